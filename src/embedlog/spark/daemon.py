"""A pyspark daemon whose Python workers start with the embedlog reader already imported:
``spark.python.daemon.module=embedlog.spark.daemon`` (:func:`embedlog.spark.local_session`
sets it).

Spark forks every executor Python worker from one daemon process per executor. pyspark's own
daemon (``pyspark.daemon``) imports nothing a task needs before it forks, so each new worker
imports ``pyspark.worker``, pyarrow, numpy and embedlog itself: about 0.4-0.5 s of CPU, paid by
the task that gets the new worker. Spark starts new workers more often than one would think: a
query that stops reading early (``limit``, ``take``, ``show``) discards the worker of every
task it cut short, so the next query's task waits for a fresh one. And after each task the
daemon's worker loop runs ``gc.collect()`` over every object those imports made (~60,000).

This module imports all of it once, in the daemon: pyspark's worker module (the one named on
the command line, ``pyspark.worker``), the reader's modules (:mod:`embedlog.spark.source` and
:mod:`embedlog.spark.scan`, hence pyarrow and numpy), then collects and freezes the heap
(``gc.freeze``), and runs pyspark's daemon loop (``pyspark.daemon.manager``) unchanged. A
worker forked from it has nothing left to import for an embedlog task, shares the imported
modules' memory with the daemon, and its collection after each task walks only the objects
made since the fork. A worker that runs something else (a UDF) is a normal pyspark worker.

Only executor workers come from this daemon: Spark's planner processes (data source lookup,
``schema()``, ``reader()`` and ``partitions()``) are forked by ``pyspark.daemon`` and import
embedlog once each, then are reused.

Threads at fork time: importing numpy (OpenBLAS) and pyarrow (jemalloc) each starts one
thread; both libraries re-create them in a forked child (``pthread_atfork``), as every
``multiprocessing`` fork of a process that imported them relies on. If the preload fails (an
import error), the daemon runs anyway and each worker reports the error itself, as with
pyspark's daemon.
"""

from __future__ import annotations

import gc
import importlib
import sys

import pyspark.daemon

__all__ = ["preload"]

READER_MODULES = ("pyspark.worker", "embedlog.spark.source", "embedlog.spark.scan")
"""What an executor worker imports to run an embedlog read task."""


def preload(argv: list[str]) -> bool:
    """Import the worker module named in ``argv`` (as pyspark's daemon would after the fork)
    and :data:`READER_MODULES`, then collect and freeze the heap. Returns whether every import
    succeeded (the heap is frozen either way)."""
    names = list(READER_MODULES)
    if len(argv) > 1 and argv[1].startswith("pyspark"):
        names.insert(0, argv[1])
    ok = True
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            ok = False
    gc.collect()
    gc.freeze()
    return ok


if __name__ == "__main__":  # pragma: no cover - runs as Spark's daemon process
    preload(sys.argv)
    pyspark.daemon.manager()
