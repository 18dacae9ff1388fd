"""Reads of an index file that never cost more than the data it holds: a whole-file read that
stops early when the file shrinks, and a zero-byte check that skips the holes of a sparse file
(``SEEK_DATA`` / ``SEEK_HOLE``). No mutation happens here."""

from __future__ import annotations

import errno
import os
from typing import Final

import numpy as np

__all__ = ["ZERO_CHUNK", "data_extents", "first_nonzero", "pread_all"]

ZERO_CHUNK: Final = 1 << 20  # bytes per pread/pwrite when checking or clearing a range


def pread_all(fd: int, size: int) -> bytes:
    """Read up to ``size`` bytes from offset 0; fewer if the file shrank meanwhile."""
    parts: list[bytes] = []
    done = 0
    while done < size:
        chunk = os.pread(fd, size - done, done)
        if not chunk:
            break
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


def data_extents(fd: int, start: int, stop: int) -> list[tuple[int, int]]:
    """The ranges of ``[start, stop)`` that may hold data, skipping holes of a sparse file
    (``SEEK_DATA`` / ``SEEK_HOLE``); the whole range where the file system cannot tell."""
    seek_data = getattr(os, "SEEK_DATA", None)
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if start >= stop:
        return []
    if seek_data is None or seek_hole is None:
        return [(start, stop)]
    extents: list[tuple[int, int]] = []
    pos = start
    while pos < stop:
        try:
            lo = os.lseek(fd, pos, seek_data)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after pos
                break
            return [(start, stop)]
        if lo >= stop:
            break
        try:
            hi = min(os.lseek(fd, lo, seek_hole), stop)
        except OSError:
            hi = stop
        extents.append((lo, hi))
        pos = hi
    return extents


def first_nonzero(fd: int, extents: list[tuple[int, int]]) -> int | None:
    """Position of the first non-zero byte inside ``extents``, or None."""
    for lo, hi in extents:
        pos = lo
        while pos < hi:
            chunk = os.pread(fd, min(ZERO_CHUNK, hi - pos), pos)
            if not chunk:
                return None
            arr = np.frombuffer(chunk, dtype=np.uint8)
            if np.any(arr):
                return pos + int(np.argmax(arr != 0))
            pos += len(chunk)
    return None
