"""The staging folder of Spark writes: rows that tasks wrote and the driver has not appended.

Layout (names in :mod:`embedlog.naming`)::

    <log dir>/.spark-staging/
      <job>/part-<task>-<uuid>.arrow        one Arrow IPC file per task that wrote rows
      <job>/part-<task>-<uuid>.arrow.tmp    a file still being written
      <job>.aborted                         the job failed: late tasks drop their file

Staged files are never fsynced: a crash loses the job, which Spark then fails or retries. Every
mutation goes through :mod:`embedlog._io` like the log's own files.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa

from .. import _io, _paths
from ..errors import CorruptionError
from ..naming import ABORTED_SUFFIX, SPARK_STAGING_DIR, TMP_SUFFIX

__all__ = ["cleanup", "is_aborted", "job_of", "mark_aborted", "read_staged", "remove_file", "stage"]

_JOB = re.compile(r"[0-9a-f]{32}")

MARKER_TTL_S = 3600
"""Abort markers older than this are removed by the next job's cleanup."""


class _Sink:
    """A write-only file object over an :mod:`embedlog._io` descriptor, for pyarrow."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        _io.write(self.fd, data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _job_folder(staging: str) -> str:
    """Create ``<log>/.spark-staging/<job>`` as real folders (a symbolic link or a file in their
    place is :class:`~embedlog.errors.CorruptionError`: nothing is written through a link)."""
    root = os.path.dirname(os.path.dirname(staging))
    return _paths.folder(root, SPARK_STAGING_DIR, os.path.basename(staging))


def stage(staging: str, task: int, batches: Iterator[pa.RecordBatch]) -> tuple[str, int]:
    """Write ``batches`` to a new Arrow IPC file in the job folder ``staging``: its path and
    row count, or ``("", 0)`` when there were no batches (nothing is left behind)."""
    _job_folder(staging)
    final = os.path.join(staging, f"part-{task:05d}-{uuid.uuid4().hex}.arrow")
    tmp = final + TMP_SUFFIX
    fd: int | None = None
    rows = 0
    writer: pa.ipc.RecordBatchFileWriter | None = None
    try:
        for batch in batches:
            if writer is None:
                fd = _io.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                writer = pa.ipc.new_file(pa.PythonFile(_Sink(fd), mode="w"), batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        try:
            if writer is not None:
                writer.close()
        finally:
            if fd is not None:
                _io.close(fd)
    if writer is None:
        return "", 0
    _io.rename(tmp, final)
    return final, rows


def job_of(staging: str, path: str) -> str:
    """The job folder of the staged file ``path``, which comes from a task's commit message: it
    must name a part file directly in a job folder (``<32 hex digits>``) of the staging root that
    ``staging`` is in. A streaming query's tasks may stage under another job folder than the
    driver's writer object names: each side builds its own."""
    job = os.path.dirname(path)
    name = os.path.basename(path)
    if os.path.dirname(job) != os.path.dirname(staging) or \
            not _JOB.fullmatch(os.path.basename(job)) or \
            not name.startswith("part-") or not name.endswith(".arrow"):
        raise CorruptionError(f"staged file {path!r} is not a part file of {staging!r}")
    return job


def read_staged(staging: str, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A staged file's rows (only ``columns`` that it has, when given). ``path`` must name a
    regular file in a job folder next to ``staging`` (:func:`job_of`); one pyarrow cannot read
    (damaged, truncated, not Arrow) is a :class:`~embedlog.errors.CorruptionError`."""
    job_of(staging, path)
    with os.fdopen(_io.open_regular(path), "rb") as raw, pa.PythonFile(raw, mode="r") as f:
        try:
            reader = pa.ipc.open_file(f)
            if columns is not None:
                names = reader.schema.names
                wanted = [names.index(c) for c in columns if c in names]
                options = pa.ipc.IpcReadOptions(included_fields=wanted)
                reader = pa.ipc.open_file(f, options=options)
            return reader.read_all()
        except pa.ArrowException as exc:
            raise CorruptionError(f"staged file is not a readable Arrow file: {exc}",
                                  path=path) from exc


def is_aborted(staging: str) -> bool:
    return os.path.exists(staging + ABORTED_SUFFIX)


def mark_aborted(staging: str) -> None:
    """Leave the marker that tells tasks of a failed job still running to drop their file."""
    with contextlib.suppress(OSError, CorruptionError):
        root = os.path.dirname(os.path.dirname(staging))
        folder = _paths.folder(root, SPARK_STAGING_DIR)
        marker = os.path.join(folder, os.path.basename(staging) + ABORTED_SUFFIX)
        _io.close(_io.open_file(marker, os.O_WRONLY | os.O_CREAT))


def remove_file(path: str) -> None:
    """Remove one staged file, and its job folder if that is now empty."""
    with contextlib.suppress(OSError):
        _io.unlink(path)
    with contextlib.suppress(OSError):
        _io.rmdir(os.path.dirname(path))


def cleanup(staging: str) -> None:
    """Remove the job folder ``staging``, abort markers of jobs long gone, and the staging
    root when no other job is staging. Only real folders are listed and emptied: a symbolic
    link (or a file) where the staging root or the job folder belongs is left alone, so
    nothing outside the log folder is ever removed."""
    root = os.path.dirname(os.path.dirname(staging))
    parent = _real_folder(root, SPARK_STAGING_DIR)
    if parent is None:
        return
    job = _real_folder(root, SPARK_STAGING_DIR, os.path.basename(staging))
    if job is not None:
        with contextlib.suppress(OSError):
            for name in os.listdir(job):
                _io.unlink(os.path.join(job, name))
        with contextlib.suppress(OSError):
            _io.rmdir(job)
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            marker = os.path.join(parent, name)
            if name.endswith(ABORTED_SUFFIX) and (
                time.time() - os.path.getmtime(marker) > MARKER_TTL_S
            ):
                _io.unlink(marker)
    with contextlib.suppress(OSError):
        _io.rmdir(parent)


def _real_folder(root: str, *names: str) -> str | None:
    """``root/names...`` if it is there and a real folder all the way (never a link)."""
    try:
        return _paths.existing_folder(root, *names)
    except (CorruptionError, OSError):
        return None
