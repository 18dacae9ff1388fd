"""Drive the crash explorer: record a workload, enumerate its crash states, check each one.

:func:`explore` handles one workload in this process; :func:`explore_many` fans workloads out
over worker processes (:mod:`.parallel`) and sums the results. Each crash state is written to a
fresh folder on tmpfs, checked, and removed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from unittest import mock

from embedlog import _io

from .checker import Promises, check_state
from .crash_states import CrashState, crash_states, write_image
from .parallel import pmap
from .recording import RecordingFS
from .workloads import Truth, Workload, run, scratch_dir, setup

__all__ = ["Result", "explore", "explore_many", "safety_off"]


@dataclass
class Result:
    workloads: int = 0
    ops: int = 0
    states: int = 0  # distinct (image, promises) pairs checked
    repeats: int = 0  # crash states already checked, with the same promises, in this process
    violations: list[str] = field(default_factory=list)

    def merge(self, other: Result) -> None:
        self.workloads += other.workloads
        self.ops += other.ops
        self.states += other.states
        self.repeats += other.repeats
        self.violations += other.violations


# Workloads share prefixes (every one starts by opening the same log), so many of their crash
# states coincide: within a group of workloads (see explore_many), a state already checked under
# the same promises and records is not checked again.
_checked: set[tuple[bytes, str]] = set()


@contextlib.contextmanager
def safety_off(switch: str | None) -> Iterator[None]:
    """Switch one of ``_io.SAFETY``'s durability steps off (mutation testing of the checker)."""
    if switch is None:
        yield
        return
    assert hasattr(_io.SAFETY, switch), switch
    setattr(_io.SAFETY, switch, False)
    try:
        yield
    finally:
        setattr(_io.SAFETY, switch, True)


def explore(
    workload: Workload,
    *,
    max_per_point: int = 32,
    safety: str | None = None,
    stop_at_first: bool = False,
    fresh: bool = True,
) -> Result:
    """Record ``workload`` (optionally with one safety step off) and check every crash state
    (``fresh=False``: skip states this process already checked for earlier workloads).

    The switch stays off while the crash states are checked too: some steps (CRC checks, tail
    truncation) belong to recovery itself.
    """
    logging.getLogger("embedlog").setLevel(logging.CRITICAL)  # recovery warnings are expected
    if fresh:
        _checked.clear()
    root = scratch_dir()
    result = Result(workloads=1)
    try:
        with _fixed_topic_ids():
            _record_and_check(workload, root, safety, result, max_per_point, stop_at_first)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result


@contextlib.contextmanager
def _fixed_topic_ids() -> Iterator[None]:
    """Topic ids (random UUIDs otherwise) from a counter restarted for each workload: the same
    steps then leave the same bytes, so a crash state that several workloads reach is checked
    once, as :func:`explore_many` intends."""
    ids = itertools.count(1)
    with mock.patch.object(uuid, "uuid4", lambda: uuid.UUID(int=next(ids))):
        yield


def _record_and_check(workload: Workload, root: str, safety: str | None, result: Result,
                      max_per_point: int, stop_at_first: bool) -> None:
    path = os.path.join(root, "log")
    truth = setup(path, topics=workload.topics)
    fs = RecordingFS(root)
    with safety_off(safety):
        with _io.use_backend(fs):
            run(workload, path, truth)
        result.ops = len(fs.ops)
        _check_trace(workload, fs, truth, result, max_per_point, stop_at_first)


def _check_trace(workload: Workload, fs: RecordingFS, truth: Truth, result: Result,
                 max_per_point: int, stop_at_first: bool) -> None:
    promises = Promises.from_truth(_truth_before(truth, fs))
    folded = 0
    seed = zlib.crc32(workload.name.encode())
    for state in crash_states(fs.base, fs.ops, max_per_point=max_per_point, seed=seed):
        while folded <= state.point:
            op = fs.ops[folded]
            if op.kind == "mark":
                promises.fold(op.info)
            folded += 1
        key = (state.digest, promises.key(truth))
        if key in _checked:
            result.repeats += 1
            continue
        _checked.add(key)
        result.states += 1
        found = _check(state, fs.root, truth, promises)
        if found:
            result.violations.append(
                f"[{workload.name}] crash after op {state.point} ({fs.ops[state.point]}); "
                f"{state.choice}: " + " | ".join(found)
            )
            if stop_at_first:
                return


def _truth_before(truth: Truth, fs: RecordingFS) -> Truth:
    """The records that existed before recording began (the setup's, all acknowledged): not
    those the trace attempts (an aborted transaction's never gets acknowledged)."""
    acked_later = {
        (op.info["topic"], op.info["partition"], o)
        for op in fs.ops
        if op.kind == "mark" and op.info["kind"] in ("ack", "attempt")
        for o in op.info["offsets"]
    }
    created = {op.info["topic"] for op in fs.ops
               if op.kind == "mark" and op.info["kind"] == "ack_topic"}
    before = Truth(partitions={t: n for t, n in truth.partitions.items() if t not in created})
    for (t, p), recs in truth.records.items():
        for o, rec in recs.items():
            if (t, p, o) not in acked_later:
                before.add(t, p, o, rec)
    return before


def _check(state: CrashState, root: str, truth: Truth, promises: Promises) -> list[str]:
    target = f"{root}-state-{state.point}"
    os.mkdir(target)
    try:
        write_image(state, target)
        return check_state(os.path.join(target, "log"), truth, promises)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _worker(args: tuple[list[Workload], int, str | None, bool]) -> Result:
    group, cap, safety, stop = args
    _checked.clear()
    total = Result()
    for workload in group:
        total.merge(explore(workload, max_per_point=cap, safety=safety, stop_at_first=stop,
                            fresh=False))
        if stop and total.violations:
            break
    return total


def explore_many(
    workloads: Sequence[Workload],
    *,
    max_per_point: int = 32,
    safety: str | None = None,
    stop_at_first: bool = False,
) -> Result:
    """Explore every workload in worker processes and sum the results; with ``stop_at_first``,
    stop once one fails.

    Workloads are grouped by their first operation, one group per job, and repeated states are
    skipped within a group: the counts do not depend on how many workers run.
    """
    groups: dict[str, list[Workload]] = {}
    for w in workloads:
        groups.setdefault(w.ops[0] if w.ops else "", []).append(w)
    jobs = [(g, max_per_point, safety, stop_at_first) for g in groups.values()]
    total = Result()
    for res in pmap(_worker, jobs, stop=(lambda r: bool(r.violations)) if stop_at_first else None):
        total.merge(res)
    return total
