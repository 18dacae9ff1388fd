"""A read-only view never returns a sealed segment's records short: a sealed segment cut at a
batch boundary (inside it, or to 0 bytes) or missing entirely is damage in a view as it is in a
writer open (``embedlog.segments`` knows its size), while the gaps compaction leaves and a
writer compacting and deleting segments under the view are never taken for damage."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator

import pytest

import embedlog
from embedlog import view_tail
from embedlog.segment.segment import Segment
from helpers import writer_open

from .workloads import scratch_dir

PER_SEGMENT = 10  # batches of one record each per sealed segment
SEGMENTS = 4  # sealed segments, then an active one


def build(*, compact: bool = False) -> pathlib.Path:
    """Sealed segments of PER_SEGMENT one-record batches each (0-9, 10-19, ...), then an active
    segment holding one batch; closed cleanly. With ``compact`` the last record of every
    segment has a key written again later (so the cleaner leaves a gap at the end of every
    sealed segment but the last), and segments are too large to be merged."""
    path = pathlib.Path(scratch_dir()) / "log"
    config = {"cleanup.policy": "compact", "segment.bytes": 1000} if compact else {}
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", config=config)
        for i in range(SEGMENTS * PER_SEGMENT + 1):
            if i and i % PER_SEGMENT == 0:
                log.roll("t", 0)
            last = compact and i % PER_SEGMENT == PER_SEGMENT - 1
            log.append("t", b"v%d" % i, key=b"x" if last else b"k%d" % i, partition=0)
    return path


def seg(path: pathlib.Path, base: int) -> pathlib.Path:
    return path / "t-0" / f"{base:020d}.log"


def batch_ends(data: bytes) -> list[int]:
    """Byte positions where each batch of ``data`` ends."""
    ends, pos = [], 0
    while pos < len(data):
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
        ends.append(pos)
    return ends


def cut(path: pathlib.Path, base: int, batches: int) -> None:
    """Keep only the first ``batches`` whole batches of segment ``base``."""
    file = seg(path, base)
    data = file.read_bytes()
    file.write_bytes(data[: [0, *batch_ends(data)][batches]])


def damaged_folders() -> dict[str, tuple[pathlib.Path, int]]:
    """Each damage, and the first offset it loses."""
    inside, empty, missing, last = build(), build(), build(), build()
    cut(inside, 10, 4)
    cut(empty, 10, 0)
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        seg(missing, 10).with_suffix(suffix).unlink(missing_ok=True)
    cut(last, 30, 7)  # the last sealed segment, right before the active one
    return {"inside": (inside, 14), "empty": (empty, 10), "missing": (missing, 10),
            "last": (last, 37)}


DAMAGES = ["inside", "empty", "missing", "last"]


@pytest.fixture(scope="module")
def folders() -> dict[str, tuple[pathlib.Path, int]]:
    return damaged_folders()


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_writer_open_reports_the_damage(folders: dict[str, tuple[pathlib.Path, int]],
                                          damage: str) -> None:
    """The reference: the writer's manifest check."""
    path, _ = folders[damage]
    with pytest.raises(embedlog.CorruptionError, match="sealed segment"):
        writer_open(path)


def until_damage(path: pathlib.Path, read: Callable[[embedlog.Log], Iterable[int]]
                 ) -> tuple[list[int], embedlog.CorruptionError]:
    """The offsets ``read`` gives from a view of ``path`` before it raises the damage."""
    got: list[int] = []
    with embedlog.open(path, read_only=True) as view, \
            pytest.raises(embedlog.CorruptionError, match="sealed segment") as raised:
        got.extend(read(view))
    return got, raised.value


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_full_read_of_a_view_raises_at_the_damage(
        folders: dict[str, tuple[pathlib.Path, int]], damage: str) -> None:
    path, lost = folders[damage]
    got, error = until_damage(path, lambda view: (r.offset for r in view.read("t", 0, 0)))
    assert got == list(range(lost))  # every record before the damage, none after it
    assert not isinstance(error, embedlog.StorageError)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_view_reading_from_inside_the_lost_range_raises(
        folders: dict[str, tuple[pathlib.Path, int]], damage: str) -> None:
    path, lost = folders[damage]
    with embedlog.open(path, read_only=True) as view:
        with pytest.raises(embedlog.CorruptionError, match="sealed segment"):
            list(view.read("t", 0, lost))
        with pytest.raises(embedlog.CorruptionError, match="sealed segment"):
            list(view.read("t", 0, lost, max_records=1))
        # a bounded read that ends before the damage is answered
        assert [r.offset for r in view.read("t", 0, 0, end_offset=lost)] == list(range(lost))


def polled(view: embedlog.Log) -> Iterator[int]:
    consumer = view.consumer("t", auto_offset_reset="earliest")
    for _ in range(20):
        yield from (r.offset for r in consumer.poll(0))


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_view_consumer_does_not_skip_the_lost_records(
        folders: dict[str, tuple[pathlib.Path, int]], damage: str) -> None:
    path, lost = folders[damage]
    assert until_damage(path, polled)[0] == list(range(lost))


def test_the_view_and_the_writer_name_the_same_file() -> None:
    path, _ = damaged_folders()["inside"]
    with pytest.raises(embedlog.CorruptionError) as by_writer:
        writer_open(path)
    with embedlog.open(path, read_only=True) as view, \
            pytest.raises(embedlog.CorruptionError) as by_view:
        list(view.read("t", 0, 0))
    assert by_view.value.path == by_writer.value.path == str(seg(path, 10))
    assert by_view.value.reason == by_writer.value.reason


def test_gaps_compaction_leaves_are_not_damage() -> None:
    path = build(compact=True)
    with embedlog.open(path, upkeep=False) as log:
        log.compact("t")
        expected = [(r.offset, r.value) for r in log.read("t", 0, 0)]
    bases = sorted(int(p.name[:20]) for p in (path / "t-0").glob("*.log"))
    assert bases == [i * PER_SEGMENT for i in range(SEGMENTS + 1)]
    ends = {o + 1 for o, _ in expected}
    gaps = bases[1:SEGMENTS]  # the segments before end short of them (the last one's x stays)
    assert not ends & set(gaps) and bases[SEGMENTS] in ends
    with embedlog.open(path, read_only=True) as view:
        assert [(r.offset, r.value) for r in view.read("t", 0, 0)] == expected
        for offset in range(bases[-1]):  # from inside every gap
            assert [r.offset for r in view.read("t", 0, offset)] == [
                o for o, _ in expected if o >= offset]


def test_a_manifest_that_disagrees_only_at_first_is_checked_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A discrepancy against a manifest read before the writer changed it is looked at again
    against a fresh listing and manifest; only one that stays is damage."""
    path = build(compact=True)
    with embedlog.open(path, upkeep=False) as log:
        log.compact("t")
        expected = [r.offset for r in log.read("t", 0, 0)]
    real = view_tail.read_manifest
    calls: list[int] = []
    view_tail._KNOWN.clear()

    def stale_once(directory: str) -> dict[int, int]:
        calls.append(1)
        found = real(directory)
        return {b: s + 1 for b, s in found.items()} if len(calls) == 1 else found

    monkeypatch.setattr(view_tail, "read_manifest", stale_once)
    with embedlog.open(path, read_only=True) as view:
        assert [r.offset for r in view.read("t", 0, 0)] == expected
    # the first gap: a first look and a fresh one, whose manifest serves the later gaps
    assert len(calls) == 2


def _churn(path: pathlib.Path, stop: threading.Event, rounds: list[int]) -> None:
    """The writer: appends keyed records (each round's last one under a key every round
    writes, so the cleaner leaves gaps at segment ends), rolls, compacts and deletes old
    records until told to stop."""
    with embedlog.open(path, upkeep=False) as log:
        i = 0
        while not stop.is_set():
            for j in range(8):
                key = b"x" if j == 7 else b"k%d" % (i % 40)
                log.append("t", b"v%d" % i, key=key, partition=0)
                i += 1
            log.roll("t", 0)
            log.compact("t")
            if rounds[0] % 4 == 3:
                log.delete_records("t", 0, max(0, log.end_offset("t", 0) - 48))
            rounds[0] += 1


def run_views_beside_a_compacting_writer(rounds_wanted: int) -> tuple[int, int]:
    """Views read the whole log again and again while the writer compacts and deletes; returns
    (reads, writer rounds). Any error of a view fails."""
    path = pathlib.Path(scratch_dir()) / "log"
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", config={"cleanup.policy": "compact,delete", "segment.bytes": 700})
    stop, rounds, errors = threading.Event(), [0], []
    writer = threading.Thread(target=_churn, args=(path, stop, rounds))
    writer.start()
    reads = 0
    try:
        with embedlog.open(path, read_only=True) as view:
            while rounds[0] < rounds_wanted and writer.is_alive():
                try:
                    offsets = [r.offset for r in view.read("t", 0)]
                except embedlog.OffsetOutOfRangeError:
                    continue  # retention passed the read: said, never skipped in silence
                except embedlog.EmbedlogError as exc:
                    errors.append(exc)
                    break
                assert offsets == sorted(set(offsets))
                reads += 1
    finally:
        stop.set()
        writer.join()
    assert not errors, errors
    return reads, rounds[0]


def counted_run(rounds: int) -> str:
    """:func:`run_views_beside_a_compacting_writer` with the gap checks counted: ``"reads
    rounds checks"``."""
    checks: list[int] = []
    real = view_tail.check_gap

    def counted(seg: Segment, ceiling: int) -> None:
        checks.append(1)
        real(seg, ceiling)

    view_tail.check_gap = counted
    try:
        reads, done = run_views_beside_a_compacting_writer(rounds)
    finally:
        view_tail.check_gap = real
    return f"{reads} {done} {len(checks)}"


def test_a_view_beside_a_compacting_writer_never_reports_false_damage() -> None:
    """Run in a process of its own: descriptors a view drops while they are in use stay open
    until the descriptor budget evicts them, and other tests count the open ones."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; "
            "from reliability.test_view_tail import counted_run; print(counted_run(60))")
    done = subprocess.run([sys.executable, "-c", code, tests], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    reads, rounds, checks = map(int, done.stdout.split())
    assert reads and rounds >= 60
    assert checks  # the reads met the gaps compaction leaves, and checked them


def test_a_view_whose_first_sealed_segment_is_missing_does_not_start_above_it() -> None:
    """The log start of a view is its first segment's base when the writer checkpointed none
    lower; a first sealed segment gone (not deleted by retention, which checkpoints the log
    start first) is damage, not a later log start."""
    path = build()
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        seg(path, 0).with_suffix(suffix).unlink(missing_ok=True)
    with pytest.raises(embedlog.CorruptionError, match="sealed segment 0 is missing"):
        writer_open(path)
    with embedlog.open(path, read_only=True) as view:
        with pytest.raises(embedlog.CorruptionError, match="sealed segment 0 is missing"):
            list(view.read("t", 0))
        with pytest.raises(embedlog.CorruptionError, match="sealed segment 0 is missing"):
            view.consumer("t", auto_offset_reset="earliest").poll(0)
        # reads from later offsets, which nothing was lost before, are answered
        assert [r.offset for r in view.read("t", 0, 12, max_records=2)] == [12, 13]


def test_a_view_after_retention_starts_at_the_first_segment_left() -> None:
    path = build()
    with embedlog.open(path, upkeep=False) as log:
        log.delete_records("t", 0, 15)  # segment 0 goes
        assert not seg(path, 0).exists()
    with embedlog.open(path, read_only=True) as view:
        assert [r.offset for r in view.read("t", 0)] == list(range(15, SEGMENTS * PER_SEGMENT + 1))
