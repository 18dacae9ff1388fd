"""The sealed-segment manifest, ``<topic>-<partition>/embedlog.segments`` (embedlog only).

Layout (:data:`embedlog.checkpoint.SEGMENT_MANIFEST`)::

    embedlog-segments 1
    <base offset> <size in bytes>        one line per sealed segment, in base-offset order

A segment is *sealed* when the partition rolls past it: it was fsynced whole and is never
appended to again. The manifest is replaced atomically (:func:`embedlog._io.write_atomic`)
whenever the set of sealed segments changes (roll, retention, a compaction swap). On open a
sealed segment that is shorter, longer or missing is reported as corruption
(:func:`check_sealed`), because a cut at a batch boundary is invisible to CRCs; a read-only
view compares the sizes of the sealed segments it opens (:func:`view_damage`).
Kafka folders have no manifest: every check then passes.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections.abc import Sequence
from typing import Final, Protocol

from . import _io, checkpoint
from .errors import CorruptCheckpointError, CorruptionError
from .naming import LOG_SUFFIX, SEGMENT_MANIFEST, SWAP_SUFFIX, segment_path

__all__ = ["MANIFEST", "Opened", "check_sealed", "manifest_stamp", "read_manifest", "size_error",
           "view_damage", "write_manifest"]

MANIFEST: Final = SEGMENT_MANIFEST
_MAX_LINE: Final = 40
"""The longest entry line :func:`write_manifest` writes: two 19-digit numbers, a space and a
newline (the version line is shorter)."""
_CANONICAL: Final = re.compile(rb"embedlog-segments 1\n(?:[0-9]{1,19} [0-9]{1,19}\n)*\Z")
"""The bytes :func:`write_manifest` writes; only these take the quick parse of
:func:`read_manifest` (anything else goes through the format's full parser)."""
_LIMIT: Final = 1 << 63


class Opened(Protocol):
    """What :func:`view_damage` reads of a segment a view opened."""

    base_offset: int
    size: int
    log_path: str

    def is_current(self) -> bool: ...


def read_manifest(directory: str, *, max_entries: int | None = None) -> dict[int, int]:
    """``{base offset: size}`` of sealed segments, from ``embedlog.segments`` (``{}`` if the
    file does not exist). A malformed file, or (with ``max_entries``) one with more entries than
    that, raises :class:`~embedlog.errors.CorruptCheckpointError` (the format:
    :mod:`embedlog.checkpoint`), having read no more bytes than ``max_entries`` justify.

    The bytes :func:`write_manifest` writes are parsed at once (one pattern match, then the
    numbers); anything else goes through the format's full parser, which gives the same
    entries for them."""
    path = os.path.join(directory, MANIFEST)
    spec = checkpoint.SEGMENT_MANIFEST
    limit = spec.max_bytes
    if max_entries is not None:
        limit = min(limit, _MAX_LINE * (max_entries + 1))
    try:  # a regular file only, as the format's own read
        raw = _io.read_regular(path, limit + 1, error=CorruptCheckpointError)
    except OSError as exc:
        raise CorruptCheckpointError(f"cannot read segment manifest: {exc}", path=path) from exc
    if raw is None:
        return {}
    sealed = _quick_parse(raw) if len(raw) <= limit else None
    if sealed is None:
        rows = spec.read(path, max_entries=max_entries)
        sealed = {int(base): int(size) for base, size in rows or ()}
    if max_entries is not None and len(sealed) > max_entries:
        raise CorruptCheckpointError(
            f"malformed segment manifest: {len(sealed)} entries, more than the "
            f"{max_entries} segments there are", path=path)
    return sealed


def _quick_parse(raw: bytes) -> dict[int, int] | None:
    """The entries of a manifest in exactly the layout :func:`write_manifest` writes, or None
    for any other bytes (left to the full parser)."""
    if _CANONICAL.match(raw) is None:
        return None
    values = [int(v) for v in raw.split()[2:]]
    if values and max(values) >= _LIMIT:
        return None  # the full parser names the value beyond 64 bits
    return dict(zip(values[::2], values[1::2], strict=True))


def write_manifest(directory: str, sealed: dict[int, int]) -> None:
    """Replace the manifest with ``sealed`` (``{base offset: size}``), atomically."""
    checkpoint.SEGMENT_MANIFEST.write(os.path.join(directory, MANIFEST), sorted(sealed.items()))


def manifest_stamp(directory: str) -> tuple[int, int, int] | None:
    """Identity of the manifest file (inode, mtime, size): it is replaced whenever the sealed
    segments change, so a reader re-checks its open segments when the stamp moves."""
    try:
        st = os.lstat(os.path.join(directory, MANIFEST))
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def check_sealed(directory: str, bases: list[int], start_offset: int) -> dict[int, int]:
    """Compare the segment files ``bases`` (sorted) with the manifest; returns the manifest.

    Segments wholly below ``start_offset`` are skipped (deleted by retention, or about to be).
    A sealed segment missing below the last present one, or whose size differs, raises
    :class:`~embedlog.errors.CorruptionError`."""
    sealed = read_manifest(directory)
    present = set(bases)
    known = sorted(present | set(sealed))
    for base, size in sealed.items():
        later = bisect.bisect_right(known, base)
        if later < len(known) and known[later] <= start_offset:
            continue  # wholly below the log start: deleted or about to be
        path = segment_path(directory, base, LOG_SUFFIX)
        if base not in present:
            if bases and base < bases[-1]:
                raise CorruptionError(
                    f"sealed segment {base} is missing: records would be lost", path=path
                )
            continue
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):  # say what is there, as the open would
            os.close(_io.open_regular(path))
        if st.st_size != size:
            raise size_error(path, st.st_size, size)
    return sealed


def size_error(path: str, actual: int, sealed: int) -> CorruptionError:
    """The error of a sealed segment whose size is not the one the manifest recorded."""
    return CorruptionError(
        f"sealed segment is {actual} bytes, expected {sealed}: "
        "it was truncated or extended after it was sealed",
        path=path,
        position=min(actual, sealed),
    )


def view_damage(directory: str, names: list[str], segments: Sequence[Opened]
                ) -> tuple[int, CorruptionError] | None:
    """A read-only view's :func:`check_sealed`: the index in ``segments`` (opened from the listing
    ``names``; all but the last are sealed) of the first sealed segment whose size is not the one
    the manifest recorded, and its :class:`~embedlog.errors.CorruptionError` -- a cut at a batch
    boundary would otherwise read as a gap --, or None. A mismatch the writer may be causing
    right now is not damage: a swap in progress (the view reads its ``.swap`` files), a listing
    or a manifest that changed meanwhile, a name that now holds another file (the view reads the
    file it holds). The view's next refresh that finds the manifest changed checks again
    (:func:`embedlog.view_loader.adopt`)."""
    if len(segments) < 2 or any(n.endswith(SWAP_SUFFIX) for n in names):
        return None
    stamp = manifest_stamp(directory)
    if stamp is None:
        return None  # a Kafka folder, or nothing sealed yet
    sealed = read_manifest(directory)
    for i, seg in enumerate(segments[:-1]):
        size = sealed.get(seg.base_offset)
        if size is None or size == seg.size:
            continue
        if (manifest_stamp(directory) != stamp or sorted(os.listdir(directory)) != sorted(names)
                or not seg.is_current()):
            return None
        return i, size_error(seg.log_path, seg.size, size)
    return None
