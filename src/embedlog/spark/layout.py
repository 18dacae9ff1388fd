"""Which segments a partition folder holds, as Spark planning needs them: base offsets, the
sizes of the sealed ones, and the last (active) segment, whose tail the caller reads.

Three ways, cheapest first; each one that cannot vouch for its answer gives way to the next.
What the first two found is remembered for the next query of the process (:func:`remember`)
while the manifest keeps its stamp, and checked again as the first way's answer is before use.

1. :func:`manifest_chain` -- no listing, no ``lstat`` per segment. The sealed-segment manifest
   (``embedlog.segments``, :mod:`embedlog.manifest`) gives the sealed bases and sizes; the active
   segment is the one embedlog rolled to, at the end offset of the last sealed one (read from
   that segment's batch headers when it holds at most :data:`CHAIN_BATCHES`). It is vouched for
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

What is not seen without a listing: a segment below the first sealed one that the manifest does
not name (no writer makes one), and a segment a writer that keeps no manifest rolled to above
the active one's end (a Kafka follower of a compacted topic may): the end offset is then that of
an older snapshot -- offsets that are all in the log -- until that writer's retention or a new
manifest shows the change.
"""

from __future__ import annotations

import os
from typing import Final

from .. import _io
from ..errors import CorruptCheckpointError, CorruptionError
from ..manifest import manifest_stamp, read_manifest
from ..naming import (
    LOG_SUFFIX,
    SWAP_SUFFIX,
    parse_segment_file,
    segment_path,
    segment_paths,
)
from ..segment import format as fmt
from ..segment.rules import check_order

__all__ = [
    "CHAIN_BATCHES",
    "SMALL_TAIL_BYTES",
    "Files",
    "end_offset",
    "forget",
    "from_listing",
    "from_manifest",
    "log_names",
    "manifest_chain",
    "read_sealed",
    "remember",
    "remembered",
    "rolled_past",
    "small_tail",
    "stamp",
]

SMALL_TAIL_BYTES: Final = 64 * 1024
"""A segment up to this size is read whole to find its end offset (one read, no index)."""
CHAIN_BATCHES: Final = 4
"""The most batches :func:`manifest_chain` walks in the last sealed segment to find where the
active one starts: a batch header costs ~2.5 us to walk, listing a folder of ten segments
~25 us, so past a few batches the listing is the cheaper way."""

Files = list[tuple[int, int, str]]
"""``(base offset, size, path)`` of a partition's segments in offset order; the last one is the
active segment, whose size is not known yet (0): the caller reads its tail."""

_SWAP_LOG: Final = LOG_SUFFIX + SWAP_SUFFIX


def read_sealed(folder: str) -> dict[int, int] | None:
    """The manifest's ``{base offset: size}`` (``{}`` if there is none), or None if it is damaged:
    not a regular file, malformed, or larger than its format allows."""
    try:
        return read_manifest(folder)
    except CorruptCheckpointError:
        return None


def manifest_chain(folder: str, sealed: dict[int, int], max_batch: int) -> Files | None:
    """The segments from the manifest's entries ``sealed`` alone (way 1 of the module
    docstring), or None when they cannot vouch for them: no sealed segment, the first one gone,
    the last one of another size, holding more than :data:`CHAIN_BATCHES` batches (then one
    listing costs less than walking them), or not a clean run of batches."""
    if not sealed:
        return None
    bases = sorted(sealed)
    paths = segment_paths(folder, bases, LOG_SUFFIX)
    if not os.path.lexists(paths[0]):
        return None  # retention deleted it since
    last = bases[-1]
    try:
        tail = small_tail(paths[-1], last, max_batch, None, max_batches=CHAIN_BATCHES)
    except FileNotFoundError:
        return None
    if tail is None or tail[0] != sealed[last] or tail[1] <= last:
        return None
    files = [(b, sealed[b], path) for b, path in zip(bases, paths, strict=True)]
    files.append((tail[1], 0, segment_path(folder, tail[1], LOG_SUFFIX)))
    return files


Stamp = tuple[int, int, int]
_KNOWN: dict[str, tuple[Stamp, tuple[tuple[int, int, str], ...], int]] = {}
KNOWN_FOLDERS: Final = 1 << 16
"""The most partition folders whose segments this process remembers (:func:`remember`)."""


def stamp(folder: str) -> Stamp | None:
    """The manifest's identity (:func:`embedlog.manifest.manifest_stamp`), taken before it is
    read: the writer replaces it whenever the sealed segments change."""
    return manifest_stamp(folder)


def remember(folder: str, seen: Stamp | None, files: Files, end: int) -> None:
    """Keep the segments ``files`` (the last one's size read with it, ending at ``end``) that
    the manifest stamped ``seen`` vouched for, for the next query of this process."""
    if seen is None or not files:
        return
    if len(_KNOWN) >= KNOWN_FOLDERS:
        _KNOWN.clear()
    _KNOWN[folder] = (seen, tuple(files), end)


def remembered(folder: str, seen: Stamp | None) -> tuple[Files, tuple[int, int, int]] | None:
    """The segments :func:`remember` kept for ``folder`` if its manifest is still the one stamped
    ``seen`` and the first segment is still there (retention ran since otherwise), with the last
    one's ``(base, size, end)`` as it was read; the caller checks the last one as it checks
    :func:`manifest_chain`'s (its tail, :func:`rolled_past`)."""
    entry = _KNOWN.get(folder)
    if entry is None or seen is None or entry[0] != seen:
        return None
    files = list(entry[1])
    if not os.path.lexists(files[0][2]):
        return None
    base, size, _ = files[-1]
    return files, (base, size, entry[2])


def forget() -> None:
    """Forget every folder :func:`remember` kept (the next query plans as the first one)."""
    _KNOWN.clear()


def rolled_past(folder: str, end: int) -> bool:
    """Whether a segment starts at ``end``, the end offset of what :func:`manifest_chain` took
    for the active segment: the partition rolled since the manifest was read or written."""
    return os.path.lexists(segment_path(folder, end, LOG_SUFFIX))


def log_names(folder: str) -> list[str] | None:
    """The names ending in ``.log`` in ``folder``, sorted (none if it does not exist); None
    while a compaction swap is in progress there (a ``<segment>.log.swap``)."""
    try:
        names = os.listdir(folder)
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


def from_manifest(folder: str, names: list[str], sealed: dict[int, int] | None
                  ) -> Files | None:
    """The segments, sealed sizes from the manifest's entries ``sealed``, when they name
    exactly ``names`` but the last (the active segment, above every sealed one); else None (no
    manifest or a damaged one -- ``sealed`` None --, a stale one, or a name that is not a
    segment's). A single segment needs no manifest (nor an ``lstat``)."""
    if len(names) <= 1:  # none, or the active segment alone, whatever a manifest says
        return from_listing(folder, names)
    if sealed is None or len(sealed) != len(names) - 1:
        return None
    bases = sorted(sealed)
    paths = segment_paths(folder, bases, LOG_SUFFIX)
    prefix = os.path.join(folder, "")
    if any(path != prefix + name for path, name in zip(paths, names, strict=False)):
        return None
    last = parse_segment_file(names[-1])
    if last is None or last[1:] != (LOG_SUFFIX, "") or (bases and last[0] <= bases[-1]):
        return None
    files = [(b, sealed[b], path) for b, path in zip(bases, paths, strict=True)]
    files.append((last[0], 0, prefix + names[-1]))
    return files


def from_listing(folder: str, names: list[str]) -> Files:
    """The segments among ``names``, sealed sizes from ``lstat`` (never through a link).
    ``FileNotFoundError`` passes through."""
    found = []
    for name in names:
        parsed = parse_segment_file(name)
        if parsed is not None and parsed[1:] == (LOG_SUFFIX, ""):
            found.append((parsed[0], name))
    found.sort()
    prefix = os.path.join(folder, "")
    files = [(base, os.lstat(prefix + name).st_size, prefix + name) for base, name in found[:-1]]
    files.extend((base, 0, prefix + name) for base, name in found[-1:])
    return files


def small_tail(path: str, base: int, max_batch: int, known: tuple[int, int, int] | None, *,
               max_batches: int | None = None) -> tuple[int, int] | None:
    """``(size, end offset)`` of the segment file ``path`` from one read of its bytes, or from
    ``known`` (base, size, end) if its size did not change; None when it is larger than
    :data:`SMALL_TAIL_BYTES`, not a regular file, holds more than ``max_batches`` batches (when
    given), or its bytes are not a clean run of batches (the caller then opens it as a
    segment). ``FileNotFoundError`` passes through."""
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
        end = end_offset(os.pread(fd, size, 0), base, max_batch, max_batches)
        return None if end is None else (size, end)
    except CorruptionError:
        return None
    finally:
        os.close(fd)


def end_offset(buf: bytes, base: int, max_batch: int, max_batches: int | None = None
               ) -> int | None:
    """One past the last offset of the whole batches of a segment's bytes ``buf`` (``base``
    if none), from their headers alone; an incomplete last batch is one being written; None
    past ``max_batches`` batches. Bytes that are not such a run raise
    :class:`~embedlog.errors.CorruptionError`."""
    end = base
    for count, (pos, header) in enumerate(
            fmt.iter_batches(buf, verify=False, max_batch_size=max_batch)):
        if max_batches is not None and count >= max_batches:
            return None
        end = check_order(header, end, base, "", pos)
    return end
