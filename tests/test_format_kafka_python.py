"""Cross-check of embedlog.segment.format against kafka-python's independent v2 codec.

Both directions: every batch we encode validates and decodes identically with
``kafka.record.default_records.DefaultRecordBatch``; every batch kafka-python's builder makes
(each codec) decodes identically here; real broker segments decode identically with both.
"""

from __future__ import annotations

import pathlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from embedlog.errors import UnsupportedFormatError
from embedlog.segment.codecs import Compression
from embedlog.segment.format import (
    BatchHeader,
    DecodedRecords,
    control_record,
    decode_control_record,
    decode_records,
    encode_batch,
    iter_batches,
    next_batch,
    set_base_offset,
)

T0 = 1_700_000_000_000
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def kafka_rows(buf: bytes) -> tuple[DefaultRecordBatch, list[Row]]:
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    rows = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
    return batch, rows


def our_rows(r: DecodedRecords) -> list[Row]:
    return [
        (o, t, k, v, r.header(i))
        for i, (o, t, k, v) in enumerate(
            zip(r.offsets.tolist(), r.timestamps.tolist(), r.keys(), r.values(), strict=True)
        )
    ]


def same_header(kb: DefaultRecordBatch, h: BatchHeader) -> None:
    assert (kb.base_offset, kb.leader_epoch, kb.magic, kb.crc) == (
        h.base_offset,
        h.leader_epoch,
        h.magic,
        h.crc,
    )
    assert (kb.attributes, kb.compression_type, kb.timestamp_type) == (
        h.attributes,
        h.compression,
        h.timestamp_type,
    )
    assert (kb.is_transactional, kb.is_control_batch) == (h.is_transactional, h.is_control)
    assert (kb.last_offset_delta, kb.first_timestamp, kb.max_timestamp) == (
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
    )
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.records_count) == (
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.records_count,
    )


def _compressible(i: int) -> bytes:
    return b"embedlog-compressible-value-" * (1 + i % 5) + b"%d" % i


# --------------------------------------------------------------------------- ours -> kafka-python


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize(
    "producer",
    [(-1, -1, -1, False), (4242, 3, 0, False), (7777, 1, 100, True)],
    ids=["plain", "idempotent", "transactional"],
)
def test_our_batches_read_by_kafka_python(
    codec: Compression, producer: tuple[int, int, int, bool]
) -> None:
    pid, epoch, seq, txn = producer
    n = 60
    values = [None if i % 7 == 3 else _compressible(i) for i in range(n)]
    keys = [None if i % 5 == 1 else b"key-%d" % i for i in range(n)]
    headers = [
        [("trace", b"t%d" % i), ("null", None), ("ünï", b"")] if i % 4 == 0 else None
        for i in range(n)
    ]
    stamps = [T0 + (i * 37) % 1000 - 300 for i in range(n)]  # out of order, negative deltas
    buf = encode_batch(
        values,
        keys=keys,
        headers=headers,
        timestamps=stamps,
        compression=codec,
        base_offset=1000,
        leader_epoch=7,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    h = next_batch(buf, 0)
    assert h is not None and h.compression is codec
    kb, rows = kafka_rows(buf)
    same_header(kb, h)
    assert rows == our_rows(decode_records(buf, 0, h))
    assert [r[1] for r in rows] == stamps
    assert [r[2] for r in rows] == keys and [r[3] for r in rows] == values


def test_our_special_batches_read_by_kafka_python() -> None:
    # compaction output: offset gaps, overridden lastOffsetDelta, delete horizon
    buf = encode_batch(
        [b"a", None],
        keys=[b"k1", b"k2"],
        timestamps=[T0, T0 + 4],
        offset_deltas=[2, 5],
        last_offset_delta=9,
        base_offset=50,
        delete_horizon_ms=T0 + 1000,
    )
    kb, rows = kafka_rows(buf)
    assert [(o, t) for o, t, *_ in rows] == [(52, T0), (55, T0 + 4)]
    assert kb.last_offset_delta == 9
    # LogAppendTime
    buf = encode_batch([b"x", b"y"], timestamps=[1, 2], timestamp_type=1, max_timestamp=T0)
    kb, rows = kafka_rows(buf)
    assert kb.timestamp_type == 1 and [r[1] for r in rows] == [T0, T0]
    # a COMMIT marker
    key, value = control_record(1, coordinator_epoch=4)
    buf = encode_batch(
        [value],
        keys=[key],
        timestamps=T0,
        producer_id=9,
        producer_epoch=2,
        is_transactional=True,
        is_control=True,
        base_offset=77,
    )
    kb = DefaultRecordBatch(bytearray(buf))
    assert kb.validate_crc() and kb.is_control_batch
    (marker,) = list(kb)
    assert (marker.offset, marker.version, marker.type, marker.commit) == (77, 0, 1, True)
    # an empty batch (what the cleaner keeps)
    buf = encode_batch([], timestamps=[], last_offset_delta=3, max_timestamp=T0, base_offset=8)
    kb, rows = kafka_rows(buf)
    assert rows == [] and kb.records_count == 0 and kb.last_offset_delta == 3


headers_st = st.none() | st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=10)), max_size=3
)


@given(
    rows=st.lists(
        st.tuples(
            st.none() | st.binary(max_size=20),
            st.none() | st.binary(max_size=120),
            headers_st,
            st.integers(-(2**40), 2**40),
        ),
        min_size=1,
        max_size=25,
    ),
    codec=st.sampled_from(list(Compression)),
    base_offset=st.integers(0, 2**40),
)
@settings(max_examples=80, deadline=None)
def test_round_trip_through_kafka_python(
    rows: list[tuple[bytes | None, bytes | None, object, int]],
    codec: Compression,
    base_offset: int,
) -> None:
    keys = [r[0] for r in rows]
    values = [r[1] for r in rows]
    headers = [r[2] for r in rows]
    stamps = [T0 + r[3] for r in rows]
    buf = encode_batch(
        values,
        keys=keys,
        headers=headers,
        timestamps=stamps,  # type: ignore[arg-type]
        compression=codec,
        base_offset=base_offset,
    )
    h = next_batch(buf, 0)
    assert h is not None
    kb, krows = kafka_rows(buf)
    same_header(kb, h)
    assert krows == our_rows(decode_records(buf, 0, h))


def test_a_log_of_our_batches_read_by_memory_records() -> None:
    log = bytearray()
    for i, codec in enumerate(Compression):
        batch = bytearray(
            encode_batch(
                [_compressible(j) for j in range(10)], timestamps=T0 + i, compression=codec
            )
        )
        set_base_offset(batch, i * 10)
        log += batch
    records = MemoryRecords(bytes(log))
    seen = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        seen.extend(r.offset for r in batch)
    assert seen == list(range(50))


# --------------------------------------------------------------------------- kafka-python -> ours


def kafka_python_batch(
    codec: int,
    rows: list[tuple[int, bytes | None, bytes | None, list]],
    producer: tuple[int, int, int] = (-1, -1, -1),
    txn: bool = False,
    base_offset: int = 0,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=txn,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 20,
    )
    for delta, (ts, key, value, headers) in enumerate(rows):
        assert builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = builder.build()
    set_base_offset(buf, base_offset)  # the builder always writes 0; a broker patches it
    return bytes(buf)


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_read_by_us(codec: Compression) -> None:
    rows = [
        (
            T0 + (i * 13) % 50,
            None if i % 6 == 2 else b"k%d" % i,
            None if i % 9 == 4 else _compressible(i),
            [("h", b"%d" % i), ("nil", None)] if i % 3 == 0 else [],
        )
        for i in range(80)
    ]
    buf = kafka_python_batch(codec, rows, producer=(31, 2, 5), txn=True, base_offset=4096)
    h = next_batch(buf, 0)  # verifies the CRC
    assert h is not None and h.compression is codec  # compressible, so the builder compressed
    kb, krows = kafka_rows(buf)
    same_header(kb, h)
    r = decode_records(buf, 0, h)
    assert our_rows(r) == krows
    assert r.offsets.tolist() == list(range(4096, 4176))
    assert r.values() == [row[2] for row in rows]


@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 2**45),
            st.none() | st.binary(max_size=16),
            st.none() | st.binary(max_size=100),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)), max_size=2),
        ),
        min_size=1,
        max_size=20,
    ),
    codec=st.sampled_from(list(Compression)),
)
@settings(max_examples=60, deadline=None)
def test_kafka_python_round_trip_hypothesis(rows: list, codec: Compression) -> None:  # type: ignore[type-arg]
    buf = kafka_python_batch(codec, rows, base_offset=12)
    h = next_batch(buf, 0)
    assert h is not None
    kb, krows = kafka_rows(buf)
    same_header(kb, h)
    assert our_rows(decode_records(buf, 0, h)) == krows


# --------------------------------------------------------------------------- real broker output


def test_real_kafka_segments(kafka_fixtures: pathlib.Path) -> None:
    """Every v2 segment written by real brokers decodes here exactly as kafka-python reads it."""
    n_batches = n_records = n_control = 0
    for path in sorted(kafka_fixtures.rglob("*.log")):
        data = path.read_bytes()
        if len(data) > 16 and data[16] in (0, 1):
            with pytest.raises(UnsupportedFormatError):
                list(iter_batches(data))
            continue
        records = MemoryRecords(data)
        theirs = []
        while (kb := records.next_batch()) is not None:
            assert kb.validate_crc()
            theirs.append(kb)
        ours = list(iter_batches(data))
        assert len(ours) == len(theirs), path
        assert sum(h.size for _, h in ours) == len(data), path
        for (pos, h), kb in zip(ours, theirs, strict=True):
            same_header(kb, h)
            r = decode_records(data, pos, h)
            if h.is_control:
                n_control += 1
                for i, marker in enumerate(kb):
                    assert decode_control_record(r.key(i)) == (marker.version, marker.type)
                    assert int(r.offsets[i]) == marker.offset
                continue
            assert our_rows(r) == [
                (k.offset, k.timestamp, k.key, k.value, tuple(k.headers)) for k in kb
            ], path
            n_batches += 1
            n_records += len(r)
    assert n_batches > 1000 and n_records > 3000


def test_kafka_vector_tool_marker_matches_ours() -> None:
    """The synthetic COMMIT marker recipe of shared/tools/kafka_vectors.py."""
    key = struct.pack(">hh", 0, 1)
    value = struct.pack(">hi", 0, 0)
    buf = bytearray(
        kafka_python_batch(0, [(T0 + 210, key, value, [])], producer=(7777, 1, -1), txn=True)
    )
    attrs = struct.unpack_from(">h", buf, 21)[0] | 0x30
    struct.pack_into(">h", buf, 21, attrs)
    from kafka.record.util import calc_crc32c

    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    set_base_offset(buf, 190)
    struct.pack_into(">i", buf, 12, 5)
    ours = encode_batch(
        [value],
        keys=[key],
        timestamps=T0 + 210,
        base_offset=190,
        leader_epoch=5,
        producer_id=7777,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    assert bytes(buf) == ours
