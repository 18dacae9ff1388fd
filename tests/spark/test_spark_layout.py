"""Planning from the sealed-segment manifest (embedlog.spark.layout): the same bounds, segments
and tasks as from the folder listing, whatever the writer did since the manifest was written,
and a damaged manifest is passed over."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.manifest import MANIFEST
from embedlog.spark import layout
from embedlog.spark.catalog import FolderView
from embedlog.spark.options import parse_read_options
from embedlog.spark.planning import plan_batch

TOPIC = "t"
Snapshot = dict[int, tuple[int, int, list[tuple[int, int]]]]


def snapshot(path: str, partitions: int) -> Snapshot:
    view = FolderView(path)
    out = {}
    for p in range(partitions):
        b = view.bounds(TOPIC, p)
        out[p] = (b.start, b.end, [(s.base_offset, s.size) for s in b.segments])
    return out


def plan(path: str, **options: str) -> list[list[tuple[str, int, int, int, int]]]:
    opts = parse_read_options({"path": path, "subscribe": TOPIC, **options}, streaming=False)
    return [[(r.topic, r.partition, r.start, r.end, r.size_bytes) for r in task]
            for task in plan_batch(FolderView(path), opts)]


def log_bounds(path: str, partitions: int) -> dict[int, tuple[int, int]]:
    with embedlog.open(path, read_only=True) as log:
        return {p: (log.start_offset(TOPIC, p), log.end_offset(TOPIC, p))
                for p in range(partitions)}


@pytest.fixture
def no_manifest(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A switch: inside ``with no_manifest():`` planning never reads a manifest (the listing
    and one lstat per sealed segment, the way a Kafka folder is planned)."""
    import contextlib

    @contextlib.contextmanager
    def switch() -> Iterator[None]:
        with monkeypatch.context() as m:
            m.setattr(layout, "read_sealed", lambda folder: None)
            m.setattr(layout, "stamp", lambda folder: None)  # nothing remembered either
            yield

    yield switch


_LISTINGS = [0]


@pytest.fixture(autouse=True)
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count the partition folders planning lists (in ``_LISTINGS``)."""
    listing = layout.log_names
    _LISTINGS[0] = 0

    def log_names(directory: str) -> list[str] | None:
        _LISTINGS[0] += 1
        return listing(directory)

    monkeypatch.setattr(layout, "log_names", log_names)


# -- identical with and without the manifest ---------------------------------------------------

Step = tuple[str, int, int]  # (what, partition, amount)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 30)),
        st.tuples(st.just("roll"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("delete"), st.integers(0, 2), st.integers(0, 100)),
    ),
    max_size=25,
)


def apply(log: embedlog.Log, step: Step) -> None:
    what, p, n = step
    if what == "append":
        log.append_batch(TOPIC, [b"v" * 40] * n, partition=p)
    elif what == "roll":
        log.roll(TOPIC, p)
    else:
        log.delete_records(TOPIC, p, min(n, log.end_offset(TOPIC, p)))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps, segment_bytes=st.sampled_from([300, 1000, 1 << 20]),
       stale_at=st.none() | st.integers(0, 25), seen_at=st.none() | st.integers(0, 25))
def test_plans_are_the_same_with_and_without_the_manifest(
        tmp_path_factory: pytest.TempPathFactory, no_manifest: Any, history: list[Step],
        segment_bytes: int, stale_at: int | None, seen_at: int | None) -> None:
    """Any history of appends, rolls and deletions; with ``stale_at`` the manifests are put back
    as they were after that many steps (a writer that crashed before rewriting them, or one
    that keeps none); with ``seen_at`` a query planned the folder after that many steps (what
    it saw is remembered for the next query)."""
    path = str(tmp_path_factory.mktemp("log") / "log")
    kept: dict[str, bytes] = {}
    with embedlog.open(path) as log:
        log.create_topic(TOPIC, partitions=3, config={"segment.bytes": segment_bytes})
        for i, step in enumerate(history):
            if i == stale_at:
                kept = manifests(path, 3)
            if i == seen_at:
                snapshot(path, 3)
            apply(log, step)
    for name, data in kept.items():
        with open(name, "wb") as f:
            f.write(data)
    with_manifest = snapshot(path, 3), plan(path), plan(path, maxBytesPerPartition="700")
    with no_manifest():
        without = snapshot(path, 3), plan(path), plan(path, maxBytesPerPartition="700")
    assert with_manifest == without
    if not kept:
        assert {p: b[:2] for p, b in with_manifest[0].items()} == log_bounds(path, 3)


def manifests(path: str, partitions: int) -> dict[str, bytes]:
    out = {}
    for p in range(partitions):
        name = os.path.join(path, f"{TOPIC}-{p}", MANIFEST)
        if os.path.exists(name):
            with open(name, "rb") as f:
                out[name] = f.read()
    return out


def test_ten_segments_are_planned_without_a_listing(tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic(TOPIC, partitions=2)
        for p in range(2):
            for _ in range(10):
                log.append_batch(TOPIC, [b"r" * 50] * 10, partition=p)
                log.roll(TOPIC, p)
            log.append_batch(TOPIC, [b"r"] * 3, partition=p)  # a non-empty active segment
    got = snapshot(path, 2)
    assert _LISTINGS[0] == 0
    assert got[1][:2] == (0, 103) and len(got[1][2]) == 11
    assert {p: b[:2] for p, b in got.items()} == log_bounds(path, 2)


# -- a stale manifest ---------------------------------------------------------------------------


@pytest.fixture
def stale(tmp_path: Any) -> tuple[str, bytes]:
    """A log of one partition in 6 sealed segments of 10 records and an active one of 4, and
    its manifest's bytes as they are now."""
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic(TOPIC, partitions=1, config={"retention.bytes": -1})
        for _ in range(6):
            log.append_batch(TOPIC, [b"s" * 50] * 10, partition=0)
            log.roll(TOPIC, 0)
        log.append_batch(TOPIC, [b"s" * 50] * 4, partition=0)
    with open(os.path.join(path, f"{TOPIC}-0", MANIFEST), "rb") as f:
        return path, f.read()


def put_back(path: str, manifest: bytes) -> None:
    """The manifest as it was: what a crash between a folder change and the manifest's
    rewrite leaves, or a writer that keeps no manifest (Kafka) working on the folder."""
    with open(os.path.join(path, f"{TOPIC}-0", MANIFEST), "wb") as f:
        f.write(manifest)


def check(path: str, no_manifest: Any, start: int, end: int, *, sizes: bool = True) -> int:
    """Planning gives ``[start, end)``, and the same segments and tasks as the listing (with
    ``sizes=False`` the same offsets: sizes from a damaged manifest only weigh tasks). Returns
    how often the first look listed the folder."""
    listed_before = _LISTINGS[0]
    got = snapshot(path, 1), plan(path), plan(path, maxBytesPerPartition="700")
    listings = _LISTINGS[0] - listed_before
    with no_manifest():
        listed = snapshot(path, 1), plan(path), plan(path, maxBytesPerPartition="700")
    assert got[0][0][:2] == (start, end)
    if sizes:
        assert got == listed
    else:
        assert [b for b, _ in got[0][0][2]] == [b for b, _ in listed[0][0][2]]
        assert got[1][0][0][:4] == listed[1][0][0][:4]
    assert [[r[:4] for r in task] for task in got[1]] == [[(TOPIC, 0, start, end)]]
    return listings


def test_records_appended_after_the_manifest(stale: tuple[str, bytes], no_manifest: Any
                                             ) -> None:
    path, old = stale
    with embedlog.open(path) as log:
        log.append_batch(TOPIC, [b"a"] * 7, partition=0)
    put_back(path, old)
    assert check(path, no_manifest, 0, 71) == 0  # appends leave the manifest true


@pytest.mark.parametrize("rolls", [1, 2])
def test_segments_rolled_after_the_manifest(stale: tuple[str, bytes], no_manifest: Any,
                                            rolls: int) -> None:
    path, old = stale
    with embedlog.open(path) as log:
        for _ in range(rolls):
            log.roll(TOPIC, 0)
            log.append_batch(TOPIC, [b"a"] * 5, partition=0)
    put_back(path, old)
    # the roll is seen: the partition is listed (once per query of the three)
    assert check(path, no_manifest, 0, 64 + 5 * rolls) == 3


def test_an_empty_segment_rolled_to_after_the_manifest(stale: tuple[str, bytes],
                                                       no_manifest: Any) -> None:
    path, old = stale
    with embedlog.open(path) as log:
        log.roll(TOPIC, 0)  # the new active segment holds nothing yet
    put_back(path, old)
    check(path, no_manifest, 0, 64)


def test_segments_deleted_by_retention_after_the_manifest(
        stale: tuple[str, bytes], no_manifest: Any) -> None:
    path, old = stale
    with embedlog.open(path) as log:
        log.alter_topic(TOPIC, {"retention.bytes": 1500})
        assert log.enforce_retention() > 0
        first = log.segments(TOPIC, 0)[0].base_offset
    put_back(path, old)
    os.unlink(os.path.join(path, "log-start-offset-checkpoint"))  # not written yet
    assert check(path, no_manifest, first, 64) == 3


def test_delete_records_after_the_manifest(stale: tuple[str, bytes], no_manifest: Any) -> None:
    path, old = stale
    with embedlog.open(path) as log:
        log.delete_records(TOPIC, 0, 35)  # three segments go, the log starts in the fourth
    put_back(path, old)
    check(path, no_manifest, 35, 64)


def test_a_last_sealed_segment_compacted_short_of_the_next_base(
        stale: tuple[str, bytes], tmp_path: Any, no_manifest: Any) -> None:
    """Compaction may drop the last batches of a sealed segment: its end offset then falls
    short of the next segment's base, and only the listing finds the active segment."""
    path, old = stale
    scratch = str(tmp_path / "scratch")
    with embedlog.open(scratch) as log:
        log.create_topic(TOPIC, partitions=1)
        log.append_batch(TOPIC, [b"c" * 50] * 5, partition=0)
    with open(os.path.join(scratch, f"{TOPIC}-0", f"{0:020d}.log"), "rb") as f:
        batch = bytearray(f.read())
    batch[0:8] = (50).to_bytes(8, "big")  # offsets 50..54 (the base offset is outside the CRC)
    with open(os.path.join(path, f"{TOPIC}-0", f"{50:020d}.log"), "wb") as f:
        f.write(batch)  # what is left of the last sealed segment [50, 60)
    lines = [f"50 {len(batch)}" if line.startswith("50 ") else line
             for line in old.decode().splitlines()]
    put_back(path, ("\n".join(lines) + "\n").encode())
    assert check(path, no_manifest, 0, 64) == 1  # then remembered: the manifest did not change


# -- a damaged manifest -------------------------------------------------------------------------


@pytest.mark.parametrize("damage", [  # each one of the three ways below passes over
    b"",
    b"embedlog-segments 1\n0 10\n10\n",
    b"embedlog-segments 2\n0 631\n",
    b"embedlog-segments 1\n0 99999999999999999999\n",
    b"embedlog-segments 1\n10 631\n20 631\n",  # the first sealed segment missing
    b"embedlog-segments 1\n0 1\n10 1\n20 1\n30 1\n40 1\n50 1\n",  # sizes that do not match
    b"embedlog-segments 1\n" + b"0 631\n" * 500_000,  # far larger than 6 entries justify
    b"\xff\xfe garbage",
])
def test_a_damaged_manifest_falls_back_to_the_listing(
        stale: tuple[str, bytes], no_manifest: Any, damage: bytes) -> None:
    path, _ = stale
    put_back(path, damage)
    sizes = not damage.endswith(b"50 1\n")  # only weigh tasks: not checked against the files
    check(path, no_manifest, 0, 64, sizes=sizes)


@pytest.mark.parametrize("kind", ["dir", "symlink", "fifo"])
def test_a_manifest_that_is_not_a_regular_file_is_passed_over(
        stale: tuple[str, bytes], no_manifest: Any, kind: str) -> None:
    path, old = stale
    manifest = os.path.join(path, f"{TOPIC}-0", MANIFEST)
    os.unlink(manifest)
    if kind == "dir":
        os.mkdir(manifest)
    elif kind == "symlink":
        target = os.path.join(path, "elsewhere")
        with open(target, "wb") as f:
            f.write(old)
        os.symlink(target, manifest)
    else:
        os.mkfifo(manifest)
    check(path, no_manifest, 0, 64)


# -- what an earlier query saw ------------------------------------------------------------------


@pytest.mark.parametrize("change", ["append", "roll", "two rolls", "retention", "nothing"])
def test_what_a_query_saw_is_checked_before_it_is_used_again(
        stale: tuple[str, bytes], no_manifest: Any, monkeypatch: pytest.MonkeyPatch,
        change: str) -> None:
    """The next query takes the segments an earlier one saw while the manifest keeps its stamp,
    after the same checks as the manifest's own word; here the stamp never moves (a writer that
    keeps no manifest took over), so only those checks stand between it and a wrong answer."""
    path, _ = stale
    monkeypatch.setattr(layout, "stamp", lambda folder: (1, 2, 3))
    assert snapshot(path, 1)[0][:2] == (0, 64)
    with embedlog.open(path) as log:
        if change == "append":
            log.append_batch(TOPIC, [b"a"] * 3, partition=0)
        elif change in ("roll", "two rolls"):
            for _ in range(1 if change == "roll" else 2):
                log.roll(TOPIC, 0)
                log.append_batch(TOPIC, [b"a"] * 3, partition=0)
        elif change == "retention":
            log.alter_topic(TOPIC, {"retention.bytes": 1500})
            assert log.enforce_retention() > 0
    if change == "retention":
        os.unlink(os.path.join(path, "log-start-offset-checkpoint"))  # not written yet
    got = snapshot(path, 1)
    with no_manifest():
        expected = snapshot(path, 1)
    assert got == expected
    assert got[0][:2] == {"append": (0, 67), "roll": (0, 67), "two rolls": (0, 70),
                          "nothing": (0, 64)}.get(change, (expected[0][0], 64))


def test_an_empty_partition_folder_is_planned_again_each_time(tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic(TOPIC, partitions=1)
        log.append_batch(TOPIC, [b"x"] * 3, partition=0)
    folder = os.path.join(path, f"{TOPIC}-0")
    saved = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            saved[name] = f.read()
        os.unlink(os.path.join(folder, name))
    with open(os.path.join(folder, MANIFEST), "wb") as f:
        f.write(b"embedlog-segments 1\n")  # a manifest, no segment
    assert snapshot(path, 1) == snapshot(path, 1) == {0: (0, 0, [])}
    for name, data in saved.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    assert snapshot(path, 1)[0][:2] == (0, 3)
