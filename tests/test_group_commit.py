"""Group commit of ``append()`` in ``fsync`` mode: appends queued while an fsync runs are written
by one leader and share the next fsync, and appenders an fsync covers return without waiting for
the next one."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Callable

import embedlog
from doubles import Call, ScriptedFS
from embedlog import _io
from embedlog.group_commit import GroupCommit

WAIT = 30.0  # generous bound for a thread to reach a point it must reach (a hang guard only)


def _waiting(gc: GroupCommit, n: int) -> bool:
    """Whether ``n`` threads are parked in ``sync`` behind the fsync in flight."""
    with gc._mutex:
        return len(gc._sync_parked) >= n


def _until(check: Callable[[], bool]) -> None:
    gate = threading.Event()
    for _ in range(int(WAIT / 0.005)):
        if check():
            return
        gate.wait(0.005)
    raise AssertionError("a thread never reached the expected point")


def test_covered_follower_returns_while_the_next_fsync_runs() -> None:
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    flushes: list[int] = []

    def flush() -> None:
        n = len(flushes)
        flushes.append(n)
        started[n].set()
        assert release[n].wait(WAIT)

    gc = GroupCommit(flush, lambda entries: (0, gc.written))
    gc.written = 2  # appends 1 and 2 written: the first fsync covers both
    leader = threading.Thread(target=gc.sync, args=(1,))
    leader.start()
    assert started[0].wait(WAIT)
    covered = threading.Thread(target=gc.sync, args=(2,))
    covered.start()
    gc.written = 3  # append 3 written after the fsync started: it needs the next one
    late = threading.Thread(target=gc.sync, args=(3,))
    late.start()
    _until(lambda: _waiting(gc, 2))
    release[0].set()
    assert started[1].wait(WAIT)  # the late appender leads the second fsync ...
    covered.join(WAIT)
    assert not covered.is_alive()  # ... and the covered one returned while it is held
    assert gc.synced == 2
    release[1].set()
    for t in (leader, late):
        t.join(WAIT)
        assert not t.is_alive()
    assert flushes == [0, 1]
    assert gc.synced == 3


def test_append_threads_share_one_fsync(log_dir: pathlib.Path) -> None:
    threads = 8
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        p = log._topic("t").partitions[0]
        fs = ScriptedFS()
        held, release = threading.Event(), threading.Event()

        def hold(call: Call) -> None:
            if not held.is_set():
                held.set()
                assert release.wait(WAIT)

        fs.before("fsync", hold, match=lambda c: (c.path or "").endswith(".log"))
        errors: list[BaseException] = []
        results: list[int] = []

        def append(i: int) -> None:
            try:
                results.append(log.append("t", b"v%d" % i).offset)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        with _io.use_backend(fs):
            first = threading.Thread(target=append, args=(0,))
            first.start()
            assert held.wait(WAIT)
            rest = [threading.Thread(target=append, args=(i,)) for i in range(1, threads)]
            for t in rest:
                t.start()
            # Every other append is queued while the first fsync is held (none writes while an
            # fsync runs); the next leader appends all seven, then fsyncs once.
            _until(lambda: p._commit.parked >= threads - 1)
            assert p._commit.written == 1
            release.set()
            for t in [first, *rest]:
                t.join(WAIT)
                assert not t.is_alive()
        assert errors == []
        assert sorted(results) == list(range(threads))
        # One fsync for the first append, one for the seven written while it ran.
        assert fs.count("fsync", suffix=".log") == 2
        values = sorted(r.value or b"" for r in log.read("t", 0))
        assert values == sorted(b"v%d" % i for i in range(threads))


def test_a_failed_fsync_fails_every_append_of_its_round(log_dir: pathlib.Path) -> None:
    """No append of the round returns as durable when its fsync failed; the log is poisoned
    and the records written before stay readable after a reopen."""
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        log.append("t", b"before")
        fs = ScriptedFS()
        fs.fail("fsync", persistent=True)
        outcomes: list[str] = []

        def append(i: int) -> None:
            try:
                log.append("t", b"v%d" % i)
                outcomes.append("acknowledged")
            except embedlog.EmbedlogError as exc:
                outcomes.append(type(exc).__name__)

        with _io.use_backend(fs):
            ts = [threading.Thread(target=append, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(WAIT)
                assert not t.is_alive()
        assert len(outcomes) == 4 and "acknowledged" not in outcomes
    with embedlog.open(log_dir, durability="fsync") as log:
        assert [r.value for r in log.read("t", 0)][:1] == [b"before"]
