"""128-bit key digests computed for many keys at once with numpy.

Kafka's cleaner identifies a key by the MD5 hash of its bytes (16 bytes per key in its
offset map). Hashing key by key from Python costs ~0.3 µs per key, more than the whole budget
of a record, so the cleaner uses this vectorised digest instead. A key of ``n`` bytes is read as
``ceil(n / 8)`` little-endian 64-bit words ``w_j`` (the last one zero-padded) and each of the
two 64-bit lanes is::

    lane = fin(  sum_j mix(w_j ^ (seed + j * K))  ^  mix(n ^ seed')  )      (mod 2**64)

where ``mix`` / ``fin`` are the MurmurHash3 and SplitMix64 64-bit finalizers (bijections), one
per lane, ``K`` an odd constant that tags each word with its position, and the seeds random per
:class:`Digester` (so per cleaning pass: digests are never stored). Two keys of equal length of
at most 8 bytes never collide (the lane is a bijection of the word); longer keys collide with
probability ~2**-128 for unrelated keys. Like Kafka's MD5 it is not meant to resist someone who
knows the seeds.

The words are gathered with a single fancy-indexing read per word column through an
overlapping ``uint64`` view of the byte buffer, which needs 7 readable bytes after the last key
byte: callers pass a buffer made by :func:`padded`.
"""

from __future__ import annotations

import secrets
from typing import Final

import numpy as np
import numpy.typing as npt

from . import _native

__all__ = ["PAD", "Digester", "padded"]

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

PAD: Final = 8
"""Zero bytes a digest buffer needs after its data (see :func:`padded`)."""

_POSITION: Final = 0x9E3779B97F4A7C15
_U64_MASK: Final = 2**64 - 1
_MASKS: Final = np.array(
    [0] + [(1 << (8 * i)) - 1 for i in range(1, 8)] + [2**64 - 1], dtype=np.uint64
)
"""``_MASKS[r]`` keeps the low ``r`` bytes of a little-endian word (r = bytes left in the key)."""

_LANES: Final = (
    # (shift1, mult1, shift2, mult2, shift3): MurmurHash3 fmix64, SplitMix64 finalizer
    (33, 0xFF51AFD7ED558CCD, 33, 0xC4CEB9FE1A85EC53, 33),
    (30, 0xBF58476D1CE4E5B9, 27, 0x94D049BB133111EB, 31),
)


def padded(data: bytes | bytearray | memoryview) -> npt.NDArray[np.uint8]:
    """``data`` as a uint8 array followed by :data:`PAD` zero bytes (one copy)."""
    out = np.zeros(len(data) + PAD, np.uint8)
    out[: len(data)] = np.frombuffer(data, np.uint8)
    return out


def _mix(x: U64, lane: int) -> U64:
    """A 64-bit finalizer, in place on ``x`` (a bijection of each element)."""
    s1, m1, s2, m2, s3 = _LANES[lane]
    x ^= x >> np.uint64(s1)
    x *= np.uint64(m1)
    x ^= x >> np.uint64(s2)
    x *= np.uint64(m2)
    x ^= x >> np.uint64(s3)
    return x


class Digester:
    """Digests of keys held in one byte buffer; one instance per cleaning pass (its seeds are
    random, so only digests made by the same instance are comparable)."""

    def __init__(self, seed: int | None = None) -> None:
        s = secrets.randbits(128) if seed is None else seed
        self._seeds = (s & _U64_MASK, (s >> 64) & _U64_MASK)

    @property
    def seeds(self) -> tuple[int, int]:
        """The two 64-bit seeds (lane 0, lane 1) of this instance."""
        return self._seeds

    def digests(self, buf: npt.NDArray[np.uint8], pos: I64, lens: I64) -> tuple[U64, U64]:
        """The two 64-bit lanes of the digest of each key ``buf[pos[i] : pos[i] + lens[i]]``.

        ``buf`` must hold :data:`PAD` readable bytes after the last key (see :func:`padded`);
        ``lens`` are >= 0 (null keys are the caller's business).
        """
        n = len(pos)
        h = [np.zeros(n, np.uint64), np.zeros(n, np.uint64)]
        if n == 0:
            return h[0], h[1]
        if len(buf) < PAD:
            raise ValueError("digest buffer lacks its padding")
        core = _native.CORE
        if core is not None:
            core.digests(np.ascontiguousarray(buf, np.uint8), np.ascontiguousarray(pos, np.int64),
                         np.ascontiguousarray(lens, np.int64), *self._seeds, h[0], h[1])
            return h[0], h[1]
        # Overlapping little-endian uint64 windows: words[p] = the 8 bytes at buf[p:p+8].
        words: U64 = np.ndarray(
            (len(buf) - PAD + 1,), dtype="<u8", buffer=buf, strides=(1,)
        )
        nwords = (lens + 7) >> 3
        longest = int(nwords.max())
        shortest = int(nwords.min())
        if int((pos + nwords * 8).max()) > len(buf):
            raise ValueError("key extends past the digest buffer")
        sel: I64 | None = None
        for j in range(longest):
            if j >= shortest:
                sel = np.flatnonzero(nwords > j)
            p = pos + 8 * j if sel is None else pos[sel] + 8 * j
            w = np.asarray(words[p], dtype=np.uint64)
            if j + 1 >= shortest:  # the last word of some key: keep only its bytes
                left = lens - 8 * j if sel is None else lens[sel] - 8 * j
                w &= _MASKS[np.minimum(left, 8)]
            for lane in (0, 1):
                tag = np.uint64((self._seeds[lane] + j * _POSITION) & _U64_MASK)
                m = _mix(w ^ tag, lane)
                if sel is None:
                    h[lane] += m
                else:
                    h[lane][sel] += m
        for lane in (0, 1):
            length = _mix(lens.astype(np.uint64) ^ np.uint64(self._seeds[1 - lane]), lane)
            h[lane] ^= length
            _mix(h[lane], 1 - lane)
        return h[0], h[1]
