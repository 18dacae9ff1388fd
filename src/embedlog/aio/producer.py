"""``AsyncProducer``: aiokafka's ``AIOKafkaProducer`` shape over a writable :class:`~embedlog.Log`.

::

    async with AsyncProducer(log, linger_ms=2) as producer:
        future = await producer.send("events", b"payload", key=b"user-1")
        meta = await future                        # RecordMetadata, offset included
        meta = await producer.send_and_wait("events", b"more")

**How it never blocks the event loop.** ``send()`` only puts the record and a new
``asyncio.Future`` in a queue (waiting first while ``max_buffer_records`` are queued:
back-pressure, as aiokafka's ``send`` waits for buffer space). A sender task takes everything
queued -- after ``linger_ms`` -- and hands it to one worker thread, which passes each record to
a :class:`~embedlog.Producer` in order, then writes the open batches and, in ``fsync``
durability, fsyncs the log; only then are the futures resolved (in slices, so that resolving a
large round does not hold the loop either). Records sent while a round is being written go
together into the next round: one write and one fsync serve them all (group commit), and order
is kept because one thread writes. A record's future therefore resolves once its batch is
written (readable by consumers) -- and on disk with ``durability="fsync"`` (the producer's
option, or the log's).

Errors (unknown topic, a record too large, an I/O error) come back through the record's future; an
I/O error that fails a batch fails the future of each record it held, as aiokafka's do, and no
other (unlike :class:`~embedlog.Producer`, which raises it at its next call). Cancelling a task
that awaits a send does not take the record back. A ``send`` still waiting for buffer space when
:meth:`AsyncProducer.stop` is called raises :class:`~embedlog.LogClosedError` (the record is not
sent); every future ``send`` returned resolves. Options other than ``linger_ms`` and
``max_buffer_records`` are those of :class:`~embedlog.Producer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from .. import _validate
from ..errors import InvalidConfigError, LogClosedError, UsageError
from ..producer import Producer
from ..records import Header, RecordMetadata

if TYPE_CHECKING:
    from ..batch_writer import OpenBatch
    from ..log import Log

__all__ = ["AsyncProducer"]

_ROUND: Final = 10_000
"""Most records one worker round writes (their futures resolve together)."""
_RESOLVE_SLICE: Final = 1_000
"""Futures resolved between two yields to the event loop."""

_Item = tuple[str, Any, Any, Any, Any, Any]  # topic, value, key, headers, partition, timestamp


class AsyncProducer:
    """Sends records to a writable log from asyncio code; see the module notes.

    Args:
        log: an open, writable :class:`~embedlog.Log`.
        linger_ms: how long the sender waits after a record arrives for others to join it.
        max_buffer_records: records queued at most before ``send`` waits.
        **options: :class:`~embedlog.Producer` options (``durability``, ``compression``,
            ``idempotent``, ``key_serializer``, ``value_serializer``, ``partitioner``, ...).
    """

    def __init__(self, log: Log, *, linger_ms: float = 0, max_buffer_records: int = 100_000,
                 **options: Any) -> None:
        try:
            _validate.seconds(linger_ms, "linger_ms")
            _validate.count(max_buffer_records, "max_buffer_records")
        except UsageError as exc:
            raise InvalidConfigError(str(exc)) from None
        durability = options.pop("durability", None) or log.durability
        if durability not in ("none", "fsync"):
            raise InvalidConfigError(f"durability must be 'none' or 'fsync', not {durability!r}")
        options.pop("linger_ms", None)
        self.log = log
        self.durability = durability
        self._linger_s = linger_ms / 1000
        self._max_buffer = max_buffer_records
        self._options = options
        self._producer: Producer | None = None
        self._worker: ThreadPoolExecutor | None = None
        self._queue: list[tuple[_Item, asyncio.Future[RecordMetadata]]] = []
        self._queued = 0  # records ever queued
        self._resolved = 0  # records whose futures were resolved, in queue order
        self._round_done = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._space = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._new_future: Callable[[], asyncio.Future[Any]] = _no_loop
        self._stopped = False
        self._shutdown: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the underlying producer (in the worker thread: an idempotent producer
        allocates its id on disk) and the sender task. Idempotent."""
        if self._sender is not None:
            return
        if self._stopped:
            raise LogClosedError("the producer is stopped")
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="embedlog-aio-producer")
        loop = asyncio.get_running_loop()
        self._new_future = loop.create_future
        # Writes happen at the end of each round (flush); the inner producer's own linger
        # thread only matters if a round is still filling a batch.
        self._producer = await loop.run_in_executor(
            self._worker, lambda: _RoundProducer(self.log, durability="none", linger_ms=1000,
                                                 **self._options))
        self._sender = asyncio.create_task(self._send_loop(), name="embedlog-aio-sender")

    async def stop(self) -> None:
        """Send everything queued, wait for it, close. Idempotent. Cancelling it does not stop
        the shutdown: every record sent is still written and its future resolved, and a later
        ``stop`` waits for the same shutdown."""
        self._stopped = True
        if self._sender is None:
            return
        if self._shutdown is None:
            self._shutdown = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._shutdown)

    async def _stop(self) -> None:
        assert self._sender is not None
        try:
            await self.flush()
        finally:
            self._space.set()  # sends still waiting for buffer space raise LogClosedError
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            assert self._worker is not None and self._producer is not None
            await asyncio.get_running_loop().run_in_executor(self._worker, self._producer.close)
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns a future of its :class:`~embedlog.RecordMetadata`
        (aiokafka's signature). Waits while ``max_buffer_records`` records are queued."""
        if self._sender is None or self._stopped:
            raise UsageError("the producer is not running: await producer.start() first (or "
                             "use 'async with')") if not self._stopped else LogClosedError(
                "the producer is stopped")
        while len(self._queue) >= self._max_buffer:
            self._space.clear()
            await self._space.wait()
            if self._stopped:  # stop() came meanwhile: its flush did not count this record
                raise LogClosedError("the producer was stopped while this send waited for "
                                     "buffer space; the record was not sent")
        future: asyncio.Future[RecordMetadata] = self._new_future()
        self._queue.append(((topic, value, key, headers, partition, timestamp_ms), future))
        self._queued += 1
        if not self._wakeup.is_set():
            self._wakeup.set()
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> RecordMetadata:
        """``send`` and wait until the record is written (durable with ``fsync``)."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await asyncio.shield(future)

    async def flush(self) -> None:
        """Wait until every record sent so far is written (errors stay in their futures)."""
        target = self._queued
        while self._resolved < target and self._sender is not None and not self._sender.done():
            self._round_done.clear()
            await self._round_done.wait()

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic`` (aiokafka returns a set)."""
        return set(range(self.log.partition_count(topic)))

    # ------------------------------------------------------------------ the sender

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            if self._linger_s:
                await asyncio.sleep(self._linger_s)
            batch, self._queue = self._queue[:_ROUND], self._queue[_ROUND:]
            if not self._queue:
                self._wakeup.clear()
            self._space.set()
            if not batch:
                continue
            try:
                results = await loop.run_in_executor(self._worker, self._write_round,
                                                     [item for item, _ in batch])
            except Exception as exc:  # the worker could not run the round at all
                results = [exc] * len(batch)
            for start in range(0, len(batch), _RESOLVE_SLICE):
                for (_, future), result in zip(batch[start : start + _RESOLVE_SLICE],
                                               results[start : start + _RESOLVE_SLICE],
                                               strict=True):
                    if future.done():
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
                await asyncio.sleep(0)
            self._resolved += len(batch)
            self._round_done.set()

    def _write_round(self, items: list[_Item]) -> list[RecordMetadata | BaseException]:
        """Worker thread: send every record in order, write the batches, fsync if asked."""
        producer = self._producer
        assert isinstance(producer, _RoundProducer)
        out: list[RecordMetadata | BaseException] = []
        for topic, value, key, headers, partition, timestamp in items:
            producer.sending = len(out)
            try:
                out.append(producer.send(topic, value, key, headers=headers,
                                         partition=partition, timestamp=timestamp))
            except Exception as exc:
                out.append(exc)
        producer.sending = len(out)
        try:
            producer.flush()
            if self.durability == "fsync":
                self.log.flush()
        except Exception as exc:  # nothing of this round is known to be written
            out = [r if isinstance(r, BaseException) else exc for r in out]
        failed, producer.failed = producer.failed, []
        for topic, partition, base, error, upto in failed:
            for i, r in enumerate(out[: upto + 1]):
                if isinstance(r, RecordMetadata) and r[:2] == (topic, partition) and (
                        r.offset >= base):
                    out[i] = error
        return out

    def __repr__(self) -> str:
        state = " stopped" if self._stopped else "" if self._sender else " not started"
        return f"<embedlog.aio.AsyncProducer {self.log.path!r} durability={self.durability}" \
               f"{state}>"


class _RoundProducer(Producer):
    """The worker's producer. A batch that fails to be written (an I/O error) is reported by
    the futures of the records it held, not raised by the next call as :class:`Producer` does:
    ``failed`` lists ``(topic, partition, base offset, error, index)`` of each, ``index``
    the round's record being sent when it failed (``sending``): that one and the records
    before it of the partition from the base offset on were in it."""

    def __init__(self, log: Log, **options: Any) -> None:
        super().__init__(log, **options)
        self.sending = 0
        self.failed: list[tuple[str, int, int, BaseException, int]] = []

    def _closed_batch(self, slot: OpenBatch, error: BaseException | None) -> None:
        if error is None:
            super()._closed_batch(slot, None)
            return
        self._open.pop(slot, None)
        self.failed.append((slot.topic, slot.index, slot.base, error, self.sending))


def _no_loop() -> asyncio.Future[Any]:
    raise UsageError("the producer is not running: await producer.start() first")
