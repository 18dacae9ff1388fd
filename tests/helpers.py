"""Small helpers shared by test modules."""

from __future__ import annotations


def small_segments(**extra: object) -> dict[str, object]:
    """A topic config that rolls often, so tests see many segments."""
    cfg: dict[str, object] = {"segment.bytes": 4096, "index.interval.bytes": 256}
    cfg.update(extra)
    return cfg
