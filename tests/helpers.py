"""Small helpers shared by test modules."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
KAFKA_FIXTURES = SHARED / "fixtures" / "kafka-real"
KAFKA_VECTORS = SHARED / "tools" / "kafka_vectors.py"


def small_segments(**extra: object) -> dict[str, object]:
    """A topic config that rolls often, so tests see many segments."""
    cfg: dict[str, object] = {"segment.bytes": 4096, "index.interval.bytes": 256}
    cfg.update(extra)
    return cfg
