"""A partition left as its last clean close fsynced it costs no fsync to open and close again
(``Segment.pristine``), and skipping them loses nothing: every state a power loss could leave
after such a session, or after a session of ``durability="none"`` appends, keeps every record
once the close returned."""

from __future__ import annotations

import functools
import os

import embedlog
from embedlog import _io

from .crash_states import check_image, crash_states
from .recording import RecordingFS
from .workloads import scratch_dir

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
PARTITIONS = 2


def _setup(path: str) -> dict[int, list[bytes]]:
    """A log of two partitions with two records each, closed cleanly."""
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", PARTITIONS)
        for p in range(PARTITIONS):
            for i in range(2):
                log.append("t", b"setup-%d-%d" % (p, i), partition=p)
    return {p: [b"setup-%d-%d" % (p, i) for i in range(2)] for p in range(PARTITIONS)}


def _record(root: str, session: str) -> tuple[RecordingFS, dict[int, list[bytes]]]:
    """Record one session on the set-up log: ``idle`` opens and closes it; ``none`` appends to
    partition 0 with ``durability="none"`` (partition 1 stays idle) and closes it."""
    path = os.path.join(root, "log")
    want = _setup(path)
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        log = embedlog.open(path, durability="fsync" if session == "idle" else "none",
                            upkeep=False)
        if session == "none":
            for i in range(3):
                # an old timestamp: no time-index entry, so only the append marks the change
                log.append("t", b"none-%d" % i, partition=0, timestamp=1)
                want[0].append(b"none-%d" % i)
        log.close()
    return fs, want


def _records(path: str) -> dict[int, list[bytes]]:
    with embedlog.open(path, upkeep=False) as log:
        return {p: [r.value or b"" for r in log.read("t", p, 0)]
                for p in range(PARTITIONS)}


def _segment_fsyncs(fs: RecordingFS) -> list[str]:
    return [op.path for op in fs.ops
            if op.kind == "fsync" and op.path.endswith(SEGMENT_SUFFIXES)]


def test_an_idle_session_fsyncs_no_segment_file() -> None:
    fs, _ = _record(scratch_dir(), "idle")
    assert _segment_fsyncs(fs) == []
    assert any(op.kind == "fsync" for op in fs.ops)  # the checkpoints and the clean marker


def test_a_written_partition_is_fsynced_at_close_and_the_idle_ones_are_not() -> None:
    """The written partition's log and both indexes (the seal: a clean open trusts them)."""
    fs, _ = _record(scratch_dir(), "none")
    fsynced = {(os.path.basename(os.path.dirname(p)), os.path.splitext(p)[1])
               for p in _segment_fsyncs(fs)}
    assert fsynced == {("t-0", suffix) for suffix in SEGMENT_SUFFIXES}


def test_a_log_fsynced_since_its_last_append_is_not_fsynced_again() -> None:
    """A durable session's appends each fsync the log; sealing it at close does not fsync it
    again (only the indexes), and a ``durability="none"`` session's log is fsynced once."""
    root = scratch_dir()
    path = os.path.join(root, "log")
    _setup(path)
    fs = RecordingFS(root)
    with _io.use_backend(fs):
        with embedlog.open(path, durability="fsync", upkeep=False) as log:
            for i in range(3):
                log.append("t", b"durable-%d" % i, partition=0, timestamp=1)
            log.flush()
            durable = len([p for p in _segment_fsyncs(fs) if p.endswith(".log")])
        closed = [p for p in _segment_fsyncs(fs)][durable:]
    assert durable == 3
    assert sorted(os.path.splitext(p)[1] for p in closed) == [".index", ".timeindex"]
    fs, _ = _record(scratch_dir(), "none")
    assert len([p for p in _segment_fsyncs(fs) if p.endswith(".log")]) == 1


def _problems(path: str, want: dict[int, list[bytes]], complete: bool) -> list[str]:
    """``complete``: every record must be there; else (before the close returned, appends of
    durability "none" may be lost) the set-up records and a prefix of the rest."""
    got = _records(path)
    if complete:
        return [] if got == want else [f"{got} != {want}"]
    return [f"{got}" for p in range(PARTITIONS)
            if got[p] != want[p][: len(got[p])] or len(got[p]) < 2]


def _every_state_keeps(session: str, *, points: str) -> int:
    root = scratch_dir()
    fs, want = _record(root, session)
    last = len(fs.ops)
    complete = points == "after close"
    wanted = range(last - 1, last) if complete else range(last)
    checked = 0
    for n, state in enumerate(crash_states(fs.base, fs.ops, points=wanted, max_per_point=8)):
        found = check_image(state, os.path.join(root, f"state-{n}"),
                            functools.partial(_problems, want=want, complete=complete))
        assert found == [], state.choice
        checked += 1
    return checked


def test_every_crash_state_of_an_idle_session_keeps_every_record() -> None:
    assert _every_state_keeps("idle", points="every op") > 1


def test_records_of_a_none_durability_session_survive_its_clean_close() -> None:
    assert _every_state_keeps("none", points="after close") > 1
