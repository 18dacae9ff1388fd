"""Salvaging a damaged partition (``embedlog recover --truncate-damaged``), in the spirit of
sqlite3's ``.recover``: keep every valid batch, move the damaged bytes aside, say exactly what
was lost.

A writer open never hides damage: a partition whose sealed segment is damaged or missing, or
whose log start lies beyond its end, opens quarantined (:func:`embedlog.loader.quarantine`).
:func:`salvage` is the explicit, user-requested repair, run under the writer lock. For each
partition folder, every segment but the active one (whose torn tail the next open cuts) is
walked batch by batch; a batch is *valid* when its framing, CRC-32C and records are, and its
offsets follow the previous valid batch and stay below the next segment's base. Then:

* a segment with invalid bytes is rewritten with its valid batches only (temporary file,
  fsync, rename); the invalid bytes go, unchanged, to
  ``<root>/lost+found/<topic>-<partition>/<base>.log.<byte position>.damaged``
  (:func:`embedlog.naming.damaged_path`) and its indexes are rebuilt. After a framing error the
  rest of the segment cannot be split into batches and is moved aside whole;
* a sealed segment shorter than ``embedlog.segments`` says (a cut CRCs cannot see) or missing
  loses the offsets up to the next segment: nothing to move, the loss is reported;
* ``embedlog.segments`` is rewritten with the sizes now on disk;
* the producer snapshots above the first offset lost are deleted (they describe batches that
  are gone; the next writer rebuilds the state from an older one or the batch headers);
* a ``log-start-offset-checkpoint`` entry beyond its partition's end is removed (every record
  there becomes readable again: nothing valid is dropped) and reported;
* the recovery point of a salvaged partition moves up to its active segment (salvage has just
  validated every sealed segment; a rewritten one has an offset gap where the damage was, as a
  compacted one has, which re-validation of a sealed segment would refuse), and the
  clean-shutdown marker is removed, so the next open validates the active segment.

Each loss is a :class:`Loss`: the partition, the offsets lost (the gap between the valid
neighbours), the byte count and where the bytes went. ``apply=False`` reports the same losses
and changes nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from . import _io, _paths, checkpoint, producer_state_store
from .config import TopicConfig
from .errors import CorruptionError
from .index._fileops import data_extents
from .inspect import SegmentWalk, rebuild_indexes
from .manifest import read_manifest, write_manifest
from .metadata import CLEAN_SHUTDOWN, LOG_START, RECOVERY_POINT, read_metadata
from .naming import (
    LOG_SUFFIX,
    LOST_FOUND_DIR,
    damaged_path,
    parse_partition_dir,
    segment_bases,
    segment_path,
)
from .records import TopicPartition

__all__ = ["COPY_CHUNK", "Loss", "salvage"]

COPY_CHUNK: Final = 1 << 20
"""The most bytes of a segment a salvage holds in memory at once."""


@dataclass(frozen=True)
class Loss:
    """What salvage dropped (or would drop) from one partition.

    Attributes:
        partition: ``<topic>-<partition>``.
        first_offset, last_offset: the offsets no longer in the log (``last_offset`` is -1 when
            the loss has no known end: the damage reached the active segment).
        bytes: how many bytes of the segment were lost or moved aside.
        moved_to: the file holding the moved bytes, or None (nothing left to move).
        reason: what was wrong.
    """

    partition: str
    first_offset: int
    last_offset: int
    bytes: int
    moved_to: str | None
    reason: str


def salvage(root: str, *, apply: bool) -> list[Loss]:
    """Salvage every partition folder of the log at ``root`` (the caller holds the writer
    lock); returns the losses. With ``apply=False`` nothing is changed."""
    losses: list[Loss] = []
    try:
        topics = read_metadata(root) or {}
    except CorruptionError:
        topics = {}
    ends: dict[TopicPartition, int] = {}
    actives: dict[TopicPartition, int] = {}
    for name in sorted(os.listdir(root)):
        parsed = parse_partition_dir(name)
        directory = os.path.join(root, name)
        if parsed is None or os.path.islink(directory) or not os.path.isdir(directory):
            continue
        config = topics.get(parsed[0], (0, TopicConfig()))[1]
        before = len(losses)
        end, active = _partition(root, name, config, losses, apply)
        ends[TopicPartition(*parsed)] = end
        if len(losses) > before:
            actives[TopicPartition(*parsed)] = active
    losses += _log_starts(root, ends, apply)
    if apply and actives:
        _raise_recovery_points(root, actives)
    marker = os.path.join(root, CLEAN_SHUTDOWN)
    if apply and losses and os.path.exists(marker):
        _io.unlink(marker)
        _io.fsync_dir(root)
    return losses


def _raise_recovery_points(root: str, actives: dict[TopicPartition, int]) -> None:
    path = os.path.join(root, RECOVERY_POINT)
    try:
        points = checkpoint.read_offsets(path)
    except CorruptionError:
        points = {}
    for tp, active in actives.items():
        points[tp] = max(points.get(tp, 0), active)
    checkpoint.write_offsets(path, points)


def _partition(root: str, name: str, config: TopicConfig, losses: list[Loss], apply: bool
               ) -> tuple[int, int]:
    """Salvage one partition folder; returns its end offset (as far as the walk can tell) and
    the base of its active segment."""
    directory = os.path.join(root, name)
    bases = segment_bases(os.listdir(directory))
    try:
        sealed = read_manifest(directory)
    except CorruptionError:
        sealed = {}
    new_sealed = dict(sealed)
    end = bases[0] if bases else 0
    found = len(losses)
    known = sorted(set(bases) | set(sealed))
    for i, base in enumerate(known):
        following = [b for b in known[i + 1:] if b in bases]
        if base not in bases:
            if following and base in sealed:  # a missing sealed segment
                losses.append(Loss(name, end, following[0] - 1, sealed[base], None,
                                   f"sealed segment {base} is missing"))
                del new_sealed[base]
            continue
        if base == bases[-1]:
            end = max(end, _walk_end(directory, base))
            break
        before = len(losses)
        end, new_sealed[base] = _segment(root, name, base, following[0], end, sealed.get(base),
                                         losses, apply)
        if apply and len(losses) > before:
            rebuild_indexes(directory, base, config)
    new_sealed = {b: size for b, size in new_sealed.items() if b in bases and b != bases[-1]}
    if apply and new_sealed != sealed:
        write_manifest(directory, new_sealed)
    if apply and len(losses) > found:
        producer_state_store.prune(directory, 0, min(x.first_offset for x in losses[found:]))
    return end, bases[-1] if bases else 0


def _walk_end(directory: str, base: int) -> int:
    walk = SegmentWalk(directory, base, decode=False)
    for _ in walk:
        pass
    return walk.next_offset


@contextlib.contextmanager
def _opened(path: str) -> Iterator[int]:
    """A read descriptor of the regular file ``path`` (a FIFO must not block the salvage, a
    symbolic link is not followed: :func:`embedlog._io.open_regular`)."""
    fd = _io.open_regular(path)
    try:
        yield fd
    finally:
        os.close(fd)


def _segment(root: str, name: str, base: int, next_base: int, end: int, sealed_size: int | None,
             losses: list[Loss], apply: bool) -> tuple[int, int]:
    """Walk one sealed segment; keep its valid batches, move the rest aside. Returns the end
    offset after it and its (new) size."""
    directory = os.path.join(root, name)
    with _opened(segment_path(directory, base, LOG_SUFFIX)) as fd:
        size = os.fstat(fd).st_size
        walk = SegmentWalk(directory, base, decode=True)
        keep: list[tuple[int, int, int, int]] = []  # (position, size, base, last): valid
        bad: list[tuple[int, int, str]] = []  # (position, size, reason) of invalid ranges
        for batch in walk:
            h = batch.header
            if batch.error is None and h.base_offset >= end and h.last_offset < next_base:
                keep.append((batch.position, h.size, h.base_offset, h.last_offset))
                end = h.last_offset + 1
            else:
                reason = (batch.error
                          or f"offsets {h.base_offset}..{h.last_offset} out of order")
                bad.append((batch.position, h.size, reason))
        if walk.error is not None or walk.trailing_bytes:
            reason = str(walk.error.reason) if walk.error is not None else "incomplete batch"
            bad.append((walk.valid_bytes, size - walk.valid_bytes, reason))
        if walk.size != size:
            raise CorruptionError("the segment changed while it was salvaged", path=walk.path)
        if not bad:
            if sealed_size is not None and sealed_size > size:
                losses.append(Loss(name, end, next_base - 1, sealed_size - size, None,
                                   f"sealed segment {base} was cut from {sealed_size} to "
                                   f"{size} bytes"))
            return end, size
        _report_bad(root, name, base, bad, keep, next_base, losses)
        if apply:
            lost_dir = _paths.folder(root, LOST_FOUND_DIR, name)
            _rewrite(fd, walk.path, lost_dir, [(pos, n) for pos, n, _, _ in keep], bad,
                     losses[-len(_merge(bad)):])
        return end, sum(k[1] for k in keep)


def _merge(bad: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Adjacent invalid ranges as one."""
    out: list[tuple[int, int, str]] = []
    for pos, size, reason in sorted(bad):
        if out and out[-1][0] + out[-1][1] >= pos:
            p0, s0, r0 = out[-1]
            out[-1] = (p0, max(s0, pos + size - p0), r0)
        else:
            out.append((pos, size, reason))
    return out


def _report_bad(root: str, name: str, base: int, bad: list[tuple[int, int, str]],
                keep: list[tuple[int, int, int, int]], next_base: int, losses: list[Loss]
                ) -> None:
    """One :class:`Loss` per invalid range: the offsets between its valid neighbours."""
    for pos, size, reason in _merge(bad):
        prev = [k for k in keep if k[0] < pos]
        after = [k for k in keep if k[0] > pos]
        first = prev[-1][3] + 1 if prev else base
        last = after[0][2] - 1 if after else next_base - 1
        losses.append(Loss(name, first, last, size, damaged_path(root, name, base, pos),
                           f"segment {base}, byte {pos}: {reason}"))


def _rewrite(fd: int, path: str, lost_dir: str, keep: list[tuple[int, int]],
             bad: list[tuple[int, int, str]], losses: list[Loss]) -> None:
    """Move the invalid ranges of the segment open as ``fd`` to their ``.damaged`` files in
    ``lost_dir`` (made by :func:`embedlog._paths.folder`: real folders only, so nothing is
    written outside the log through a planted link), then replace the segment with its valid
    batches (each step durable before the next)."""
    for (pos, size, _), loss in zip(_merge(bad), losses, strict=True):
        assert loss.moved_to is not None and os.path.dirname(loss.moved_to) == lost_dir
        _copy(fd, path, [(pos, size)], loss.moved_to)
    _copy(fd, path, keep, path)


def _copy(src: int, src_path: str, ranges: list[tuple[int, int]], dest: str) -> None:
    """Replace ``dest`` with the ``(position, size)`` ranges of the file open as ``src``, one
    after the other, atomically. Never more than :data:`COPY_CHUNK` bytes in memory, and holes
    of a sparse source stay holes: a damaged sparse 16 GiB tail costs neither 16 GiB of memory
    nor of disk."""
    with _io.atomic_file(dest) as fd:
        out = 0
        for pos, size in ranges:
            for lo, hi in data_extents(src, pos, pos + size):
                while lo < hi:
                    chunk = os.pread(src, min(COPY_CHUNK, hi - lo), lo)
                    if not chunk:
                        raise CorruptionError("the segment shrank while it was salvaged",
                                              path=src_path, position=lo)
                    _io.pwrite(fd, chunk, out + lo - pos)
                    lo += len(chunk)
            out += size
        _io.truncate(fd, out)


def _log_starts(root: str, ends: dict[TopicPartition, int], apply: bool) -> list[Loss]:
    """Remove ``log-start-offset-checkpoint`` entries beyond their partition's end."""
    path = os.path.join(root, LOG_START)
    try:
        starts = checkpoint.read_offsets(path)
    except CorruptionError:
        return []
    wrong = {tp: s for tp, s in starts.items() if tp in ends and s > ends[tp]}
    if apply and wrong:
        checkpoint.write_offsets(path, {tp: s for tp, s in starts.items() if tp not in wrong})
    return [Loss(f"{tp.topic}-{tp.partition}", ends[tp], ends[tp] - 1, 0, None,
                 f"log start offset {s} was beyond the log end offset {ends[tp]}: entry "
                 "removed, every record of the partition is readable again")
            for tp, s in wrong.items()]
