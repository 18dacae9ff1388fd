"""Planning against a fake log: partition selection, offset resolution, data loss, splitting."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from embedlog.errors import (
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from embedlog.spark.options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    PartitionOffsets,
    PartitionTimestamps,
    Subscribe,
    SubscribePattern,
)
from embedlog.spark.planning import (
    OffsetRange,
    _by_segment,
    _runs,
    offset_ranges,
    resolve_offsets,
    select_partitions,
    split_ranges,
)


@dataclass(frozen=True)
class Seg:
    base_offset: int
    size: int


@dataclass
class FakePartition:
    start: int
    end: int
    segments: list[Seg]
    timestamps: dict[int, int] = field(default_factory=dict)  # offset -> ts


class FakeLog:
    """Topic "a" has 2 partitions, "b" 1; a-0 has three 1000-byte segments of 100 offsets."""

    def __init__(self) -> None:
        self.parts = {
            ("a", 0): FakePartition(
                0, 300, [Seg(0, 1000), Seg(100, 1000), Seg(200, 1000)],
                {o: 1000 + o for o in range(300)},
            ),
            ("a", 1): FakePartition(50, 60, [Seg(40, 100)], {o: 5000 for o in range(50, 60)}),
            ("b", 0): FakePartition(0, 0, [Seg(0, 0)]),
        }

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.parts})

    def partition_count(self, topic: str) -> int:
        return sum(1 for t, _ in self.parts if t == topic)

    def start_offset(self, topic: str, partition: int) -> int:
        return self.parts[(topic, partition)].start

    def end_offset(self, topic: str, partition: int) -> int:
        return self.parts[(topic, partition)].end

    def segments(self, topic: str, partition: int) -> list[Seg]:
        return self.parts[(topic, partition)].segments

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        stamps = self.parts[(topic, partition)].timestamps
        hits = [o for o, ts in sorted(stamps.items()) if ts >= timestamp_ms]
        return hits[0] if hits else None


ALL = [("a", 0), ("a", 1), ("b", 0)]


def test_select_partitions() -> None:
    log = FakeLog()
    assert select_partitions(log, SubscribePattern(".*")) == ALL
    assert select_partitions(log, Subscribe(("b", "a"))) == ALL
    assert select_partitions(log, SubscribePattern("a")) == [("a", 0), ("a", 1)]
    assert select_partitions(log, Assign((("a", 1),))) == [("a", 1)]
    with pytest.raises(UnknownTopicError, match="subscribe: topic"):
        select_partitions(log, Subscribe(("zz",)))
    with pytest.raises(UnknownTopicError, match="assign: a-7"):
        select_partitions(log, Assign((("a", 7),)))
    # streaming tolerates topics that do not exist yet
    assert select_partitions(log, Subscribe(("zz", "b")), strict=False) == [("b", 0)]


def test_resolve_symbolic_and_json_offsets() -> None:
    log = FakeLog()
    assert resolve_offsets(log, ALL, Earliest(), side="start") == {
        ("a", 0): 0, ("a", 1): 50, ("b", 0): 0}
    assert resolve_offsets(log, ALL, Latest(), side="end") == {
        ("a", 0): 300, ("a", 1): 60, ("b", 0): 0}
    spec = PartitionOffsets("startingOffsets", {"a": {0: 23, 1: -2}, "b": {0: -1}})
    assert resolve_offsets(log, ALL, spec, side="start") == {
        ("a", 0): 23, ("a", 1): 50, ("b", 0): 0}


def test_json_must_name_exactly_the_selected_partitions() -> None:
    log = FakeLog()
    spec = PartitionOffsets("startingOffsets", {"a": {0: 1}})
    with pytest.raises(InvalidConfigError, match=r"startingOffsets.*missing a-1, b-0"):
        resolve_offsets(log, ALL, spec, side="start")
    spec = PartitionOffsets("endingOffsets", {"a": {0: 1, 1: 2, 5: 3}, "b": {0: 0}})
    with pytest.raises(InvalidConfigError, match=r"endingOffsets.*a-5"):
        resolve_offsets(log, ALL, spec, side="end")


def test_short_form_needs_a_single_topic() -> None:
    log = FakeLog()
    spec = PartitionOffsets("startingOffsets", {None: {0: 5, 1: -2}})
    assert resolve_offsets(log, [("a", 0), ("a", 1)], spec, side="start") == {
        ("a", 0): 5, ("a", 1): 50}
    with pytest.raises(InvalidConfigError, match="exactly one topic"):
        resolve_offsets(log, ALL, spec, side="start")


def test_timestamps_and_strategy() -> None:
    log = FakeLog()
    tps = [("a", 0), ("a", 1)]
    assert resolve_offsets(log, tps, GlobalTimestamp("startingTimestamp", 1250), side="start") == {
        ("a", 0): 250, ("a", 1): 50}
    late = GlobalTimestamp("startingTimestamp", 6000)
    with pytest.raises(OffsetOutOfRangeError, match=r"startingTimestamp.*a-0.*Strategy=latest"):
        resolve_offsets(log, tps, late, side="start")
    assert resolve_offsets(log, tps, late, side="start", strategy="latest") == {
        ("a", 0): 300, ("a", 1): 60}
    # an ending timestamp with no match means "latest"
    assert resolve_offsets(log, tps, GlobalTimestamp("endingTimestamp", 6000), side="end") == {
        ("a", 0): 300, ("a", 1): 60}
    per = PartitionTimestamps("startingOffsetsByTimestamp", {"a": {0: 1010, 1: 0}})
    assert resolve_offsets(log, tps, per, side="start") == {("a", 0): 10, ("a", 1): 50}


def test_offset_ranges_data_loss() -> None:
    log = FakeLog()
    starts = {("a", 0): 10, ("a", 1): 40}
    ends = {("a", 0): 20, ("a", 1): 60}
    with pytest.raises(OffsetOutOfRangeError, match=r"a-1.*\[50, 60\].*failOnDataLoss=false"):
        offset_ranges(log, starts, ends, fail_on_data_loss=True)
    got = offset_ranges(log, starts, ends, fail_on_data_loss=False)
    assert got == [OffsetRange("a", 0, 10, 20), OffsetRange("a", 1, 50, 60)]
    with pytest.raises(OffsetOutOfRangeError, match="beyond the log end"):
        offset_ranges(log, {("a", 0): 0}, {("a", 0): 301}, fail_on_data_loss=True)
    with pytest.raises(InvalidConfigError, match="before the starting offset"):
        offset_ranges(log, {("a", 0): 30}, {("a", 0): 20}, fail_on_data_loss=True)
    # empty ranges are dropped
    assert offset_ranges(log, {("b", 0): 0}, {("b", 0): 0}, fail_on_data_loss=True) == []


def _covers(tasks: list[OffsetRange], rng: OffsetRange) -> bool:
    mine = sorted((t.start, t.end) for t in tasks if (t.topic, t.partition) == (rng.topic,
                                                                                  rng.partition))
    return (mine[0][0] == rng.start and mine[-1][1] == rng.end
            and all(a[1] == b[0] for a, b in itertools.pairwise(mine)))


def test_split_by_segment_and_byte_budget() -> None:
    log = FakeLog()
    rng = OffsetRange("a", 0, 50, 250)
    one_per_segment = split_ranges(log, [rng], max_partition_bytes=1000)
    assert [(t.start, t.end) for t in one_per_segment] == [(50, 100), (100, 200), (200, 250)]
    assert [t.size_bytes for t in one_per_segment] == [500, 1000, 500]
    cut = split_ranges(log, [rng], max_partition_bytes=400)  # segments bigger than the budget
    assert [(t.start, t.end) for t in cut] == [
        (50, 75), (75, 100), (100, 133), (133, 166), (166, 200), (200, 225), (225, 250)]
    assert _covers(cut, rng)
    merged = split_ranges(log, [rng], max_partition_bytes=1500)
    assert [(t.start, t.end) for t in merged] == [(50, 200), (200, 250)]
    whole = split_ranges(log, [rng], max_partition_bytes=10**9)
    assert [(t.start, t.end, t.size_bytes) for t in whole] == [(50, 250, 2000)]


def test_min_partitions_splits_proportionally() -> None:
    log = FakeLog()
    big, small = OffsetRange("a", 0, 0, 300), OffsetRange("a", 1, 50, 60)
    tasks = split_ranges(log, [big, small], max_partition_bytes=10**9, min_partitions=8)
    by_tp = {tp: [t for t in tasks if (t.topic, t.partition) == tp] for tp in [("a", 0),
                                                                              ("a", 1)]}
    assert len(by_tp[("a", 0)]) >= 7 and len(by_tp[("a", 1)]) == 1
    assert _covers(tasks, big) and _covers(tasks, small)
    # never more pieces than offsets
    tiny = split_ranges(log, [OffsetRange("a", 1, 50, 52)], max_partition_bytes=10**9,
                        min_partitions=10)
    assert [(t.start, t.end) for t in tiny] == [(50, 51), (51, 52)]


@st.composite
def _partition_and_range(draw: st.DrawFn) -> tuple[list[Seg], int, OffsetRange]:
    """Segments (bases strictly increasing, sizes, some empty), a log end, a range in it."""
    gaps = draw(st.lists(st.integers(0, 40), min_size=1, max_size=8))
    bases = list(itertools.accumulate(gaps))
    bases = sorted(set(bases))
    segs = [Seg(b, draw(st.integers(0, 3000))) for b in bases]
    log_end = draw(st.integers(bases[-1], bases[-1] + 50))
    lo = draw(st.integers(0, log_end))
    hi = draw(st.integers(lo, log_end + 5))
    return segs, log_end, OffsetRange("a", 0, lo, max(hi, lo + 1))


@given(case=_partition_and_range(), budget=st.integers(1, 20_000))
def test_the_whole_partition_shortcut_cuts_as_the_segment_walk(
        case: tuple[list[Seg], int, OffsetRange], budget: int) -> None:
    segs, log_end, rng = case
    shuffled = list(reversed(segs))  # either way round: the cut sorts them
    assert _by_segment(rng, shuffled, log_end, budget) == _runs(rng, segs, log_end, budget)
