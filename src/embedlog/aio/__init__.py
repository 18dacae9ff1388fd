"""asyncio clients with aiokafka's shape: :class:`AsyncProducer` and :class:`AsyncConsumer`.

::

    from embedlog.aio import AsyncConsumer, AsyncProducer

    async with AsyncProducer(log) as producer:
        await producer.send_and_wait("events", b"hello")
    async with AsyncConsumer(log, "events", group="g") as consumer:
        async for record in consumer:
            ...

Both run their blocking work (writes, fsyncs, waits for records) in a worker thread of their
own, so the event loop never waits on a file; see :mod:`embedlog.aio.producer` and
:mod:`embedlog.aio.consumer` for ordering, cancellation and commit rules.
"""

from .consumer import AsyncConsumer
from .producer import AsyncProducer

__all__ = ["AsyncConsumer", "AsyncProducer"]
