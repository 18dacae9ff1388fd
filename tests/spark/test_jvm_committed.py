"""``read_committed`` in the JVM reader core (``embedlog.TxnFilter``) against Spark's Python
reader (``CommittedFilter`` through ``committed_batches``): the same rows and counts for every
range of logs of interleaved transactions (committed, aborted, still open, markers of nothing),
plain and idempotent batches, every codec, several segments, a moved log start and compaction;
a range holding a transaction without its marker is left to the Python reader by both."""

from __future__ import annotations

import base64
import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jvm_core_util import (
    Spec,
    damaged_copies,
    dump_while,
    open_view,
    python_result,
    run_dump,
    verdicts,
)

import embedlog
from embedlog.segment import format as fmt

TXN = {"producer_epoch": 0, "is_transactional": True}
CODEC = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class _Writer:
    """Encoded batches straight into one partition (producer ids 1-3, their sequences)."""

    def __init__(self, log: embedlog.Log, topic: str, keyed: bool) -> None:
        self.log, self.topic, self.keyed = log, topic, keyed
        self.seq: dict[int, int] = {}
        self.count = 0

    def _batch(self, values: list[bytes], **kw: Any) -> None:
        if self.keyed and "keys" not in kw:
            kw["keys"] = [b"k%d" % (self.count % 5 + i) for i in range(len(values))]
        self.count += len(values)
        kw.setdefault("timestamps", 1_700_000_000_000 + self.count)
        self.log._append_encoded(self.topic, 0, bytearray(fmt.encode_batch(values, **kw)))

    def plain(self, n: int, codec: str | None) -> None:
        self._batch([b"p%d" % (self.count + i) for i in range(n)], compression=CODEC[codec])

    def txn(self, pid: int, n: int, codec: str | None) -> None:
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + n
        self._batch([b"t%d-%d" % (pid, self.count + i) for i in range(n)], producer_id=pid,
                    base_sequence=seq, compression=CODEC[codec], **TXN)

    def marker(self, pid: int, kind: int) -> None:
        key, value = fmt.control_record(kind)
        self._batch([value], keys=[key], producer_id=pid, is_control=True, **TXN)


def _specs(root: str, topic: str, rng: random.Random, n: int = 10) -> list[Spec]:
    with open_view(root) as view:
        s, e = view.start_offset(topic, 0), view.end_offset(topic, 0)
    out: list[Spec] = []
    for i in range(n):
        a = s if i == 0 else rng.randint(s, e)
        b = e if i == 0 else rng.randint(a, e)
        out += [(root, topic, 0, a, b, "committed-records"),
                (root, topic, 0, a, b, "committed-count")]
    return out


def _agree(classpath: str, root: str, specs: list[Spec]) -> list[dict[str, Any]]:
    got = run_dump(classpath, specs)
    with open_view(root) as view:
        for spec, jvm in zip(specs, got, strict=True):
            want = python_result(view, spec)
            if "error" in want:
                assert jvm.get("error") == want["error"].replace("Error", "Exception"), spec
            else:
                assert jvm == want, spec
    return got


def _values(result: dict[str, Any]) -> set[str]:
    return {base64.b64decode(r["value"]).decode() for r in result["records"]}


def test_aborted_transactions_are_left_out(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("t", 1, {"segment.bytes": 1024})
        w = _Writer(log, "t", keyed=False)
        for round_ in range(6):
            w.plain(1, None)
            w.txn(1, 2, "lz4")
            w.txn(2, 1, None)
            w.marker(1, fmt.CONTROL_COMMIT)
            w.marker(2, fmt.CONTROL_ABORT if round_ % 2 else fmt.CONTROL_COMMIT)
    got = _agree(classpath, root, _specs(root, "t", random.Random(1)))
    whole = _values(got[0])
    assert {v for v in whole if v.startswith("t1-")} and {v for v in whole if v.startswith("p")}
    # six offsets a round (values are named by offset): pid 2 commits at round 0, aborts at 1
    assert "t2-3" in whole and "t2-9" not in whole and "t2-15" in whole
    assert got[1]["count"] == len(got[0]["records"])


def test_a_transaction_open_in_the_range_is_left_to_python(classpath: str,
                                                            tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("t", 1)
        w = _Writer(log, "t", keyed=False)
        w.plain(2, None)
        w.txn(1, 2, None)
        w.plain(2, None)
    specs: list[Spec] = [(root, "t", 0, 0, 6, "committed-records"),
                         (root, "t", 0, 0, 2, "committed-records"),
                         (root, "t", 0, 0, 6, "records")]
    got = _agree(classpath, root, specs)
    assert got[0]["error"] == "FallbackException"
    assert len(got[1]["records"]) == 2 and len(got[2]["records"]) == 6


def test_a_marker_past_the_range_decides_it(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("t", 1, {"segment.bytes": 200})
        w = _Writer(log, "t", keyed=False)
        w.txn(1, 1, None)  # offset 0, aborted by the marker at 41
        w.txn(2, 1, None)  # offset 1, committed at 42
        for _ in range(39):
            w.plain(1, None)
        w.marker(1, fmt.CONTROL_ABORT)
        w.marker(2, fmt.CONTROL_COMMIT)
    got = _agree(classpath, root, [(root, "t", 0, 0, 2, "committed-records"),
                                   (root, "t", 0, 0, 2, "committed-count")])
    assert [r["offset"] for r in got[0]["records"]] == [1] and got[1] == {"count": 1}


_OP = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 4)),
    st.tuples(st.just("txn"), st.integers(1, 3), st.integers(1, 4)),
    st.tuples(st.just("commit"), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(1, 3)),
)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OP, min_size=1, max_size=40), segment=st.sampled_from([300, 1500]),
       codec=st.sampled_from([None, "gzip", "lz4", "zstd", "snappy"]),
       deleted=st.floats(0, 0.4), compact=st.booleans(), seed=st.integers(0, 2**16))
def test_random_transactional_logs(classpath: str, tmp_path_factory: pytest.TempPathFactory,
                                   ops: list[tuple[Any, ...]], segment: int, codec: str | None,
                                   deleted: float, compact: bool, seed: int) -> None:
    root = str(tmp_path_factory.mktemp("txn"))
    policy = "compact,delete" if compact else "delete"
    with embedlog.open(root) as log:
        log.create_topic("r", 1, {"segment.bytes": segment, "cleanup.policy": policy,
                                  "index.interval.bytes": 64})
        w = _Writer(log, "r", keyed=compact)
        for op in ops:
            if op[0] == "plain":
                w.plain(op[1], codec)
            elif op[0] == "txn":
                w.txn(op[1], op[2], codec)
            else:
                w.marker(op[1], fmt.CONTROL_COMMIT if op[0] == "commit" else fmt.CONTROL_ABORT)
        if compact:
            log.roll("r", 0)
            log.compact("r")
        log.delete_records("r", 0, int(log.end_offset("r", 0) * deleted))
    got = _agree(classpath, root, _specs(root, "r", random.Random(seed)))
    pairs = zip(got[::2], got[1::2], strict=True)
    assert all(c.get("count") == len(r["records"]) for r, c in pairs if "records" in r)


def test_damaged_transactional_logs_get_the_python_verdict(classpath: str,
                                                           tmp_path: Path) -> None:
    """Where the Python reader raises CorruptBatchError for a read_committed range, the JVM
    raises CorruptBatchException; where it leaves the range undecided, so does the JVM (a
    damaged marker); where it returns records, the JVM returns the same ones."""
    base = tmp_path / "base"
    with embedlog.open(str(base)) as log:
        log.create_topic("t", 1, {"segment.bytes": 700, "index.interval.bytes": 100})
        w = _Writer(log, "t", keyed=False)
        rng = random.Random(5)
        for i in range(60):
            pid = rng.randint(1, 3)
            w.txn(pid, rng.randint(1, 3), "lz4" if i % 2 else None)
            w.plain(1, None)
            if rng.random() < 0.6:
                w.marker(pid, fmt.CONTROL_ABORT if rng.random() < 0.4 else fmt.CONTROL_COMMIT)
        for pid in (1, 2, 3):
            w.marker(pid, fmt.CONTROL_COMMIT)
    specs: list[Spec] = []
    for root, topic in damaged_copies(base, tmp_path / "work", ["t"], 80, seed=3):
        try:
            specs += _specs(root, topic, rng, 3)
        except embedlog.CorruptionError:
            continue  # the view refuses the bounds: planning fails before any range is read
    got = run_dump(classpath, specs)
    counts = verdicts(specs, got)
    assert counts["corrupt"] > 5 and counts["same"] > 50, counts


def test_ranges_below_the_stable_offset_while_transactions_are_written(
        classpath: str, tmp_path: Path) -> None:
    """Transactions keep being written (one left open for a while, others committed and
    aborted) while the JVM reads ranges below the last stable offset seen before: the same
    rows as before the writes, whatever the header walk meets past the ranges."""
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("w", 1, {"segment.bytes": 4000})
        w = _Writer(log, "w", keyed=False)
        rng = random.Random(9)
        for _ in range(40):
            pid = rng.randint(1, 3)
            w.txn(pid, 2, "zstd")
            w.plain(1, None)
            w.marker(pid, fmt.CONTROL_ABORT if rng.random() < 0.4 else fmt.CONTROL_COMMIT)
        w.txn(1, 1, None)  # open: the stable offset stops here
        with open_view(root) as view:
            stable = view.last_stable_offset("w", 0)
            assert stable < view.end_offset("w", 0)
            specs = [s for s in _specs(root, "w", rng, 8) if s[4] <= stable] * 5
            specs += [(root, "w", 0, 0, stable, "committed-records")]
            expected = [python_result(view, s) for s in specs]
        assert len(specs) > 10 and all("error" not in e for e in expected)
        rounds = itertools.count()

        def append() -> None:
            n = next(rounds)
            w.txn(2 + n % 2, 1, None)
            w.plain(1, None)
            w.marker(2 + n % 2, fmt.CONTROL_ABORT if n % 3 else fmt.CONTROL_COMMIT)

        got = dump_while(classpath, specs, append)
        w.marker(1, fmt.CONTROL_COMMIT)
    assert got == expected
