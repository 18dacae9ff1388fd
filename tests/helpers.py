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


def txn_ops(max_size: int, *, records: int = 30, compact: bool = True) -> Any:
    """Hypothesis lists of the operations :func:`run_txn_ops` plays (sends and plain appends
    of up to ``records`` records; ``compact`` ones only with ``compact``)."""
    from hypothesis import strategies as st

    return st.lists(st.one_of(
        st.tuples(st.just("send"), st.sampled_from("ab"), st.integers(1, records)),
        st.tuples(st.just("commit"), st.sampled_from("ab")),
        st.tuples(st.just("abort"), st.sampled_from("ab")),
        st.tuples(st.just("plain"), st.integers(1, records)),
        st.tuples(st.just("delete"), st.floats(0, 1)),
        st.tuples(st.just("compact" if compact else "roll")),
        st.tuples(st.just("roll")),
    ), max_size=max_size)  # fmt: skip


def run_txn_ops(log: Any, ops: list[tuple[Any, ...]], producers: dict[str, Any],
                after: Callable[[tuple[Any, ...]], None] | None = None) -> None:
    """Play ``ops`` (as :func:`txn_ops` makes them) on partition 0 of topic ``t``: transactional
    ``send`` (opening a transaction) / ``commit`` / ``abort`` of the ``producers`` by name
    (initialised), ``plain`` appends, ``delete`` of a fraction of the records, ``compact``,
    ``roll``; ``after(op)`` runs after each."""
    open_: set[str] = set()
    for op in ops:
        kind, *args = op
        if kind == "send":
            name, n = args
            if name not in open_:
                producers[name].begin_transaction()
                open_.add(name)
            for i in range(n):
                producers[name].send("t", b"x%d" % i, key=b"k%d" % (i % 4), partition=0)
            producers[name].flush()
        elif kind in ("commit", "abort") and args[0] in open_:
            p = producers[args[0]]
            p.commit_transaction() if kind == "commit" else p.abort_transaction()
            open_.discard(args[0])
        elif kind == "plain":
            log.append_batch("t", [b"p"] * args[0], keys=[b"k"] * args[0], partition=0)
        elif kind == "delete":
            start, end = log.start_offset("t", 0), log.end_offset("t", 0)
            log.delete_records("t", 0, start + int((end - start) * args[0]))
        elif kind == "compact":
            log.compact("t")
        elif kind == "roll":
            log.roll("t", 0)
        if after is not None:
            after(op)


def aborted_log(path: pathlib.Path) -> pathlib.Path:
    """A log whose only segment holds a committed and an aborted transaction."""
    import embedlog

    with embedlog.open(path) as log:
        log.create_topic("t")
        p = log.producer(transactional_id="x")
        p.init_transactions()
        for commit in (True, False):
            p.begin_transaction()
            p.send("t", b"v", partition=0)
            p.flush()  # on disk before the decision: the abort needs its marker
            p.commit_transaction() if commit else p.abort_transaction()
        p.close()
    return next((path / "t-0").glob("*.txnindex"))


def open_transaction(log: Any, topic: str, value: bytes, transactional_id: str = "x") -> Any:
    """A transactional producer of ``log`` with one record of ``value`` written to partition
    0 of ``topic`` in a transaction left open."""
    producer = log.producer(transactional_id=transactional_id)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, value, partition=0)
    producer.flush()
    return producer


def read_committed(log: Any, part: int, topic: str = "out") -> list[bytes]:
    """The values a ``read_committed`` consumer of ``topic``-``part`` reads from the start."""
    from embedlog import TopicPartition

    c = log.consumer(isolation_level="read_committed")
    c.assign([TopicPartition(topic, part)])
    out: list[bytes] = []
    while batch := c.poll():
        out += [r.value for r in batch]
    c.close()
    return out


def descriptors_under(folder: str | os.PathLike[str]) -> list[str]:
    """The files under ``folder`` this process holds open (Linux ``/proc/self/fd``; a deleted
    file's name ends in `` (deleted)``)."""
    prefix = os.path.join(os.fspath(folder), "")
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # (the listing's own descriptor, closed meanwhile)
            continue
        if target.startswith(prefix):
            held.append(target)
    return sorted(held)
