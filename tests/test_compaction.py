"""Keyed log compaction: Kafka's semantics, crash safety, readers during swaps, the key map."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import embedlog
from doubles import MUTATING_OPS, Call, Crash, ScriptedFS
from embedlog import _io
from embedlog.compaction import CompactionStats
from embedlog.compaction.columns import decode_batches
from embedlog.compaction.digest import Digester, padded
from embedlog.compaction.offset_map import OffsetMap
from embedlog.log import Log
from embedlog.manifest import read_manifest
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression
from embedlog.segment.segment import SegmentSettings
from embedlog.view_loader import reader_view
from helpers import KAFKA_VECTORS

kafka_records = pytest.importorskip("kafka.record.memory_records")

DAY = 86_400_000
T0 = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 4096, "index.interval.bytes": 256}


class Clock:
    """A test-controlled clock for tombstone horizons."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


Rec = tuple[int, bytes | None, bytes | None]


def records(log: Log, topic: str = "t", partition: int = 0) -> list[Rec]:
    return [(r.offset, r.key, r.value) for r in log.read(topic, partition)]


def latest(recs: list[Rec]) -> dict[bytes | None, Rec]:
    out: dict[bytes | None, Rec] = {}
    for r in recs:
        out[r[1]] = r
    return out


def batch_headers(directory: pathlib.Path) -> list[fmt.BatchHeader]:
    out = []
    for seg in sorted(directory.glob("*.log")):
        data = seg.read_bytes()
        out += [h for _, h in fmt.iter_batches(data)]
    return out


def kafka_python_read(directory: pathlib.Path) -> list[Rec]:
    """Every data record of a partition folder, decoded (and CRC-checked) by kafka-python."""
    out = []
    for seg in sorted(directory.glob("*.log")):
        mr = kafka_records.MemoryRecords(seg.read_bytes())
        while mr.has_next():
            batch = mr.next_batch()
            assert batch.validate_crc()
            if batch.is_control_batch:
                continue
            out += [(r.offset, r.key, r.value) for r in batch]
    return out


def fill(log: Log, n: int, keys: int, *, seed: int = 1, tombstones: float = 0.0,
         batch: int = 1, topic: str = "t", start_ts: int = T0) -> list[Rec]:
    """Append ``n`` records over ``keys`` keys (some tombstones), ``batch`` per batch."""
    rng = np.random.default_rng(seed)
    out: list[Rec] = []
    i = 0
    while i < n:
        m = min(batch, n - i)
        ks = [b"key-%04d" % k for k in rng.integers(0, keys, m)]
        vs = [None if rng.random() < tombstones else b"value-%06d" % (i + j) for j in range(m)]
        metas = log.append_batch(topic, vs, keys=ks, timestamps=start_ts + i, partition=0)
        base = metas[0].offset
        out += [(base + j, ks[j], vs[j]) for j in range(m)]
        i += m
    return out


def compacted_view(recs: list[Rec], upto: int) -> list[Rec]:
    """What one pass over records below ``upto`` keeps (no tombstone horizon passed yet)."""
    last = {k: o for o, k, _ in recs if o < upto}
    return [r for r in recs if r[0] >= upto or last[r[1]] == r[0]]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ram_dir(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A scratch directory on tmpfs when there is one: the crash and model tests make tens of
    thousands of file-system calls, each ~100x slower on a disk-backed /tmp."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    path = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-test-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def clog(log_dir: pathlib.Path, clock: Clock) -> Iterator[Log]:
    with Log(log_dir, clock=clock) as opened:
        opened.create_topic("t", config=COMPACT)
        yield opened


# ---------------------------------------------------------------------------- key map


def digests(keys: list[bytes], digester: Digester, shift: int = 0) -> tuple[Any, Any]:
    data = b"x" * shift + b"".join(keys)
    lens = np.array([len(k) for k in keys], np.int64)
    pos = np.zeros(len(keys), np.int64)
    pos[1:] = np.cumsum(lens)[:-1]
    return digester.digests(padded(data), pos + shift, lens)


def test_digests_depend_on_the_key_bytes_only() -> None:
    d = Digester()
    keys = [b"", b"a", b"a\x00", b"\x00", b"12345678", b"123456789", b"x" * 1000, b"y" * 17]
    a0, a1 = digests(keys, d)
    b0, b1 = digests(keys, d, shift=5)
    assert (a0 == b0).all() and (a1 == b1).all()
    assert len(set(zip(a0.tolist(), a1.tolist(), strict=True))) == len(keys)
    rng = np.random.default_rng(7)
    many = list({rng.bytes(int(n)) for n in rng.integers(0, 40, 20_000)})
    m0, m1 = digests(many, d)
    assert len(set(zip(m0.tolist(), m1.tolist(), strict=True))) == len(many)
    other0, _ = digests(keys, Digester())
    assert (other0 != a0).any()  # seeds differ per instance


def test_offset_map_keeps_the_latest_offset_and_grows() -> None:
    d = Digester()
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 5000, 40_000)
    keys = [b"k%d" % i for i in ids.tolist()]
    lane0, lane1 = digests(keys, d)
    m = OffsetMap(1 << 20, initial_entries=100)
    offsets = np.arange(len(keys), dtype=np.int64)
    for lo in range(0, len(keys), 7000):
        hi = lo + 7000
        assert m.grow(m.size + hi - lo)
        m.put(lane0[lo:hi], lane1[lo:hi], offsets[lo:hi])
    want = {}
    for o, k in enumerate(ids.tolist()):
        want[k] = o
    assert m.size == len(want)
    got = m.get(lane0, lane1)
    assert got.tolist() == [want[k] for k in ids.tolist()]
    assert m.latest_offsets().tolist() == sorted(want.values())
    absent0, absent1 = digests([b"nope", b"never"], d)
    assert m.get(absent0, absent1).tolist() == [-1, -1]
    # an older offset for a known key does not replace the newer one
    m.put(lane0[:1], lane1[:1], np.array([-5 + 5], np.int64))
    assert m.get(lane0[:1], lane1[:1])[0] == want[int(ids[0])]
    assert m.nbytes <= 1 << 20


def test_offset_map_respects_its_budget() -> None:
    m = OffsetMap(24 * 100)
    assert m.slots <= 100 and m.max_entries < 100
    assert not m.grow(1000)
    d = Digester()
    l0, l1 = digests([b"%d" % i for i in range(m.max_entries + 1)], d)
    with pytest.raises(ValueError, match="may not fit"):
        m.put(l0, l1, np.arange(len(l0), dtype=np.int64))
    with pytest.raises(ValueError):
        OffsetMap(10)


# ---------------------------------------------------------------------------- columns


def test_decode_batches_matches_batch_by_batch_decoding() -> None:
    rng = np.random.default_rng(5)
    batches, base = [], 0
    for b in range(40):
        n = int(rng.integers(0, 40))
        if n == 0:
            raw = fmt.encode_batch([], timestamps=-1, base_offset=base, last_offset_delta=3)
        else:
            keys = [None if rng.random() < 0.1 else b"k%d" % rng.integers(99) for _ in range(n)]
            vals = [None if rng.random() < 0.2 else rng.bytes(int(rng.integers(0, 300)))
                    for _ in range(n)]
            hdrs = ([(("h", b"v"),) if rng.random() < 0.3 else None for _ in range(n)]
                    if b % 2 else None)
            raw = fmt.encode_batch(vals, keys=keys, headers=hdrs, base_offset=base,
                                   timestamps=[T0 + 3 * i for i in range(n)],
                                   compression=[0, 1, 2, 3, 4][b % 5],
                                   timestamp_type=1 if b % 7 == 0 else 0, max_timestamp=None)
        header = fmt.parse_header(raw, 0)
        batches.append((raw, header))
        base = header.next_offset
    cols = decode_batches(batches)
    assert cols.bounds is not None
    r = cols.records
    expect = [fmt.decode_records(raw, 0, h) for raw, h in batches]
    assert r.offsets.tolist() == [o for e in expect for o in e.offsets.tolist()]
    assert r.timestamps.tolist() == [t for e in expect for t in e.timestamps.tolist()]
    assert r.keys() == [k for e in expect for k in e.keys()]  # noqa: SIM118
    assert r.values() == [v for e in expect for v in e.values()]
    assert [r.header(i) for i in range(len(r))] == [
        e.header(i) for e in expect for i in range(len(e))]
    # every record's bytes are exactly one record
    for i in range(len(r)):
        piece = r.data[cols.bounds[i] : cols.bounds[i + 1]]
        length, after = fmt.decode_varint(piece, 0, 5)
        assert after + length == len(piece)


def test_decode_batches_refuses_byte_ranges_for_non_minimal_varints() -> None:
    good = fmt.encode_batch([b"v1", b"v2"], keys=[b"a", b"b"], timestamps=T0)
    header = fmt.parse_header(good, 0)
    section = bytearray(good[fmt.HEADER_SIZE:])
    # record 0 = 12 00 00 00 02 61 04 76 31 00 (length 9): write its headersCount 0 as the
    # two-byte varint 80 00, which Kafka's decoder accepts too
    assert section[0] == 0x12 and section[9] == 0
    section[0:10] = bytes([0x14]) + section[1:9] + b"\x80\x00"
    raw = fmt.rebuild_batch(header, bytes(section), 2, header.max_timestamp)
    cols = decode_batches([(raw, fmt.parse_header(raw, 0))])
    assert cols.bounds is None
    assert cols.records.values() == [b"v1", b"v2"]


# ---------------------------------------------------------------------------- semantics


def test_latest_value_per_key_survives_offsets_preserved(clog: Log) -> None:
    written = fill(clog, 3000, 150, tombstones=0.05, batch=7)
    clog.roll("t", 0)
    active_base = clog.end_offset("t", 0)
    written += fill(clog, 40, 150, seed=2, start_ts=T0 + 5000)  # the active segment: untouched
    before = records(clog)
    stats = clog.compact("t")
    after = records(clog)
    assert after == compacted_view(written, active_base)
    assert latest(after) == latest(before)
    assert [o for o, _, _ in after] == sorted({o for o, _, _ in after})
    assert stats.records_read == active_base and stats.records_retained == len(
        [r for r in after if r[0] < active_base])
    assert stats.passes == 1 and stats.partitions == 1
    assert kafka_python_read(pathlib.Path(clog.path) / "t-0") == after
    # reading from an offset removed by compaction gives the next one that exists
    gone = next(o for o in range(active_base) if o not in {r[0] for r in after})
    assert next(clog.read("t", 0, gone)).offset > gone


def test_batches_keep_offsets_producer_fields_and_codec(clog: Log) -> None:
    clog.alter_topic("t", {"segment.bytes": 1 << 20})
    base = 0
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        raw = bytearray(fmt.encode_batch(
            [b"a%d" % i, b"b%d" % i, b"c%d" % i] * 4, keys=[b"a", b"b", b"c"] * 4,
            timestamps=[T0 + j for j in range(12)], compression=Compression[codec.upper()],
            producer_id=40 + i, producer_epoch=2, base_sequence=100, leader_epoch=7))
        base = clog._append_encoded("t", 0, raw).next_offset
    clog.append("t", b"tail", key=b"z")
    clog.roll("t", 0)
    clog.append("t", b"active", key=b"y")
    before = batch_headers(pathlib.Path(clog.path) / "t-0")
    clog.compact("t")
    after = batch_headers(pathlib.Path(clog.path) / "t-0")
    by_base = {h.base_offset: h for h in after}
    for old in before[:5]:
        new = by_base[old.base_offset]
        assert (new.last_offset_delta, new.producer_id, new.producer_epoch, new.base_sequence,
                new.leader_epoch, new.max_timestamp) == (
            old.last_offset_delta, old.producer_id, old.producer_epoch, old.base_sequence,
            old.leader_epoch, old.max_timestamp)
    # only the last batch held latest values; the others are their producers' last batches
    # (one batch per producer): they stay emptied, as Kafka's writeEmptyHeader writes them
    assert [h.records_count for h in after[:5]] == [0, 0, 0, 0, 3]
    assert [h.compression for h in after[:5]] == [Compression.NONE] * 4 + [Compression.ZSTD]
    assert all(h.base_timestamp == -1 for h in after[:4])
    assert after[4].max_timestamp == T0 + 11
    assert [r[2] for r in records(clog)] == [b"a4", b"b4", b"c4", b"tail", b"active"]
    assert base == 60


def test_rebuilt_batch_keeps_log_append_time(log_dir: pathlib.Path, clock: Clock) -> None:
    with Log(log_dir, clock=clock) as log:
        log.create_topic("t", config={**COMPACT, "message.timestamp.type": "LogAppendTime"})
        log.append_batch("t", [b"1", b"2", b"3"], keys=[b"a", b"b", b"a"], partition=0)
        log.roll("t", 0)
        log.append("t", b"x", key=b"x")
        clock.now += 10
        log.compact("t")
        recs, _ = list(log.read_batches("t", 0))
        assert recs.timestamp_type == 1 and recs.max_timestamp == T0
        assert recs.last_offset - recs.base_offset == 2
        assert recs.offsets.tolist() == [1, 2] and recs.timestamps.tolist() == [T0, T0]


def test_tombstones_get_a_delete_horizon_then_go(clog: Log, clock: Clock) -> None:
    retention = clog.topic_config("t").delete_retention_ms
    clog.append("t", b"v", key=b"gone")
    clog.append("t", None, key=b"gone")
    clog.append("t", b"w", key=b"kept")
    clog.roll("t", 0)
    clog.append("t", b"active", key=b"x")
    stats = clog.compact("t")
    assert stats.batches_rebuilt == 1 and stats.tombstones_removed == 0
    assert records(clog) == [(1, b"gone", None), (2, b"kept", b"w"), (3, b"x", b"active")]
    horizon = [h for h in batch_headers(pathlib.Path(clog.path) / "t-0") if h.base_offset == 1]
    assert horizon[0].delete_horizon_ms == T0 + retention
    assert horizon[0].attributes & fmt.DELETE_HORIZON_MASK
    # a pass before the horizon keeps the tombstone
    clock.now = T0 + retention - 1
    clog.roll("t", 0)
    clog.append("t", b"again", key=b"x")
    assert clog.compact("t").tombstones_removed == 0
    assert (1, b"gone", None) in records(clog)
    # a pass at the horizon removes it
    clock.now = T0 + retention
    clog.roll("t", 0)
    clog.append("t", b"more", key=b"x")
    assert clog.compact("t").tombstones_removed == 1
    assert [r[1] for r in records(clog)] == [b"kept", b"x", b"x"]


def test_keyless_records_are_rejected_in_compacted_topics(clog: Log) -> None:
    with pytest.raises(embedlog.UsageError, match="every record needs a key"):
        clog.append("t", b"v")
    with pytest.raises(embedlog.UsageError, match="every record needs a key"):
        clog.append_batch("t", [b"a", b"b"], keys=[b"k", None], partition=0)


def test_compact_refuses_plain_topics_and_read_only_logs(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("plain")
        with pytest.raises(embedlog.UsageError, match=r"cleanup\.policy=delete"):
            log.compact("plain")
    with embedlog.open(log_dir, read_only=True) as ro, pytest.raises(embedlog.ReadOnlyError):
        ro.compact("plain")


def test_min_compaction_lag_keeps_young_segments(clog: Log, clock: Clock) -> None:
    clog.alter_topic("t", {"min.compaction.lag.ms": 1000})
    old = fill(clog, 200, 5, start_ts=T0 - 5000, batch=10)
    clog.roll("t", 0)
    young_base = clog.end_offset("t", 0)
    young = fill(clog, 200, 5, seed=9, start_ts=T0 - 10, batch=10)
    clog.roll("t", 0)
    clog.append("t", b"a", key=b"key-0000")
    clog.compact("t")
    got = records(clog)
    assert [r for r in got if r[0] >= young_base][:200] == young  # untouched
    assert [r for r in got if r[0] < young_base] == compacted_view(old, young_base)


def test_several_passes_with_a_small_key_map_match_one_pass(
    tmp_path: pathlib.Path, clock: Clock
) -> None:
    results = []
    for name, map_bytes in (("one", 1 << 24), ("many", 24 * 64)):
        with Log(tmp_path / name, clock=clock) as log:
            log.create_topic("t", config={**COMPACT, "segment.bytes": 1 << 16})
            fill(log, 600, 100, tombstones=0.1, batch=5)
            log.roll("t", 0)
            stats = log.compact("t", map_bytes=map_bytes)
            results.append((records(log), stats.passes))
    assert results[0][0] == results[1][0]
    assert results[0][1] == 1 and results[1][1] > 5


def test_small_segments_are_merged_on_the_next_pass(clog: Log) -> None:
    fill(clog, 3000, 20, batch=10)
    clog.roll("t", 0)
    first = len(clog.segments("t", 0))
    clog.compact("t")
    fill(clog, 10, 20, seed=4, start_ts=T0 + 10_000)
    clog.roll("t", 0)
    stats = clog.compact("t")
    after = len(clog.segments("t", 0))
    assert first > 20 and after <= 3, (first, after)
    assert stats.segments_read > stats.segments_written
    sizes = read_manifest(os.path.join(clog.path, "t-0"))
    assert sizes == {s.base_offset: s.size for s in clog.segments("t", 0)[:-1]}


def test_cleaner_checkpoint_is_kafkas_format(clog: Log, log_dir: pathlib.Path) -> None:
    fill(clog, 100, 10, batch=10)
    clog.roll("t", 0)
    end = clog.end_offset("t", 0)
    clog.compact("t")
    text = (log_dir / "cleaner-offset-checkpoint").read_text()
    assert text == f"0\n1\nt 0 {end}\n"
    # nothing dirty: a second compaction does nothing
    assert clog.compact("t").passes == 0
    clog.delete_topic("t")
    assert (log_dir / "cleaner-offset-checkpoint").read_text() == "0\n0\n"


def test_dirty_ratio_and_max_compaction_lag(clog: Log, clock: Clock) -> None:
    fill(clog, 2000, 400, batch=20, start_ts=T0 - DAY)
    clog.roll("t", 0)
    clog.compact("t")
    fill(clog, 20, 10, seed=3, batch=20, start_ts=T0 - DAY)
    clog.roll("t", 0)
    p = clog._partition_of("t", 0)
    compactor = clog._compaction()
    plan = compactor.plan(p, clock.now)
    assert plan is not None and 0 < plan.ratio < 0.5 and not plan.due(p.config)
    clog.alter_topic("t", {"max.compaction.lag.ms": 1000})
    plan = compactor.plan(p, clock.now)
    assert plan is not None and plan.max_compaction_delay_ms > 0 and plan.due(p.config)
    clog.alter_topic("t", {"max.compaction.lag.ms": 10 * DAY, "min.cleanable.dirty.ratio": 0.01})
    plan = compactor.plan(p, clock.now)
    assert plan is not None and plan.due(p.config)


def test_transactions_aborted_records_go_markers_stay_while_needed(clog: Log, clock: Clock) -> None:
    clog.alter_topic("t", {"segment.bytes": 1 << 20})
    sequence = {7: 0, 9: 0}

    def txn_batch(pid: int, value: bytes, key: bytes) -> None:
        raw = bytearray(fmt.encode_batch([value], keys=[key], timestamps=T0, producer_id=pid,
                                         producer_epoch=0, base_sequence=sequence[pid],
                                         is_transactional=True))
        sequence[pid] += 1
        clog._append_encoded("t", 0, raw)

    def marker(pid: int, kind: int) -> None:
        k, v = fmt.control_record(kind)
        raw = bytearray(fmt.encode_batch([v], keys=[k], timestamps=T0, producer_id=pid,
                                         producer_epoch=0, is_transactional=True,
                                         is_control=True))
        clog._append_encoded("t", 0, raw)

    def headers() -> dict[int, fmt.BatchHeader]:
        return {h.base_offset: h for h in batch_headers(pathlib.Path(clog.path) / "t-0")}

    def next_pass(at: int) -> None:
        clock.now = at
        clog.roll("t", 0)
        clog.append("t", b"x", key=b"x")
        clog.compact("t")

    clog.append("t", b"committed-before", key=b"a")  # 0
    txn_batch(7, b"aborted", b"a")                    # 1
    marker(7, fmt.CONTROL_ABORT)                      # 2
    txn_batch(7, b"committed", b"b")                  # 3
    marker(7, fmt.CONTROL_COMMIT)                     # 4
    clog.append("t", b"b-later", key=b"b")            # 5
    clog.roll("t", 0)
    txn_batch(9, b"open", b"c")                       # 6: no marker yet
    clog.compact("t")
    # the aborted record went (and did not replace offset 0); producer 7's last data batch
    # stays as an empty batch; both markers stay: their transactions' batches were still seen
    assert records(clog) == [(0, b"a", b"committed-before"), (5, b"b", b"b-later"),
                             (6, b"c", b"open")]
    heads = headers()
    assert 1 not in heads and heads[3].records_count == 0 and heads[3].producer_id == 7
    assert heads[2].is_control and heads[2].delete_horizon_ms is None
    assert clog._compaction().first_dirty(clog._partition_of("t", 0)) == 6
    # the open transaction holds the cleaner back (last stable offset)
    next_pass(T0)
    assert clog._compaction().first_dirty(clog._partition_of("t", 0)) == 6
    marker(9, fmt.CONTROL_COMMIT)
    next_pass(T0 + DAY)
    # the ABORT marker's data is gone: it gets a delete horizon, then goes after it
    assert headers()[2].delete_horizon_ms == T0 + 2 * DAY
    assert headers()[4].delete_horizon_ms is None  # its transaction's batch header is still there
    next_pass(T0 + 2 * DAY)
    assert 2 not in headers() and 4 in headers()
    assert (6, b"c", b"open") in records(clog)
    assert kafka_python_read(pathlib.Path(clog.path) / "t-0") == records(clog)


# ---------------------------------------------------------------------------- format checks


def test_compacted_segments_validate_in_kafka_python_and_the_vector_tool(clog: Log) -> None:
    written = fill(clog, 4000, 100, tombstones=0.05, batch=13)
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        clog.append_batch("t", [b"%s-%d" % (codec.encode(), i) for i in range(50)],
                          keys=[b"key-%04d" % i for i in range(50)], compression=codec,
                          timestamps=T0 + 9999, partition=0)
    clog.roll("t", 0)
    clog.compact("t")
    folder = pathlib.Path(clog.path) / "t-0"
    assert kafka_python_read(folder) == records(clog)
    assert len(written) == 4000
    if not KAFKA_VECTORS.is_file():
        pytest.skip("kafka_vectors.py is not present")
    for seg in sorted(folder.glob("*.log")):
        if seg.stat().st_size == 0:
            continue
        out = subprocess.run([sys.executable, str(KAFKA_VECTORS), "read", str(seg)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-2000:]


def test_real_compacted_kafka_fixture_still_reads_and_compacts(
    kafka_fixtures: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    src = kafka_fixtures / "kafka27-compacted-multiseg"
    with embedlog.open(src, read_only=True) as ro:
        assert [r.offset for r in ro.read("__consumer_offsets", 39)] == [4, 16, 17, 18, 19]
    copy = tmp_path / "k"
    shutil.copytree(src, copy)
    for root, dirs, files in os.walk(copy):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o750 if name in dirs else 0o640)
    os.chmod(copy, 0o750)
    folder = copy / "__consumer_offsets-39"
    before = sorted((p.name, p.read_bytes()) for p in folder.glob("*.log"))
    with embedlog.open(copy, adopt=True) as log:
        log.alter_topic("__consumer_offsets", {"cleanup.policy": "compact"})
        expect = records(log, "__consumer_offsets", 39)
        # the broker's cleaner-offset-checkpoint says 39 -> 18: nothing is dirty
        assert log.compact("__consumer_offsets").passes == 0
    assert sorted((p.name, p.read_bytes()) for p in folder.glob("*.log")) == before
    (copy / "cleaner-offset-checkpoint").unlink()
    with embedlog.open(copy, adopt=True) as log:
        stats = log.compact("__consumer_offsets")
        assert stats.passes >= 1
        got = records(log, "__consumer_offsets", 39)
    assert latest(got) == latest(expect)
    assert kafka_python_read(folder) == got


# ---------------------------------------------------------------------------- readers


def test_iterator_opened_before_a_swap_finishes_without_duplicates(clog: Log) -> None:
    fill(clog, 2000, 50, batch=5)
    clog.roll("t", 0)
    before = records(clog)
    it = clog.read("t", 0)
    head = [next(it) for _ in range(10)]
    cols = clog.read_batches("t", 0, 500)
    first_cols = next(cols)
    clog.compact("t")
    rest = [(r.offset, r.key, r.value) for r in it]
    assert [(r.offset, r.key, r.value) for r in head] + rest == before
    offsets = first_cols.offsets.tolist() + [o for b in cols for o in b.offsets.tolist()]
    assert offsets == [o for o, _, _ in before if o >= 500]


def test_read_only_process_sees_each_swap_consistently(clog: Log, log_dir: pathlib.Path) -> None:
    fill(clog, 1500, 40, batch=3)
    clog.roll("t", 0)
    with embedlog.open(log_dir, read_only=True) as ro:
        old = records(ro)
        it = ro.read("t", 0)
        first = next(it)
        clog.compact("t")
        assert [(first.offset, first.key, first.value)] + [
            (r.offset, r.key, r.value) for r in it] == old
        new = records(ro)
        assert new == records(clog)
        assert latest(new) == latest(old)
        assert len(ro.segments("t", 0)) == len(clog.segments("t", 0))


def no_sync() -> ScriptedFS:
    """The real file system without fsync: the crash tests model a killed process, whose
    writes all survive in the page cache, so syncing only costs time."""
    return ScriptedFS(sync=False)


def crash_at(n: int) -> ScriptedFS:
    """Performs the first ``n - 1`` mutations, then crashes (a process killed at that point:
    everything done before it is in the page cache, nothing after it happens)."""
    fs = no_sync()
    fs.crash_at(n)
    return fs


def dead() -> ScriptedFS:
    """Every mutation (and every open) fails: lets a crashed Log release its lock without
    writing."""
    fs = ScriptedFS()
    fs.fail(("open", *MUTATING_OPS), persistent=True, error=lambda call: Crash("dead"))
    return fs


def abandon(log: Log) -> None:
    with _io.use_backend(dead()), contextlib.suppress(Crash, embedlog.EmbedlogError):
        log.close()


def by_range(recs: list[Rec], bounds: list[int]) -> list[list[Rec]]:
    edges = [*bounds, 2**63]
    return [[r for r in recs if edges[i] <= r[0] < edges[i + 1]] for i in range(len(bounds))]


def test_a_crash_anywhere_in_a_compaction_leaves_old_or_new_data(
    ram_dir: pathlib.Path, clock: Clock
) -> None:
    tmp_path = ram_dir
    template = tmp_path / "template"
    with _io.use_backend(no_sync()), Log(template, clock=clock) as log:
        log.create_topic("t", config={**COMPACT, "segment.bytes": 1500})
        fill(log, 150, 12, tombstones=0.1, batch=6)
        log.roll("t", 0)
        fill(log, 30, 12, seed=5, batch=6, start_ts=T0 + 1000)
        log.roll("t", 0)
        log.append("t", b"active", key=b"key-0001")
        old = records(log)
    done = tmp_path / "done"
    shutil.copytree(template, done)
    counter = no_sync()
    with Log(done, clock=clock) as log:
        with _io.use_backend(counter):
            log.compact("t")
        new = records(log)
        groups = [s.base_offset for s in log.segments("t", 0)]
    assert new != old and len(groups) > 3 and counter.mutations > 50
    old_parts, new_parts = by_range(old, groups), by_range(new, groups)
    for n in range(1, counter.mutations + 1):
        state = tmp_path / f"crash{n}"
        shutil.copytree(template, state)
        with _io.use_backend(no_sync()):
            log = Log(state, clock=clock)
        with pytest.raises(Crash), _io.use_backend(crash_at(n)):
            log.compact("t")
        abandon(log)
        with embedlog.open(state, read_only=True) as ro:  # before any recovery
            seen = records(ro)
        with _io.use_backend(no_sync()), Log(state, clock=clock) as log:
            recovered = records(log)
            for got in (seen, recovered):
                assert latest(got) == latest(old), n
                for part, before, after in zip(by_range(got, groups), old_parts, new_parts,
                                               strict=True):
                    assert part in (before, after), n
            log.compact("t")
            assert records(log) == new, n
        shutil.rmtree(state)


def test_reader_view_applies_an_interrupted_swap(tmp_path: pathlib.Path, clock: Clock) -> None:
    state = tmp_path / "s"
    with Log(state, clock=clock) as log:
        log.create_topic("t", config=COMPACT)
        for i in range(8):  # small segments, merged in groups
            fill(log, 40, 10, seed=i, batch=4, start_ts=T0 + 100 * i)
            log.roll("t", 0)
        old = records(log)
        bases = [s.base_offset for s in log.segments("t", 0)]
    # stop right after the first group's old segments were unlinked, before the rename
    stops: list[Call] = []

    def stop(call: Call) -> None:
        stops.append(call)
        raise Crash("rename")

    fs = no_sync()
    fs.before("rename", stop, match=lambda call: (call.path or "").endswith(".log.swap"))
    log = Log(state, clock=clock)
    with pytest.raises(Crash), _io.use_backend(fs):
        log.compact("t")
    abandon(log)
    folder = state / "t-0"
    names = os.listdir(folder)
    assert any(n.endswith(".log.swap") for n in names) and stops
    view = reader_view(str(folder), SegmentSettings())
    assert set(view) < set(bases)  # the old segments the swap replaces are not in the view
    with embedlog.open(state, read_only=True) as ro:
        seen = records(ro)
    assert latest(seen) == latest(old)
    assert [o for o, _, _ in seen] == sorted({o for o, _, _ in seen})


# ---------------------------------------------------------------------------- background


def test_background_cleaner_compacts_dirty_partitions_while_a_reader_tails(
    log_dir: pathlib.Path, clock: Clock
) -> None:
    with Log(log_dir, clock=clock) as log:
        log.create_topic("t", config={**COMPACT, "min.cleanable.dirty.ratio": 0.1})
        errors: list[BaseException] = []
        acked: dict[bytes, int] = {}
        values: dict[int, bytes] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def tail() -> None:
            reader = embedlog.open(log_dir, read_only=True)
            try:
                while not stop.is_set():
                    with lock:
                        expected = dict(acked)
                    seen: dict[bytes, int] = {}
                    last = -1
                    for r in reader.read("t", 0):
                        assert r.offset > last
                        last = r.offset
                        with lock:
                            assert r.value == values[r.offset]
                        seen[r.key] = r.offset
                    for key, offset in expected.items():
                        assert seen.get(key, -1) >= offset, (key, offset)
            except BaseException as exc:
                errors.append(exc)
            finally:
                reader.close()

        readers = [threading.Thread(target=tail) for _ in range(2)]
        for t in readers:
            t.start()
        log.start_cleaner(interval_s=0.01)
        cleaner = log._cleaner
        assert cleaner is not None
        rng = np.random.default_rng(11)
        for i in range(3000):
            key = b"k%d" % rng.integers(40)
            with lock:  # readers must not see the record before its value is known here
                offset = log.append("t", b"v%d" % i, key=key).offset
                values[offset] = b"v%d" % i
                acked[key] = offset
            if i % 500 == 499:
                assert cleaner.wait_rounds(cleaner.rounds + 2, timeout=30)
        assert cleaner.wait_rounds(cleaner.rounds + 2, timeout=30)
        stop.set()
        for t in readers:
            t.join()
        assert not errors, "".join(traceback.format_exception(errors[0]))
        final = records(log)
        assert len(final) < 1000
        assert latest(final) == {k: (o, k, values[o]) for k, o in acked.items()}
    assert not cleaner.is_alive()


READER_PROCESS = """
import os, sys, embedlog
path, stop = sys.argv[1], sys.argv[2]
scans = 0
with embedlog.open(path, read_only=True) as log:
    while not os.path.exists(stop) or scans == 0:
        last, seq = -1, {}
        for r in log.read("t", 0):
            assert r.offset > last, (r.offset, last)
            last = r.offset
            key, n = r.value.split(b":")
            assert key == r.key, (r.key, r.value)
            assert int(n) > seq.get(key, -1), (r.offset, r.value)
            seq[key] = int(n)
        scans += 1
print("ok", scans)
"""


def test_a_reader_process_reads_consistently_during_background_compaction(
    log_dir: pathlib.Path, tmp_path: pathlib.Path, clock: Clock
) -> None:
    with Log(log_dir, clock=clock) as log:
        log.create_topic("t", config={**COMPACT, "min.cleanable.dirty.ratio": 0.1})
        log.append("t", b"k0:0", key=b"k0")
        stop = tmp_path / "stop"
        reader = subprocess.Popen([sys.executable, "-c", READER_PROCESS, str(log_dir), str(stop)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            log.start_cleaner(interval_s=0.01)
            cleaner = log._cleaner
            assert cleaner is not None
            rng = np.random.default_rng(2)
            for i in range(1, 4000):
                key = b"k%d" % rng.integers(30)
                log.append("t", key + b":%d" % i, key=key)
            assert cleaner.wait_rounds(cleaner.rounds + 3, timeout=30)
            stop.touch()
            out, err = reader.communicate(timeout=60)
        finally:
            reader.kill()
        assert reader.returncode == 0, err[-3000:]
        assert out.startswith("ok")
        assert len(records(log)) < 1000


def test_close_interrupts_a_compaction_running_in_another_thread(
    log_dir: pathlib.Path, clock: Clock
) -> None:
    log = Log(log_dir, clock=clock)
    log.create_topic("t", config=COMPACT)
    fill(log, 2000, 30, batch=10)
    log.roll("t", 0)
    old = records(log)
    writing = threading.Event()
    go_on = threading.Event()

    def gate(call: Call) -> None:
        if threading.current_thread() is not threading.main_thread() and not go_on.is_set():
            writing.set()
            assert go_on.wait(30)

    fs = ScriptedFS()
    fs.before("pwrite", gate)

    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(log.compact("t"))
        except BaseException as exc:
            outcome.append(exc)

    with _io.use_backend(fs):
        worker = threading.Thread(target=run)
        worker.start()
        assert writing.wait(30)  # the pass is writing its first cleaned segment
        closer = threading.Thread(target=log.close)
        closer.start()
        go_on.set()
        closer.join(30)
        worker.join(30)
    assert not closer.is_alive() and not worker.is_alive() and log.closed
    assert isinstance(outcome[0], CompactionStats), outcome
    assert outcome[0].segments_written < outcome[0].segments_read or outcome[0].passes == 0
    with Log(log_dir, clock=clock) as reopened:
        got = records(reopened)
        assert latest(got) == latest(old)
        assert not [n for n in os.listdir(log_dir / "t-0") if n.endswith((".cleaned", ".swap"))]


# ---------------------------------------------------------------------------- model


class CompactionModel(RuleBasedStateMachine):
    """Keyed appends, tombstones, rolls, compactions and reopens against a model of what Kafka's
    cleaner keeps (one pass per compaction: the key map always fits)."""

    RETENTION = 1000

    def __init__(self) -> None:
        super().__init__()
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="compaction-model-", dir=shm))
        self.clock = Clock()
        self.log: Log | None = None

    @initialize()
    def start(self) -> None:
        self.log = Log(self.dir / "log", clock=self.clock)
        self.log.create_topic("t", config={
            "cleanup.policy": "compact", "segment.bytes": 1 << 30, "segment.ms": 10**12,
            "delete.retention.ms": self.RETENTION})
        self.present: list[list[Any]] = []  # [offset, key, value, horizon]
        self.next_offset = 0
        self.active_base = 0
        self.first_dirty = 0

    @rule(key=st.sampled_from([b"a", b"b", b"c", b"d"]),
          value=st.one_of(st.none(), st.binary(min_size=0, max_size=20)))
    def append(self, key: bytes, value: bytes | None) -> None:
        assert self.log is not None
        meta = self.log.append("t", value, key=key, timestamp=self.clock.now)
        assert meta.offset == self.next_offset
        self.present.append([meta.offset, key, value, None])
        self.next_offset += 1

    @rule()
    def roll(self) -> None:
        assert self.log is not None
        self.log.roll("t", 0)
        if self.next_offset > self.active_base:
            self.active_base = self.next_offset

    @rule(ms=st.integers(0, 2500))
    def tick(self, ms: int) -> None:
        self.clock.now += ms

    @rule()
    def roll_then_compact(self) -> None:
        self.roll()
        self.compact()

    @rule()
    def compact(self) -> None:
        assert self.log is not None
        self.log.compact("t")
        upto, now = self.active_base, self.clock.now
        if self.first_dirty >= upto:
            return
        last = {r[1]: r[0] for r in self.present if self.first_dirty <= r[0] < upto}
        kept = []
        for r in self.present:
            offset, key, value, horizon = r
            if offset < upto:
                newest = last[key] == offset if offset >= self.first_dirty else key not in last
                if not newest or (value is None and horizon is not None and now >= horizon):
                    continue
                if value is None and horizon is None:
                    r[3] = now + self.RETENTION
            kept.append(r)
        self.present = kept
        self.first_dirty = upto

    @rule()
    def reopen(self) -> None:
        assert self.log is not None
        self.log.close()
        self.log = Log(self.dir / "log", clock=self.clock)

    @invariant()
    def reads_match_the_model(self) -> None:
        if self.log is None:
            return
        assert records(self.log) == [(o, k, v) for o, k, v, _ in self.present]

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


CompactionModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_compaction_model = CompactionModel.TestCase
