"""Power-loss crash exploration of the transaction protocol (issue 14).

A transactional workload is recorded through :class:`RecordingFS` (the open with its recovery,
``init_transactions``, a commit over three partitions with group offsets, an abort over two,
a commit over one, the close); every state a power loss could leave after each recorded call
(torn, skipped and reordered writes of the state log and the segments included, see
:mod:`.crash_states`) is rebuilt, reopened and checked:

1. the open succeeds, and every transaction is committed everywhere or aborted everywhere
   (its records visible to ``read_committed`` in all of its partitions or in none);
2. a transaction whose ``commit_transaction`` returned is committed; an aborted one never is;
   a later transaction is committed only if the earlier commits are (they were acknowledged
   before it began);
3. the group's committed offset is the transaction's exactly when it committed;
4. nothing stays open (last stable offset = log end) and no partition holds two markers for
   one transaction;
5. a new producer of the id keeps its producer id once batches of it are on disk, gets an
   epoch above every epoch its batches hold, and commits; a clean close and reopen show the
   same.

A variant shrinks the compaction bound so the state log is rewritten during the trace: a crash
inside that rewrite must leave the old or the new file whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import embedlog
from embedlog import TopicPartition, _io
from embedlog import txn_coordinator as coord
from embedlog import txn_state_log as tsl
from embedlog.naming import TXN_STATE_FILE

from .crash_states import check_image, crash_states
from .parallel import first_failure, run_shards
from .recording import RecordingFS
from .workloads import scratch_dir

PARTS = 3
IN = TopicPartition("in", 0)
TXNS: tuple[tuple[str, tuple[int, ...], bool], ...] = (
    ("A", (0, 1, 2), True), ("B", (0, 1), False), ("C", (2,), True))
"""(name, partitions written, commit?) of the recorded transactions, in order."""
OFFSET_A = 9


def _open(path: str) -> embedlog.Log:
    return embedlog.open(path, durability="fsync", upkeep=False)


def _setup(path: str, *, earlier: bool) -> None:
    """The log before recording: topic ``out``; with ``earlier``, one committed transaction
    already (so the state log exists and is appended to)."""
    with _open(path) as log:
        log.create_topic("out", partitions=PARTS)
        if earlier:
            p = log.producer(transactional_id="t")
            p.init_transactions()
            p.begin_transaction()
            p.send("out", b"setup", partition=0)
            p.commit_transaction()


def _workload(path: str) -> None:
    with _open(path) as log:
        p = log.producer(transactional_id="t")
        p.init_transactions()
        _io.mark("txn_epoch", epoch=p.producer_epoch, pid=p.producer_id)
        for name, parts, commit in TXNS:
            p.begin_transaction()
            for part in parts:
                p.send("out", name.encode(), partition=part)
            if name == "A":
                p.send_offsets_to_transaction({IN: OFFSET_A}, "g")
            if commit:
                p.commit_transaction()
                _io.mark("txn_ack", name=name)
            else:
                p.flush()
                p.abort_transaction()


@dataclass
class _Promised:
    acked: set[str] = field(default_factory=set)
    epoch: int = -1
    pid: int = -1

    def fold(self, info: dict[str, object]) -> None:
        if info["kind"] == "txn_ack":
            self.acked.add(str(info["name"]))
        elif info["kind"] == "txn_epoch":
            self.epoch, self.pid = int(info["epoch"]), int(info["pid"])  # type: ignore[call-overload]


def _views(log: embedlog.Log) -> list[list[bytes]]:
    out = []
    for part in range(PARTS):
        c = log.consumer(isolation_level="read_committed")
        c.assign([TopicPartition("out", part)])
        got: list[bytes] = []
        while batch := c.poll():
            got += [r.value for r in batch]
        c.close()
        out.append(got)
    return out


def _double_markers(log: embedlog.Log, part: int) -> bool:
    """Two markers of one producer with no data of it in between."""
    last_control: dict[int, bool] = {}
    for b in log.read_batches("out", part, 0, control=True):
        if b.producer_id < 0:
            continue
        if b.is_control and last_control.get(b.producer_id):
            return True
        last_control[b.producer_id] = b.is_control
    return False


def _check_views(views: list[list[bytes]], promised: _Promised) -> tuple[list[str], set[str]]:
    problems, committed = [], set()
    for name, parts, commit in TXNS:
        seen = [name.encode() in views[part] for part in parts]
        if any(seen) and not all(seen):
            problems.append(f"{name} committed in some partitions only: {views}")
        if all(seen):
            committed.add(name)
            if not commit:
                problems.append(f"aborted {name} is visible")
        elif name in promised.acked:
            problems.append(f"acknowledged commit {name} lost: {views}")
    if "C" in committed and "A" not in committed:
        problems.append("C committed without A")
    return problems, committed


def _check_new_producer(log: embedlog.Log, promised: _Promised) -> list[str]:
    """A new producer of the id: the same producer id if the old one's batches are on disk,
    an epoch above every one its batches hold (an id or epoch handed out but never written with
    may be handed out again: its producer died with the process), and a transaction of it
    commits."""
    p = log.producer(transactional_id="t")
    p.init_transactions()
    written = [b.producer_epoch for part in range(PARTS)
               for b in log.read_batches("out", part, 0, control=True)
               if b.producer_id == p.producer_id]
    out = []
    if promised.pid not in (-1, p.producer_id) and any(
            b.producer_id == promised.pid for part in range(PARTS)
            for b in log.read_batches("out", part, 0, control=True)):
        out.append(f"new producer id {p.producer_id}: {promised.pid} wrote before the crash")
    if p.producer_epoch <= max(written, default=-1):
        out.append(f"new producer epoch {p.producer_epoch}: epochs {written} written")
    p.begin_transaction()
    p.send("out", b"after", partition=0)
    p.commit_transaction()
    if b"after" not in _views(log)[0]:
        out.append("a transaction after recovery did not commit")
    return out


def _check(path: str, promised: _Promised) -> list[str]:
    try:
        log = _open(path)
    except BaseException as exc:
        return [f"open failed: {type(exc).__name__}: {exc}"]
    try:
        views = _views(log)
        problems, committed = _check_views(views, promised)
        offset = log.consumer(group="g").committed(IN)
        if offset != (OFFSET_A if "A" in committed else None):
            problems.append(f"group offset {offset} with committed {sorted(committed)}")
        for part in range(PARTS):
            if log.last_stable_offset("out", part) != log.end_offset("out", part):
                problems.append(f"out-{part}: a transaction stays open")
            if _double_markers(log, part):
                problems.append(f"out-{part}: a transaction has two markers")
        problems += _check_new_producer(log, promised)
    except BaseException as exc:
        problems = [f"after recovery: {type(exc).__name__}: {exc}"]
    finally:
        log.close()
    if not problems:
        with _open(path) as again:
            if [[v for v in view if v != b"after"] for view in _views(again)] != views:
                problems.append("views changed across a clean reopen")
    return problems


def _commit_of_a(fs: RecordingFS) -> range:
    """The recorded calls of A's ``commit_transaction``: from its first state log append (the
    partitions recorded) to its acknowledgement."""
    marks = [i for i, op in enumerate(fs.ops) if op.kind == "mark"]
    start = next(i for i, op in enumerate(fs.ops) if i > marks[0]
                 and op.kind == "write" and op.path.endswith("embedlog.transactions"))
    return range(start, marks[1] + 1)


def _record(*, earlier: bool) -> tuple[str, RecordingFS]:
    root = scratch_dir()
    path = os.path.join(root, "log")
    _setup(path, earlier=earlier)
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        _workload(path)
    return root, fs


_TRACE: list[tuple[str, RecordingFS, int, range | None]] = []
"""The trace being explored (root, recording, states per crash point, points), set before the
worker processes fork."""


def _explore(max_per_point: int, *, earlier: bool, only_a: bool = False
             ) -> Iterator[tuple[str, list[str]]]:
    root, fs = _record(earlier=earlier)
    _TRACE[:] = [(root, fs, max_per_point, _commit_of_a(fs) if only_a else None)]
    return _shard((0, 1))


def _shard(job: tuple[int, int]) -> Iterator[tuple[str, list[str]]]:
    """Check the crash states ``index``, ``index + count``, ... of the trace in ``_TRACE``."""
    index, count = job
    root, fs, max_per_point, points = _TRACE[0]
    promised, folded = _Promised(), 0
    states = crash_states(fs.base, fs.ops, max_per_point=max_per_point, points=points)
    for i, state in enumerate(states):
        while folded <= state.point:
            if fs.ops[folded].kind == "mark":
                promised.fold(fs.ops[folded].info)
            folded += 1
        if i % count != index:
            continue
        found = check_image(state, f"{root}-state-{index}",
                            lambda path: _check(path, promised))
        yield f"crash after op {state.point} ({fs.ops[state.point]}); {state.choice}", found


def _checked_shard(job: tuple[int, int]) -> tuple[int, list[str]]:
    """A worker's share: how many states it checked, and the first failure."""
    return first_failure(_shard(job))


def _run(max_per_point: int, *, earlier: bool, only_a: bool = False) -> int:
    """Explore the trace over the worker processes; the number of crash states checked."""
    root, fs = _record(earlier=earlier)
    _TRACE[:] = [(root, fs, max_per_point, _commit_of_a(fs) if only_a else None)]
    return run_shards(_checked_shard)


def test_every_crash_point_of_a_commit_is_all_or_nothing() -> None:
    """Every call of one commit over three partitions (partitions recorded, data, decision,
    markers, group offsets, Complete), a few crash states each."""
    assert _run(3, earlier=True, only_a=True) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("earlier", [True, False])
def test_every_crash_state_of_the_protocol_exhaustive(earlier: bool) -> None:
    """Every recorded call of the whole trace, up to three crash states each."""
    assert _run(3, earlier=earlier) > 90


@pytest.mark.slow
def test_crash_during_state_log_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tsl, "COMPACT_MIN", 0)  # rewritten whenever it passes 4x its state
    _, fs = _record(earlier=True)
    assert [op for op in fs.ops if op.kind == "rename" and op.name2 == TXN_STATE_FILE]
    assert _run(3, earlier=True) > 60


@pytest.mark.parametrize("state", ["Ongoing", "PrepareCommit"])
def test_explorer_finds_a_missing_fsync(monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """Mutation check of this explorer: without the fsync of the partitions record (data may
    then be durable with no record of its transaction: it stays open) or of the commit decision
    (markers may then be durable with the decision lost: committed in some partitions only),
    some crash state breaks an invariant."""
    real = coord.TxnCoordinator._touch

    def touch(self: coord.TxnCoordinator, tid: str, *, durable: bool = False) -> None:
        entry = self.entries.get(tid)
        real(self, tid, durable=durable and (entry is None or entry.state != state))

    monkeypatch.setattr(coord.TxnCoordinator, "_touch", touch)
    found = [f for _, f in _explore(3, earlier=True, only_a=True) if f]
    assert found
    wanted = "stays open" if state == "Ongoing" else "in some partitions only"
    assert any(wanted in problem for f in found for problem in f), found[:3]
