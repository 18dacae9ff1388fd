"""Synthetic click events for ``embedlog demo``: an hour of a small shop's traffic.

Users and pages follow skewed (Zipf-like) popularity, traffic per minute rises and falls over
the hour, and actions are mostly views. Everything is drawn with numpy from one seed, so a run
is reproducible; values are compact JSON, keys are user ids::

    key   u00042
    value {"user":"u00042","page":"/product/17","action":"view","ms":2315,"ts":1714564800000}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ACTIONS", "PAGES", "Events", "make_events"]

PAGES = (
    ["/", "/search", "/cart", "/checkout", "/account", "/help", "/deals", "/new"]
    + [f"/product/{i}" for i in range(1, 33)]
)
ACTIONS = ("view", "click", "add_to_cart", "purchase")
ACTION_WEIGHTS = (0.70, 0.20, 0.08, 0.02)
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Events:
    """Columns of ``n`` events in time order."""

    user: npt.NDArray[np.int64]
    page: npt.NDArray[np.int64]
    action: npt.NDArray[np.int64]
    ms: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.ts)

    def records(self, start: int, stop: int) -> Iterator[tuple[bytes, bytes, int, int]]:
        """``(key, value, timestamp, action)`` of events ``[start, stop)``."""
        users = self.user[start:stop].tolist()
        pages = self.page[start:stop].tolist()
        actions = self.action[start:stop].tolist()
        durations = self.ms[start:stop].tolist()
        stamps = self.ts[start:stop].tolist()
        for u, p, a, d, t in zip(users, pages, actions, durations, stamps, strict=True):
            user = b"u%05d" % u
            yield (user,
                   b'{"user":"%s","page":"%s","action":"%s","ms":%d,"ts":%d}'
                   % (user, PAGE_BYTES[p], ACTION_BYTES[a], d, t),
                   t, a)


PAGE_BYTES = [p.encode() for p in PAGES]
ACTION_BYTES = [a.encode() for a in ACTIONS]


def _skewed(rng: np.random.Generator, n: int, size: int, s: float, *, shuffle: bool
            ) -> npt.NDArray[np.int64]:
    """``n`` draws of ``0..size-1``, rank ``r`` with probability proportional to
    ``1 / (r + 1) ** s``; ``shuffle`` spreads the popular ranks over the ids."""
    weights = 1.0 / np.arange(1, size + 1) ** s
    order = rng.permutation(size) if shuffle else np.arange(size)
    return order[rng.choice(size, n, p=weights / weights.sum())].astype(np.int64)


def make_events(n: int, *, users: int, end_ms: int, seed: int = 7) -> Events:
    """``n`` events over the hour before ``end_ms``."""
    rng = np.random.default_rng(seed)
    minute = np.arange(60)
    traffic = 1.0 + 0.6 * np.sin(minute / 60 * 2 * np.pi - 1.2) + rng.uniform(0, 0.3, 60)
    minutes = rng.choice(60, n, p=traffic / traffic.sum())
    ts = np.sort(end_ms - HOUR_MS + minutes * 60_000 + rng.integers(0, 60_000, n))
    return Events(
        user=_skewed(rng, n, users, 0.8, shuffle=True),
        page=_skewed(rng, n, len(PAGES), 0.9, shuffle=False),
        action=rng.choice(len(ACTIONS), n, p=ACTION_WEIGHTS).astype(np.int64),
        ms=rng.integers(50, 30_000, n).astype(np.int64),
        ts=ts.astype(np.int64),
    )
