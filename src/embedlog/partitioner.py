"""Kafka's default partition choice for keyed records: ``murmur2(key) & 0x7fffffff % n``.

Same hash as Kafka's ``Utils.murmur2`` (MurmurHash2, 32-bit, seed ``0x9747b28c``, words read
little-endian, result a signed 32-bit int), so a key lands on the same partition number as
with a Java or kafka-python producer (``BuiltInPartitioner.partitionForKey``).

:class:`TopicChooser` is a producer's whole choice for one topic: a custom ``partitioner``
callable first, then the key's hash (cached), and for keyless records Kafka's sticky partition
(KIP-794: one partition until ``batch_size`` bytes went to it, then the next, round-robin).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Final

import numpy as np
import numpy.typing as npt

from .errors import UsageError

__all__ = ["TopicChooser", "murmur2", "partition_for_key", "partitions_for_keys"]

Custom = Callable[[bytes | None, list[int], list[int]], int]
"""kafka-python 2's partitioner: ``f(key_bytes, all_partitions, available_partitions)``."""
_KEY_CACHE: Final = 1 << 14

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    for k in struct.unpack_from(f"<{n4}I", data):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = n4 << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _check_partitions(num_partitions: int) -> None:
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, not {num_partitions}")


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key``."""
    _check_partitions(num_partitions)
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> npt.NDArray[np.int64]:
    """:func:`partition_for_key` of every key, vectorised with numpy (keys must be non-null)."""
    _check_partitions(num_partitions)
    n = len(keys)
    if n == 0:
        return np.empty(0, np.int64)
    lens = np.fromiter(map(len, keys), np.int64, n)
    width = (int(lens.max()) + 3) & ~3 or 4
    blob = b"".join(map(bytes.ljust, map(bytes, keys), repeat(width), repeat(b"\x00")))
    mat = np.frombuffer(blob, np.uint8).reshape(n, width)
    words = mat.view("<u4").astype(np.uint32)
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lens.astype(np.uint32)
    n4 = lens >> 2
    for j in range(int(n4.max())):
        k = words[:, j] * m
        k ^= k >> np.uint32(_R)
        k *= m
        hj = (h * m) ^ k
        h = np.where(n4 > j, hj, h)
    tail = lens & 3
    rows = np.arange(n)
    base = n4 << 2
    t = np.zeros(n, np.uint32)
    sel = tail == 3
    t[sel] ^= mat[rows[sel], base[sel] + 2].astype(np.uint32) << np.uint32(16)
    sel = tail >= 2
    t[sel] ^= mat[rows[sel], base[sel] + 1].astype(np.uint32) << np.uint32(8)
    sel = tail >= 1
    t[sel] ^= mat[rows[sel], base[sel]].astype(np.uint32)
    h = np.where(sel, (h ^ t) * m, h)
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return (h & np.uint32(0x7FFFFFFF)).astype(np.int64) % num_partitions


class TopicChooser:
    """A producer's partition choice for the topic ``name`` (``count`` partitions)."""

    __slots__ = ("all_partitions", "compact", "count", "key_cache", "name", "sticky",
                 "sticky_bytes")

    def __init__(self, name: str, count: int, compact: bool) -> None:
        self.name = name
        self.count = count
        self.compact = compact
        self.all_partitions = list(range(count))
        self.key_cache: dict[bytes, int] = {}
        self.sticky = 0
        self.sticky_bytes = 0

    def choose(self, key: bytes | None, size: int, batch_size: int, custom: Custom | None
               ) -> int:
        """The partition of a record of about ``size`` bytes."""
        if custom is not None:
            chosen = custom(key, self.all_partitions, self.all_partitions)
            if chosen.__class__ is not int or not 0 <= chosen < self.count:
                raise UsageError(
                    f"the partitioner returned {chosen!r} for topic {self.name!r} "
                    f"(partitions 0..{self.count - 1})"
                )
            return chosen
        if key is None:
            chosen = self.sticky
            self.sticky_bytes += size
            if self.sticky_bytes >= batch_size:
                self.sticky = (chosen + 1) % self.count
                self.sticky_bytes = 0
            return chosen
        if self.count == 1:
            return 0
        chosen = self.key_cache.get(key, -1)
        if chosen < 0:
            chosen = partition_for_key(key, self.count)
            if len(self.key_cache) < _KEY_CACHE:
                self.key_cache[key] = chosen
        return chosen
