"""Executor side: read the offset ranges of one planned task as Arrow batches.

A task carries only the log directory and the ranges fixed at planning -- one or more
``(topic, partition, start, end)``, several when small partitions were packed together
(:class:`ReadTask`) -- so any executor that sees the directory can run it, with read access
only. Rolled segments never change, and the active segment is read only up to the end offset
chosen at planning, so a writer appending meanwhile does not disturb the read.

Each Python worker keeps one :class:`~embedlog.spark.catalog.FolderView` per directory between
tasks (Spark reuses workers): it opens only the partitions the worker's tasks read, and keeps a
few of them open for the next task.

With ``read_committed`` the batches go through :class:`embedlog.transactions.CommittedFilter`
(the storage-side transaction filter every reader shares): records of aborted transactions are
dropped. Planning ends ranges at last stable offsets (:mod:`embedlog.spark.stable`); a range
that still reaches into a transaction open when the task runs (one not planned that way) fails
the task rather than silently skipping the withheld records.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..arrow.columns import ArrowBatcher
from ..arrow.isolation import committed_batches
from ..errors import OffsetOutOfRangeError, UnknownTopicError, UsageError
from ..log import Log
from ..log import open as open_log
from ..opener import open as open_any
from ..partition_read import decoded
from ..records import RecordBatch
from ..remote import is_uri
from ..transactions import CommittedFilter
from .catalog import FolderView
from .planning import OffsetRange
from .remote_view import RemoteView, cache_root, open_view

__all__ = ["ReadTask", "Slice", "make_tasks", "planning_log", "read_task", "reader_log",
           "reader_view"]


Slice = tuple[str, int, int, int]
"""``(topic, partition, start, end)``: offsets ``[start, end)`` of one partition."""


@dataclass(frozen=True)
class ReadTask(InputPartition):  # type: ignore[misc]
    """One Spark input partition: the offset ranges (:data:`Slice`) one task reads, in order."""

    path: str
    ranges: tuple[Slice, ...]
    fail_on_data_loss: bool = True
    size_bytes: int = 0
    read_committed: bool = False
    dense: tuple[str, ...] = ()
    """The topics of ``ranges`` that embedlog created (``"dense"`` in ``embedlog.json``): their
    active segments have no offset gap, a rule the JVM reader (:mod:`embedlog.spark.jvm`)
    applies as the Python views do."""


_GONE = "the partition no longer exists (its topic was deleted after planning)"

_LOGS: dict[tuple[str, int, int], Log] = {}
_VIEWS: dict[tuple[str, int, int], FolderView | RemoteView] = {}
_LOCK = threading.Lock()


def make_tasks(path: str, planned: Sequence[Sequence[OffsetRange]], *,
               fail_on_data_loss: bool, read_committed: bool,
               dense: Collection[str] = ()) -> list[InputPartition]:
    """Spark input partitions for planned tasks (``dense``: the topics planning found marked
    dense, :attr:`ReadTask.dense`). Spark turns an empty list into one
    ``InputPartition(None)``; :func:`read_task` reads nothing for it, so a query with nothing
    to read returns no rows (as Kafka's source does)."""
    return [
        ReadTask(path, tuple((r.topic, r.partition, r.start, r.end) for r in task),
                 fail_on_data_loss, sum(r.size_bytes for r in task), read_committed,
                 tuple(sorted({r.topic for r in task}.intersection(dense))))
        for task in planned
    ]


def planning_log(path: str) -> Log:
    """A fresh read-only :class:`Log` of the whole folder (the writer's checks; planning uses
    :class:`~embedlog.spark.catalog.FolderView`). Close it after use."""
    if not os.path.isdir(path):
        raise UsageError(f"no log directory at {path}")
    return open_log(path, read_only=True)


def reader_log(path: str) -> Log:
    """A cached read-only :class:`Log` of the whole folder (the ``read_committed`` path, which
    reads through a consumer)."""
    key = _key(path)
    with _LOCK:
        log = _LOGS.get(key)
        if log is None or log.closed:
            log = _LOGS[key] = open_any(path, read_only=True, cache_dir=(
                cache_root() if is_uri(path) else None))
        return log


def reader_view(path: str) -> FolderView | RemoteView:
    """This worker's view of ``path`` (a new one if the folder was replaced); a local folder's
    is refreshed: it sees the folder as it is now (a remote one lists again only for a range
    past what it listed: :meth:`RemoteView.reader`)."""
    key = _key(path)
    with _LOCK:
        view = _VIEWS.get(key)
        if view is None:
            view = _VIEWS[key] = open_view(path)
        if isinstance(view, FolderView):
            view.refresh()
        return view


def _key(path: str) -> tuple[str, int, int]:
    if is_uri(path):
        return (path, 0, 0)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"no log directory at {path}") from None
    return (os.path.abspath(path), st.st_dev, st.st_ino)


def read_task(
    task: InputPartition, columns: Sequence[str], schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Yield the task's records as ``RecordBatch``es of ``schema`` (nothing for anything but a
    :class:`ReadTask`: Spark's stand-in for an empty plan)."""
    if not isinstance(task, ReadTask) or not task.ranges:
        return
    view = reader_view(task.path)
    for topic, partition, start, end in task.ranges:
        try:
            p = view.reader(topic, partition, end)
        except UnknownTopicError:  # deleted after planning: data loss, as in Kafka's source
            if task.fail_on_data_loss and start < end:
                raise OffsetOutOfRangeError(
                    f"{topic}-{partition}: offsets [{start}, {end}) planned for this task are "
                    f"no longer in the log: {_GONE}. Set failOnDataLoss=false to read what is "
                    "left instead") from None
            continue
        checked = _check(p.start_offset, p.end_offset, task, topic, partition, start, end)
        if checked is None:
            continue
        start, end = checked
        if task.read_committed:
            log = reader_log(task.path)
            yield from _committed(log, topic, partition, start, end, columns, schema, batch_rows)
            continue
        batcher = ArrowBatcher(topic, partition, columns, schema, batch_rows)
        for header, found in decoded(p, start, end, False, None, batcher.decode):
            yield from batcher.take(header, found)
        yield from batcher.flush()


def _check(log_start: int, log_end: int, task: ReadTask, topic: str, partition: int,
           start: int, end: int) -> tuple[int, int] | None:
    """``[start, end)`` if the log (now ``[log_start, log_end)``) still holds it all; else an
    error, or with ``failOnDataLoss=false`` what is left (``None`` if nothing)."""
    if log_start <= start and end <= log_end:
        return start, end
    if task.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{topic}-{partition}: offsets [{start}, {end}) planned for this task "
            f"are no longer all in the log, which now holds [{log_start}, {log_end}) "
            "(retention or truncation ran after planning). Set failOnDataLoss=false to "
            "read what is left instead"
        )
    start, end = max(start, log_start), min(end, log_end)
    return (start, end) if start < end else None


def _committed(log: Log, topic: str, partition: int, start: int, end: int,
               columns: Sequence[str], schema: pa.Schema, batch_rows: int
               ) -> Iterator[pa.RecordBatch]:
    """``read_committed``: the records a ``read_committed`` consumer returns in the range
    (:class:`~embedlog.transactions.CommittedFilter`, through the Arrow reader's adapter)."""
    batcher = ArrowBatcher(topic, partition, columns, schema, batch_rows)
    committed = CommittedFilter[RecordBatch]()
    source = log.read_batches(topic, partition, start, None, control=True)
    for batch in committed_batches(source, end, committed):
        yield from batcher.add(batch.timestamp_type, batch)
    if committed.stable is not None and committed.stable < end:
        raise UsageError(
            f"{topic}-{partition}: a transaction still open at offset {committed.stable} "
            f"holds back the records up to {end} planned for this read_committed task; retry "
            "once it is committed or aborted"
        )
    yield from batcher.flush()
