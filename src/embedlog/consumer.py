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
fell below the log start (retention deleted those records) or above the end.

**Groups.** With ``group=`` and :meth:`Consumer.subscribe`, consumers of the same group in
threads or processes share the partitions of their topics (``assignor="range"`` or
``"roundrobin"``) and rebalance when members join, leave or die; see :mod:`embedlog.groups`.
The group protocol runs inside ``subscribe()`` and ``poll()`` (Kafka's consumers heartbeat
from a thread): a member that does not poll for ``session_timeout_ms`` is evicted and its
commits are refused, but the partitions it holds stay blocked until it polls again (or dies), so
no partition is ever read by two members at once. Callbacks ``on_revoke(partitions)`` (still
owned: commit here) and ``on_assign(partitions)`` get the partitions lost or gained
(cooperative rebalancing). A member commits only partitions it owns. Without a group,
``subscribe`` takes every partition and ``commit`` is refused.

**Waiting.** ``poll(timeout)`` blocks while nothing is new. On the log's writer (records
appended in this process) it waits on ``Partition.appended`` and wakes as soon as a batch is
written -- a producer writes batches within ``linger_ms`` of a send; on a read-only open
(records written by another process) it re-reads the partition files every 10 ms.

**Reading.** Consumers follow new segments, survive retention (reset as above) and skip offset
gaps left by compaction and control batches. ``isolation_level="read_committed"`` withholds the
records of open transactions and drops those of aborted ones (transactional batches of a
producer id followed by an ABORT marker), as Kafka does below the last stable offset.

A consumer is used by one thread at a time (``close()`` may come from another thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import repeat
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .errors import (
    GroupError,
    InvalidConfigError,
    LogClosedError,
    OffsetOutOfRangeError,
    UsageError,
)
from .groups import Membership, OffsetStore, group_directory
from .partition import Partition
from .records import Header, Record, TopicPartition
from .segment import format as fmt

if TYPE_CHECKING:
    from .log import Log

__all__ = ["Consumer", "OffsetAndTimestamp"]

_new = tuple.__new__
_FILE_POLL_S: Final = 0.010
"""How often a consumer of a read-only open re-reads the partition files while waiting."""
_SLICE_S: Final = 0.002
"""Wait slice per partition when waiting on several partitions of a writer in this process."""
_GROUP_TICK_S: Final = 0.050
"""Longest wait between two runs of the group protocol inside a blocking poll."""

Callback = Callable[[list[TopicPartition]], None]


class OffsetAndTimestamp(NamedTuple):
    """What :meth:`Consumer.offsets_for_times` finds for a partition."""

    offset: int
    timestamp: int


class _Columns:
    """Decoded records as plain lists; :class:`Record` objects are made only for the records
    handed out (records are tuples the garbage collector tracks: the fewer alive, the fewer
    collections a poll loop triggers)."""

    __slots__ = ("headers", "keys", "n", "offsets", "timestamps", "ttypes", "values")

    def __init__(self, offsets: list[int], timestamps: list[int], ttypes: list[int],
                 keys: list[Any], values: list[Any],
                 headers: list[tuple[Header, ...]] | None) -> None:
        self.offsets, self.timestamps, self.ttypes = offsets, timestamps, ttypes
        self.keys, self.values, self.headers = keys, values, headers
        self.n = len(offsets)

    def records(self, tp: TopicPartition, i: int, j: int) -> list[Record]:
        m = min(j, self.n) - i
        whole = i == 0 and m == self.n
        rows = zip(
            repeat(tp.topic, m),
            repeat(tp.partition, m),
            self.offsets if whole else self.offsets[i:j],
            self.timestamps if whole else self.timestamps[i:j],
            self.ttypes if whole else self.ttypes[i:j],
            self.keys if whole else self.keys[i:j],
            self.values if whole else self.values[i:j],
            repeat((), m) if self.headers is None else self.headers[i:j],
            strict=True,
        )
        return list(map(_new, repeat(Record, m), rows))


_EMPTY = _Columns([], [], [], [], [], None)


class _Fetch:
    """Read state of one assigned partition.

    ``fetched`` is where the reader continues; records in ``[position, fetched)`` are
    ``cols`` from index ``i`` on (or were gaps). ``position is None`` until first needed.
    """

    __slots__ = ("cols", "fetched", "gen", "i", "p", "position", "seen", "stop", "tp")

    def __init__(self, tp: TopicPartition, p: Partition) -> None:
        self.tp = tp
        self.p = p
        self.position: int | None = None
        self.fetched = 0
        self.cols = _EMPTY
        self.i = 0
        self.gen: Iterator[tuple[fmt.BatchHeader, fmt.DecodedRecords]] | None = None
        self.stop = 0
        self.seen = False

    def move_to(self, offset: int) -> None:
        self.position = self.fetched = offset
        self.cols, self.i, self.gen = _EMPTY, 0, None


_Run = tuple[_Fetch, list[Record]]
"""Records of one partition handed to an iteration, in order."""


def _concat(parts: list[_Columns]) -> _Columns:
    if len(parts) == 1:
        return parts[0]
    out = _Columns([], [], [], [], [], None)
    for c in parts:
        if c.headers is not None and out.headers is None:
            out.headers = [()] * out.n
        out.offsets += c.offsets
        out.timestamps += c.timestamps
        out.ttypes += c.ttypes
        out.keys += c.keys
        out.values += c.values
        if out.headers is not None:
            out.headers += c.headers if c.headers is not None else [()] * c.n
        out.n += c.n
    return out


class Consumer:
    """Reads records of a :class:`~embedlog.Log` (writer or read-only); see the module notes.

    Args:
        *topics: subscribe to these now.
        group: consumer group name (committed offsets, shared partitions).
        auto_offset_reset: ``"earliest"``, ``"latest"`` or ``"none"``.
        enable_auto_commit: commit positions every ``auto_commit_interval_ms`` (inside
            ``poll``), before partitions are revoked, and on ``close``.
        max_poll_records: most records one ``poll`` returns.
        key_deserializer, value_deserializer: applied to non-``None`` keys and values.
        isolation_level: ``"read_uncommitted"`` or ``"read_committed"``.
        assignor: ``"range"`` or ``"roundrobin"``.
        session_timeout_ms: a member silent this long is evicted from its group.
        heartbeat_interval_ms: how often a member heartbeats and checks the others.
        on_assign, on_revoke: rebalance callbacks, ``f(list[TopicPartition])``.
        consumer_timeout_ms: iteration stops after this long without records (default never).
        client_id: prefix of the member id.
    """

    def __init__(
        self,
        log: Log,
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
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise InvalidConfigError(
                f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}"
            )
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise InvalidConfigError(
                "isolation_level must be read_uncommitted or read_committed, "
                f"not {isolation_level!r}"
            )
        if max_poll_records < 1:
            raise InvalidConfigError("max_poll_records must be >= 1")
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
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._group_dir = group_directory(log.path, group) if group is not None else None
        self._store = (
            OffsetStore(self._group_dir, f"{self._group_dir}/lock")
            if self._group_dir is not None else None
        )
        self._membership: Membership | None = None
        self._subscription: tuple[str, ...] | None = None
        self._fetches: dict[TopicPartition, _Fetch] = {}
        self._unannounced: list[TopicPartition] = []
        self._rotation = 0
        self._next_beat = 0.0
        self._next_lease_try = 0.0
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._closed = False
        self._closing = False  # set first by close(), which may come from another thread
        self._wake = threading.Event()
        self._deferred: Exception | None = None
        self._iter_runs: list[_Run] = []
        self._iter_last: Record | None = None
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
        now are assigned before this returns; later changes happen inside ``poll``."""
        self._check_open()
        names = tuple(sorted(set([topics] if isinstance(topics, str) else topics)))
        if not names:
            raise UsageError("subscribe needs at least one topic")
        counts = {t: self.log.partition_count(t) for t in names}
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
        else:
            tps = [TopicPartition(t, i) for t in names for i in range(counts[t])]
            self._add(tps)
            self._unannounced = tps
        self._maintain()  # partitions (and on_assign) now rather than at the first poll

    def unsubscribe(self) -> None:
        """Give up the subscription or assignment (``on_revoke`` runs for subscribed ones)."""
        try:
            if self._subscription is not None and self._fetches:
                self._revoke(list(self._fetches))
        finally:
            self._abandon_iteration()
            self._fetches.clear()
            self._subscription = None
            self._unannounced = []
            if self._membership is not None:
                membership, self._membership = self._membership, None
                for tp in list(membership.leases):
                    membership.drop_lease(tp)
                membership.leave()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly ``partitions`` (no group membership; committed offsets of ``group``
        are still read and written, without fencing)."""
        self._check_open()
        tps = [TopicPartition(*tp) for tp in partitions]
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
        self._abandon_iteration()
        for tp in tps:
            if tp not in self._fetches:
                self._fetches[tp] = _Fetch(tp, self.log._partition_of(tp.topic, tp.partition))

    def _revoke(self, tps: list[TopicPartition], *, lost: bool = False) -> None:
        """Commit (if auto and still a member), tell the application, then let go of ``tps``."""
        self._abandon_iteration()
        try:
            if self.enable_auto_commit and self._store is not None and not lost:
                self._commit_positions(tps)
            if self._on_revoke is not None:
                self._on_revoke(sorted(tps))
        finally:
            for tp in tps:
                self._fetches.pop(tp, None)
                if self._membership is not None:
                    self._membership.drop_lease(tp)

    def _maintain(self, *, eager: bool = True) -> None:
        """Run the group protocol: heartbeat, follow membership changes, move leases. Leases
        still held by their previous owner are retried on every ``poll`` call (``eager``) and
        every 50 ms while a poll waits."""
        m = self._membership
        if m is None:
            if self._unannounced:
                tps, self._unannounced = self._unannounced, []
                if self._on_assign is not None:
                    self._on_assign(sorted(tps))
            return
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
            gained = [tp for tp in wanted if m.take_lease(tp)]
            if gained:
                self._add(gained)
                if self._on_assign is not None:
                    self._on_assign(gained)

    # ------------------------------------------------------------------ polling

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Record]:
        """Up to ``max_records`` (default ``max_poll_records``) records, waiting up to
        ``timeout`` seconds for some to arrive."""
        return self._poll(timeout, max_records, None)

    def _poll(self, timeout: float, max_records: int | None, runs: list[_Run] | None
              ) -> list[Record]:
        self._check_open()
        self._abandon_iteration()
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout
        eager = True
        while True:
            self._maintain(eager=eager)
            eager = False
            if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
                self._auto_commit()
            out = self._collect(limit, runs)
            if out or self._closing:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            self._wait(remaining)

    def _collect(self, limit: int, runs: list[_Run] | None) -> list[Record]:
        """Take up to ``limit`` buffered or newly decoded records, visiting the partitions in a
        rotating order, and move the positions past them -- or, given ``runs``, leave the
        positions to the caller and list the records per partition there. An error after some
        records were taken is raised by the next poll."""
        fetches = list(self._fetches.values())
        out: list[Record] = []
        n = len(fetches)
        start = self._rotation % n if n else 0
        self._rotation += 1
        for k in range(n):
            f = fetches[(start + k) % n]
            first = len(out)
            try:
                while len(out) < limit:
                    if f.i >= f.cols.n and not self._fill(f):
                        break
                    j = min(f.i + limit - len(out), f.cols.n)
                    out += f.cols.records(f.tp, f.i, j)
                    f.i = j
            except Exception as exc:
                if not out:
                    raise
                self._deferred = exc
                break
            finally:
                if runs is None:
                    if f.position is not None:
                        f.position = f.cols.offsets[f.i] if f.i < f.cols.n else f.fetched
                elif len(out) > first:
                    runs.append((f, out[first:]))
            if len(out) >= limit:
                break
        return out

    def _fill(self, f: _Fetch) -> bool:
        """Decode the next batch with records into ``f.cols``; ``False`` if none is there."""
        if f.position is None:
            self._init_positions([f])
        f.cols, f.i = _EMPTY, 0
        while True:
            if f.gen is None:
                end = self._end_offset(f.p)
                if f.fetched >= end:
                    if f.fetched > end:
                        self._reset(f, f"position {f.fetched} is beyond the log end {end}")
                        continue
                    f.stop = end
                    return False
                if self.isolation_level == "read_committed":
                    return self._fill_committed(f, end)
                f.gen = f.p.batches(f.fetched, end, control=True)
                f.stop, f.seen = end, False
            try:
                header, records = next(f.gen)
            except StopIteration:
                f.gen = None
                if not f.seen:  # nothing readable left below the end: gaps, control batches
                    f.fetched = max(f.fetched, f.stop)
                    return False
                continue
            except OffsetOutOfRangeError:
                f.gen = None
                self._reset(f, f"position {f.fetched} is below the log start")
                continue
            f.seen = True
            f.fetched = max(f.fetched, header.next_offset)
            if not header.is_control:
                f.cols = self._columns(header, records)
                return True

    def _fill_committed(self, f: _Fetch, end: int) -> bool:
        """read_committed: hand out records up to the first transaction still open below
        ``end``; drop aborted transactions' records."""
        chunks: list[tuple[bool, _Columns | None, int]] = []  # (decided, records, first)
        open_txns: dict[int, list[int]] = {}
        last = end
        try:
            for header, records in f.p.batches(f.fetched, end, control=True):
                last = header.next_offset
                pid = header.producer_id
                if header.is_control:
                    if header.is_transactional and pid in open_txns and len(records):
                        _, kind = fmt.decode_control_record(records.key(0))
                        for idx in open_txns.pop(pid):
                            decided, cols, first = chunks[idx]
                            chunks[idx] = (True, None if kind == fmt.CONTROL_ABORT else cols, first)
                    continue
                cols = self._columns(header, records)
                chunks.append((not header.is_transactional, cols, int(records.offsets[0])))
                if header.is_transactional:
                    open_txns.setdefault(pid, []).append(len(chunks) - 1)
        except OffsetOutOfRangeError:
            self._reset(f, f"position {f.fetched} is below the log start")
            return False
        kept: list[_Columns] = []
        for decided, cols, first in chunks:
            if not decided:
                last = first
                break
            if cols is not None:
                kept.append(cols)
        f.fetched = max(f.fetched, last)
        f.cols, f.i, f.stop = _concat(kept), 0, end
        return f.cols.n > 0

    def _columns(self, header: fmt.BatchHeader, records: fmt.DecodedRecords) -> _Columns:
        keys: list[Any] = records.keys()
        values: list[Any] = records.values()
        if self._key_deserializer is not None:
            kd = self._key_deserializer
            keys = [None if k is None else kd(k) for k in keys]
        if self._value_deserializer is not None:
            vd = self._value_deserializer
            values = [None if v is None else vd(v) for v in values]
        return _Columns(records.offsets.tolist(), records.timestamps.tolist(),
                        [header.timestamp_type] * len(keys), keys, values, records.headers)

    def _end_offset(self, p: Partition) -> int:
        if self.log.read_only:
            p.refresh()
        return p.end_offset

    def _init_positions(self, fetches: list[_Fetch]) -> None:
        committed = self._store.read() if self._store is not None else {}
        for f in fetches:
            offset = committed.get(f.tp)
            if offset is None:
                self._reset(f, "no committed offset")
            else:
                f.move_to(offset)

    def _reset(self, f: _Fetch, why: str) -> None:
        """Apply ``auto_offset_reset`` to ``f``."""
        policy = self.auto_offset_reset
        if policy == "none":
            raise OffsetOutOfRangeError(
                f"{f.tp.topic}-{f.tp.partition}: {why} and auto_offset_reset is 'none'"
            )
        if self.log.read_only:
            f.p.refresh()
        f.move_to(f.p.start_offset if policy == "earliest" else f.p.end_offset)

    def _wait(self, remaining: float) -> None:
        """Block until records may have arrived, at most ``remaining`` seconds (less when the
        group protocol or a read-only view needs a turn). ``f.stop`` is the end offset each
        partition had when it was last found drained."""
        limit = min(remaining, _GROUP_TICK_S if self._membership is not None else 0.5)
        fetches = list(self._fetches.values())
        if self.log.read_only or not fetches:
            self._wake.wait(min(limit, _FILE_POLL_S))
            return
        end = time.monotonic() + limit
        turn = 0
        while not self._closing:
            if any(f.p.end_offset > f.stop or not f.p.segments for f in fetches):
                return
            left = end - time.monotonic()
            if left <= 0:
                return
            f = fetches[turn % len(fetches)]
            turn += 1
            with f.p.appended:
                if f.p.end_offset > f.stop or not f.p.segments:
                    return
                f.p.appended.wait(left if len(fetches) == 1 else min(left, _SLICE_S))

    def __iter__(self) -> Iterator[Record]:
        """Records as they arrive; positions move record by record. Stops when the consumer
        is closed or after ``consumer_timeout_ms`` without records.

        Per record only the last one handed out is noted (``_iter_last``); positions are
        settled from it when asked for, at the end of each partition's run, or when the
        iteration is abandoned (a seek, a rebalance, a ``poll``)."""
        idle_since = time.monotonic()
        limit = self.consumer_timeout_ms
        while not self._closing:
            wait = 0.5 if limit is None else max(0.0, limit / 1000 - (time.monotonic()
                                                                      - idle_since))
            runs: list[_Run] = []
            self._poll(wait, None, runs)
            if not runs:
                if limit is not None and time.monotonic() - idle_since >= limit / 1000:
                    return
                continue
            self._iter_runs = runs
            for f, run in runs:
                for r in run:
                    self._iter_last = r
                    yield r
                if not run:
                    break  # abandoned meanwhile (cleared by _abandon_iteration)
                self._iter_last = None
                f.position = run[-1].offset + 1
                if f.i >= f.cols.n and f.position < f.fetched:
                    f.position = f.fetched
            if self._iter_runs is runs:
                self._iter_runs = []
            idle_since = time.monotonic()

    def _settle(self) -> None:
        """Position of the partition whose run the iterator is in."""
        last = self._iter_last
        if last is not None:
            f = self._fetches.get(TopicPartition(last.topic, last.partition))
            if f is not None:
                f.position = last.offset + 1

    def _abandon_iteration(self) -> None:
        """Stop a running iteration: settle, drop what it prefetched, re-read from the
        positions."""
        runs = self._iter_runs
        if not runs:
            return
        self._settle()
        self._iter_runs, self._iter_last = [], None
        for f, run in runs:
            if run and f.position is not None and f.position <= run[-1].offset:
                f.move_to(f.position)  # not all handed out: read again from the position
            run.clear()

    # ------------------------------------------------------------------ positions

    def _fetch(self, tp: TopicPartition) -> _Fetch:
        f = self._fetches.get(tp)
        if f is None:
            raise UsageError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return f

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will hand out for ``tp``."""
        self._check_open()
        self._settle()
        f = self._fetch(TopicPartition(*tp))
        if f.position is None:
            self._init_positions([f])
        assert f.position is not None
        return f.position

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Continue ``tp`` at ``offset`` (checked against the log at the next fetch)."""
        self._check_open()
        if not isinstance(offset, int) or offset < 0:
            raise UsageError(f"offset must be a non-negative int, not {offset!r}")
        self._abandon_iteration()
        self._fetch(TopicPartition(*tp)).move_to(offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move ``partitions`` (default: all assigned) to their log start."""
        for tp, offset in self.beginning_offsets(partitions or list(self._fetches)).items():
            self.seek(tp, offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move ``partitions`` (default: all assigned) to their log end."""
        for tp, offset in self.end_offsets(partitions or list(self._fetches)).items():
            self.seek(tp, offset)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        return {TopicPartition(*tp): self.log.start_offset(*tp) for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {TopicPartition(*tp): self.log.end_offset(*tp) for tp in partitions}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest record whose timestamp is >= the given one (ms)."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in timestamps.items():
            tp = TopicPartition(*tp)
            offset = self.log.offsets_for_times(tp.topic, tp.partition, ts)
            found = None
            if offset is not None:
                for r in self.log.read(tp.topic, tp.partition, offset, max_records=1):
                    found = OffsetAndTimestamp(r.offset, r.timestamp)
            out[tp] = found
        return out

    def lag(self) -> dict[TopicPartition, int]:
        """Records between each assigned partition's position and its log end."""
        return {tp: max(0, self.log.end_offset(*tp) - self.position(tp))
                for tp in self._fetches}

    # ------------------------------------------------------------------ commits

    def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        """Store committed offsets (default: the current positions of all assigned
        partitions). Values are next-offsets-to-read, as ints or objects with ``.offset``
        (kafka-python's ``OffsetAndMetadata``). A group member may commit only the partitions
        it owns (:class:`~embedlog.GroupError` otherwise). Works while ``close`` revokes
        partitions, and after the log was closed (offsets live in their own files)."""
        if self._closed:
            raise LogClosedError("the consumer is closed")
        if offsets is None:
            self._commit_positions(list(self._fetches))
            return
        clean: dict[TopicPartition, int] = {}
        for tp, value in offsets.items():
            offset = getattr(value, "offset", value)
            if not isinstance(offset, int) or offset < 0:
                raise UsageError(f"committed offset must be a non-negative int, not {offset!r}")
            clean[TopicPartition(*tp)] = offset
        self._commit(clean)

    def _commit_positions(self, tps: list[TopicPartition]) -> None:
        self._settle()
        self._commit({tp: p for tp in tps if (p := self._fetches[tp].position) is not None})

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self._store is None:
            raise GroupError("commit needs a consumer group: create the consumer with group=...")
        if not offsets:
            return
        m = self._membership
        check = None
        if m is not None:
            def check() -> None:
                m.check_commit(offsets)
        self._store.commit(offsets, check)

    def _auto_commit(self) -> None:
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        if self._store is not None and self._fetches:
            self._commit_positions(list(self._fetches))

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for ``tp`` (``None`` if none, or without a group)."""
        return self._store.committed(TopicPartition(*tp)) if self._store is not None else None

    # ------------------------------------------------------------------ lifecycle

    def close(self, autocommit: bool = True) -> None:
        """Commit (with ``enable_auto_commit``), revoke, leave the group. Idempotent."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        try:
            if autocommit and self.enable_auto_commit and self._store is not None:
                self._commit_positions(list(self._fetches))
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
