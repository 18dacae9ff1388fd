"""The sealed-segment manifest, ``<topic>-<partition>/embedlog.segments`` (embedlog only).

Layout (:data:`embedlog.checkpoint.SEGMENT_MANIFEST`)::

    embedlog-segments 1
    <base offset> <size in bytes>        one line per sealed segment, in base-offset order

A segment is *sealed* when the partition rolls past it: it was fsynced whole and is never
appended to again. The manifest is replaced atomically (:func:`embedlog._io.write_atomic`)
whenever the set of sealed segments changes (roll, retention, a compaction swap). On open a
sealed segment that is shorter, longer or missing is reported as corruption
(:func:`check_sealed`), because a cut at a batch boundary is invisible to CRCs. Kafka folders
have no manifest: every check then passes.
"""

from __future__ import annotations

import bisect
import os
import stat
from typing import Final

from . import _io, checkpoint
from .errors import CorruptionError
from .naming import LOG_SUFFIX, SEGMENT_MANIFEST, segment_path

__all__ = ["MANIFEST", "check_sealed", "manifest_stamp", "read_manifest", "write_manifest"]

MANIFEST: Final = SEGMENT_MANIFEST


def read_manifest(directory: str) -> dict[int, int]:
    """``{base offset: size}`` of sealed segments, from ``embedlog.segments`` (``{}`` if the
    file does not exist). A malformed file raises
    :class:`~embedlog.errors.CorruptCheckpointError` (the format: :mod:`embedlog.checkpoint`)."""
    rows = checkpoint.SEGMENT_MANIFEST.read(os.path.join(directory, MANIFEST))
    return {int(base): int(size) for base, size in rows or ()}


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
        actual = st.st_size
        if actual != size:
            raise CorruptionError(
                f"sealed segment is {actual} bytes, expected {size}: "
                "it was truncated or extended after it was sealed",
                path=path,
                position=min(actual, size),
            )
    return sealed
