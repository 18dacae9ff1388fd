"""Power-loss crash exploration of a transaction timeout's abort (Kafka's fence).

A transaction of ``t`` writes to three partitions and times out; the coordinator bumps the
producer's epoch, makes ``PrepareAbort`` with it durable, then appends the ABORT markers with
the bumped epoch. Every state a power loss could leave after each recorded call from the
transaction's open to the end of its abort (see :mod:`.crash_states`) is rebuilt, reopened and
checked:

1. the open succeeds; nothing of the transaction is visible to ``read_committed``, nothing
   stays open, no partition holds two markers of it;
2. every partition holds one ABORT marker of the producer, all of one epoch: the old one (the
   crash came before the decision was durable: no marker of the bumped epoch can be on disk
   then) or the bumped one; the bumped one once the abort returned;
3. a new producer of the id gets an epoch above every epoch its batches hold, and commits.

A mutation check drops the fsync of the timeout's decision: markers of the bumped epoch may
then be durable with the decision lost, and the explorer finds partitions marked with two
different epochs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from functools import partial

import pytest

import embedlog
from embedlog import _io
from embedlog import txn_coordinator as coord
from embedlog.errors import ProducerFencedError

from .crash_states import check_image, crash_states
from .parallel import first_failure, run_shards
from .recording import RecordingFS
from .test_txn_crash_states import (
    PARTS,
    _check_new_producer,
    _double_markers,
    _open,
    _Promised,
    _views,
)
from .workloads import scratch_dir

TIMEOUT_MS = 1000
MAX_PER_POINT = 16
"""Crash states per call: enough to reach the one where nothing unsynced landed (the
decision's record lost while a marker fsynced before it is on disk, without its fsync)."""


def _workload(path: str) -> None:
    now = [int(time.time() * 1000)]  # the checks reopen with the real clock: the id not expired
    with embedlog.Log(path, durability="fsync", upkeep=False, clock=lambda: now[0]) as log:
        p = log.producer(transactional_id="t", transaction_timeout_ms=TIMEOUT_MS)
        p.init_transactions()
        p.begin_transaction()
        for part in range(PARTS):
            p.send("out", b"slow", partition=part)
        p.flush()
        _io.mark("txn_epoch", epoch=p.producer_epoch, pid=p.producer_id)
        now[0] += TIMEOUT_MS + 1
        try:
            p.commit_transaction()
        except ProducerFencedError:
            _io.mark("txn_fenced")


def _record() -> tuple[str, RecordingFS, range]:
    """The recorded trace and its calls from the transaction's open to just past the abort's
    end (the close after it is test_txn_crash_states.py's)."""
    root = scratch_dir()
    path = os.path.join(root, "log")
    with _open(path) as log:
        log.create_topic("out", partitions=PARTS)
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        _workload(path)
    marks = [i for i, op in enumerate(fs.ops) if op.kind == "mark"]
    assert [fs.ops[i].info["kind"] for i in marks] == ["txn_epoch", "txn_fenced"]
    return root, fs, range(marks[0], marks[1] + 4)


def _check_markers(log: embedlog.Log, promised: _Promised, fenced: bool) -> list[str]:
    epochs = set()
    for part in range(PARTS):
        marks = [b for b in log.read_batches("out", part, 0, control=True)
                 if b.is_control and b.producer_id == promised.pid]
        if len(marks) != 1:
            return [f"out-{part}: {len(marks)} markers of the producer"]
        epochs.add(marks[0].producer_epoch)
    if len(epochs) != 1 or not epochs <= {promised.epoch, promised.epoch + 1}:
        return [f"marker epochs {sorted(epochs)} (producer epoch {promised.epoch})"]
    if fenced and epochs != {promised.epoch + 1}:
        return [f"marker epochs {sorted(epochs)} after the abort returned"]
    return []


def _check(path: str, promised: _Promised, fenced: bool) -> list[str]:
    try:
        log = _open(path)
    except BaseException as exc:
        return [f"open failed: {type(exc).__name__}: {exc}"]
    try:
        problems = [f"visible: {view}" for view in _views(log) if b"slow" in view]
        for part in range(PARTS):
            if log.last_stable_offset("out", part) != log.end_offset("out", part):
                problems.append(f"out-{part}: a transaction stays open")
            if _double_markers(log, part):
                problems.append(f"out-{part}: a transaction has two markers")
        problems += _check_markers(log, promised, fenced)
        problems += _check_new_producer(log, promised)
    except BaseException as exc:
        problems = [f"after recovery: {type(exc).__name__}: {exc}"]
    finally:
        log.close()
    return problems


_TRACE: list[tuple[str, RecordingFS, range]] = []
"""The trace being explored, set before the worker processes fork."""


def _shard(job: tuple[int, int]) -> Iterator[tuple[str, list[str]]]:
    """Check the crash states ``index``, ``index + count``, ... of the trace in ``_TRACE``."""
    index, count = job
    root, fs, points = _TRACE[0]
    promised, fenced, folded = _Promised(), False, 0
    states = crash_states(fs.base, fs.ops, max_per_point=MAX_PER_POINT, points=points)
    for i, state in enumerate(states):
        while folded <= state.point:
            op = fs.ops[folded]
            if op.kind == "mark":
                promised.fold(op.info)
                fenced = fenced or op.info["kind"] == "txn_fenced"
            folded += 1
        if i % count != index:
            continue
        found = check_image(state, f"{root}-state-{index}",
                            partial(_check, promised=promised, fenced=fenced))
        yield f"crash after op {state.point} ({fs.ops[state.point]}); {state.choice}", found


def _checked_shard(job: tuple[int, int]) -> tuple[int, list[str]]:
    return first_failure(_shard(job))


@pytest.mark.slow
def test_every_crash_point_of_a_timeout_abort() -> None:
    _TRACE[:] = [_record()]
    assert run_shards(_checked_shard) >= 10


def test_explorer_finds_a_missing_fsync_of_the_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    real = coord.TxnCoordinator._touch

    def touch(self: coord.TxnCoordinator, tid: str, *, durable: bool = False) -> None:
        entry = self.entries.get(tid)
        real(self, tid, durable=durable and (entry is None or entry.state != "PrepareAbort"))

    monkeypatch.setattr(coord.TxnCoordinator, "_touch", touch)
    _TRACE[:] = [_record()]
    found = []
    for _, problems in _shard((0, 1)):
        found += problems
        if any("marker epochs" in problem for problem in problems):
            return
    pytest.fail(f"the explorer missed the lost decision: {found[:3]}")
