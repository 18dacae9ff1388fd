"""The descriptor budget: an LRU of the segments that hold open files.

A segment opens its files on demand (:mod:`embedlog.segment.segment`) and reports how many
descriptors (file descriptors and index mappings, each of which holds a duplicated descriptor)
it holds to the process-wide :class:`HandleCache`. When the total exceeds the budget, the least
recently used segments that nobody is using right now are asked to release theirs, as Kafka's
and LevelDB's table caches do. A released segment reopens its files by name on next use.

Invariants:

* an owner is released only while it is not *pinned*: every use of an owner's descriptors
  happens between :meth:`HandleCache.pin` and :meth:`HandleCache.unpin`, and pinning takes the
  cache lock, so a descriptor number is never closed under a thread that is using it;
* the budget may be exceeded while every owner over it is pinned (a budget smaller than the
  descriptors in use at once is a soft limit, never a deadlock);
* owners are held strongly while listed: an owner must :meth:`HandleCache.forget` itself when it
  closes or is retired (a retired segment keeps its descriptors outside the budget until its
  last reference goes, so iterators can finish reading an unlinked file).

Lock order: an owner's own open lock -> ``HandleCache._lock``. Releasing an owner runs under
``HandleCache._lock`` and takes no other lock.

The default budget is a quarter of the soft ``RLIMIT_NOFILE`` (at least 16); :func:`configure`
changes it, e.g. ``EMBEDLOG_MAX_OPEN_FILES``-style settings of an application.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final, Protocol

__all__ = ["CACHE", "DEFAULT_BUDGET", "HandleCache", "Owner", "configure", "default_budget"]

_MIN_BUDGET: Final = 16


class Owner(Protocol):
    """Something that holds descriptors it can close and reopen later."""

    def release_handles(self) -> None:
        """Close every descriptor (called under the cache lock, only while unpinned)."""


def default_budget() -> int:
    """A quarter of the soft ``RLIMIT_NOFILE`` (at least 16; 256 where it cannot be read)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 4096
    return max(_MIN_BUDGET, soft // 4)


DEFAULT_BUDGET: Final = default_budget()


class HandleCache:
    """The LRU of owners holding descriptors, with a budget of descriptors."""

    def __init__(self, budget: int) -> None:
        self._lock = threading.Lock()
        self._lru: OrderedDict[Owner, int] = OrderedDict()  # owner -> descriptors, oldest first
        self._pins: dict[Owner, int] = {}
        self._used = 0
        self.budget = budget
        self.evictions = 0

    @property
    def in_use(self) -> int:
        """Descriptors held by the listed owners."""
        return self._used

    def pin(self, owner: Owner) -> None:
        """``owner`` is about to use its descriptors: it is not released until :meth:`unpin`
        (which makes it the most recently used: a pinned owner is never released, so where
        it stands in the LRU meanwhile does not matter)."""
        pins = self._pins
        with self._lock:  # (not acquire/try: an interrupt could land between the two)
            pins[owner] = pins.get(owner, 0) + 1

    def unpin(self, owner: Owner, held: int | None) -> None:
        """``owner`` is done and now holds ``held`` descriptors; release others over budget.
        ``held=None``: it opened and closed nothing while pinned (it holds the descriptors
        last counted, by whoever opened or closed one)."""
        pins = self._pins
        with self._lock:  # as pin
            n = pins.pop(owner) - 1
            if n:
                pins[owner] = n
            if held is None:
                if owner in self._lru:
                    self._lru.move_to_end(owner)
                return
            self._used += held - self._lru.pop(owner, 0)
            if held:
                self._lru[owner] = held
            if self._used > self.budget:
                self._shrink()

    def forget(self, owner: Owner) -> None:
        """``owner`` closed (or retired) its descriptors: stop counting them."""
        with self._lock:
            self._used -= self._lru.pop(owner, 0)

    def evict(self, owner: Owner) -> None:
        """Release ``owner``'s descriptors now, as the LRU would over budget, unless it is
        pinned (in use: then it stays listed and goes the LRU's way). For owners nobody will
        look up again (a read-only view's segments the writer deleted); a later use reopens
        by name, as after any eviction."""
        with self._lock:
            if owner in self._pins or owner not in self._lru:
                return
            self._used -= self._lru.pop(owner)
            owner.release_handles()

    def _shrink(self) -> None:
        if self._used <= self.budget:
            return
        for owner in list(self._lru):
            if self._used <= self.budget:
                break
            if owner in self._pins:
                continue
            held = self._lru.pop(owner)
            self._used -= held
            self.evictions += 1
            owner.release_handles()

    def set_budget(self, budget: int) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"the descriptor budget must be a positive int, got {budget!r}")
        with self._lock:
            self.budget = budget
            self._shrink()


CACHE: Final = HandleCache(DEFAULT_BUDGET)
"""The process-wide cache shared by every log the process opens (the descriptor limit is the
process's)."""


def configure(budget: int | None = None) -> int:
    """Set the descriptor budget (None: the default from ``RLIMIT_NOFILE``); returns it."""
    CACHE.set_budget(default_budget() if budget is None else budget)
    return CACHE.budget
