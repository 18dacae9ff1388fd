"""Compaction of a log directory: the cleaner checkpoint, one cleaning at a time per partition,
manual compaction and the choice the background cleaner makes.

``cleaner-offset-checkpoint`` (Kafka's text checkpoint format, at the log root, as a broker
writes it) maps each compacted partition to its first dirty offset: where the last completed
pass stopped. It is written after a pass, so a crash before that only makes the next pass redo
work (cleaning is idempotent); a damaged one is passed over the same way.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Final

from .. import checkpoint
from ..errors import CorruptionError
from ..naming import CLEANER_CHECKPOINT
from ..partition import Partition
from ..producer_state_store import last_stable_offset
from ..records import TopicPartition
from .cleaner import Cancelled, clean_partition
from .plan import Cleanable, cleanable
from .stats import CompactionStats

__all__ = ["DEFAULT_MAP_BYTES", "Compactor"]

log = logging.getLogger(__name__)

DEFAULT_MAP_BYTES: Final = 128 * 1024 * 1024
"""Memory for one pass's key map (Kafka's ``log.cleaner.dedupe.buffer.size`` default)."""


def _tp(p: Partition) -> TopicPartition:
    return TopicPartition(p.topic, p.partition)


def _read_checkpoint(path: str) -> dict[TopicPartition, int]:
    """The checkpointed first dirty offsets. A damaged file is passed over with a warning, as
    an offset out of range is: it only says where cleaning may start, so each partition's
    next pass starts at its log start (cleaning again what was clean loses nothing) and the
    pass writes the file anew. Raising instead would stop every compaction for good, and a
    topic deletion half way."""
    try:
        return checkpoint.read_offsets(path)
    except CorruptionError as exc:
        log.warning("%s; compaction starts again from each partition's log start", exc)
        return {}


class Compactor:
    """The cleaning state of one writable log directory."""

    def __init__(
        self, root: str, clock: Callable[[], int], map_bytes: int = DEFAULT_MAP_BYTES
    ) -> None:
        self.path = os.path.join(root, CLEANER_CHECKPOINT)
        self.clock = clock
        self.map_bytes = map_bytes
        self._offsets = _read_checkpoint(self.path)
        self._lock = threading.Lock()
        self._busy: dict[TopicPartition, threading.Lock] = {}
        self._cancelled: set[TopicPartition] = set()

    def first_dirty(self, p: Partition) -> int | None:
        """The checkpointed first dirty offset of ``p``, if any."""
        return self._offsets.get(_tp(p))

    def _busy_lock(self, tp: TopicPartition) -> threading.Lock:
        with self._lock:
            return self._busy.setdefault(tp, threading.Lock())

    def _save(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            self._offsets[tp] = offset
            checkpoint.write_offsets(self.path, self._offsets)

    def plan(self, p: Partition, now: int) -> Cleanable | None:
        """The partition's cleanable range as the background cleaner judges it: up to its
        last stable offset (Kafka's ``cleanableOffsets``), so a partition whose open
        transaction holds back its dirty section is not due."""
        with p.lock:
            if p.poisoned is not None or not p.segments:
                return None
            segments = list(p.segments)
            start, end = p.start_offset, p.end_offset
            stable = last_stable_offset(p)  # incremental: new headers only
        return cleanable(
            segments, start_offset=start, end_offset=end, checkpoint=self.first_dirty(p),
            last_stable_offset=stable, config=p.config, now=now,
        )  # fmt: skip

    def clean(
        self,
        p: Partition,
        *,
        now: int | None = None,
        map_bytes: int | None = None,
        until_done: bool = True,
        wait: bool = True,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> CompactionStats:
        """Clean ``p``: every pass needed to cover its dirty section (``until_done``), or one.
        Without ``wait``, a partition another thread is cleaning is skipped."""
        tp = _tp(p)
        busy = self._busy_lock(tp)
        if not busy.acquire(blocking=wait):
            return CompactionStats()
        total = CompactionStats()
        try:
            when = self.clock() if now is None else now

            def stop() -> bool:
                return tp in self._cancelled or should_stop()

            target: int | None = None  # what the first pass planned to reach
            while True:
                result = clean_partition(
                    p, checkpoint=self.first_dirty(p), now=when,
                    map_bytes=self.map_bytes if map_bytes is None else map_bytes,
                    should_stop=stop,
                )  # fmt: skip
                total += result.stats
                if result.end_offset is None or result.plan is None:
                    break
                self._save(tp, result.end_offset)
                if target is None:
                    target = result.plan.first_uncleanable
                if not until_done or result.end_offset >= target:
                    break
        except Cancelled:
            pass
        finally:
            busy.release()
        total.partitions = 1 if total.passes else 0
        return total

    def clean_round(
        self, partitions: Iterable[Partition], should_stop: Callable[[], bool]
    ) -> CompactionStats:
        """One background round: a pass over each partition that is due, the filthiest first
        (Kafka's ``grabFilthiestCompactedLog``)."""
        now = self.clock()
        due = []
        for p in partitions:
            if not p.config.compact:
                continue
            try:
                plan = self.plan(p, now)
            except Exception:  # a damaged segment: reported by the pass that reads it
                log.exception("cannot plan the compaction of %s-%d", p.topic, p.partition)
                continue
            if plan is not None and plan.due(p.config):
                due.append((plan.max_compaction_delay_ms > 0, plan.ratio, p))
        due.sort(key=lambda d: (d[0], d[1]), reverse=True)
        total = CompactionStats()
        for _, _, p in due:
            if should_stop():
                break
            try:
                total += self.clean(p, now=now, until_done=False, wait=False,
                                    should_stop=should_stop)
            except Exception:
                log.exception("compaction of %s-%d failed", p.topic, p.partition)
        return total

    def stop(self, partitions: Iterable[Partition]) -> None:
        """Interrupt any pass over ``partitions`` (between two batches) and wait for it."""
        tps = [_tp(p) for p in partitions]
        with self._lock:
            self._cancelled.update(tps)
        try:
            for tp in tps:
                with self._busy_lock(tp):
                    pass
        finally:
            with self._lock:
                self._cancelled.difference_update(tps)

    def forget(self, topic: str, partitions: Iterable[Partition]) -> None:
        """A topic is being deleted: stop any pass over its ``partitions`` and drop its
        checkpoint entries."""
        self.stop(partitions)
        with self._lock:
            stale = [tp for tp in self._offsets if tp.topic == topic]
            for tp in stale:
                del self._offsets[tp]
            if stale:
                checkpoint.write_offsets(self.path, self._offsets)
