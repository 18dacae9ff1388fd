"""Upkeep that happens on its own: retention and the log cleaner, owned by the writer.

A writer :class:`~embedlog.log.Log` owns an :class:`Upkeep` daemon thread, as a Kafka broker
owns its log manager's scheduler: ``log.initial.delay.ms`` (30 s) after the open it applies
``retention.ms`` / ``retention.bytes`` to every partition, then again every
``log.retention.check.interval.ms`` (5 minutes); with ``log.cleaner.enable`` (default true) it
also runs a compaction round every ``log.cleaner.backoff.ms`` (15 s) over the compacted
partitions whose dirty ratio or ``max.compaction.lag.ms`` makes them eligible
(:meth:`~embedlog.compaction.manager.Compactor.clean_round`). The settings take Kafka's broker
config names and defaults (:class:`~embedlog.config.UpkeepConfig`). A process that lives less
than the initial delay gets no background run: ``Log.upkeep.run_once()`` or ``embedlog
cleanup`` run one at once.

Every run is recorded as an :class:`UpkeepRun` (what ran, when, what it deleted or cleaned);
the last :data:`HISTORY` runs are kept in memory (``Log.upkeep.history``). A failing run is
logged and recorded with its error; the next run goes on. :meth:`Upkeep.stop` interrupts a
compaction pass between two batches and waits for the thread; ``Log.close()`` stops it first.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .compaction.stats import CompactionStats
from .config import UpkeepConfig
from .errors import ReadOnlyError, UsageError
from .partition import Partition
from .tiering.upload import enforce_retention as tiered_retention
from .tiering.upload import preview as tiered_preview

__all__ = ["HISTORY", "Upkeep", "UpkeepRun", "enforce_retention", "retention_preview"]

log = logging.getLogger(__name__)

HISTORY = 100
"""How many runs :attr:`Upkeep.history` keeps."""


@dataclass(frozen=True)
class UpkeepRun:
    """One upkeep run: ``kind`` is ``"retention"``, ``"cleaner"`` or ``"tiering"``; times in
    ms since the epoch; ``deleted_segments`` (retention; tiering: the local copies deleted) per
    ``"topic-partition"``; ``cleaned`` and ``records_removed`` (cleaner) the partitions
    compacted and the records they dropped; ``uploaded`` (tiering) the segments published to
    the remote; ``error`` the failure's message, if any."""

    kind: str
    started_ms: int
    finished_ms: int
    deleted_segments: dict[str, int]
    cleaned: int = 0
    records_removed: int = 0
    error: str | None = None
    uploaded: int = 0


def enforce_retention(partitions: Iterable[Partition], now: int | None = None) -> UpkeepRun:
    """Apply retention to ``partitions`` and describe what was deleted."""
    started = _now()
    deleted: dict[str, int] = {}
    for p in partitions:
        count = tiered_retention(p, p.clock() if now is None else now)
        if count:
            deleted[f"{p.topic}-{p.partition}"] = count
    return UpkeepRun("retention", started, _now(), deleted)


def retention_preview(p: Partition, now: int) -> tuple[int, int]:
    """What retention would delete from ``p`` at ``now`` without deleting it: ``(segments,
    new log start offset)`` -- the same rule as :meth:`Partition.enforce_retention`: leading
    closed segments whose newest record is older than ``retention.ms``, or while the partition
    stays at or above ``retention.bytes`` without them; never the active segment."""
    cfg = p.config
    segments = list(p.segments)
    if not cfg.delete or not segments:
        return 0, p.start_offset
    total = sum(s.size for s in segments)
    doomed = 0
    for seg in segments[:-1]:
        stamp = seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms()
        by_time = cfg.retention_ms >= 0 and now - stamp > cfg.retention_ms
        by_size = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
        if not (by_time or by_size):
            break
        total -= seg.size
        doomed += 1
    return doomed, max(p.start_offset, segments[doomed].base_offset)


def _now() -> int:
    return int(time.time() * 1000)


class Upkeep(threading.Thread):
    """The writer's upkeep thread (a daemon). ``settings``: Kafka's broker names
    (:class:`~embedlog.config.UpkeepConfig`), ``True`` for the defaults, ``False`` for no
    thread (:meth:`start` then does nothing; :meth:`run_once` still works). ``partitions``
    lists the log's partitions at the time of each run; ``clean_round(partitions, stopping)``
    runs one cleaner round; ``tier_round(partitions, now)`` one tiering round (uploaded,
    local segments deleted); ``clock`` gives ms."""

    def __init__(
        self,
        settings: bool | Mapping[str, Any],
        partitions: Callable[[], list[Partition]],
        clean_round: Callable[[list[Partition], Callable[[], bool]], CompactionStats],
        *,
        writable: bool,
        clock: Callable[[], int],
        tier_round: Callable[[list[Partition], int], tuple[int, dict[str, int]]] | None = None,
    ) -> None:
        super().__init__(name="embedlog-upkeep", daemon=True)
        self.config = UpkeepConfig.from_kafka(settings if isinstance(settings, Mapping) else {})
        self.enabled = settings is not False
        self.writable = writable
        self.clock = clock
        self.partitions = partitions
        self.clean_round = clean_round
        self.tier_round = tier_round
        self.history: collections.deque[UpkeepRun] = collections.deque(maxlen=HISTORY)
        self._stopping = threading.Event()
        self._changed = threading.Condition()

    def record(self, run: UpkeepRun) -> None:
        with self._changed:
            self.history.append(run)
            self._changed.notify_all()

    def wait_runs(self, kind: str, count: int, timeout: float) -> bool:
        """Block until ``count`` runs of ``kind`` are recorded; False on timeout."""
        def enough() -> bool:
            return sum(1 for r in self.history if r.kind == kind) >= count

        with self._changed:
            return self._changed.wait_for(enough, timeout)

    def run(self) -> None:
        cfg = self.config
        first = time.monotonic() + cfg.initial_delay_ms / 1000
        due = {"retention": first}
        if cfg.cleaner_enable:
            due["cleaner"] = first
        if self.tier_round is not None:
            due["tiering"] = first
        while not self._stopping.is_set():
            kind = min(due, key=due.__getitem__)
            if self._stopping.wait(max(0.0, due[kind] - time.monotonic())):
                return
            self.run_once(kind)
            interval = {"retention": cfg.retention_check_interval_ms,
                        "tiering": cfg.remote_log_manager_task_interval_ms,
                        }.get(kind, cfg.cleaner_backoff_ms)
            due[kind] = time.monotonic() + interval / 1000

    def preview(self, now_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int]]:
        """What retention would delete now, deleting nothing (also on a reader):
        ``{(topic, partition): (segments, new log start offset)}``."""
        now = self.clock() if now_ms is None else now_ms
        out = {}
        for p in self.partitions():
            p.refresh()
            tiered = tiered_preview(p, now)
            out[(p.topic, p.partition)] = retention_preview(p, now) if tiered is None else tiered
        return out

    def run_once(self, kind: str) -> UpkeepRun:
        """One ``"retention"``, ``"cleaner"`` or ``"tiering"`` run in the calling thread,
        recorded and returned; a failure is logged and recorded with its message."""
        if kind not in ("retention", "cleaner", "tiering"):
            raise UsageError("upkeep kind must be 'retention', 'cleaner' or 'tiering', "
                             f"not {kind!r}")
        if not self.writable:
            raise ReadOnlyError("upkeep runs need a writer; this log was opened read-only")
        started = _now()
        try:
            if kind == "retention":
                run = enforce_retention(self.partitions())
            elif kind == "tiering":
                uploaded, deleted = (self.tier_round(self.partitions(), self.clock())
                                     if self.tier_round is not None else (0, {}))
                run = UpkeepRun("tiering", started, _now(), deleted, uploaded=uploaded)
            else:
                compacted = [p for p in self.partitions() if p.config.compact]
                stats = self.clean_round(compacted, self._stopping.is_set)
                run = UpkeepRun("cleaner", started, _now(), {}, stats.partitions,
                                stats.records_removed)
        except Exception as exc:  # a failed run is reported; the next one goes on
            log.exception("embedlog %s run failed", kind)
            run = UpkeepRun(kind, started, _now(), {}, error=str(exc))
        self.record(run)
        return run

    def start(self) -> None:
        """Start the thread for a writer whose upkeep is enabled; otherwise do nothing."""
        if self.enabled and self.writable:
            super().start()

    def stop(self) -> None:
        """Interrupt the current run (a compaction pass stops between two batches) and wait."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()
