"""Small pieces of :class:`~embedlog.aio.AsyncConsumer`: a rebalance callback that may be a
plain function or a coroutine function, and its fetch lock held with no fetch in flight."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Protocol

from ..records import TopicPartition

__all__ = ["Settled", "Settling", "maybe_await"]


async def maybe_await(fn: Callable[[list[TopicPartition]], Any] | None,
                      tps: list[TopicPartition]) -> None:
    """``fn(sorted(tps))``, awaited if it gives an awaitable (nothing without ``fn``)."""
    if fn is not None:
        result = fn(sorted(tps))
        if inspect.isawaitable(result):
            await result


class Settling(Protocol):
    """What :class:`Settled` uses of the consumer."""

    _lock: asyncio.Lock

    async def _settle(self) -> None: ...


class Settled:
    """``async with``: hold the fetch lock with no fetch of a cancelled caller in flight."""

    def __init__(self, consumer: Settling) -> None:
        self.consumer = consumer

    async def __aenter__(self) -> None:
        await self.consumer._lock.acquire()
        try:
            await self.consumer._settle()
        except BaseException:
            self.consumer._lock.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.consumer._lock.release()
