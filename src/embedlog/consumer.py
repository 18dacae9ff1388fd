"""The consumer: ``KafkaConsumer``'s shape over an embedded :class:`~embedlog.Log`.

::

    with log.consumer("events", group="billing", on_revoke=...) as consumer:
        for record in consumer:
            handle(record)
            consumer.commit()

**Positions.** Each assigned partition has a *position*: the offset of the next record the
consumer will hand out. :meth:`Consumer.poll` returns up to ``max_poll_records`` records and
moves the positions past them; iterating the consumer moves them record by record.
:meth:`Consumer.commit` stores positions as the group's committed offsets (the **next** offset
to read, Kafka's convention): commit after processing for at-least-once, before for
at-most-once. A partition's first position is its committed offset, else ``auto_offset_reset``
decides (``earliest``, ``latest``, or ``none`` = raise); the same rule applies when the position
fell below the log start (retention deleted those records, even mid-read) or above the end.

**Groups.** With ``group=`` and :meth:`Consumer.subscribe`, consumers of the same group in
threads or processes share the partitions of their topics (``assignor="range"`` or
``"roundrobin"``) and rebalance when members join, leave or die; see :mod:`embedlog.groups`.
The group protocol runs inside ``subscribe()`` and ``poll()`` (Kafka's consumers heartbeat
from a thread): a member that does not poll for ``session_timeout_ms`` is evicted and its
commits are refused, but the partitions it holds stay blocked until it polls again (or dies), so
no partition is ever read by two members at once. Callbacks ``on_revoke(partitions)`` (still
owned: commit here) and ``on_assign(partitions)`` get the partitions lost or gained
(cooperative rebalancing), inside ``poll`` (the first ``on_assign`` at the first ``poll``,
``position``, ``seek*`` or ``lag``: never in the constructor). A member commits only partitions
it owns. Without a group, ``subscribe`` takes every partition and ``commit`` is refused. Topics
deleted or created again are followed at every poll (:mod:`embedlog.consumer_topics`).

**Waiting.** ``poll(timeout)`` blocks while nothing is new. On the log's writer it waits on
``Partition.appended`` (a producer writes batches within ``linger_ms`` of a send); on a
read-only open on a :class:`~embedlog._wake.WakeSource` (inotify on the partitions' folders,
else a re-read every 10 ms), and re-reads at least every half second.

**Reading.** Consumers follow new segments, survive retention (reset as above) and skip offset
gaps of compaction and control batches. ``isolation_level="read_committed"`` stops at the last
stable offset (also the end that ``end_offsets``/``seek_to_end``/``lag`` use) and drops aborted
transactions' records, as Kafka does.

**Layers.** Which partitions are read, and when, is decided here; :mod:`embedlog.fetcher` reads
them (with the rules of :mod:`embedlog.transactions`), through :mod:`embedlog._client_api`;
commits are :mod:`embedlog.consumer_commits`' (``Commits``, the class ``Consumer`` extends).
A consumer is used by one thread at a time (``close()`` may come from another thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from . import _validate, consumer_topics
from ._client_api import ClientLog
from .consumer_commits import Commits
from .errors import LogClosedError, UsageError
from .fetcher import (
    Fetch,
    Fetcher,
    Iteration,
    OffsetAndTimestamp,
    Run,
    offsets_for_times,
    wait_for_records,
)
from .groups import Membership, OffsetStore, group_directory
from .records import Record, TopicPartition

__all__ = ["Consumer", "OffsetAndTimestamp"]

_GROUP_TICK_S: Final = 0.050
"""Longest wait between two runs of the group protocol inside a blocking poll."""

Callback = Callable[[list[TopicPartition]], None]


def _offset_store(group_dir: str | None) -> OffsetStore | None:
    return OffsetStore(group_dir, f"{group_dir}/lock") if group_dir is not None else None


class Consumer(Commits):
    """Reads records of a :class:`~embedlog.Log` (writer or read-only); see the module notes.

    Args:
        *topics: subscribe to these now.
        group: consumer group name (committed offsets, shared partitions).
        auto_offset_reset: ``"earliest"``, ``"latest"`` or ``"none"``.
        enable_auto_commit: commit positions every ``auto_commit_interval_ms`` (inside
            ``poll``), before partitions are revoked, and on ``close`` (if possible: a
            refused final commit is logged, see :mod:`embedlog.consumer_commits`).
        max_poll_records: most records one ``poll`` returns.
        key_deserializer, value_deserializer: applied to non-``None`` keys and values.
        isolation_level: ``"read_uncommitted"`` or ``"read_committed"``.
        assignor: ``"range"`` or ``"roundrobin"``.
        session_timeout_ms: a member silent this long is evicted from its group.
        heartbeat_interval_ms: how often a member heartbeats (below ``session_timeout_ms``).
        on_assign, on_revoke: rebalance callbacks, ``f(list[TopicPartition])``.
        consumer_timeout_ms: iteration stops after this long without records (default never).
        client_id: prefix of the member id.
    """

    _on_rebind: Callback | None = None
    """Told of the partitions read anew (their topic created again): the asyncio consumer's."""

    def __init__(
        self,
        log: ClientLog,
        *topics: str,
        group: str | None = None,
        auto_offset_reset: str = "earliest",
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5000,
        max_poll_records: int = 500,
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        isolation_level: str = "read_uncommitted",
        assignor: str = "range",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 1_000,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        consumer_timeout_ms: float | None = None,
        client_id: str = "embedlog",
    ) -> None:
        _validate.consumer_options(auto_offset_reset, isolation_level, max_poll_records,
                                   auto_commit_interval_ms, session_timeout_ms,
                                   heartbeat_interval_ms, consumer_timeout_ms, group=group)
        if log.closed:
            raise LogClosedError(f"the log at {log.path} is closed")
        self.log = log
        self.group = group
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.max_poll_records = max_poll_records
        self.isolation_level = isolation_level
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.consumer_timeout_ms = consumer_timeout_ms
        self.client_id = client_id
        self._auto_commit_s = auto_commit_interval_ms / 1000
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._group_dir = group_directory(log.path, group) if group is not None else None
        self._store = _offset_store(self._group_dir)
        self._fetcher = Fetcher(log, isolation_level=isolation_level,
                                auto_offset_reset=auto_offset_reset,
                                committed=self._committed_offsets,
                                key_deserializer=key_deserializer,
                                value_deserializer=value_deserializer)
        self._membership: Membership | None = None
        self._subscription: tuple[str, ...] | None = None
        self._fetches: dict[TopicPartition, Fetch] = {}
        self._unannounced: list[TopicPartition] = []
        self._watch = consumer_topics.TopicWatch(log)
        self._next_beat = 0.0
        self._next_lease_try = 0.0
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._closed = False
        self._closing = False  # set first by close(), which may come from another thread
        self._wake = threading.Event()
        self._deferred: Exception | None = None
        self._iteration = Iteration()
        if topics:
            self.subscribe(topics)

    # ------------------------------------------------------------------ assignment

    def subscribe(
        self,
        topics: Iterable[str],
        *,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
    ) -> None:
        """Consume ``topics``: shared with the group's other members, or every partition
        without a group. Replaces any earlier subscription or assignment. The partitions free
        now are assigned before this returns (:meth:`assignment` lists them), but ``on_assign``
        runs for them at the first ``poll`` (or ``position``, ``seek*``, ``lag``), never here;
        later changes (members, topics deleted or re-created) happen inside ``poll``."""
        self._check_open()
        names = tuple(_validate.topic_names(topics))
        if not names:
            raise UsageError("subscribe needs at least one topic")
        for t in names:
            self.log.partition_count(t)  # UnknownTopicError before anything changes
        if on_assign is not None:
            self._on_assign = on_assign
        if on_revoke is not None:
            self._on_revoke = on_revoke
        self.unsubscribe()
        self._subscription = names
        if self._group_dir is not None:
            self._membership = Membership(
                self._group_dir,
                topics=names,
                assignor=self.assignor,
                session_timeout_ms=self.session_timeout_ms,
                partition_count=self.log.partition_count,
                client_id=self.client_id,
            )
            self._membership.join()
            self._next_beat = time.monotonic() + self._heartbeat_s
        self._maintain(announce=False)  # partitions now; on_assign at the first poll

    def unsubscribe(self) -> None:
        """Give up the subscription or assignment (``on_revoke`` runs for subscribed ones)."""
        try:
            if self._subscription is not None and self._fetches:
                self._revoke(list(self._fetches))
        finally:
            self._iteration.abandon(self._fetches)
            self._fetches.clear()
            self._subscription = None
            self._unannounced = []
            self._watch.seen = None
            if self._membership is not None:
                membership, self._membership = self._membership, None
                for tp in list(membership.leases):
                    membership.drop_lease(tp)
                membership.leave()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly ``partitions`` (no group membership; committed offsets of ``group``
        are still read and written, without fencing)."""
        self._check_open()
        tps = [_validate.topic_partition(tp) for tp in _validate.iterable(partitions, "partitions")]
        for tp in tps:
            self.log._partition_of(tp.topic, tp.partition)  # validates
        self.unsubscribe()
        self._add(tps)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return set(self._fetches)

    def subscription(self) -> set[str]:
        return set(self._subscription or ())

    @property
    def member_id(self) -> str | None:
        return self._membership.member_id if self._membership is not None else None

    @property
    def generation(self) -> int | None:
        return self._membership.state.generation if self._membership is not None else None

    def _add(self, tps: Iterable[TopicPartition]) -> None:
        """Read ``tps`` too; ``on_assign`` runs for them at the next :meth:`_announce` (a
        subscription's: an assigned consumer has no callbacks)."""
        self._iteration.abandon(self._fetches)
        for tp in tps:
            if tp not in self._fetches:
                self._fetches[tp] = Fetch(tp, self.log._partition_of(tp.topic, tp.partition))
                if self._subscription is not None:
                    self._unannounced.append(tp)

    def _announce(self) -> set[TopicPartition]:
        """Run ``on_assign`` for the partitions gained since it last ran (never inside the
        constructor or ``subscribe``: a callback may use the consumer, as Kafka's listeners
        do); the assignment."""
        if self._unannounced:
            tps, self._unannounced = sorted(self._unannounced), []
            if self._on_assign is not None:
                self._on_assign(tps)
        return set(self._fetches)

    def _revoke(self, tps: list[TopicPartition], *, lost: bool = False) -> None:
        """Commit (if auto and still a member), tell the application, then let go of ``tps``."""
        self._iteration.abandon(self._fetches)
        told = sorted(tp for tp in tps if tp not in self._unannounced)  # on_assign ran for them
        self._unannounced = [tp for tp in self._unannounced if tp not in tps]
        try:
            if self.enable_auto_commit and self._store is not None and not lost:
                self._commit_positions(tps)
            if self._on_revoke is not None and told:
                self._on_revoke(told)
        finally:
            for tp in tps:
                self._fetches.pop(tp, None)
                if self._membership is not None:
                    self._membership.drop_lease(tp)

    def _maintain(self, *, eager: bool = True, announce: bool = True) -> None:
        """Follow the topics (:mod:`embedlog.consumer_topics`), run the group protocol, then
        (``announce``) ``on_assign`` for the partitions gained."""
        m = self._membership
        missing, wanted = self._watch.follow(self._fetches, self._iteration,
                                             self._subscription, group=m is not None)
        self._rebound(self._watch.rebound)
        if missing:
            self._revoke(missing)
        if m is None:
            self._add(wanted)
        else:
            self._rebalance(m, eager)
        if announce:
            self._announce()

    def _rebind_recreated(self) -> None:
        """Read anew the partitions whose topic was created again since the last poll (the
        asyncio consumer's, before it counts its stashed records in a commit)."""
        if not self._closed and not self.log.closed:
            self.log._refresh_topics()
            self._rebound(consumer_topics.rebind(self.log, self._fetches, self._iteration)[1])

    def _rebound(self, tps: list[TopicPartition]) -> None:
        if tps and self._on_rebind is not None:
            self._on_rebind(tps)

    def _rebalance(self, m: Membership, eager: bool) -> None:
        """The group protocol: heartbeat, follow membership changes, move leases. Leases still
        held by their previous owner are retried on every ``poll`` call (``eager``) and every
        50 ms while a poll waits."""
        now = time.monotonic()
        if now >= self._next_beat:
            m.heartbeat()
            self._next_beat = now + self._heartbeat_s
        changed = m.refresh()
        if not m.in_group:
            if self._fetches:
                self._revoke(list(self._fetches), lost=True)
            m.leave()
            m.join()
            changed = True
        target = m.assignment()
        revoked = [tp for tp in self._fetches if tp not in target]
        if revoked:
            self._revoke(revoked)
        wanted = sorted(tp for tp in target if tp not in self._fetches)
        if wanted and (changed or eager or now >= self._next_lease_try):
            self._next_lease_try = now + _GROUP_TICK_S
            self._add([tp for tp in wanted if m.take_lease(tp)])

    # ------------------------------------------------------------------ polling

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Record]:
        """Up to ``max_records`` (default ``max_poll_records``) records, waiting up to
        ``timeout`` seconds for some to arrive."""
        return self._poll(timeout, max_records, None)

    def _poll(self, timeout: float, max_records: int | None, runs: list[Run] | None
              ) -> list[Record]:
        self._check_open()
        timeout = _validate.seconds(timeout, "timeout")
        limit = self.max_poll_records if max_records is None else _validate.count(
            max_records, "max_records")
        self._iteration.abandon(self._fetches)
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        deadline = time.monotonic() + timeout
        eager = True
        while True:
            self._maintain(eager=eager)
            eager = False
            if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
                self._auto_commit()
            fetches = list(self._fetches.values())
            out, self._deferred = self._fetcher.collect(fetches, limit, runs)
            if out or self._closing:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            # wake at least every group tick (the protocol runs here) or half a second
            tick = _GROUP_TICK_S if self._membership is not None else 0.5
            wait_for_records(fetches, min(remaining, tick), self._wake,
                             read_only=self.log.read_only, waker=self._fetcher.waker)

    def __iter__(self) -> Iterator[Record]:
        """Records as they arrive; positions move record by record (see
        :class:`~embedlog.fetcher.Iteration`). Stops when the consumer is closed or after
        ``consumer_timeout_ms`` without records."""
        idle_since = time.monotonic()
        limit = self.consumer_timeout_ms
        while not self._closing:
            wait = 0.5 if limit is None else max(0.0, limit / 1000 - (time.monotonic()
                                                                      - idle_since))
            runs: list[Run] = []
            self._poll(wait, None, runs)
            if not runs:
                if limit is not None and time.monotonic() - idle_since >= limit / 1000:
                    return
                continue
            yield from self._iteration.hand_out(runs)
            idle_since = time.monotonic()

    # ------------------------------------------------------------------ positions

    def _fetch(self, tp: TopicPartition) -> Fetch:
        f = self._fetches.get(tp)
        if f is None:
            raise UsageError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return f

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will hand out for ``tp``."""
        self._check_open()
        self._announce()
        self._iteration.settle(self._fetches)
        f = self._fetch(_validate.topic_partition(tp))
        if f.position is None:
            self._fetcher.init_positions([f])
        assert f.position is not None
        return f.position

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Continue ``tp`` at ``offset`` (checked against the log at the next fetch)."""
        self._check_open()
        offset = _validate.offset(offset)
        self._announce()
        f = self._fetch(_validate.topic_partition(tp))
        self._iteration.abandon(self._fetches)
        f.move_to(offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move ``partitions`` (default: all assigned) to their log start."""
        self._announce()
        for tp, offset in self.beginning_offsets(partitions or list(self._fetches)).items():
            self.seek(tp, offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move ``partitions`` (default: all assigned) to their end (:meth:`end_offsets`)."""
        self._announce()
        for tp, offset in self.end_offsets(partitions or list(self._fetches)).items():
            self.seek(tp, offset)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        tps = [_validate.topic_partition(tp) for tp in _validate.iterable(partitions, "partitions")]
        return {tp: self.log.start_offset(*tp) for tp in tps}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log ends; last stable offsets under ``read_committed`` (Kafka's ``endOffsets``)."""
        tps = [_validate.topic_partition(tp) for tp in _validate.iterable(partitions, "partitions")]
        return {tp: self._end_of(tp) for tp in tps}

    def _end_of(self, tp: TopicPartition) -> int:
        committed = self.isolation_level == "read_committed"
        return (self.log.last_stable_offset if committed else self.log.end_offset)(*tp)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first record stamped >= the given ms below :meth:`end_offsets`."""
        return offsets_for_times(self.log, timestamps, self._end_of)

    def lag(self) -> dict[TopicPartition, int]:
        """Offsets between each assigned partition's position and its :meth:`end_offsets`."""
        return {tp: max(0, self._end_of(tp) - self.position(tp))
                for tp in self._announce()}

    # ------------------------------------------------------------------ lifecycle

    def close(self, autocommit: bool = True) -> None:
        """Commit (with ``enable_auto_commit``; a refused commit -- e.g. this member was
        evicted -- is logged, not raised), revoke, leave the group. Idempotent."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        self._fetcher.close()  # ends a wait on the wake source in another thread first
        try:
            if autocommit and self.enable_auto_commit:
                self._final_commit()  # logs a refusal: see embedlog.consumer_commits
        finally:
            enable, self.enable_auto_commit = self.enable_auto_commit, False
            try:
                self.unsubscribe()  # on_revoke may still commit
            finally:
                self.enable_auto_commit = enable
                self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("the consumer is closed")
        if self.log.closed:
            raise LogClosedError(f"the log at {self.log.path} is closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        group = f" group={self.group!r}" if self.group else ""
        return f"<embedlog.Consumer {self.log.path!r}{group} {len(self._fetches)} partitions>"
