"""embedlog.Producer: offsets at send time, batching, partitioners, durability, idempotence."""

from __future__ import annotations

import os
import pathlib
import random
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner

import embedlog
from doubles import Call, ScriptedFS
from embedlog import _io
from embedlog.errors import (
    LogClosedError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ReadOnlyError,
    RecordTooLargeError,
    StorageError,
    UnknownTopicError,
    UsageError,
)
from embedlog.naming import PRODUCER_IDS_FILE as PRODUCER_IDS
from embedlog.segment import format as fmt


def stored(log: embedlog.Log, topic: str, partition: int) -> dict[int, embedlog.Record]:
    return {r.offset: r for r in log.read(topic, partition)}


def raw_batches(log: embedlog.Log, topic: str, partition: int) -> list[bytes]:
    """The encoded batches of a partition, as they are in its segment files."""
    out = []
    for seg in log.segments(topic, partition):
        data = pathlib.Path(seg.path).read_bytes()
        out += [data[pos : pos + h.size] for pos, h in fmt.iter_batches(data)]
    return out


def headers_of(log: embedlog.Log, topic: str, partition: int) -> list[fmt.BatchHeader]:
    return [fmt.parse_header(b) for b in raw_batches(log, topic, partition)]


# --------------------------------------------------------------------------- basics


def test_send_returns_the_offset_the_record_gets(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=3)
    with log.producer() as producer:
        metas = [
            producer.send("t", b"v%d" % i, key=b"k%d" % (i % 11), timestamp=1000 + i,
                          headers=[("h", b"%d" % i)] if i % 3 == 0 else None)
            for i in range(500)
        ]
    for i, meta in enumerate(metas):
        record = stored(log, "t", meta.partition)[meta.offset]
        assert (record.key, record.value, record.timestamp) == (b"k%d" % (i % 11), b"v%d" % i,
                                                                1000 + i)
        assert record.headers == ((("h", b"%d" % i),) if i % 3 == 0 else ())
        assert meta.timestamp == 1000 + i and meta.topic == "t"
    for p in range(3):  # offsets of each partition are dense from 0
        offs = sorted(m.offset for m in metas if m.partition == p)
        assert offs == list(range(len(offs)))


def test_tombstone_and_null_values(log: embedlog.Log) -> None:
    log.create_topic("t")
    with log.producer() as producer:
        producer.send("t", None, key=b"gone")
        producer.send("t", b"", key=b"")
    records = list(log.read("t", 0))
    assert [(r.key, r.value) for r in records] == [(b"gone", None), (b"", b"")]


def test_records_wait_for_their_batch_until_flush(log: embedlog.Log) -> None:
    log.create_topic("t")
    producer = log.producer(linger_ms=60_000)
    meta = producer.send("t", b"x", key=b"k")
    assert meta.offset == 0
    assert log.end_offset("t", 0) == 0  # still in the open batch
    producer.flush()
    assert log.end_offset("t", 0) == 1
    producer.close()


def test_linger_thread_writes_without_flush(log: embedlog.Log) -> None:
    log.create_topic("t")
    producer = log.producer(linger_ms=0)
    consumer = log.consumer("t")
    meta = producer.send("t", b"x", key=b"k")
    records = consumer.poll(timeout=30)  # the background writer must make it visible
    assert [(r.offset, r.value) for r in records] == [(meta.offset, b"x")]
    producer.close()


def test_batches_respect_batch_size_and_record_limit(log: embedlog.Log) -> None:
    log.create_topic("t")
    with log.producer(linger_ms=60_000, batch_size=4000, max_batch_records=20) as producer:
        for i in range(100):
            producer.send("t", b"x" * 100, key=b"%03d" % i, partition=0)
    heads = headers_of(log, "t", 0)
    assert sum(h.records_count for h in heads) == 100
    assert all(h.records_count <= 20 for h in heads)
    assert all(h.size <= 4000 + 200 for h in heads)  # one record may overshoot
    assert len(heads) < 100


def test_other_writers_never_take_promised_offsets(log: embedlog.Log) -> None:
    log.create_topic("t")
    a = log.producer(linger_ms=60_000)
    b = log.producer(linger_ms=60_000)
    expected: dict[int, bytes] = {}
    rng = random.Random(3)
    for i in range(300):
        value = b"%d" % i
        choice = rng.randrange(3)
        if choice == 0:
            meta = a.send("t", value, key=b"a", partition=0)
        elif choice == 1:
            meta = b.send("t", value, key=b"b", partition=0)
        else:
            meta = log.append("t", value, key=b"log", partition=0)
        expected[meta.offset] = value
    a.close()
    b.close()
    assert {o: r.value for o, r in stored(log, "t", 0).items()} == expected
    assert sorted(expected) == list(range(300))


def test_threads_share_a_producer(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    producer = log.producer()
    results: list[list[embedlog.RecordMetadata]] = [[] for _ in range(4)]

    def work(n: int) -> None:
        for i in range(2000):
            results[n].append(producer.send("t", b"%d-%d" % (n, i), key=b"%d" % i))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.close()
    got = {p: stored(log, "t", p) for p in range(2)}
    for n, metas in enumerate(results):
        for i, meta in enumerate(metas):
            assert got[meta.partition][meta.offset].value == b"%d-%d" % (n, i)
    assert sum(len(g) for g in got.values()) == 8000


def test_log_close_writes_open_batches(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        producer = log.producer(linger_ms=60_000)
        metas = [producer.send("t", b"%d" % i, key=b"k") for i in range(10)]
    with embedlog.open(log_dir) as log:
        assert [(r.offset, r.value) for r in log.read("t", 0)] == [
            (m.offset, b"%d" % i) for i, m in enumerate(metas)
        ]
    with pytest.raises(LogClosedError):
        producer.send("t", b"late", key=b"k")


def test_close_is_idempotent_and_final(log: embedlog.Log) -> None:
    log.create_topic("t")
    producer = log.producer()
    producer.send("t", b"1", key=b"k")
    producer.close()
    producer.close()
    assert producer.closed
    with pytest.raises(LogClosedError):
        producer.send("t", b"2", key=b"k")
    assert log.end_offset("t", 0) == 1


class _GatedLock:
    """A batch's lock that holds one thread back at its first acquire until ``gate`` opens."""

    def __init__(self, inner: threading.Lock, thread_name: str) -> None:
        self.inner, self.thread_name = inner, thread_name
        self.arrived, self.gate = threading.Event(), threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread().name == self.thread_name and not self.arrived.is_set():
            self.arrived.set()
            assert self.gate.wait(10)
        return self.inner.acquire(blocking, timeout)

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_send_racing_close_is_written_or_refused(log: embedlog.Log) -> None:
    # Kafka's accumulator refuses an append once close() began ("Producer closed while send
    # in progress"); a send acknowledged with an offset must be written by close().
    log.create_topic("t")
    producer = log.producer(linger_ms=60_000)
    producer.send("t", b"0", partition=0, headers=[("h", b"1")])
    producer.flush()
    slot = producer._slots[("t", 0)]
    gated = slot.lock = _GatedLock(slot.lock, "late-sender")  # type: ignore[assignment]
    outcome: list[object] = []

    def late() -> None:
        try:
            outcome.append(producer.send("t", b"late", partition=0, headers=[("h", b"2")]))
        except LogClosedError as exc:
            outcome.append(exc)

    sender = threading.Thread(target=late, name="late-sender")
    sender.start()
    assert gated.arrived.wait(10)  # past its checks, about to take the batch's lock
    producer.close()
    gated.gate.set()
    sender.join(10)
    [result] = outcome
    if isinstance(result, embedlog.RecordMetadata):  # acknowledged: then it is written
        assert [r.value for r in log.read("t", 0, result.offset)] == [b"late"]
    else:
        assert isinstance(result, LogClosedError)
        assert log.end_offset("t", 0) == 1


def test_partitions_for_is_a_set_as_in_kafka_python(log: embedlog.Log) -> None:
    # kafka-python's KafkaProducer.partitions_for and AsyncProducer.partitions_for: a set.
    log.create_topic("t", partitions=3)
    with log.producer() as producer:
        assert producer.partitions_for("t") == {0, 1, 2}
        with pytest.raises(UnknownTopicError):
            producer.partitions_for("nope")


def test_usage_errors(log: embedlog.Log, log_dir: pathlib.Path) -> None:
    log.create_topic("t", partitions=2)
    log.create_topic("c", config={"cleanup.policy": "compact"})
    log.create_topic("small", config={"max.message.bytes": 1000})
    producer = log.producer()
    with pytest.raises(UnknownTopicError):
        producer.send("nope", b"x")
    with pytest.raises(UnknownTopicError):
        producer.send("t", b"x", partition=2)
    with pytest.raises(UsageError, match="compacted"):
        producer.send("c", b"x")
    producer.send("c", None, key=b"k")  # a tombstone is fine
    with pytest.raises(RecordTooLargeError):
        producer.send("small", b"x" * 2000, key=b"k")
    with pytest.raises(TypeError):
        producer.send("t", "text", key=b"k")
    producer.close()
    assert log.end_offset("small", 0) == 0
    with embedlog.open(log_dir, read_only=True) as ro, pytest.raises(ReadOnlyError):
        ro.producer()


def test_serializers_and_log_append_time(log: embedlog.Log) -> None:
    log.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
    with log.producer(key_serializer=str.encode, value_serializer=lambda v: repr(v).encode()
                      ) as producer:
        meta = producer.send("t", {"a": 1}, key="user", timestamp=5)
    record = next(iter(log.read("t", 0)))
    assert (record.key, record.value) == (b"user", b"{'a': 1}")
    assert record.timestamp_type == 1 and record.timestamp == meta.timestamp != 5


def test_compression_is_applied(log: embedlog.Log) -> None:
    log.create_topic("t")
    with log.producer(compression="zstd") as producer:
        for i in range(50):
            producer.send("t", b"same value " * 10, key=b"%d" % i)
    heads = headers_of(log, "t", 0)
    assert {h.compression for h in heads} == {fmt.Compression.ZSTD}
    assert [r.value for r in log.read("t", 0)] == [b"same value " * 10] * 50


def test_topic_recreated_under_a_producer(log: embedlog.Log) -> None:
    log.create_topic("t")
    producer = log.producer()
    producer.send("t", b"1", key=b"k")
    producer.flush()
    log.delete_topic("t")
    log.create_topic("t")
    with pytest.raises(UsageError, match="created again"):
        producer.send("t", b"2", key=b"k")
    assert producer.send("t", b"3", key=b"k").offset == 0
    producer.close()


def test_write_errors_surface_at_the_next_call(log: embedlog.Log) -> None:
    log.create_topic("t")
    producer = log.producer(linger_ms=60_000)
    producer.send("t", b"1", key=b"k")
    fs = ScriptedFS()
    failing = fs.fail("pwrite", persistent=True)
    with _io.use_backend(fs), pytest.raises(StorageError):
        producer.flush()
    assert failing.fired == 1 and fs.calls[-1].name.endswith(".log")
    producer.close()


# --------------------------------------------------------------------------- partitioners


class _Cluster:
    """The part of kafka-python's ClusterMetadata its DefaultPartitioner reads."""

    def __init__(self, partitions: int) -> None:
        self.parts = set(range(partitions))

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self.parts

    available_partitions_for_topic = partitions_for_topic


def test_keyed_partition_matches_kafka_python(log: embedlog.Log) -> None:
    rng = random.Random(11)
    kafka = DefaultPartitioner()
    with log.producer() as producer:
        for partitions in (1, 2, 3, 7, 12, 50):
            topic = f"t{partitions}"
            log.create_topic(topic, partitions=partitions)
            cluster = _Cluster(partitions)
            for _ in range(400):
                key = rng.randbytes(rng.randint(0, 40))
                expected = kafka.partition("t", key, key, b"v", b"v", cluster)
                assert producer.send(topic, b"v", key=key).partition == expected


def test_custom_partitioner_gets_kafka_python_arguments(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=4)
    seen = []

    def last(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        seen.append((key, list(all_partitions)))
        return all_partitions[-1]

    with log.producer(partitioner=last) as producer:
        assert producer.send("t", b"v", key=b"k").partition == 3
        assert producer.send("t", b"v").partition == 3
    assert seen == [(b"k", [0, 1, 2, 3]), (None, [0, 1, 2, 3])]
    with log.producer(partitioner=lambda *a: 9) as bad, pytest.raises(UsageError):
        bad.send("t", b"v")


def test_keyless_records_stick_to_a_partition_per_batch_size(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=3)
    with log.producer(batch_size=1000) as producer:
        parts = [producer.send("t", b"x" * 68).partition for _ in range(60)]
    # one partition at a time, round robin: 10 records of 100 bytes (with framing) make the
    # 1000 bytes after which the next partition takes over
    assert parts == [p for p in (0, 1, 2, 0, 1, 2) for _ in range(10)]


# --------------------------------------------------------------------------- durability


def test_fsync_durability_syncs_before_returning(log: embedlog.Log) -> None:
    log.create_topic("t")
    producer = log.producer(durability="fsync")
    p = log._partition_of("t", 0)
    with _io.use_backend(ScriptedFS()) as fs:
        assert isinstance(fs, ScriptedFS)
        for i in range(5):
            before = fs.count("fsync", suffix=".log")
            producer.send("t", b"%d" % i, key=b"k")
            assert fs.count("fsync", suffix=".log") == before + 1  # one sender: one fsync each
            assert p._commit.synced == p._commit.written
    producer.close()


def _send_all(producer: embedlog.Producer, values: list[bytes], out: list[int],
              partition: int | None = None) -> None:
    for v in values:
        out.append(producer.send("t", v, key=b"k", partition=partition).offset)


@pytest.mark.parametrize("partition", [None, 0])  # 0: records the batch's lane takes
def test_concurrent_fsync_senders_are_all_durable(log: embedlog.Log,
                                                  partition: int | None) -> None:
    log.create_topic("t")
    producer = log.producer(durability="fsync")
    p = log._partition_of("t", 0)
    fs = ScriptedFS()
    fs.before("fsync", lambda call: time.sleep(0.002))  # a disk's latency: senders overlap
    synced_at_ack: list[tuple[int, int]] = []

    class Acks(list[int]):
        def append(self, offset: int) -> None:  # the durable end when send returned
            synced_at_ack.append((offset, p._commit.durable_end))
            super().append(offset)

    acked = Acks()
    with _io.use_backend(fs):
        threads = [threading.Thread(target=_send_all,
                                    args=(producer, [b"v"] * 25, acked, partition))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p._commit.synced == p._commit.written  # every acknowledged record was fsynced
    producer.close()
    assert sorted(acked) == list(range(200)) and log.end_offset("t", 0) == 200
    assert all(offset < durable for offset, durable in synced_at_ack)
    assert 1 <= fs.count("fsync", suffix=".log") <= 200  # never more than one per send


def test_senders_waiting_behind_an_fsync_share_the_next_one(log: embedlog.Log) -> None:
    """Group commit, deterministically: the first sender's fsync is held until seven more
    senders have put their record in the next batch; one more fsync then covers all seven."""
    log.create_topic("t")
    producer = log.producer(durability="fsync")
    held, release = threading.Event(), threading.Event()

    def hold(call: Call) -> None:
        held.set()
        assert release.wait(60)

    fs = ScriptedFS()
    fs.before("fsync", hold, persistent=False, match=lambda call: call.name.endswith(".log"))
    acked: list[int] = []
    with _io.use_backend(fs):
        first = threading.Thread(target=_send_all, args=(producer, [b"first"], acked))
        first.start()
        assert held.wait(60)
        followers = [threading.Thread(target=_send_all, args=(producer, [b"v%d" % i], acked))
                     for i in range(7)]
        for t in followers:
            t.start()
        deadline = time.monotonic() + 60  # a watchdog, not a measurement
        commit = log._topic("t").partitions[0]._commit
        while commit.parked < 7:  # each sender's record is in the batch before it parks
            assert time.monotonic() < deadline, "the followers never queued their records"
            time.sleep(0.001)
        release.set()
        for t in [first, *followers]:
            t.join()
    producer.close()
    assert sorted(acked) == list(range(8))
    assert fs.count("fsync", suffix=".log") == 2  # the held one, then one for all seven


# --------------------------------------------------------------------------- idempotence


def test_idempotent_batches_carry_id_epoch_and_sequences(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    with log.producer(idempotent=True, max_batch_records=7) as producer:
        for i in range(40):
            producer.send("t", b"%d" % i, key=b"k", partition=i % 2)
    with log.producer(idempotent=True) as second:
        second.send("t", b"x", key=b"k", partition=0)
    assert second.producer_id == producer.producer_id + 1
    for part in range(2):
        heads = [h for h in headers_of(log, "t", part) if h.producer_id == producer.producer_id]
        assert {h.producer_epoch for h in heads} == {0}
        seq = 0
        for h in heads:
            assert h.base_sequence == seq
            seq += h.records_count
        assert seq == 20


def test_producer_ids_survive_reopen(log_dir: pathlib.Path) -> None:
    ids = []
    for _ in range(3):
        with embedlog.open(log_dir) as log:
            if "t" not in log.topics():
                log.create_topic("t")
            with log.producer(idempotent=True) as producer:
                producer.send("t", b"v", key=b"k")
                ids.append(producer.producer_id)
    assert ids == sorted(set(ids))
    os.unlink(log_dir / PRODUCER_IDS)  # lost counter: ids continue above what the log holds
    with embedlog.open(log_dir) as log, log.producer(idempotent=True) as producer:
        assert producer.producer_id > ids[-1]


def test_retried_batches_are_not_written_twice(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        with log.producer(idempotent=True, max_batch_records=3) as producer:
            for i in range(24):
                producer.send("t", b"%d" % i, key=b"k")
        batches = raw_batches(log, "t", 0)
        assert len(batches) == 8
        end = log.end_offset("t", 0)
        last = fmt.parse_header(batches[-1])
        again = log._append_encoded("t", 0, bytearray(batches[-1]))
        assert again.base_offset == last.base_offset and log.end_offset("t", 0) == end
    with embedlog.open(log_dir) as log:  # loaded from the close's snapshot: the last batch
        assert log._append_encoded("t", 0, bytearray(batches[-1])).base_offset == last.base_offset
        with pytest.raises(OutOfOrderSequenceError):  # a snapshot keeps only the last batch
            log._append_encoded("t", 0, bytearray(batches[-2]))
    for snapshot in (log_dir / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    with embedlog.open(log_dir) as log:  # without a snapshot, rebuilt from the batch headers
        for batch in batches[-5:]:
            assert log._append_encoded("t", 0, bytearray(batch)).base_offset == (
                fmt.parse_header(batch).base_offset
            )
        with pytest.raises(OutOfOrderSequenceError):  # older than the last 5 batches
            log._append_encoded("t", 0, bytearray(batches[0]))
        assert log.end_offset("t", 0) == end
        assert [r.value for r in log.read("t", 0)] == [b"%d" % i for i in range(24)]


def _idempotent_batch(pid: int, epoch: int, seq: int, n: int) -> bytearray:
    return bytearray(fmt.encode_batch([b"v"] * n, timestamps=0, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=seq))


def test_sequence_gaps_and_old_epochs_are_refused(log: embedlog.Log) -> None:
    log.create_topic("t")
    log._append_encoded("t", 0, _idempotent_batch(77, 1, 10, 2))  # unknown producer: accepted
    with pytest.raises(OutOfOrderSequenceError):
        log._append_encoded("t", 0, _idempotent_batch(77, 1, 13, 1))  # gap
    with pytest.raises(ProducerFencedError):
        log._append_encoded("t", 0, _idempotent_batch(77, 0, 12, 1))
    with pytest.raises(OutOfOrderSequenceError):
        log._append_encoded("t", 0, _idempotent_batch(77, 2, 5, 1))  # new epoch starts at 0
    log._append_encoded("t", 0, _idempotent_batch(77, 2, 0, 1))
    with pytest.raises(ProducerFencedError):
        log._append_encoded("t", 0, _idempotent_batch(77, 1, 12, 1))
    assert log.end_offset("t", 0) == 3


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 8), st.booleans()), min_size=1,
                max_size=25))
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_idempotent_retries_never_duplicate(tmp_path: pathlib.Path,
                                            steps: list[tuple[int, int, bool]]) -> None:
    """Sends, then retries of any earlier batch (reopening between steps at random): every
    record is stored once, in order; retries of the last 5 batches return their offsets (after
    a reopen, of the last batch: the producer snapshot keeps only that one)."""
    path = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "log"
    sent: list[bytes] = []
    batches: list[bytes] = []
    log = embedlog.open(path)
    log.create_topic("t")
    try:
        for n, retry_back, reopen in steps:
            with log.producer(idempotent=True, max_batch_records=n) as producer:
                pid = producer.producer_id
                for _ in range(n):
                    sent.append(b"%d" % len(sent))
                    producer.send("t", sent[-1], key=b"k")
            mine = [b for b in raw_batches(log, "t", 0) if fmt.parse_header(b).producer_id == pid]
            batches += mine
            if reopen:
                log.close()
                log = embedlog.open(path)
            target = mine[-1] if retry_back == 0 else batches[max(0, len(batches) - retry_back)]
            header = fmt.parse_header(target)
            # after a reopen the state comes from the close's snapshot: only the last batch
            same_producer_recent = header.producer_id == pid and (not reopen or target == mine[-1])
            end = log.end_offset("t", 0)
            if same_producer_recent:
                assert log._append_encoded("t", 0, bytearray(target)).base_offset == (
                    header.base_offset
                )
            else:
                try:
                    got = log._append_encoded("t", 0, bytearray(target))
                except OutOfOrderSequenceError:
                    pass
                else:
                    assert got.base_offset == header.base_offset
            assert log.end_offset("t", 0) == end
        assert [r.value for r in log.read("t", 0)] == sent
    finally:
        log.close()
