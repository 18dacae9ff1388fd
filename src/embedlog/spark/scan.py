"""Executor side: read one planned offset range as Arrow batches.

A task carries only the log directory, the partition and the offsets fixed at planning
(:class:`ReadTask`), so any executor that sees the directory can run it. Rolled segments never
change, and the active segment is read only up to the end offset chosen at planning, so a writer
appending meanwhile does not disturb the read.

Each Python worker keeps its read-only :class:`embedlog.Log` per directory between tasks (Spark
reuses workers), so opening the directory is paid once per worker, not once per task; planning on
the driver opens a fresh view each time (:func:`planning_log`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..errors import OffsetOutOfRangeError, UsageError
from ..log import Log
from ..log import open as open_log
from .arrow import ArrowBatcher

__all__ = ["ReadTask", "planning_log", "read_task", "reader_log"]


@dataclass(frozen=True)
class ReadTask(InputPartition):  # type: ignore[misc]
    """One Spark input partition: offsets ``[start, end)`` of ``topic``-``partition``."""

    path: str
    topic: str
    partition: int
    start: int
    end: int
    fail_on_data_loss: bool = True
    size_bytes: int = 0


_LOGS: dict[tuple[str, int, int], Log] = {}
_LOGS_LOCK = threading.Lock()


def planning_log(path: str) -> Log:
    """A fresh read-only :class:`Log` for the driver: it sees the current log start offsets
    and topics (a long-lived read-only view follows new segments, but not a log start moved
    inside a segment by ``delete_records``). Close it after planning."""
    if not os.path.isdir(path):
        raise UsageError(f"no log directory at {path}")
    return open_log(path, read_only=True)


def reader_log(path: str) -> Log:
    """A cached read-only :class:`Log` for executors (reopened if the directory was replaced).
    Tasks only read offset ranges checked at planning, so the cache may lag slightly."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"no log directory at {path}") from None
    key = (os.path.abspath(path), st.st_dev, st.st_ino)
    with _LOGS_LOCK:
        log = _LOGS.get(key)
        if log is None or log.closed:
            log = open_log(path, read_only=True)
            _LOGS[key] = log
        return log


def read_task(
    task: ReadTask, columns: Sequence[str], schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Yield the task's records as ``RecordBatch``es of ``schema``."""
    log = reader_log(task.path)
    start, end = task.start, task.end
    log_start, log_end = log.start_offset(task.topic, task.partition), log.end_offset(
        task.topic, task.partition
    )
    if start < log_start or end > log_end:
        if task.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{task.topic}-{task.partition}: offsets [{start}, {end}) planned for this task "
                f"are no longer all in the log, which now holds [{log_start}, {log_end}) "
                "(retention or truncation ran after planning). Set failOnDataLoss=false to "
                "read what is left instead"
            )
        start, end = max(start, log_start), min(end, log_end)
        if start >= end:
            return
    batcher = ArrowBatcher(task.topic, task.partition, columns, schema, batch_rows)
    for batch in log.read_batches(task.topic, task.partition, start, end):
        yield from batcher.add(batch.timestamp_type, batch)
    yield from batcher.flush()
