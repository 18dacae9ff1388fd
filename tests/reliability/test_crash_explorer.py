"""Power-loss crash exploration (issue 7, item 1; reliability.md G1/G2).

Every workload of up to three operations is recorded through :class:`RecordingFS`; every state a
power loss could leave after each recorded call is rebuilt on tmpfs, reopened, and checked
(:mod:`.checker`). Longer random workloads over three partitions follow.
"""

from __future__ import annotations

import os

import pytest

import embedlog
from embedlog import _io

from .crash_states import crash_states, read_tree
from .explorer import explore, explore_many
from .recording import Op, RecordingFS
from .workloads import Workload, ace_workloads, random_workloads, run, scratch_dir, setup

MIN_STATES = 20_000


def test_recorder_sees_every_mutation_and_replays_to_the_real_tree() -> None:
    root = scratch_dir()
    path = os.path.join(root, "log")
    truth = setup(path)
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        run(Workload("w", ("append", "batch", "roll", "retain", "trim", "reopen")), path, truth)
    kinds = {op.kind for op in fs.ops}
    assert {"create", "write", "truncate", "fsync", "fsync_dir", "rename", "unlink",
            "mark"} <= kinds
    # Crash after the last call with everything persisted == the tree on disk, byte for byte.
    last = list(crash_states(fs.base, fs.ops, points=range(len(fs.ops) - 1, len(fs.ops))))
    full = [s for s in last if s.choice == "everything issued reached the disk"]
    assert len(full) == 1
    disk = read_tree(root)
    assert full[0].files == disk


def test_enumerator_drops_unsynced_data_and_names() -> None:
    root = scratch_dir()
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        fd = _io.open_file(os.path.join(root, "f"), os.O_WRONLY | os.O_CREAT)
        _io.write(fd, b"x" * 8)
        _io.fsync(fd)
        _io.write(fd, b"y" * 8)
        _io.close(fd)
    states = list(crash_states(fs.base, fs.ops))
    images = {s.files.get("f") for s in states}
    # the name was never made durable: the file may be missing; its data may be torn
    assert None in images
    assert b"x" * 8 in images and b"x" * 8 + b"y" * 8 in images
    assert b"x" * 8 + b"y" * 4 in images  # cut
    assert b"x" * 8 + bytes(8) in images  # zeros
    with _io.use_backend(fs):
        _io.fsync_dir(root)
        fd = _io.open_file(os.path.join(root, "f"), os.O_WRONLY)
        _io.fsync(fd)
        _io.close(fd)
    after = list(crash_states(fs.base, fs.ops, points=range(len(fs.ops) - 1, len(fs.ops))))
    assert [s.files for s in after] == [{"f": b"x" * 8 + b"y" * 8}]


def test_rename_is_atomic_and_unlink_needs_a_directory_sync() -> None:
    root = scratch_dir()
    with open(os.path.join(root, "old"), "wb") as f:
        f.write(b"old")
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        _io.write_atomic(os.path.join(root, "ck"), b"new")
        _io.unlink(os.path.join(root, "old"))
    seen = {(s.files.get("ck"), "old" in s.files) for s in crash_states(fs.base, fs.ops)}
    assert (b"new", True) in seen and (b"new", False) in seen
    assert all(ck in (None, b"new") for ck, _ in seen)  # never a torn checkpoint
    assert [op.kind for op in fs.ops if op.kind != "mark"] == [
        "create", "write", "fsync", "rename", "fsync_dir", "unlink"]
    assert isinstance(fs.ops[0], Op)


def test_a_crash_state_is_checked_end_to_end() -> None:
    """One small workload, fully explored, as a fast smoke test of the whole pipeline."""
    result = explore(Workload("append+roll+append", ("append", "roll", "append")))
    assert result.states > 50
    assert result.violations == []


@pytest.mark.slow
def test_every_workload_of_up_to_three_operations() -> None:
    workloads = ace_workloads(3)
    # 20 combinations a crash point (every one when there are at most 20, else the extremes,
    # each choice alone and a sample): 36,612 states; 32 gave 46,097 at a quarter more time
    result = explore_many(workloads, max_per_point=20)
    print(f"\ncrash explorer: {result.workloads} workloads, {result.ops} recorded calls, "
          f"{result.states} crash states, {len(result.violations)} violations")
    assert result.violations == []
    assert result.states >= MIN_STATES


@pytest.mark.slow
def test_longer_random_workloads() -> None:
    result = explore_many(random_workloads(count=4, length=10), max_per_point=12)
    print(f"\nrandom workloads: {result.states} crash states")
    assert result.violations == []
    assert result.states > 1_000


def test_transactions_in_a_workload() -> None:
    """Committed and aborted transactions among plain appends (markers take offsets, a
    committed record is acknowledged, nothing stays open)."""
    ops = ("txn", "append", "txn", "txn")
    result = explore(Workload("txn+append+txn+txn", ops), max_per_point=6)
    assert result.violations == []
    assert result.states > 100


def test_created_topic_survives_once_acknowledged() -> None:
    result = explore(Workload("create", ("create", "append")), max_per_point=16)
    assert result.violations == []
    assert result.states > 20


def test_explorer_reports_a_real_loss() -> None:
    """Sanity of the reporting path: a state whose acked record is gone is reported."""
    from .checker import Promises, check_state

    root = scratch_dir()
    path = os.path.join(root, "log")
    truth = setup(path)
    promises = Promises.from_truth(truth)
    promises.acked[("t", 0)].add(99)
    assert any("acknowledged record 99 lost" in p for p in check_state(path, truth, promises))
    with embedlog.open(path, upkeep=False) as log:
        assert log.end_offset("t", 0) == 5
