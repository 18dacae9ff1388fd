"""The public Log API: topics, append, read, offsets, roll, retention, reopen."""

from __future__ import annotations

import os
import pathlib

import pytest

import embedlog
from embedlog.partitioner import partition_for_key
from helpers import small_segments


def values(n: int, prefix: bytes = b"v") -> list[bytes]:
    return [prefix + b"%06d" % i for i in range(n)]


def test_append_and_read_back(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    metas = [
        log.append("t", b"a", key=b"k1", headers=[("h", b"1"), ("n", None)], timestamp=1000),
        log.append("t", None, key=b"k1", timestamp=1001),
        log.append("t", b"c", timestamp=999),
    ]
    assert [m.offset for m in metas] == [0, 1, 2]
    assert [m.partition for m in metas] == [0, 0, 0]
    records = list(log.read("t", 0))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (0, b"k1", b"a", 1000),
        (1, b"k1", None, 1001),
        (2, None, b"c", 999),
    ]
    assert records[0].headers == (("h", b"1"), ("n", None))
    assert records[2].headers == ()
    assert records[0].timestamp_type == 0
    assert log.start_offset("t", 0) == 0 and log.end_offset("t", 0) == 3


def test_append_batch_and_read_from_offset(log: embedlog.Log) -> None:
    log.create_topic("t", config=small_segments())
    for chunk in range(20):
        log.append_batch("t", values(50, b"c%02d-" % chunk), partition=0)
    assert log.end_offset("t", 0) == 1000
    assert len(log.segments("t", 0)) >= 4
    expected = [b"c%02d-%06d" % (i // 50, i % 50) for i in range(1000)]
    for start in (0, 1, 49, 50, 333, 999):
        got = [r.value for r in log.read("t", 0, start)]
        assert got == expected[start:]
    assert [r.offset for r in log.read("t", 0, 10, max_records=3)] == [10, 11, 12]
    assert [r.offset for r in log.read("t", 0, 10, end_offset=13)] == [10, 11, 12]
    assert list(log.read("t", 0, 1000)) == []


def test_every_codec_round_trips(log: embedlog.Log) -> None:
    log.create_topic("t")
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        log.append_batch("t", [codec.encode() * 40] * 30, compression=codec)
    got = [r.value for r in log.read("t", 0)]
    codecs = ("none", "gzip", "snappy", "lz4", "zstd")
    assert got == [c.encode() * 40 for c in codecs for _ in range(30)]


def test_keyed_records_follow_kafka_partitioner(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=6)
    keys = [b"user-%d" % i for i in range(200)]
    for k in keys:
        meta = log.append("t", b"x", key=k)
        assert meta.partition == partition_for_key(k, 6)
    metas = log.append_batch("t", [b"y"] * 200, keys=keys)
    assert sum(1 for _ in metas) <= 6
    for p in range(6):
        for r in log.read("t", p):
            assert partition_for_key(r.key, 6) == p


def test_reopen_keeps_everything(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", partitions=2, config=small_segments())
        for i in range(300):
            log.append("t", b"%d" % i, partition=i % 2)
    assert (log_dir / ".kafka_cleanshutdown").exists()
    with embedlog.open(log_dir) as log:
        assert log.topics() == ["t"]
        assert log.topic_config("t").segment_bytes == 4096
        assert [r.value for r in log.read("t", 1)] == [b"%d" % i for i in range(1, 300, 2)]
        meta = log.append("t", b"more", partition=0)
        assert meta.offset == 150
    with embedlog.open(log_dir, read_only=True) as ro:
        assert ro.end_offset("t", 0) == 151


def test_offsets_for_times(log: embedlog.Log) -> None:
    log.create_topic("t", config=small_segments())
    for i in range(500):
        log.append("t", b"x" * 20, timestamp=10_000 + i * 10)
    assert log.offsets_for_times("t", 0, 0) == 0
    assert log.offsets_for_times("t", 0, 10_000) == 0
    assert log.offsets_for_times("t", 0, 10_005) == 1
    assert log.offsets_for_times("t", 0, 12_340) == 234
    assert log.offsets_for_times("t", 0, 14_990) == 499
    assert log.offsets_for_times("t", 0, 15_000) is None


def test_delete_records_and_retention(log: embedlog.Log) -> None:
    log.create_topic("t", config=small_segments(**{"retention.ms": 1000}))
    for i in range(400):
        log.append("t", b"x" * 30, timestamp=1_000_000 + i)
    bases = [s.base_offset for s in log.segments("t", 0)]
    assert len(bases) > 3 and bases[1] <= 100  # the first segment lies wholly below 100
    new_start = log.delete_records("t", 0, 100)
    assert new_start == 100 and log.start_offset("t", 0) == 100
    assert next(iter(log.read("t", 0))).offset == 100
    with pytest.raises(embedlog.OffsetOutOfRangeError):
        list(log.read("t", 0, 50))
    with pytest.raises(embedlog.OffsetOutOfRangeError):
        log.delete_records("t", 0, 10_000)
    # exactly the segments whose records all lie below 100 are gone
    kept = [b for b, nxt in zip(bases, [*bases[1:], 2**63], strict=True) if nxt > 100]
    assert [s.base_offset for s in log.segments("t", 0)] == kept
    assert kept[0] <= 100 < (kept[1] if len(kept) > 1 else 2**63)
    deleted = log.enforce_retention(now_ms=1_000_000 + 400 + 5000)
    assert deleted == len(kept) - 1  # all but the active one
    assert [s.base_offset for s in log.segments("t", 0)] == kept[-1:]
    assert log.start_offset("t", 0) == log.segments("t", 0)[0].base_offset
    assert log.end_offset("t", 0) == 400


def test_retention_bytes(log: embedlog.Log) -> None:
    log.create_topic("t", config=small_segments(**{"retention.bytes": 8192, "retention.ms": -1}))
    for _ in range(600):
        log.append("t", b"y" * 40)
    log.enforce_retention()
    sizes = [s.size for s in log.segments("t", 0)]
    assert sum(sizes) - sizes[0] < 8192


def test_retention_survives_reopen(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", config=small_segments())
        for _ in range(300):
            log.append("t", b"z" * 40)
        log.delete_records("t", 0, 123)
    with embedlog.open(log_dir) as log:
        assert log.start_offset("t", 0) == 123
        assert next(iter(log.read("t", 0))).offset == 123


def test_bad_input_errors(log: embedlog.Log) -> None:
    for bad in ("", ".", "..", "a/b", "../x", "x" * 250, "caf\u00e9", "nul\x00"):
        with pytest.raises(embedlog.InvalidTopicError):
            log.create_topic(bad)
    log.create_topic("t")
    with pytest.raises(embedlog.TopicExistsError):
        log.create_topic("t")
    with pytest.raises(embedlog.UnknownTopicError):
        log.append("nope", b"x")
    with pytest.raises(embedlog.UnknownTopicError):
        log.append("t", b"x", partition=3)
    with pytest.raises(embedlog.InvalidConfigError):
        log.create_topic("u", config={"segment.bytes": -5})
    with pytest.raises(embedlog.InvalidConfigError):
        log.create_topic("u", config={"no.such.config": 1})
    with pytest.raises(embedlog.OffsetOutOfRangeError):
        list(log.read("t", 0, 5))
    with pytest.raises(embedlog.RecordTooLargeError):
        log.append("t", b"x" * 2_000_000)
    log.create_topic("c", config={"cleanup.policy": "compact"})
    with pytest.raises(embedlog.UsageError):
        log.append("c", b"keyless")


def test_closed_and_read_only(log_dir: pathlib.Path) -> None:
    log = embedlog.open(log_dir)
    log.create_topic("t")
    log.close()
    log.close()
    with pytest.raises(embedlog.LogClosedError):
        log.append("t", b"x")
    with embedlog.open(log_dir, read_only=True) as ro, pytest.raises(embedlog.ReadOnlyError):
        ro.append("t", b"x")
    with pytest.raises(embedlog.UsageError):
        embedlog.open(log_dir / "missing", read_only=True)


def test_second_writer_is_refused(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir):
        with pytest.raises(embedlog.WriterLockedError):
            embedlog.open(log_dir)
        with embedlog.open(log_dir, read_only=True) as ro:
            assert ro.topics() == []
    with embedlog.open(log_dir):
        pass


def test_files_are_not_world_writable(log_dir: pathlib.Path) -> None:
    old = os.umask(0)
    try:
        with embedlog.open(log_dir) as log:
            log.create_topic("t")
            log.append("t", b"x")
    finally:
        os.umask(old)
    for root, dirs, files in os.walk(log_dir):
        for name in dirs + files:
            mode = os.stat(os.path.join(root, name)).st_mode
            assert not mode & 0o002, name


def test_read_only_reader_sees_new_segments(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", config=small_segments())
        log.append("t", b"first")
        ro = embedlog.open(log_dir, read_only=True)
        assert [r.value for r in ro.read("t", 0)] == [b"first"]
        for i in range(200):
            log.append("t", b"n%d" % i)
        assert ro.end_offset("t", 0) == 201
        assert len(list(ro.read("t", 0))) == 201
        log.delete_records("t", 0, 150)
        log.create_topic("later")
        assert "later" in ro.topics()
        ro.close()


def test_iterator_survives_retention_of_the_segments_it_reads(log: embedlog.Log) -> None:
    log.create_topic("t", config=small_segments())
    for i in range(400):
        log.append("t", b"r%04d" % i)
    it = log.read("t", 0)
    first = [next(it).value for _ in range(5)]
    log.delete_records("t", 0, 390)
    rest = [r.value for r in it]
    assert first + rest == [b"r%04d" % i for i in range(400)]
    assert [r.offset for r in log.read("t", 0)] == list(range(390, 400))


def test_threads_append_and_read_one_log(log: embedlog.Log) -> None:
    import threading

    log.create_topic("t", partitions=2, config=small_segments())
    errors: list[BaseException] = []

    def writer(tid: int) -> None:
        try:
            for i in range(300):
                log.append("t", b"%d-%d" % (tid, i), partition=tid % 2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(30):
                for p in (0, 1):
                    offsets = [r.offset for r in log.read("t", p)]
                    assert offsets == list(range(len(offsets)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for p in (0, 1):
        got = [r.value for r in log.read("t", p)]
        assert len(got) == 600
        for tid in (p, p + 2):
            mine = [v for v in got if v.startswith(b"%d-" % tid)]
            assert mine == [b"%d-%d" % (tid, i) for i in range(300)]


def test_read_only_view_sees_delete_records_inside_a_segment(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        log.append_batch("t", values(100))
        with embedlog.open(log_dir, read_only=True) as ro:
            assert ro.start_offset("t", 0) == 0
            log.delete_records("t", 0, 40)
            assert ro.start_offset("t", 0) == 40
            assert next(ro.read("t", 0)).offset == 40
            with pytest.raises(embedlog.OffsetOutOfRangeError):
                list(ro.read("t", 0, 10))


def test_a_count_line_padded_with_control_whitespace_is_parsed_as_it_is_checked() -> None:
    from embedlog.checkpoint import OFFSETS

    assert OFFSETS.parse("0\n1\x1f\x1f\nt 0 5\n") == [("t", 0, 5)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_stay_within_what_a_read_decompresses(
        log: embedlog.Log, codec: str) -> None:
    """70 MiB of zeros compress far below max.message.bytes, but a reader decompresses at most
    MAX_DECOMPRESSED of one batch: the write splits them into batches it can read back (a
    single record that large is stored uncompressed), instead of acknowledging records every
    later read fails on."""
    from embedlog.segment import format as fmt
    from embedlog.segment.codecs import MAX_DECOMPRESSED, compression_from_name
    from embedlog.segment.encode import SectionTooLargeError

    mib = bytes(1 << 20)
    with pytest.raises(SectionTooLargeError):
        fmt.encode_batch([mib * 65], timestamps=0, compression=compression_from_name(codec))
    log.create_topic("t")
    log.append_batch("t", [mib] * 70, keys=[b"k"] * 70, compression=codec,
                     headers=[[("h", b"v")]] * 70)
    log.create_topic("big", config={"max.message.bytes": 80 << 20, "segment.bytes": 200 << 20,
                                    "compression.type": codec})
    log.append("big", mib * 65, key=b"one")
    for topic, count in (("t", 70), ("big", 1)):
        records = list(log.read(topic, 0))
        assert [r.offset for r in records] == list(range(count))
        assert all(r.value == (mib if topic == "t" else mib * 65) for r in records)
        assert log.read_table(topic, columns=["offset"]).num_rows == count
        for batch in log.read_batches(topic, 0):
            assert sum(len(batch.value(i)) for i in range(len(batch))) <= MAX_DECOMPRESSED \
                or len(batch) == 1
    assert [b.compression for b in log.read_batches("big", 0)] == ["none"]
    assert {b.compression for b in log.read_batches("t", 0)} == {codec}
