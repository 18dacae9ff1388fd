"""Small helpers shared by test modules."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("EMBEDLOG_SHARED") or ROOT.parent / "shared")
"""The shared folder next to the repository (``EMBEDLOG_SHARED`` names another one)."""
KAFKA_FIXTURES = SHARED / "fixtures" / "kafka-real"
KAFKA_VECTORS = SHARED / "tools" / "kafka_vectors.py"


def small_segments(**extra: object) -> dict[str, object]:
    """A topic config that rolls often, so tests see many segments."""
    cfg: dict[str, object] = {"segment.bytes": 4096, "index.interval.bytes": 256}
    cfg.update(extra)
    return cfg


def writer_open(path: object, **kw: object) -> None:
    """Open the log at ``path`` for writing and close it again. A partition the open found
    damaged is quarantined: after checking that appends to it are refused, its damage is raised
    (as a writer open raised it before partitions were quarantined one by one)."""
    import embedlog

    with embedlog.open(path, **kw) as log:  # type: ignore[arg-type, call-overload]
        damaged = log.quarantined()
        for tp in damaged:
            try:
                log.append(tp.topic, b"x", key=b"x", partition=tp.partition)
            except embedlog.PartitionQuarantinedError:
                continue
            raise AssertionError(f"{tp} is quarantined but took an append")
    if damaged:
        raise next(iter(damaged.values()))


@contextmanager
def codec_core(core: Any) -> Iterator[None]:
    """Run the block with ``core`` as the compiled codec core (None: the pure-Python code)."""
    from embedlog.segment import _native

    saved = _native.CORE
    _native.CORE = core
    try:
        yield
    finally:
        _native.CORE = saved


def both_cores(compiled: Any, fn: Callable[[], Any]) -> tuple[Any, Any]:
    """(outcome with the ``compiled`` core, outcome with the pure code): the value, or
    ("raised", type, message)."""
    out = []
    for core in (compiled, None):
        with codec_core(core):
            try:
                out.append(fn())
            except Exception as e:
                out.append(("raised", type(e), str(e)))
    return out[0], out[1]
