"""I/O error injection (issue 7, item 6; reliability.md section 2.7 and G10).

SQLite's loop: run a workload with EIO or ENOSPC injected at the N-th mutating call, for
N = 1, 2, ... until the workload no longer reaches N; once (*transient*) and from then on
(*persistent*). For every run:

* the injected error reaches the caller as an embedlog error -- nothing swallows it;
* after it, the log refuses further appends until it is reopened (Linux may have dropped the
  dirty pages a retried fsync would claim to have written: PostgreSQL's "fsyncgate");
* reopened without faults, the log passes the crash checker: every acknowledged record is
  there and intact, the log start and committed offsets never went back, and it takes appends.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
from dataclasses import dataclass, field

import pytest

import embedlog
from doubles import Injected, Rule, ScriptedFS
from embedlog import _io

from .checker import Promises, check_state
from .parallel import pmap
from .workloads import Session, Truth, scratch_dir, setup

ERRNOS = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}
WORKLOAD = ("append", "batch", "roll", "append", "retain", "trim", "commit", "compact",
            "append", "reopen", "append")


@dataclass
class Outcome:
    reached: bool  # the workload got as far as the N-th mutating call
    problems: list[str] = field(default_factory=list)


def _run_ops(s: Session, done: list[str] | None = None) -> None:
    for op in WORKLOAD:
        if done is not None:
            done.append(op)
        getattr(s, op)()


def run_one(fail_at: int, code: int, persistent: bool) -> Outcome:
    logging.getLogger("embedlog").setLevel(logging.CRITICAL)
    root = scratch_dir()
    path = os.path.join(root, "log")
    where = f"{os.strerror(code)} {'from' if persistent else 'at'} call {fail_at}"
    try:
        truth = setup(path)
        before = Promises.from_truth(truth)
        fs = ScriptedFS()
        fault = fs.fail(nth=fail_at, persistent=persistent, code=code)
        error: BaseException | None = None
        session: Session | None = None
        problems: list[str] = []
        ops: list[str] = []
        with _io.use_backend(fs):
            try:
                session = Session(path, truth, random.Random(fail_at))
                _run_ops(session, ops)
            except BaseException as exc:
                error = exc
            # A group commit writes the group's own files, not the log's: appends stay safe.
            touched_log = not ops or ops[-1] != "commit"
            if error is not None and touched_log and session is not None and (
                    not session.log.closed):
                problems += _refuses_appends(session, fault, where)
            if session is not None:
                try:
                    session.log.close()
                except BaseException as exc:
                    error = error or exc
        if not fault.fired:
            return Outcome(False)
        if error is None:
            problems.append(f"{where}: the injected error was swallowed")
        elif not isinstance(error, embedlog.EmbedlogError):
            problems.append(f"{where}: foreign {type(error).__name__}: {error}")
        promises = before.copy()
        for info in fs.marks:
            promises.fold(info)
        problems += [f"{where}: {p}" for p in check_state(path, truth, promises)]
        return Outcome(True, problems)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _refuses_appends(session: Session, fault: Rule, where: str) -> list[str]:
    """After an I/O error the log must not acknowledge anything until it is reopened."""
    fault.disarm()  # the disk works again: refusing is the log's own decision
    try:
        session.log.append("t", b"after-error", key=b"x", partition=0)
    except embedlog.EmbedlogError:
        return []
    except BaseException as exc:
        return [f"{where}: append after the error raised foreign {type(exc).__name__}"]
    return [f"{where}: an append was acknowledged after an I/O error, without a reopen"]


def _sweep(args: tuple[str, bool]) -> tuple[int, list[str]]:
    name, persistent = args
    runs, problems = 0, list[str]()
    n = 1
    while True:
        outcome = run_one(n, ERRNOS[name], persistent)
        if not outcome.reached:
            return runs, problems
        runs += 1
        problems += outcome.problems
        n += 1


def test_io_error_at_every_call() -> None:
    jobs = [(name, persistent) for name in ERRNOS for persistent in (False, True)]
    runs, problems = 0, []
    for r, p in pmap(_sweep, jobs):
        runs += r
        problems += p
    print(f"\nI/O error injection: {runs} runs")
    assert problems[:20] == []
    assert runs > 100


def test_truth_is_complete() -> None:
    """The workload itself (no faults) passes the checker, so every finding above is real."""
    root = scratch_dir()
    path = os.path.join(root, "log")
    truth: Truth = setup(path)
    promises = Promises.from_truth(truth)
    fs = ScriptedFS()  # no faults
    with _io.use_backend(fs):
        s = Session(path, truth, random.Random(0))
        _run_ops(s)
        s.close()
    for info in fs.marks:
        promises.fold(info)
    assert check_state(path, truth, promises) == []
    assert fs.mutations > 50
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("code", sorted(ERRNOS))
def test_failed_fsync_poisons_until_reopen(code: str) -> None:
    root = scratch_dir()
    path = os.path.join(root, "log")
    setup(path)

    fs = ScriptedFS()
    fs.fail("fsync", persistent=True, code=ERRNOS[code])
    log = embedlog.open(path, durability="fsync", upkeep=False)
    with _io.use_backend(fs), pytest.raises(Injected) as failed:
        log.append("t", b"v", key=b"k")
    assert failed.value.errno == ERRNOS[code]
    with pytest.raises(embedlog.LogPoisonedError):
        log.append("t", b"w", key=b"k")
    log.close()
    with embedlog.open(path, durability="fsync", upkeep=False) as again:
        assert again.append("t", b"x", key=b"k").offset >= 5
    shutil.rmtree(root, ignore_errors=True)
