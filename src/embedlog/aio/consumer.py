"""``AsyncConsumer``: aiokafka's ``AIOKafkaConsumer`` shape over a :class:`~embedlog.Log`.

::

    async with AsyncConsumer(log, "events", group="billing") as consumer:
        async for record in consumer:
            await handle(record)
            await consumer.commit()

**Threads.** Each consumer owns a :class:`~embedlog.Consumer` and one worker thread; every
call into the consumer runs there, in the order made, so the event loop never blocks on a file,
a lock or a wait. A waiting :meth:`AsyncConsumer.getmany` on the log's writer polls there in
slices of at most 50 ms, woken by an append; between slices, other calls (a commit) get their
turn and cancellation takes effect. On a read-only open the worker only looks and arms the
:class:`~embedlog._wake.WakeSource`; the wait is on the loop (``add_reader``), 0.5 s at most
(50 ms in a group); without inotify, the worker's slices re-read the files every 10 ms.

**Handed out vs fetched.** Records the worker fetched but the application has not received yet
are *stashed* (``getmany(max_records=...)`` takes part of a fetch; a cancelled ``getmany``
leaves its fetch there). Positions and commits count only records handed out: the position of a
partition is its first stashed offset, else the sync consumer's. So cancelling a task at any
point loses no record and never commits one that was not handed out. ``seek`` drops that
partition's stash, and a fetch in flight at the time is discarded for it; so does a partition
read anew because its topic was created again (by the worker's poll, or before a commit).

**Groups.** ``group=`` plus topics (or :meth:`subscribe`) shares partitions with the group's other
members -- in this loop, other threads or other processes. The group protocol runs inside
``getmany`` (as in the sync consumer): call it at least every ``session_timeout_ms``. ``on_assign``
/ ``on_revoke`` (or a ``listener`` with aiokafka's ``on_partitions_assigned`` /
``on_partitions_revoked``) may be plain functions or coroutines; they run on the event loop while
the worker waits for them, and may ``await consumer.commit()`` (but not ``getmany``). A revoked
partition's stash is dropped after ``on_revoke``. ``enable_auto_commit`` commits the handed-out
positions every ``auto_commit_interval_ms`` (inside ``getmany``), before a revoke (not when an
evicted member lost the partitions) and on ``stop`` (if possible, as ``Consumer.close``: a refusal
is logged), whose shutdown goes on when it is cancelled (a later ``stop`` waits for it). Other
options: :class:`~embedlog.Consumer`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .. import _validate
from .._wake import Armed
from ..consumer import Consumer
from ..errors import LogClosedError, UsageError
from ..records import Record, TopicPartition
from ._plumbing import Settled, maybe_await

if TYPE_CHECKING:
    from ..log import Log

__all__ = ["AsyncConsumer"]

T = TypeVar("T")
_SLICE_S: Final = 0.05
"""Longest single wait in the worker; bounds how long a cancelled getmany keeps the worker."""
_AUTO_COMMIT: Final = "auto_commit_interval_ms"
_WAKE_WAIT_S: Final = 0.5  # longest wait on the loop for a wake-up: then re-read anyway
_IN_CALLBACK: contextvars.ContextVar[AsyncConsumer | None] = contextvars.ContextVar(
    "embedlog_aio_callback", default=None)

Callback = Callable[[list[TopicPartition]], Any]


class AsyncConsumer:
    """Reads records of a log from asyncio code; see the module notes.

    Args:
        log: an open :class:`~embedlog.Log` (writer or read-only).
        *topics: subscribe to these at ``start``.
        group: consumer group name.
        on_assign, on_revoke: rebalance callbacks (functions or coroutine functions).
        listener: an object with aiokafka's ``on_partitions_assigned`` /
            ``on_partitions_revoked`` (instead of ``on_assign`` / ``on_revoke``).
        enable_auto_commit, auto_commit_interval_ms: see the module notes.
        **options: :class:`~embedlog.Consumer` options (``auto_offset_reset``,
            ``max_poll_records``, ``isolation_level``, deserializers, ``assignor``, ...).
    """

    def __init__(self, log: Log, *topics: str, group: str | None = None,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None,
                 listener: Any = None, enable_auto_commit: bool = False,
                 auto_commit_interval_ms: int = 5000, **options: Any) -> None:
        if listener is not None:
            on_assign = getattr(listener, "on_partitions_assigned", on_assign)
            on_revoke = getattr(listener, "on_partitions_revoked", on_revoke)
        self.log, self.group, self._topics = log, group, topics
        self._options = dict(options, group=group)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._auto_commit = enable_auto_commit and group is not None
        self._auto_commit_s = _validate.seconds(auto_commit_interval_ms, _AUTO_COMMIT) / 1000
        self._next_auto_commit = 0.0
        self._sync: Consumer | None = None
        self._worker: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stash: deque[Record] = deque()
        self._epochs: dict[TopicPartition, int] = {}
        self._epoch_all = 0
        self._assigned_now: frozenset[TopicPartition] = frozenset()
        self._inflight: asyncio.Future[list[Record]] | None = None
        self._error: BaseException | None = None
        self._lock, self._stopping = asyncio.Lock(), False
        self._shutdown: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the consumer in the worker thread and subscribe (joining the group)."""
        if self._sync is not None:
            return
        if self._stopping:
            raise LogClosedError("the consumer is stopped")
        self._loop = asyncio.get_running_loop()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="embedlog-aio-consumer")
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._sync = await self._call(self._open)
        if self._topics:  # once started: the first on_assign may seek, commit, ... (aiokafka's)
            try:
                await self.subscribe(self._topics)
            except Exception:
                await self.stop()
                raise

    def _open(self) -> Consumer:
        sync = Consumer(self.log, on_assign=self._bridge(self._assigned),
                        on_revoke=self._bridge(self._revoked), enable_auto_commit=False,
                        **self._options)
        sync._on_rebind = self._bridge(self._rebound)
        return sync

    async def stop(self) -> None:
        """Commit (with auto commit), leave the group, close (see the module notes)."""
        self._stopping = True
        if self._sync is None:
            return
        if self._shutdown is None:
            if self._sync._fetcher.waker is not None:
                self._sync._fetcher.waker.close()  # ends a wait on the loop now
            self._shutdown = asyncio.ensure_future(self._stop(self._sync))
        await asyncio.shield(self._shutdown)

    async def _stop(self, sync: Consumer) -> None:
        async with self._lock:
            await self._settle()
            try:
                if self._auto_commit:  # if possible: a refusal is logged (as Consumer.close)
                    self._auto_commit = False  # so close's revokes commit nothing more
                    await self._call(sync._rebind_recreated)  # before the stash counts
                    await self._call(sync._final_commit, self._first_stashed())
            finally:
                await self._call(sync.close)
                assert self._worker is not None
                self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ assignment

    async def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        """Replace the subscription (aiokafka's ``subscribe``, awaitable here)."""
        if listener is not None:
            self._on_assign = getattr(listener, "on_partitions_assigned", self._on_assign)
            self._on_revoke = getattr(listener, "on_partitions_revoked", self._on_revoke)
        sync = self._started()
        names = _validate.topic_names(topics)
        await self._reset_all(lambda: sync.subscribe(names))

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly ``partitions`` (no group membership)."""
        sync = self._started()
        tps = [_validate.topic_partition(tp) for tp in _validate.iterable(partitions, "partitions")]
        await self._reset_all(lambda: sync.assign(tps))

    async def unsubscribe(self) -> None:
        sync = self._started()
        await self._reset_all(sync.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned when the worker last reported (a snapshot)."""
        return set(self._assigned_now)

    async def _reset_all(self, fn: Callable[[], None]) -> None:
        async with self._lock:
            await self._settle()
            await self._call(fn)
            self._drop(None)
            self._assigned_now = frozenset(await self._call(self._started()._announce))

    # ------------------------------------------------------------------ fetching

    async def getmany(self, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """Records by partition, waiting up to ``timeout_ms`` for some to arrive; at most
        ``max_records`` (default ``max_poll_records``), only of ``partitions`` if given."""
        self._started()
        deadline = time.monotonic() + _validate.seconds(timeout_ms, "timeout_ms") / 1000
        max_records = _validate.optional(_validate.count, max_records, "max_records")
        partitions = tuple(_validate.topic_partition(tp) for tp in partitions)
        first = True
        while True:
            async with self._lock:
                self._raise_deferred()
                taken = self._take(partitions, max_records)
                left = deadline - time.monotonic()
                if taken or self._stopping or (left <= 0 and not first):
                    return taken
                first = False
                if self._auto_commit and time.monotonic() >= self._next_auto_commit:
                    await self._commit_handed()
                await self._wait(max(0.0, left))

    async def _wait(self, left: float) -> None:
        """One wait for records, at most ``left`` seconds (see the module notes)."""
        waker = self._started()._fetcher.waker
        if waker is None or waker.timed or left <= 0:  # (a look alone arms nothing)
            await self._fetch(min(left, _SLICE_S))
            return
        await self._fetch(0.0, self._poll_and_arm)
        if not self._stash and self._error is None:
            await waker.wait_async(min(left, _SLICE_S if self.group else _WAKE_WAIT_S))

    def _poll_and_arm(self, _: float) -> list[Record]:
        """In the worker: the records there now; if none, arm the wake source (and look again
        after a new watch: it cannot report what came before it)."""
        sync = self._started()
        records = sync.poll(0.0)
        if not records and sync._fetcher.arm(sync._fetches.values()) is Armed.RECHECK:
            records = sync.poll(0.0)
        return records

    async def getone(self, *partitions: TopicPartition) -> Record:
        """The next record (waiting as long as it takes)."""
        while True:
            if self._stash and not partitions and self._error is None:
                return self._stash.popleft()
            got = await self.getmany(*partitions, timeout_ms=1000, max_records=1)
            for records in got.values():
                return records[0]
            if self._stopping:
                raise LogClosedError("the consumer is stopped")

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> Record:
        if self._stash and self._error is None:
            return self._stash.popleft()
        try:
            return await self.getone()
        except LogClosedError:
            if self._stopping:
                raise StopAsyncIteration from None
            raise

    async def _fetch(self, timeout_s: float,
                     poll: Callable[[float], list[Record]] | None = None) -> None:
        """One poll slice in the worker (``poll``, default the sync consumer's). Its records
        reach the stash even when the caller is cancelled meanwhile (except those of
        partitions seeked since it started)."""
        sync = self._started()
        epochs = (self._epoch_all, dict(self._epochs))
        assert self._loop is not None
        fut = self._loop.run_in_executor(self._worker, poll or sync.poll, timeout_s)
        fut.add_done_callback(lambda f: self._stash_fetch(f, epochs))
        self._inflight = fut
        await asyncio.wait([fut])  # its error is raised once, by the next _raise_deferred

    def _stash_fetch(self, fut: asyncio.Future[list[Record]],
                     epochs: tuple[int, dict[TopicPartition, int]]) -> None:
        if self._inflight is fut:
            self._inflight = None
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self._error = exc
            return
        if epochs[0] != self._epoch_all:
            return
        for r in fut.result():
            tp = TopicPartition(r.topic, r.partition)
            if epochs[1].get(tp, 0) == self._epochs.get(tp, 0):
                self._stash.append(r)

    async def _settle(self) -> None:
        """Wait until a fetch left running by a cancelled caller has stashed its records (a
        future is ``done()`` before its callbacks ran: wait for the stash callback itself)."""
        while (fut := self._inflight) is not None:
            if fut.done():
                await asyncio.sleep(0)
            else:
                await asyncio.wait([fut])

    def _take(self, partitions: tuple[TopicPartition, ...], max_records: int | None
              ) -> dict[TopicPartition, list[Record]]:
        limit = max_records or self._started().max_poll_records
        out: dict[TopicPartition, list[Record]] = {}
        wanted = {TopicPartition(*tp) for tp in partitions}
        kept: deque[Record] = deque()
        n = 0
        while self._stash:
            r = self._stash.popleft()
            tp = TopicPartition(r.topic, r.partition)
            if n < limit and (not wanted or tp in wanted):
                out.setdefault(tp, []).append(r)
                n += 1
            else:
                kept.append(r)
                if n >= limit and not wanted:
                    break
        kept.extend(self._stash)
        self._stash = kept
        return out

    def _drop(self, tps: Iterable[TopicPartition] | None, *, inflight: bool = True) -> None:
        """Forget stashed records (of ``tps``, or all) and (``inflight``) discard fetches in
        flight for them."""
        if tps is None:
            self._epoch_all += 1
            self._stash.clear()
            return
        dropped = {_validate.topic_partition(tp) for tp in tps}  # checked before any change
        if inflight:
            self._epochs.update({tp: self._epochs.get(tp, 0) + 1 for tp in dropped})
        self._stash = deque(r for r in self._stash
                            if TopicPartition(r.topic, r.partition) not in dropped)

    def _raise_deferred(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc

    # ------------------------------------------------------------------ positions and commits

    def _first_stashed(self) -> dict[TopicPartition, int]:
        first: dict[TopicPartition, int] = {}
        for r in self._stash:
            first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
        return first

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record the application will get from ``tp``."""
        tp = _validate.topic_partition(tp)
        async with self._guard():
            found = self._first_stashed().get(tp)
            return found if found is not None else await self._call(self._started().position,
                                                                     tp)

    async def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        """Store committed offsets: ``offsets``, or the positions of every assigned partition
        counting only records handed out (see the module notes)."""
        sync = self._started()
        if offsets is not None:
            await self._call(sync.commit, offsets)
            return
        async with self._guard():
            await self._commit_handed()

    async def _commit_handed(self) -> None:
        sync = self._started()
        if _IN_CALLBACK.get() is not self:  # (a callback's poll followed the topics already)
            await self._call(sync._rebind_recreated)  # before the stash counts
        first = self._first_stashed()
        self._next_auto_commit = time.monotonic() + self._auto_commit_s

        def work() -> None:
            sync.commit({tp: first.get(tp, sync.position(tp)) for tp in sync.assignment()})
        await self._call(work)

    async def committed(self, tp: TopicPartition) -> int | None:
        return await self._call(self._started().committed, _validate.topic_partition(tp))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Continue ``tp`` at ``offset`` (applied in order with the other calls; an error shows
        at the next ``getmany``)."""
        sync = self._started()
        tp = _validate.topic_partition(tp)
        offset = _validate.offset(offset)
        self._drop([tp])
        assert self._worker is not None
        self._worker.submit(self._deferring(sync.seek), tp, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_all(self._started().seek_to_beginning, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_all(self._started().seek_to_end, partitions)

    async def _seek_all(self, fn: Callable[..., None], partitions: tuple[TopicPartition, ...]
                        ) -> None:
        async with self._guard():
            self._drop(partitions or None)
            await self._call(fn, *partitions)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]
                                ) -> dict[TopicPartition, int]:
        return await self._call(self._started().beginning_offsets, _validate.listed(partitions))

    async def end_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        return await self._call(self._started().end_offsets, _validate.listed(partitions))

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> Any:
        return await self._call(self._started().offsets_for_times, _validate.mapping(timestamps))

    # ------------------------------------------------------------------ plumbing

    def _started(self) -> Consumer:
        if self._sync is None:
            raise UsageError("the consumer is not running: await consumer.start() first (or "
                             "use 'async with')")
        if self._stopping and self._sync.closed:
            raise LogClosedError("the consumer is stopped")
        return self._sync

    def _guard(self) -> Any:
        """The fetch lock -- except inside a rebalance callback, whose fetch holds it."""
        if _IN_CALLBACK.get() is self:
            return contextlib.nullcontext()
        return Settled(self)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the worker thread -- or, inside a rebalance callback (the worker is
        waiting for it), in a helper thread."""
        if _IN_CALLBACK.get() is self:
            return await asyncio.to_thread(fn, *args)
        assert self._loop is not None
        return await asyncio.shield(self._loop.run_in_executor(self._worker, fn, *args))

    def _deferring(self, fn: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except Exception as exc:
                assert self._loop is not None
                self._loop.call_soon_threadsafe(setattr, self, "_error", exc)
        return run

    def _bridge(self, handler: Callable[[list[TopicPartition]], Any]
                ) -> Callable[[list[TopicPartition]], None]:
        """A sync consumer callback (run in the worker) that runs ``handler`` on the loop and
        waits for it."""
        def callback(tps: list[TopicPartition]) -> None:
            assert self._loop is not None
            asyncio.run_coroutine_threadsafe(self._in_callback(handler, tps), self._loop).result()
        return callback

    async def _in_callback(self, handler: Callable[[list[TopicPartition]], Any],
                           tps: list[TopicPartition]) -> None:
        _IN_CALLBACK.set(self)
        await handler(tps)

    async def _assigned(self, tps: list[TopicPartition]) -> None:
        self._assigned_now = self._assigned_now | frozenset(tps)
        await maybe_await(self._on_assign, tps)

    async def _rebound(self, tps: list[TopicPartition]) -> None:
        """Partitions of a topic created again, read anew by the worker (a fetch in flight
        reads the new topic): the records stashed from the old one go, never handed out nor
        counted in a position or commit."""
        self._drop(tps, inflight=False)

    async def _revoked(self, tps: list[TopicPartition]) -> None:
        try:
            if self._auto_commit and ((m := self._started()._membership) is None or m.in_group):
                await self._commit_handed()
            await maybe_await(self._on_revoke, tps)
        finally:
            self._drop(tps)
            self._assigned_now = self._assigned_now - frozenset(tps)

    def __repr__(self) -> str:
        group = f" group={self.group!r}" if self.group else ""
        return f"<embedlog.aio.AsyncConsumer {self.log.path!r}{group}>"

