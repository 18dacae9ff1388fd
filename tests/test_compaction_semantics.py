"""Compaction and retention settings that behave as Kafka documents them: the rolls
``max.compaction.lag.ms`` forces on a compacted topic, and the config rules Kafka checks when a
topic is created or altered."""

from __future__ import annotations

import logging
import os
import pathlib
import time
from collections.abc import Iterator

import pytest

from embedlog import TopicPartition
from embedlog.errors import InvalidConfigError
from embedlog.log import Log

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(log_dir: pathlib.Path, clock: Clock) -> Iterator[Log]:
    with Log(log_dir, clock=clock, upkeep=False) as opened:
        yield opened


def bases(log: Log, topic: str) -> list[int]:
    return [s.base_offset for s in log.segments(topic, 0)]


def test_max_compaction_lag_rolls_the_active_segment_so_the_cleaner_reaches_it(
    log: Log,
) -> None:
    """Kafka's ``LogConfig.maxSegmentMs``: a compacted topic rolls once its active segment's
    records span ``max.compaction.lag.ms`` (when shorter than ``segment.ms``), else the records
    that setting bounds would sit in the active segment, never cleaned, for ``segment.ms``."""
    log.create_topic("c", config={"cleanup.policy": "compact", "max.compaction.lag.ms": 1000})
    log.create_topic("d", config={"cleanup.policy": "delete", "max.compaction.lag.ms": 1000})
    for topic in ("c", "d"):
        for i, ts in enumerate((T0 - 5000, T0 - 4500, T0 - 3900, T0 - 3500)):
            log.append(topic, b"v%d" % i, key=b"k", timestamp=ts)
    assert bases(log, "c") == [0, 2]  # 1100 ms spanned at offset 2
    assert bases(log, "d") == [0]  # only compacted topics roll for it
    run = log.upkeep.run_once("cleaner")
    assert run.error is None and run.cleaned == 1
    got = [(r.offset, r.value) for r in log.read("c", 0)]
    assert got == [(1, b"v1"), (2, b"v2"), (3, b"v3")]


def test_segment_ms_still_rolls_first_when_it_is_the_shorter(log: Log) -> None:
    log.create_topic("c", config={"cleanup.policy": "compact,delete", "segment.ms": 500,
                                  "max.compaction.lag.ms": 1000})
    for i, ts in enumerate((T0, T0 + 400, T0 + 600, T0 + 900, T0 + 1200)):
        log.append("c", b"v%d" % i, key=b"k", timestamp=ts)
    assert bases(log, "c") == [0, 2, 4]


def test_min_compaction_lag_above_max_is_refused_on_create_and_alter(log: Log) -> None:
    """Kafka's ``LogConfig.validateValues``."""
    with pytest.raises(InvalidConfigError, match=r"min\.compaction\.lag\.ms \(5000\)"):
        log.create_topic("c", config={"cleanup.policy": "compact",
                                      "min.compaction.lag.ms": 5000,
                                      "max.compaction.lag.ms": 1000})
    assert log.topics() == []
    log.create_topic("c", config={"cleanup.policy": "compact", "min.compaction.lag.ms": 1000,
                                  "max.compaction.lag.ms": 1000})
    with pytest.raises(InvalidConfigError, match=r"max\.compaction\.lag\.ms \(999\)"):
        log.alter_topic("c", {"max.compaction.lag.ms": 999})
    with pytest.raises(InvalidConfigError):
        log.alter_topic("c", {"min.compaction.lag.ms": 1001})
    assert log.topic_config("c").max_compaction_lag_ms == 1000
    assert log.topic_config("c").min_compaction_lag_ms == 1000


@pytest.mark.parametrize("policy", ["delete,compact", "compact, delete", "compact,delete"])
def test_cleanup_policy_is_a_list_in_any_order(log: Log, clock: Clock, policy: str) -> None:
    """Kafka's ``cleanup.policy`` is a list: ``delete,compact`` both compacts and deletes."""
    log.create_topic("c", config={"cleanup.policy": policy, "retention.ms": 60_000})
    for i, ts in enumerate((T0 - 120_000, T0 - 110_000, T0 - 1000, T0 - 500)):
        log.append("c", b"v%d" % i, key=b"k%d" % (i % 2), timestamp=ts)
        log.roll("c", 0)
    log.append("c", b"v4", key=b"k0", timestamp=T0)
    config = log.topic_config("c")
    assert (config.compact, config.delete, config.cleanup_policy) == (True, True, "compact,delete")
    assert log.enforce_retention() == 2
    log.compact("c")
    assert [(r.offset, r.value) for r in log.read("c", 0)] == [(2, b"v2"), (3, b"v3"), (4, b"v4")]
    log.alter_topic("c", {"cleanup.policy": "delete"})
    with pytest.raises(InvalidConfigError):
        log.alter_topic("c", {"cleanup.policy": "delete,compacted"})
    assert log.topic_config("c").cleanup_policy == "delete"


def test_a_segment_compaction_empties_keeps_its_age_for_retention(
    log_dir: pathlib.Path,
) -> None:
    """Kafka's cleaner gives a cleaned segment the modification time of the last segment it
    replaces: retention measures a segment left without records by that time, so one the pass
    emptied does not hold back the deletion of every older segment behind it."""
    now = int(time.time() * 1000)
    clock = Clock(now)
    with Log(log_dir, clock=clock, upkeep=False) as log:
        log.create_topic("c", config={"cleanup.policy": "compact,delete", "segment.bytes": 100,
                                      "retention.ms": 300_000})
        for key, age_s in ((b"a", 200), (b"a", 190), (b"b", 180), (b"b", 170)):
            log.append("c", b"v", key=key, timestamp=now - age_s * 1000)
            log.roll("c", 0)
        log.append("c", b"v", key=b"c", timestamp=now)
        for seg in log._partition_of("c", 0).segments[:-1]:  # as if written when stamped
            os.utime(seg.log_path, ns=(seg.max_timestamp * 10**6,) * 2)
        log.compact("c")
        assert [s.size for s in log.segments("c", 0)] == [0, 70, 0, 70, 70]
        clock.now += 200_000  # every closed segment is now older than retention.ms
        assert log.enforce_retention() == 4
        assert log.start_offset("c", 0) == 4


def test_a_damaged_cleaner_checkpoint_is_passed_over_not_fatal(
    log_dir: pathlib.Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """``cleaner-offset-checkpoint`` only says where cleaning may start: a damaged one makes
    the next pass start at the log start (as one out of range does) and is written anew; it
    neither stops compaction for good nor leaves a topic deletion half done."""
    with Log(log_dir, clock=clock, upkeep=False) as log:
        for topic in ("c", "gone"):
            log.create_topic(topic, config={"cleanup.policy": "compact"})
            for value in (b"1", b"2"):
                log.append(topic, value, key=b"k", timestamp=T0)
            log.roll(topic, 0)
    (log_dir / "cleaner-offset-checkpoint").write_text("garbage\n")
    with Log(log_dir, clock=clock, upkeep=False) as log:
        with caplog.at_level(logging.WARNING, logger="embedlog"):  # other tests quiet it
            log.delete_topic("gone")  # reads the checkpoint first, to drop the topic's entry
        assert "malformed checkpoint" in caplog.text
        assert log.topics() == ["c"] and not (log_dir / "gone-0").exists()
        log.create_topic("gone")
        assert log.compact("c").passes == 1
        assert [(r.offset, r.value) for r in log.read("c", 0)] == [(1, b"2")]
        assert (log_dir / "cleaner-offset-checkpoint").read_text() == "0\n1\nc 0 2\n"
        assert log.upkeep.run_once("cleaner").error is None


def test_a_transaction_committed_after_an_aborted_one_already_cleaned_is_kept(
    log: Log,
) -> None:
    """The key map is built from the first dirty offset on, with only the aborted
    transactions that reach it (Kafka's ``collectAbortedTransactions(start, end)``): one
    aborted and cleaned in an earlier pass used to make the same producer's next,
    committed, transaction look aborted, so it was left out of the map and compaction
    dropped it and kept the key's older value."""
    log.create_topic("t", config={"cleanup.policy": "compact"})
    log.append("t", b"v0", key=b"a", partition=0)
    producer = log.producer(transactional_id="x")
    producer.init_transactions()
    for value, commit in ((b"aborted", False), (b"v1", True)):
        producer.begin_transaction()
        producer.send("t", value, key=b"a", partition=0)
        producer.flush()
        (producer.commit_transaction if commit else producer.abort_transaction)()
        log.roll("t", 0)
        log.compact("t")
    producer.close()
    consumer = log.consumer(isolation_level="read_committed")
    consumer.assign([TopicPartition("t", 0)])
    seen = [(r.offset, r.value) for r in consumer.poll()]
    consumer.close()
    assert seen == [(3, b"v1")]
    assert [(r.offset, r.value) for r in log.read("t", 0)] == [(3, b"v1")]


def test_the_cleaner_does_not_pick_a_partition_an_open_transaction_holds_back(
    log: Log, clock: Clock,
) -> None:
    """Kafka's cleanable range ends at the last stable offset, for the choice of what to clean
    as for the pass: a partition whose dirty section lies past an open transaction's first
    offset is not due (no pass that reads every header to find nothing to clean)."""
    log.create_topic("t", config={"cleanup.policy": "compact", "max.compaction.lag.ms": 1})
    producer = log.producer(transactional_id="x")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"open", key=b"a", partition=0, timestamp=T0 - 1000)
    producer.flush()
    for i in range(3):
        log.append("t", b"v%d" % i, key=b"b", partition=0, timestamp=T0 - 1000)
        log.roll("t", 0)
    p = log._partition_of("t", 0)
    plan = log._compaction().plan(p, clock.now)
    assert plan is not None and plan.first_uncleanable == 0 and not plan.due(p.config)
    assert log.upkeep.run_once("cleaner").cleaned == 0
    producer.commit_transaction()
    producer.close()
    plan = log._compaction().plan(p, clock.now)
    assert plan is not None and plan.due(p.config)
    assert log.upkeep.run_once("cleaner").cleaned == 1
    assert [(r.offset, r.value) for r in log.read("t", 0)] == [(0, b"open"), (3, b"v2")]
