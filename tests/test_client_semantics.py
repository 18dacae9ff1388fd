"""Client semantics checked against Kafka's documented behaviour: timestamp lookups above a
moved log start."""

from __future__ import annotations

import pathlib
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition
from embedlog.fetcher import OffsetAndTimestamp
from helpers import small_segments

TP0 = TopicPartition("t", 0)


def _first_at_or_after(stamps: list[int], start: int, target: int) -> int | None:
    """The model: Kafka's ``findOffsetByTimestamp(target, startingOffset=log start)``."""
    return next((o for o in range(start, len(stamps)) if stamps[o] >= target), None)


def test_time_lookup_never_answers_a_record_stamped_before_the_target(
        log: embedlog.Log) -> None:
    """Out-of-order timestamps: the record found below the log start is gone, and the log
    start itself is stamped earlier than asked; the answer is the first later record that
    is stamped late enough (Kafka), not the log start."""
    log.create_topic("t", partitions=1)
    for i, ts in enumerate([100, 200, 50, 50, 300, 60]):
        log.append("t", b"%d" % i, timestamp=ts)
    assert log.offsets_for_times("t", 0, 150) == 1
    assert log.delete_records("t", 0, 2) == 2
    assert log.offsets_for_times("t", 0, 150) == 4
    assert log.offsets_for_times("t", 0, 301) is None
    with log.consumer() as consumer:
        consumer.assign([TP0])
        assert consumer.offsets_for_times({TP0: 150}) == {TP0: OffsetAndTimestamp(4, 300)}
        assert consumer.offsets_for_times({TP0: 100}) == {TP0: OffsetAndTimestamp(4, 300)}


@settings(max_examples=40, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 40), min_size=1, max_size=120),
    cut=st.integers(0, 130),
    batch=st.integers(1, 9),
    targets=st.lists(st.integers(0, 42), min_size=1, max_size=8),
)
def test_time_lookup_matches_the_model_after_delete_records(
        stamps: list[int], cut: int, batch: int, targets: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp, \
            embedlog.open(pathlib.Path(tmp) / "log") as log:
        log.create_topic("t", partitions=1, config=small_segments())
        for i in range(0, len(stamps), batch):  # batches of out-of-order stamps
            chunk = stamps[i:i + batch]
            log.append_batch("t", [b"v" * 40] * len(chunk), timestamps=chunk, partition=0)
        start = log.delete_records("t", 0, min(cut, len(stamps)))
        for target in targets:
            want = _first_at_or_after(stamps, start, target)
            assert log.offsets_for_times("t", 0, target) == want, (start, target)
