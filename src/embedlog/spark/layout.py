"""Which segments a partition folder holds, as Spark planning needs them: base offsets, the
sizes of the sealed ones, and the last (active) segment, whose tail the caller reads.

Three ways, cheapest first; each one that cannot vouch for its answer gives way to the next:

1. :func:`manifest_chain` -- no listing, no ``lstat`` per segment. The sealed-segment manifest
   (``embedlog.segments``, :mod:`embedlog.manifest`) gives the sealed bases and sizes; the active
   segment is the one embedlog rolled to, at the end offset of the last sealed one (read from
   that segment's batch headers when it is small, :data:`SMALL_TAIL_BYTES`). It is vouched for
   when the first sealed segment is still there (retention did not run since the manifest was
   written), the last sealed one has the size the manifest says, and the active segment exists;
   the caller then checks, once it has the active segment's end offset, that no segment starts
   there (no roll since the manifest was written: :func:`rolled_past`).
2. :func:`from_manifest` -- one listing (:func:`log_names`), sizes from the manifest when it
   names exactly the listed segments but the last.
3. :func:`from_listing` -- the listing with an ``lstat`` per sealed segment (Kafka folders, a
   stale or damaged manifest, a compacted last sealed segment whose end is below the next base).

The manifest is untrusted input: its size is bounded (:func:`embedlog.manifest.read_manifest`),
the names are built from its numbers (:func:`embedlog.naming.segment_path`), a damaged one is
passed over. Offsets never come from it: the log start is the first segment's base (raised to
the writer's checkpoint by the caller) and the log end is read from the active segment's bytes,
so a manifest that does not match the folder can only make planning take the next way. Sealed
sizes from it only weigh tasks.
"""

from __future__ import annotations

import os
from typing import Final

from .. import _io
from ..errors import CorruptCheckpointError, CorruptionError
from ..manifest import read_manifest
from ..naming import LOG_SUFFIX, SWAP_SUFFIX, filename_prefix, parse_segment_file
from ..segment import format as fmt
from ..segment.rules import check_order

__all__ = ["SMALL_TAIL_BYTES", "Files", "end_offset", "from_listing", "from_manifest",
           "log_names", "manifest_chain", "rolled_past", "small_tail"]

SMALL_TAIL_BYTES: Final = 64 * 1024
"""A segment up to this size is read whole to find its end offset (one read, no index)."""

Files = list[tuple[int, int, str]]
"""``(base offset, size, name)`` of a partition's segments in offset order; the last one is the
active segment, whose size is not known yet (0): the caller reads its tail."""

_SWAP_LOG: Final = LOG_SUFFIX + SWAP_SUFFIX


def manifest_chain(directory: str, max_batch: int) -> Files | None:
    """The segments from the manifest alone (way 1 of the module docstring), or None when it
    cannot vouch for them: no manifest or no sealed segment in it, a damaged one, the first
    sealed segment gone, the last one of another size, large, or not a clean run of batches
    ending where the active segment starts."""
    try:
        sealed = read_manifest(directory)
    except CorruptCheckpointError:
        return None
    if not sealed:
        return None
    bases = sorted(sealed)
    prefix = os.path.join(directory, "")
    names = [filename_prefix(b) + LOG_SUFFIX for b in bases]
    if not os.path.lexists(prefix + names[0]):
        return None  # retention deleted it since
    last = bases[-1]
    try:
        tail = small_tail(prefix + names[-1], last, max_batch, None)
    except FileNotFoundError:
        return None
    if tail is None or tail[0] != sealed[last] or tail[1] <= last:
        return None
    active = tail[1]
    files = [(b, sealed[b], n) for b, n in zip(bases, names, strict=True)]
    files.append((active, 0, filename_prefix(active) + LOG_SUFFIX))
    return files


def rolled_past(directory: str, end: int) -> bool:
    """Whether a segment starts at ``end``, the end offset of what :func:`manifest_chain` took
    for the active segment: the partition rolled since the manifest was read or written."""
    return os.path.lexists(os.path.join(directory, filename_prefix(end) + LOG_SUFFIX))


def log_names(directory: str) -> list[str] | None:
    """The names ending in ``.log`` in ``directory``, sorted (none if it does not exist); None
    while a compaction swap is in progress there (a ``<segment>.log.swap``)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    if _SWAP_LOG in "/".join(names):  # names hold no "/": one search instead of a loop
        for name in names:
            parsed = parse_segment_file(name)
            if parsed is not None and parsed[1:] == (LOG_SUFFIX, SWAP_SUFFIX):
                return None
    logs = [name for name in names if name.endswith(LOG_SUFFIX)]
    logs.sort()
    return logs


def from_manifest(directory: str, names: list[str]) -> Files | None:
    """The segments, sealed sizes from the manifest, when it names exactly ``names`` but the
    last (the active segment, above every sealed one); else None (no manifest, a stale or
    damaged one, or a name that is not a segment's). A single segment needs no manifest."""
    if not names:
        return []
    if len(names) == 1:
        sealed: dict[int, int] = {}  # the active segment, whatever a manifest says
    else:
        try:
            sealed = read_manifest(directory, max_entries=len(names) - 1)
        except CorruptCheckpointError:
            return None
    bases = sorted(sealed)
    sealed_names = names[:-1]
    if len(bases) != len(sealed_names) or list(map(_log_name, bases)) != sealed_names:
        return None
    last = parse_segment_file(names[-1])
    if last is None or last[1:] != (LOG_SUFFIX, "") or (bases and last[0] <= bases[-1]):
        return None
    files = [(b, sealed[b], n) for b, n in zip(bases, sealed_names, strict=True)]
    files.append((last[0], 0, names[-1]))
    return files


def _log_name(base: int) -> str:
    return filename_prefix(base) + LOG_SUFFIX


def from_listing(directory: str, names: list[str]) -> Files:
    """The segments among ``names``, sealed sizes from ``lstat`` (never through a link).
    ``FileNotFoundError`` passes through."""
    found = []
    for name in names:
        parsed = parse_segment_file(name)
        if parsed is not None and parsed[1:] == (LOG_SUFFIX, ""):
            found.append((parsed[0], name))
    found.sort()
    prefix = os.path.join(directory, "")
    files = [(base, os.lstat(prefix + name).st_size, name) for base, name in found[:-1]]
    files.extend((base, 0, name) for base, name in found[-1:])
    return files


def small_tail(path: str, base: int, max_batch: int, known: tuple[int, int, int] | None
               ) -> tuple[int, int] | None:
    """``(size, end offset)`` of the segment file ``path`` from one read of its bytes, or from
    ``known`` (base, size, end) if its size did not change; None when it is larger than
    :data:`SMALL_TAIL_BYTES`, not a regular file, or its bytes are not a clean run of batches
    (the caller then opens it as a segment). ``FileNotFoundError`` passes through."""
    try:
        fd = _io.open_regular(path)
    except CorruptionError:
        return None
    try:
        size = os.fstat(fd).st_size
        if known is not None and known[:2] == (base, size):
            return size, known[2]
        if size > SMALL_TAIL_BYTES:
            return None
        return size, end_offset(os.pread(fd, size, 0), base, max_batch)
    except CorruptionError:
        return None
    finally:
        os.close(fd)


def end_offset(buf: bytes, base: int, max_batch: int) -> int:
    """One past the last offset of the whole batches of a segment's bytes ``buf`` (``base``
    if none), from their headers alone; an incomplete last batch is one being written. Bytes
    that are not such a run raise :class:`~embedlog.errors.CorruptionError`."""
    end = base
    for pos, header in fmt.iter_batches(buf, verify=False, max_batch_size=max_batch):
        end = check_order(header, end, base, "", pos)
    return end
