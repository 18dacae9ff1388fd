"""The last stable offset kept incrementally (``Partition.stable``) always equals the one read
from every batch header, whatever happens to the partition between two calls; consumers under
``read_committed`` end there."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition
from embedlog.transactions import last_stable_offset

_OPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from("ab"), st.integers(1, 30)),
    st.tuples(st.just("commit"), st.sampled_from("ab")),
    st.tuples(st.just("abort"), st.sampled_from("ab")),
    st.tuples(st.just("plain"), st.integers(1, 30)),
    st.tuples(st.just("delete"), st.floats(0, 1)),
    st.tuples(st.just("compact")),
), max_size=25)  # fmt: skip


def _full(log: embedlog.Log) -> int:
    p = log._partition_of("t", 0)
    with p.lock:
        return last_stable_offset(list(p.segments), p.end_offset)


def _run(log: embedlog.Log, ops: list[tuple[Any, ...]]) -> None:
    producers = {n: log.producer(transactional_id=n) for n in "ab"}
    open_: set[str] = set()
    for p in producers.values():
        p.init_transactions()
    for op in ops:
        kind, *args = op
        if kind == "send":
            name, n = args
            p = producers[name]
            if name not in open_:
                p.begin_transaction()
                open_.add(name)
            for i in range(n):
                p.send("t", b"x%d" % i, key=b"k%d" % (i % 4), partition=0)
            p.flush()
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
        assert log.last_stable_offset("t", 0) == _full(log), op
    for p in producers.values():
        p.close()


@settings(max_examples=100, deadline=None)
@given(_OPS)
def test_incremental_last_stable_offset_equals_a_full_read(ops: list[tuple[Any, ...]]) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-lso-"))
    try:
        with embedlog.open(work / "log") as log:
            log.create_topic("t", config={"segment.bytes": 1024, "cleanup.policy": "compact"})
            _run(log, ops)
    finally:
        shutil.rmtree(work)


def test_read_committed_consumers_end_at_the_last_stable_offset(tmp_path: pathlib.Path) -> None:
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        log.append_batch("t", [b"a", b"b"], partition=0)
        p = log.producer(transactional_id="x")
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"open", partition=0)
        p.flush()
        log.append_batch("t", [b"c"], partition=0)
        tp = TopicPartition("t", 0)
        committed = log.consumer(isolation_level="read_committed")
        uncommitted = log.consumer()
        for c in (committed, uncommitted):
            c.assign([tp])
        assert committed.end_offsets([tp]) == {tp: 2}
        assert uncommitted.end_offsets([tp]) == {tp: 4}
        assert committed.lag() == {tp: 2} and uncommitted.lag() == {tp: 4}
        committed.seek_to_end()
        assert committed.position(tp) == 2
        p.commit_transaction()
        assert committed.end_offsets([tp]) == {tp: 5}  # the marker took offset 4
        committed.seek_to_end()
        assert committed.position(tp) == 5 and committed.lag() == {tp: 0}
        for c in (committed, uncommitted):
            c.close()
        p.close()
