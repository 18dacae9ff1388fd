"""embedlog.Consumer: positions, commits, resets, blocking poll, gaps and transactions."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import embedlog
from embedlog import TopicPartition
from embedlog.errors import (
    GroupError,
    InvalidConfigError,
    LogClosedError,
    OffsetOutOfRangeError,
    UsageError,
)
from embedlog.segment import format as fmt
from helpers import small_segments

TP0 = TopicPartition("t", 0)
SRC = str(pathlib.Path(__file__).resolve().parent.parent / "src")


def fill(log: embedlog.Log, n: int, topic: str = "t", partition: int = 0, start: int = 0) -> None:
    for i in range(start, start + n):
        log.append(topic, b"%d" % i, key=b"k", partition=partition, timestamp=1000 + i)


def values(records: list[embedlog.Record]) -> list[bytes | None]:
    return [r.value for r in records]


def drain(consumer: embedlog.Consumer) -> list[embedlog.Record]:
    out: list[embedlog.Record] = []
    while batch := consumer.poll():
        out += batch
    return out


# --------------------------------------------------------------------------- poll and positions


def test_poll_returns_records_in_order_and_moves_positions(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    fill(log, 30, partition=0)
    fill(log, 20, partition=1, start=100)
    consumer = log.consumer("t", max_poll_records=7)
    got: list[embedlog.Record] = []
    while batch := consumer.poll():
        assert len(batch) <= 7
        got += batch
    for p, expected in ((0, [b"%d" % i for i in range(30)]),
                        (1, [b"%d" % i for i in range(100, 120)])):
        mine = [r for r in got if r.partition == p]
        assert values(mine) == expected
        assert [r.offset for r in mine] == list(range(len(expected)))
    assert consumer.position(TP0) == 30 and consumer.position(TopicPartition("t", 1)) == 20
    assert consumer.lag() == {TP0: 0, TopicPartition("t", 1): 0}
    assert consumer.assignment() == {TP0, TopicPartition("t", 1)}
    consumer.close()


def test_seek_and_offset_lookups(log: embedlog.Log) -> None:
    log.create_topic("t")
    fill(log, 50)
    consumer = log.consumer()
    consumer.assign([TP0])
    consumer.seek(TP0, 40)
    assert [r.offset for r in drain(consumer)] == list(range(40, 50))
    consumer.seek_to_beginning()
    assert consumer.position(TP0) == 0
    assert consumer.poll(max_records=1)[0].offset == 0
    consumer.seek_to_end(TP0)
    assert consumer.poll() == [] and consumer.position(TP0) == 50
    assert consumer.beginning_offsets([TP0]) == {TP0: 0}
    assert consumer.end_offsets([TP0]) == {TP0: 50}
    found = consumer.offsets_for_times({TP0: 1010})[TP0]
    assert found is not None and (found.offset, found.timestamp) == (10, 1010)
    assert consumer.offsets_for_times({TP0: 99_999}) == {TP0: None}
    with pytest.raises(UsageError):
        consumer.seek(TopicPartition("t", 5), 0)
    with pytest.raises(UsageError):
        consumer.seek(TP0, -1)
    consumer.close()


def test_iteration_moves_positions_record_by_record(log: embedlog.Log) -> None:
    log.create_topic("t")
    fill(log, 10)
    consumer = log.consumer("t", group="g", consumer_timeout_ms=50)
    seen = []
    for record in consumer:
        seen.append(record.offset)
        assert consumer.position(TP0) == record.offset + 1
        if record.offset == 4:
            consumer.commit()
    assert seen == list(range(10))
    assert consumer.committed(TP0) == 5
    consumer.close()


def test_leaving_or_seeking_an_iteration_loses_nothing(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    fill(log, 30, partition=0)
    fill(log, 30, partition=1)
    consumer = log.consumer("t", consumer_timeout_ms=50)
    seen: list[tuple[int, int]] = []
    for r in consumer:  # leave in the middle of what one poll fetched
        seen.append((r.partition, r.offset))
        if len(seen) == 7:
            break
    rest = [(r.partition, r.offset) for r in drain(consumer)]
    assert sorted(seen + rest) == [(p, o) for p in (0, 1) for o in range(30)]
    consumer.seek_to_beginning()
    replay = []
    for r in consumer:
        replay.append((r.partition, r.offset))
        if (r.partition, r.offset) == (0, 3):
            consumer.seek(TP0, 25)  # the iteration continues from there
    assert [o for p, o in replay if p == 0] == [0, 1, 2, 3, *range(25, 30)]
    assert sorted(o for p, o in replay if p == 1) == list(range(30))
    consumer.close()


def test_deserializers(log: embedlog.Log) -> None:
    log.create_topic("t")
    log.append("t", b"41", key=b"answer")
    log.append("t", None, key=b"gone")
    consumer = log.consumer("t", key_deserializer=bytes.decode, value_deserializer=int)
    assert [(r.key, r.value) for r in consumer.poll()] == [("answer", 41), ("gone", None)]
    consumer.close()


# --------------------------------------------------------------------------- commits


def test_resume_after_reopen_is_at_least_once(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        fill(log, 20)
        consumer = log.consumer("t", group="g", max_poll_records=8)
        batch = consumer.poll()
        consumer.commit({TP0: batch[4].offset + 1})  # processed 5 of the 8, then "crashed"
        consumer.close()
    with embedlog.open(log_dir) as log:
        consumer = log.consumer("t", group="g")
        assert [r.offset for r in drain(consumer)] == list(range(5, 20))
        consumer.close()


def test_commit_before_processing_is_at_most_once(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        fill(log, 20)
        consumer = log.consumer("t", group="g", max_poll_records=8)
        consumer.poll()
        consumer.commit()  # before processing; the process dies while processing
        consumer.close()
    with embedlog.open(log_dir) as log:
        consumer = log.consumer("t", group="g")
        assert [r.offset for r in drain(consumer)] == list(range(8, 20))
        consumer.close()


def test_auto_commit_on_close_and_commit_values(log: embedlog.Log) -> None:
    log.create_topic("t")
    fill(log, 10)
    with log.consumer("t", group="g", enable_auto_commit=True) as consumer:
        consumer.poll(max_records=3)
    with log.consumer("t", group="g") as consumer:
        assert consumer.committed(TP0) == 3
        assert consumer.poll()[0].offset == 3

        class OffsetAndMetadata:
            offset = 7

        consumer.commit({TP0: OffsetAndMetadata()})
        assert consumer.committed(TP0) == 7
        with pytest.raises(UsageError):
            consumer.commit({TP0: -3})


def test_offsets_commit_after_the_log_closed(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        fill(log, 5)
        consumer = log.consumer("t", group="g", enable_auto_commit=True)
        consumer.poll()
    consumer.close()  # the offsets have their own files
    with embedlog.open(log_dir, read_only=True) as ro, ro.consumer(group="g") as other:
        assert other.committed(TP0) == 5


def test_commit_needs_a_group(log: embedlog.Log) -> None:
    log.create_topic("t")
    consumer = log.consumer("t")
    with pytest.raises(GroupError):
        consumer.commit()
    assert consumer.committed(TP0) is None
    consumer.close()


def test_offsets_file_is_a_kafka_checkpoint(log: embedlog.Log, log_dir: pathlib.Path) -> None:
    log.create_topic("t", partitions=2)
    fill(log, 3)
    with log.consumer("t", group="billing") as consumer:
        drain(consumer)
        consumer.commit()
    text = (log_dir / "__groups" / "billing" / "offsets").read_text()
    assert text == "0\n2\nt 0 3\nt 1 0\n"


# --------------------------------------------------------------------------- resets


def test_auto_offset_reset_without_committed_offsets(log: embedlog.Log) -> None:
    log.create_topic("t")
    fill(log, 5)
    with log.consumer("t", group="a", auto_offset_reset="latest") as latest:
        assert latest.poll() == []
        fill(log, 1, start=5)
        assert values(latest.poll()) == [b"5"]
    strict = log.consumer("t", group="b", auto_offset_reset="none")
    with pytest.raises(OffsetOutOfRangeError):
        strict.poll()
    strict.close()
    with pytest.raises(InvalidConfigError):
        log.consumer("t", auto_offset_reset="smallest")


def test_retention_below_the_position_resets(log: embedlog.Log) -> None:
    log.create_topic("t", config=small_segments())
    fill(log, 200)
    with log.consumer(group="g") as consumer:
        consumer.assign([TP0])  # manual assignment: commits without membership
        consumer.commit({TP0: 3})
    start = log.delete_records("t", 0, 150)
    with log.consumer("t", group="g") as consumer:
        assert consumer.poll()[0].offset == start
    strict = log.consumer("t", group="g", auto_offset_reset="none")
    with pytest.raises(OffsetOutOfRangeError):
        strict.poll()
    strict.close()


def test_consumer_follows_new_segments_and_survives_retention(log: embedlog.Log) -> None:
    cfg = small_segments(**{"retention.bytes": 20_000, "retention.ms": -1})
    log.create_topic("t", config=cfg)
    consumer = log.consumer("t", max_poll_records=50)
    got: list[embedlog.Record] = []
    bases: set[int] = set()
    for round_ in range(10):
        fill(log, 100, start=round_ * 100)
        log.enforce_retention()
        bases |= {s.base_offset for s in log.segments("t", 0)}
        got += drain(consumer)
    assert len(bases) >= 5 and log.start_offset("t", 0) > 0
    assert [r.offset for r in got] == list(range(1000))
    assert values(got) == [b"%d" % i for i in range(1000)]
    consumer.close()


# --------------------------------------------------------------------------- gaps and control


def append_batch(log: embedlog.Log, values_: list[bytes], **kwargs: object) -> None:
    log._append_encoded("t", 0, bytearray(fmt.encode_batch(values_, timestamps=0, **kwargs)))


def marker(log: embedlog.Log, pid: int, kind: int) -> None:
    key, value = fmt.control_record(kind)
    log._append_encoded("t", 0, bytearray(fmt.encode_batch(
        [value], keys=[key], timestamps=0, producer_id=pid, producer_epoch=0,
        is_transactional=True, is_control=True)))


def test_offset_gaps_and_trailing_control_batches(log: embedlog.Log) -> None:
    log.create_topic("t")
    append_batch(log, [b"a", b"b"], offset_deltas=[0, 5], last_offset_delta=9)  # 0, 5; 10 next
    append_batch(log, [b"c"])  # 10
    marker(log, 1, fmt.CONTROL_COMMIT)  # 11, not a record
    consumer = log.consumer("t", group="g")
    records = drain(consumer)
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (5, b"b"), (10, b"c")]
    assert consumer.position(TP0) == 12 and consumer.lag() == {TP0: 0}
    consumer.close()


def test_read_committed_skips_aborted_and_waits_for_open_transactions(log: embedlog.Log
                                                                       ) -> None:
    log.create_topic("t")
    txn = {"producer_epoch": 0, "is_transactional": True}
    append_batch(log, [b"plain-1"])                                  # 0
    append_batch(log, [b"A1"], producer_id=1, base_sequence=0, **txn)  # 1
    append_batch(log, [b"B1"], producer_id=2, base_sequence=0, **txn)  # 2
    append_batch(log, [b"A2"], producer_id=1, base_sequence=1, **txn)  # 3
    marker(log, 1, fmt.CONTROL_COMMIT)                               # 4
    marker(log, 2, fmt.CONTROL_ABORT)                                # 5
    append_batch(log, [b"C1"], producer_id=3, base_sequence=0, **txn)  # 6, still open
    append_batch(log, [b"plain-2"])                                  # 7
    uncommitted = log.consumer("t")
    assert values(drain(uncommitted)) == [b"plain-1", b"A1", b"B1", b"A2", b"C1", b"plain-2"]
    committed = log.consumer("t", isolation_level="read_committed")
    assert values(drain(committed)) == [b"plain-1", b"A1", b"A2"]
    assert committed.position(TP0) == 6  # the last stable offset: C1's transaction is open
    marker(log, 3, fmt.CONTROL_ABORT)                                # 8
    append_batch(log, [b"plain-3"])                                  # 9
    assert values(drain(committed)) == [b"plain-2", b"plain-3"]
    assert committed.position(TP0) == 10
    with pytest.raises(InvalidConfigError):
        log.consumer("t", isolation_level="serializable")


# --------------------------------------------------------------------------- waiting


# A poll that slept to its timeout would outlast the test's timeout: returning at all is the
# proof that the poll woke for the record (the test timeout is a watchdog, not a measurement).
NEVER = 24 * 3600.0


@pytest.mark.timeout(300)
def test_blocking_poll_wakes_when_a_record_is_appended(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=3)
    consumer = log.consumer("t")
    assert consumer.poll(timeout=0.05) == []
    started = threading.Event()

    def later() -> None:
        started.wait()
        log.append("t", b"late", key=b"k", partition=2)

    writer = threading.Thread(target=later)
    writer.start()
    started.set()
    records = consumer.poll(timeout=NEVER)  # woke on the append: it never reaches the timeout
    writer.join()
    assert values(records) == [b"late"]
    consumer.close()


WRITER = """
import sys
sys.path.insert(0, {src!r})
import embedlog
with embedlog.open({path!r}) as log:
    print("ready", flush=True)
    sys.stdin.readline()
    log.append("t", b"from-another-process", key=b"k")
"""


@pytest.mark.timeout(300)
def test_read_only_consumer_sees_another_process_writing(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(src=SRC, path=str(log_dir))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        with embedlog.open(log_dir, read_only=True) as ro:
            consumer = ro.consumer("t", group="g")
            assert consumer.poll(timeout=0.05) == []
            proc.stdin.write("go\n")
            proc.stdin.flush()
            records = consumer.poll(timeout=NEVER)  # returns once the record is seen
            assert values(records) == [b"from-another-process"]
            consumer.commit()
            assert consumer.committed(TP0) == 1
            consumer.close()
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=30) == 0


def test_read_only_consumer_writes_only_group_files(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", partitions=2)
        fill(log, 10)

    def snapshot() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(log_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in log_dir.rglob("*") if p.is_file()}

    before = snapshot()
    with embedlog.open(log_dir, read_only=True) as ro, ro.consumer("t", group="g") as consumer:
        drain(consumer)
        consumer.commit()
    after = snapshot()
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed and all(k.startswith("__groups/") for k in changed)
    assert set(before) <= set(after)


def test_close_and_closed_log(log: embedlog.Log) -> None:
    log.create_topic("t")
    consumer = log.consumer("t")
    consumer.close()
    consumer.close()
    with pytest.raises(LogClosedError):
        consumer.poll()
    other = log.consumer("t")
    log.close()
    with pytest.raises(LogClosedError):
        other.poll()


# --------------------------------------------------------------------------- model


class ConsumerModel(RuleBasedStateMachine):
    """send / poll / commit / seek / reopen against a list per partition: positions and
    committed offsets behave like Kafka's, and a reopen resumes at the committed offsets."""

    PARTITIONS = 2

    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.path = pathlib.Path(self.dir) / "log"
        self.log = embedlog.open(self.path)
        self.log.create_topic("t", partitions=self.PARTITIONS, config=small_segments())
        self.producer = self.log.producer()
        self.model: list[list[bytes]] = [[] for _ in range(self.PARTITIONS)]
        self.committed: list[int | None] = [None] * self.PARTITIONS
        self.open_consumer()

    def open_consumer(self) -> None:
        self.consumer = self.log.consumer("t", group="g")
        self.position = [c or 0 for c in self.committed]

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(partition=st.integers(0, PARTITIONS - 1), n=st.integers(1, 30))
    def send(self, partition: int, n: int) -> None:
        for _ in range(n):
            value = b"%d-%d" % (partition, len(self.model[partition]))
            meta = self.producer.send("t", value, key=b"k", partition=partition)
            assert meta.offset == len(self.model[partition])
            self.model[partition].append(value)
        self.producer.flush()

    @rule(limit=st.integers(1, 40))
    def poll(self, limit: int) -> None:
        records = self.consumer.poll(max_records=limit)
        available = any(self.position[p] < len(self.model[p]) for p in range(self.PARTITIONS))
        assert bool(records) == available
        assert len(records) <= limit
        for r in records:
            assert r.offset == self.position[r.partition]
            assert r.value == self.model[r.partition][r.offset]
            self.position[r.partition] += 1

    @rule()
    def commit(self) -> None:
        self.consumer.commit()
        self.committed = list(self.position)

    @rule(partition=st.integers(0, PARTITIONS - 1), data=st.data())
    def seek(self, partition: int, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, len(self.model[partition])))
        self.consumer.seek(TopicPartition("t", partition), offset)
        self.position[partition] = offset

    @precondition(lambda self: hasattr(self, "log"))
    @rule()
    def reopen(self) -> None:
        self.consumer.close()
        self.producer.close()
        self.log.close()
        self.log = embedlog.open(self.path)
        self.producer = self.log.producer()
        self.open_consumer()

    @invariant()
    def positions_agree(self) -> None:
        # a group member gets its partitions in its first poll
        if hasattr(self, "consumer") and self.consumer.assignment():
            for p in range(self.PARTITIONS):
                assert self.consumer.position(TopicPartition("t", p)) == self.position[p]
                assert self.consumer.committed(TopicPartition("t", p)) == self.committed[p]


ConsumerModel.TestCase.settings = settings(max_examples=20, stateful_step_count=20,
                                           deadline=None)
test_consumer_model = ConsumerModel.TestCase
