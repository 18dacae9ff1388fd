"""``embedlog verify [PATH]``: check a log directory without changing it.

Checked, for an embedlog or a Kafka broker directory (or one partition folder):

* every batch of every segment: framing, CRC-32C, records (full decode), offsets increasing
  within and across segments, no incomplete tail in a sealed segment;
* every ``.index`` / ``.timeindex`` entry against its log (:mod:`.segment_check`);
* sealed segment sizes against ``embedlog.segments``; checkpoint files, ``embedlog.json`` and
  consumer groups' state and offsets parse; every topic's partition folders exist; log start
  offsets are within the logs;
* producer snapshots (``<offset>.snapshot``): a corrupt one, or one beyond the log end, is a
  *warning* (a writer passes over it, or deletes it, and rebuilds the state from the batch
  headers).

Severity: an *error* makes the log unhealthy (exit code 3); a *warning* does not: a missing
index (readers scan the log instead), an incomplete batch at the end of the active segment
(a crash or a writer mid-append; the next writer open cuts it), files of an interrupted
compaction or deletion (finished or rolled back on the next writer open). ``--fix`` takes the
writer lock and rebuilds the indexes reported as broken or missing from their logs; it never
touches a ``.log`` file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import click

from ..config import TopicConfig
from ..errors import CorruptionError, EmbedlogError, StorageError, UnsupportedFormatError
from ..folder_check import check_folder, classify
from ..groups import GroupState
from ..inspect import (
    SegmentWalk,
    check_offset_index,
    check_time_index,
    check_txn_index,
    dense_topics,
    producer_snapshot_offsets,
    read_checkpoint,
    read_producer_snapshot,
    read_segment_manifest,
    rebuild_indexes,
    regular_file_size,
    segment_file,
    writer_lock,
)
from ..log import open as open_log
from ..naming import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    GROUP_OFFSETS_FILE,
    GROUP_STATE_FILE,
    GROUPS_DIR,
    INDEX_SUFFIX,
    LOG_START_CHECKPOINT,
    LOG_SUFFIX,
    METADATA_FILE,
    ROOT_CHECKPOINTS,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TMP_SUFFIX,
    TXNINDEX_SUFFIX,
    parse_partition_dir,
    partition_dir_name,
    segment_path,
)
from ..records import TopicPartition
from .app import EXIT_CORRUPT, EXIT_UNSUPPORTED
from .options import dir_option, json_option
from .output import echo_json, human_bytes, progressbar

__all__ = ["Problem", "Report", "verify", "verify_path"]

MAX_BATCH_PROBLEMS = 10
"""Bad batches listed per segment; the rest are counted."""

Severity = Literal["error", "warning"]


@dataclass
class Problem:
    path: str
    severity: Severity
    message: str
    fixable: bool = False
    fixed: bool = False


@dataclass
class Report:
    path: str
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    unsupported: bool = False
    """A segment is in a format embedlog does not read (Kafka's v0/v1): exit code 5."""

    @property
    def healthy(self) -> bool:
        return not any(p.severity == "error" and not p.fixed for p in self.problems)

    def add(self, path: str, severity: Severity, message: str, fixable: bool = False) -> None:
        self.problems.append(Problem(path, severity, message, fixable))

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["healthy"] = self.healthy
        doc["errors"] = sum(p.severity == "error" and not p.fixed for p in self.problems)
        doc["warnings"] = sum(p.severity == "warning" and not p.fixed for p in self.problems)
        return doc


@dataclass
class _Partition:
    directory: str
    tp: TopicPartition | None
    config: TopicConfig
    dense: bool = False
    """A topic embedlog created: its active segment has no offset gap."""


def _partition_folders(root: str) -> tuple[bool, list[str]]:
    """``(is_log_dir, partition folders)``: a log directory's partition folders (real ones:
    :func:`_linked_folders` reports symbolic links), or ``root`` itself when it is a partition
    folder."""
    folders = sorted(
        entry.path for entry in os.scandir(root)
        if entry.is_dir(follow_symlinks=False) and parse_partition_dir(entry.name) is not None
    )
    if not folders and parse_partition_dir(os.path.basename(os.path.normpath(root))):
        return False, [root]
    return True, folders


def _linked_folders(folder: str, report: Report, *, partitions: bool) -> None:
    """Report each symbolic link in ``folder`` where a partition folder (``partitions``) or a
    group folder belongs: it is never followed."""
    with os.scandir(folder) as entries:
        links = [e.path for e in entries
                 if e.is_symlink() and (not partitions or parse_partition_dir(e.name))]
    for link in sorted(links):
        report.add(link, "error", "expected a folder, found a symbolic link (not followed)")


def _configs(root: str, report: Report) -> dict[TopicPartition, TopicConfig]:
    """Each partition's topic config from the topic metadata (Kafka's defaults when there is
    none); reports unreadable metadata and topics whose partition folders are missing."""
    out: dict[TopicPartition, TopicConfig] = {}
    try:
        with open_log(root, read_only=True) as log:
            for topic in log.topics():
                config = log.topic_config(topic)
                for p in range(log.partition_count(topic)):
                    out[TopicPartition(topic, p)] = config
                    directory = os.path.join(root, partition_dir_name(topic, p))
                    if not os.path.isdir(directory):
                        report.add(directory, "error",
                                   f"partition folder of {topic}-{p} is missing")
    except EmbedlogError as exc:
        report.add(os.path.join(root, METADATA_FILE), "error", str(exc))
    return out


def _check_root(root: str, report: Report, ends: dict[TopicPartition, int]) -> None:
    for name in ROOT_CHECKPOINTS:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            continue
        try:
            offsets = read_checkpoint(path)
        except CorruptionError as exc:
            report.add(path, "error", str(exc))
            continue
        if name != LOG_START_CHECKPOINT:
            continue
        for tp, start in offsets.items():
            end = ends.get(tp)
            if end is not None and start > end:
                report.add(path, "error", f"log start offset {start} of {tp.topic}-"
                           f"{tp.partition} is beyond its log end offset {end}")


def _check_groups(root: str, report: Report) -> None:
    """Every consumer group's state and committed-offsets files parse."""
    groups_dir = os.path.join(root, GROUPS_DIR)
    if os.path.islink(groups_dir):
        report.add(groups_dir, "error", "expected a folder, found a symbolic link (not followed)")
        return
    if not os.path.isdir(groups_dir):
        return
    _linked_folders(groups_dir, report, partitions=False)
    for entry in sorted(os.scandir(groups_dir), key=lambda e: e.name):
        if not entry.is_dir(follow_symlinks=False):
            continue
        state = os.path.join(entry.path, GROUP_STATE_FILE)
        offsets = os.path.join(entry.path, GROUP_OFFSETS_FILE)
        for path, read in ((state, GroupState.read), (offsets, read_checkpoint)):
            try:
                read(path)
            except CorruptionError as exc:
                report.add(path, "error", str(exc))


def _leftovers(directory: str, report: Report) -> None:
    for name in sorted(os.listdir(directory)):
        if name.endswith((SWAP_SUFFIX, CLEANED_SUFFIX, DELETED_SUFFIX, TMP_SUFFIX)):
            report.add(os.path.join(directory, name), "warning",
                       "left by an interrupted compaction or deletion; the next writer open "
                       "finishes or discards it")


def _check_manifest(directory: str, bases: list[int], report: Report) -> None:
    try:
        sealed = read_segment_manifest(directory)
    except CorruptionError as exc:
        report.add(directory, "error", str(exc))
        return
    present = set(bases)
    for base, size in sealed.items():
        path = segment_path(directory, base, LOG_SUFFIX)
        if base not in present:
            if bases and bases[0] < base < bases[-1]:
                report.add(path, "error", "sealed segment is missing")
            continue
        try:
            actual = regular_file_size(path)
        except CorruptionError as exc:  # the walk of the segment reports it as well
            report.add(path, "error", str(exc))
            continue
        if actual is not None and actual != size:
            report.add(path, "error", f"sealed segment is {actual} bytes; it was sealed at "
                                      f"{size}")


def _check_snapshots(directory: str, end: int, report: Report) -> None:
    for offset in producer_snapshot_offsets(directory):
        path = segment_path(directory, offset, SNAPSHOT_SUFFIX)
        try:
            read_producer_snapshot(path)
        except (CorruptionError, StorageError) as exc:
            reason = exc.reason if isinstance(exc, CorruptionError) else str(exc)
            report.add(path, "warning", f"{reason}: a writer passes over it")
            continue
        if offset > end:
            report.add(path, "warning", f"producer snapshot beyond the log end offset {end}: "
                       "the next writer open deletes it")


def _segments(directory: str) -> list[int]:
    bases = []
    for name in os.listdir(directory):
        try:
            _, base, suffix = segment_file(name)
        except ValueError:
            continue
        if suffix == LOG_SUFFIX:
            bases.append(base)
    return sorted(bases)


class _Checker:
    def __init__(self, report: Report, bar: Any, fix: bool) -> None:
        self.report, self.bar, self.fix = report, bar, fix
        self.pending = 0

    def partition(self, part: _Partition) -> int:
        """Check one partition folder; returns its end offset."""
        self.report.partitions += 1
        bases = _segments(part.directory)
        _leftovers(part.directory, self.report)
        _check_manifest(part.directory, bases, self.report)
        end = bases[0] if bases else 0
        for i, base in enumerate(bases):
            walk = self.segment(part, base, last=i == len(bases) - 1, previous_end=end)
            end = max(end, walk.next_offset)
        _check_snapshots(part.directory, end, self.report)
        return end

    def segment(self, part: _Partition, base: int, *, last: bool, previous_end: int
                ) -> SegmentWalk:
        report = self.report
        walk = SegmentWalk(part.directory, base, decode=True, dense=part.dense and last)
        listed = 0
        for batch in walk:
            report.batches += 1
            self.progress(batch.header.size)
            if batch.error and listed < MAX_BATCH_PROBLEMS:
                listed += 1
                report.add(walk.path, "error", f"batch at byte {batch.position} (offsets "
                           f"{batch.header.base_offset}..{batch.header.last_offset}): "
                           f"{batch.error}")
        report.segments += 1
        report.records += walk.records
        report.bytes += walk.size
        self.progress(walk.size - walk.valid_bytes)
        if walk.bad_batches > listed:
            report.add(walk.path, "error", f"{walk.bad_batches - listed} more bad batches")
        if walk.error is not None:
            report.unsupported |= isinstance(walk.error, UnsupportedFormatError)
            report.add(walk.path, "error", str(walk.error))
        elif walk.trailing_bytes:
            msg = (f"incomplete batch at byte {walk.valid_bytes} ({walk.trailing_bytes} "
                   "bytes)")
            if last:
                report.add(walk.path, "warning", msg + ": cut when the log is next opened for "
                           "writing")
            else:
                report.add(walk.path, "error", msg + " in a sealed segment")
        if walk.first_offset is not None and walk.first_offset < previous_end:
            report.add(walk.path, "error", f"segment overlaps the previous one: it starts at "
                       f"offset {walk.first_offset}, the previous one ends at {previous_end}")
        self.indexes(part, walk)
        return walk

    def progress(self, n: int) -> None:
        self.pending += n
        if self.pending >= 1 << 22:
            self.bar.update(self.pending)
            self.pending = 0

    def indexes(self, part: _Partition, walk: SegmentWalk) -> None:
        damaged_log = walk.error is not None or walk.bad_batches > 0
        broken = []
        stem = walk.path[: -len(LOG_SUFFIX)]
        for suffix, check in ((INDEX_SUFFIX, check_offset_index),
                              (TIMEINDEX_SUFFIX, check_time_index),
                              (TXNINDEX_SUFFIX, _txn_check)):
            path = stem + suffix
            if not os.path.lexists(path):
                if suffix != TXNINDEX_SUFFIX and \
                        walk.valid_bytes > part.config.index_interval_bytes:
                    self.report.add(path, "warning", "index is missing (readers scan the log)",
                                    fixable=not damaged_log)
                    broken.append(self.report.problems[-1])
                continue
            for message in check(path, walk, max_bytes=part.config.segment_index_bytes):
                self.report.add(path, "error", message, fixable=not damaged_log)
                broken.append(self.report.problems[-1])
        if self.fix and broken and not damaged_log:
            rebuild_indexes(part.directory, walk.base_offset, part.config)
            for problem in broken:
                problem.fixed = True


def _txn_check(path: str, walk: SegmentWalk, *, max_bytes: int) -> list[str]:
    """:func:`check_txn_index` (a missing ``.txnindex`` is fine: readers scan the markers)."""
    return check_txn_index(path, walk)


def verify_path(root: str, *, fix: bool = False) -> Report:
    """Check the log directory (or partition folder) ``root``; with ``fix`` rebuild broken
    indexes under the writer lock."""
    if not os.path.isdir(root):
        raise FileNotFoundError(2, "No such log directory", root)
    root = os.path.abspath(root)
    report = Report(root)
    is_log_dir, folders = _partition_folders(root)
    with (writer_lock(root if is_log_dir else os.path.dirname(root)) if fix
          else contextlib.nullcontext()):
        configs = _configs(root, report) if is_log_dir else {}
        dense = dense_topics(root) if is_log_dir else frozenset()
        parts = []
        for folder in folders:
            parsed = parse_partition_dir(os.path.basename(folder))
            tp = TopicPartition(*parsed) if parsed else None
            config = configs.get(tp) if tp else None
            parts.append(_Partition(folder, tp, config or TopicConfig(),
                                    tp is not None and tp.topic in dense))
        total = sum(os.lstat(segment_path(p.directory, b, LOG_SUFFIX)).st_size
                    for p in parts for b in _segments(p.directory))
        ends: dict[TopicPartition, int] = {}
        with progressbar(total, "verifying") as bar:
            checker = _Checker(report, bar, fix)
            for part in parts:
                end = checker.partition(part)
                if part.tp is not None:
                    ends[part.tp] = end
            bar.update(checker.pending)
        if is_log_dir:
            _linked_folders(root, report, partitions=True)
            _check_root(root, report, ends)
            _check_groups(root, report)
    return report


def _lines(report: Report) -> Iterator[str]:
    for p in report.problems:
        tag = "FIXED" if p.fixed else {"error": "ERROR", "warning": "WARN"}[p.severity]
        where = os.path.relpath(p.path, report.path) if p.path.startswith(report.path) else p.path
        yield f"{tag:<6} {where}: {p.message}"
    doc = report.to_json()
    state = "healthy" if report.healthy else "UNHEALTHY"
    yield (f"{report.partitions} partitions, {report.segments} segments, {report.batches} "
           f"batches, {report.records} records, {human_bytes(report.bytes)} checked: {state} "
           f"({doc['errors']} errors, {doc['warnings']} warnings)")


@click.command()
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=str))
@dir_option
@click.option("--fix", is_flag=True, help="Rebuild broken or missing indexes (takes the "
                                          "writer lock).")
@json_option
def verify(path: str | None, log_dir: str, fix: bool, as_json: bool) -> None:
    """Check CRCs, records, offsets, indexes and checkpoints of the log at PATH (a log
    directory or one partition folder). Exit code 0: healthy; 3: damage found;
    5: a segment in Kafka's unsupported v0/v1 format."""
    root = path or log_dir
    if classify(root) == "foreign":  # not a log at all: say so instead of listing "damage"
        check_folder(root, writing=False, adopt=False)
    report = verify_path(root, fix=fix)
    if as_json:
        echo_json(report.to_json())
    else:
        for line in _lines(report):
            click.echo(line)
    if not report.healthy:
        click.get_current_context().exit(EXIT_UNSUPPORTED if report.unsupported
                                         else EXIT_CORRUPT)
