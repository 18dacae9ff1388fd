"""Layer tests of :class:`embedlog.segment.segment.Segment` alone: one base offset's ``.log``,
``.index`` and ``.timeindex``, with no partition, topic or log around it.

The oracle is a plain list of the batches appended (:class:`Model`); index files are read back
with ``struct`` in Kafka's layout (``.index``: int32 relative offset, int32 position;
``.timeindex``: int64 timestamp, int32 relative offset), not through embedlog's index classes.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles import ScriptedFS
from embedlog import _io
from embedlog.errors import CorruptBatchError, CorruptionError, StorageError
from embedlog.segment import format as fmt
from embedlog.segment.segment import Segment, SegmentSettings

T0 = 1_700_000_000_000
INT32_MAX = 2**31 - 1


# ---------------------------------------------------------------- helpers and the model


def encode(base: int, values: list[bytes], timestamps: list[int]) -> bytes:
    return fmt.encode_batch(values, keys=[b"k%d" % i for i in range(len(values))],
                            timestamps=timestamps, base_offset=base)


@dataclass
class Model:
    """What a segment must hold: the batches appended, in order, with their positions, and the
    index entries Kafka's rules give for that history of appends, seals and reopens."""

    base: int
    interval: int
    batches: list[tuple[int, bytes, fmt.BatchHeader]] = field(default_factory=list)
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # offset, ts, value
    offset_entries: list[tuple[int, int]] = field(default_factory=list)  # relative, position
    time_entries: list[tuple[int, int]] = field(default_factory=list)  # timestamp, relative
    since: int = 0  # bytes appended since the last index entry
    max_ts: int = -1
    max_at: int = -1  # the offset that holds max_ts

    @property
    def size(self) -> int:
        return sum(len(data) for _, data, _ in self.batches)

    @property
    def next_offset(self) -> int:
        return self.batches[-1][2].next_offset if self.batches else self.base

    @property
    def max_timestamp(self) -> int:
        return max((h.max_timestamp for _, _, h in self.batches), default=-1)

    def add(self, values: list[bytes], timestamps: list[int]) -> tuple[bytes, fmt.BatchHeader]:
        data = encode(self.next_offset, values, timestamps)
        header = fmt.parse_header(data)
        first = self.next_offset
        self._index(self.size, header)
        self.batches.append((self.size, data, header))
        self.records += [(first + i, ts, v) for i, (v, ts) in enumerate(
            zip(values, timestamps, strict=True))]
        return data, header

    def _index(self, position: int, h: fmt.BatchHeader) -> None:
        """Kafka's rule: after more than ``interval`` bytes since the previous entry, a batch
        adds (its last offset, its position) to the offset index, and (the largest timestamp so
        far, the offset that holds it) to the time index if that timestamp grew."""
        if h.max_timestamp > self.max_ts:
            self.max_ts, self.max_at = h.max_timestamp, h.last_offset
        if self.since > self.interval:
            self.offset_entries.append((h.last_offset - self.base, position))
            self._time_entry()
            self.since = 0
        self.since += h.size

    def _time_entry(self) -> None:
        if self.max_ts > (self.time_entries[-1][0] if self.time_entries else -1):
            self.time_entries.append((self.max_ts, self.max_at - self.base))

    def seal(self) -> None:
        """Sealing (a close of the active segment too) adds the final time-index entry."""
        if self.max_ts >= 0:
            self._time_entry()

    def reopen(self) -> None:
        """A clean reopen counts index.interval.bytes afresh, as Kafka's LogSegment does
        (bytesSinceLastIndexEntry starts at 0; only a recovery recomputes it)."""
        self.since = 0

    def truncate_to(self, offset: int) -> None:
        """Drop the batches at or above ``offset``; the indexes are rebuilt from the log."""
        kept = [b for b in self.batches if b[2].base_offset < offset]
        self.batches, self.offset_entries, self.time_entries = [], [], []
        self.since, self.max_ts, self.max_at = 0, -1, -1
        for position, data, header in kept:
            self._index(position, header)
            self.batches.append((position, data, header))
        end = self.next_offset
        self.records = [r for r in self.records if r[0] < end]

    def position_of(self, offset: int) -> int | None:
        """Kafka's ``translateOffset``: the first batch whose last offset is >= ``offset``."""
        return next((pos for pos, _, h in self.batches if h.last_offset >= offset), None)

    def offset_for_time(self, ts: int) -> int | None:
        return next((o for o, t, _ in self.records if t >= ts), None)


def assert_indexes(seg: Segment, model: Model) -> None:
    """The sealed segment's index files hold exactly the model's entries."""
    assert raw_entries(seg.index_path, ">ii") == model.offset_entries
    assert raw_entries(seg.timeindex_path, ">qi") == model.time_entries


def settings_for(interval: int, index_bytes: int = 10 * 1024 * 1024) -> SegmentSettings:
    return SegmentSettings(index_interval_bytes=interval, segment_index_bytes=index_bytes)


def open_active(directory: Path | str, base: int, cfg: SegmentSettings) -> Segment:
    """A writer's active segment, as a partition opens it after a clean close."""
    seg = Segment(str(directory), base, cfg, writable=True)
    seg.open_indexes_for_append()
    seg.load_active_state()
    return seg


def read_records(seg: Segment) -> list[tuple[int, int, bytes]]:
    out = []
    for buf, p, header in seg.batches():
        recs = fmt.decode_records(buf, p, header)
        for i in range(len(recs.offsets)):
            start, n = int(recs.value_pos[i]), int(recs.value_len[i])
            out.append((int(recs.offsets[i]), int(recs.timestamps[i]),
                        recs.data[start : start + n]))
    return out


def raw_entries(path: str, fmt_: str) -> list[tuple[int, int]]:
    data = Path(path).read_bytes()
    size = struct.calcsize(fmt_)
    return [struct.unpack_from(fmt_, data, i) for i in range(0, len(data), size)]


@pytest.fixture
def seg_dir(tmp_path: Path) -> Path:
    d = tmp_path / "t-0"
    d.mkdir()
    return d


def filled(seg_dir: Path, batches: int = 10, interval: int = 200, base: int = 0
           ) -> tuple[Segment, Model]:
    model = Model(base, interval)
    seg = open_active(seg_dir, base, settings_for(interval))
    for i in range(batches):
        n = 1 + i % 4
        data, header = model.add([b"value-%d-%d" % (i, j) * 3 for j in range(n)],
                                 [T0 + 10 * i + j for j in range(n)])
        seg.append(data, header)
    return seg, model


# ---------------------------------------------------------------- create, append, read


def test_a_new_segment_is_empty_and_named_by_its_base_offset(seg_dir: Path) -> None:
    seg = open_active(seg_dir, 42, settings_for(100))
    assert sorted(os.listdir(seg_dir)) == [
        "00000000000000000042.index", "00000000000000000042.log",
        "00000000000000000042.timeindex", "00000000000000000042.txnindex"]
    assert os.path.getsize(seg_dir / "00000000000000000042.txnindex") == 0
    assert seg.size == 0 and seg.next_offset == 42 and seg.max_timestamp == -1
    assert list(seg.batches()) == []
    assert seg.find_position(42) is None and seg.find_offset_by_timestamp(0) is None
    seg.close()
    assert os.path.getsize(seg.log_path) == 0
    assert os.path.getsize(seg.index_path) == os.path.getsize(seg.timeindex_path) == 0


def test_append_returns_positions_and_reads_back_every_record(seg_dir: Path) -> None:
    model = Model(100, 200)
    seg = open_active(seg_dir, 100, settings_for(200))
    for i in range(12):
        data, header = model.add([b"v%d" % i] * (i % 3 + 1), [T0 + i] * (i % 3 + 1))
        assert seg.append(data, header) == model.batches[-1][0]
        assert seg.size == model.size and seg.next_offset == model.next_offset
    assert read_records(seg) == model.records
    assert seg.pread(0, seg.size) == b"".join(d for _, d, _ in model.batches)
    for offset in range(model.base - 1, model.next_offset + 2):
        assert seg.find_position(offset) == model.position_of(offset), offset
    seg.close()


def test_offset_and_time_index_entries_follow_index_interval_bytes(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=40, interval=300)
    offsets = model.offset_entries
    assert len(offsets) >= 5  # the interval is small enough to index often
    seg.seal()
    model.seal()
    assert_indexes(seg, model)
    # the index is sparse: every entry maps a batch's last offset to that batch's start
    starts = {pos: h for pos, _, h in model.batches}
    assert all(starts[pos].last_offset == model.base + rel for rel, pos in offsets)


def test_an_interval_of_zero_indexes_every_batch_after_the_first(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=6, interval=0)
    seg.seal()
    assert raw_entries(seg.index_path, ">ii") == [
        (h.last_offset, pos) for pos, _, h in model.batches[1:]]


def test_time_index_only_grows(seg_dir: Path) -> None:
    model = Model(0, 0)
    seg = open_active(seg_dir, 0, settings_for(0))
    for ts in (T0 + 50, T0 + 10, T0 + 50, T0 + 70, T0 + 60, T0 + 90):  # out of order
        seg.append(*model.add([b"x"], [ts]))
    seg.seal()
    model.seal()
    assert raw_entries(seg.timeindex_path, ">qi") == [(T0 + 50, 0), (T0 + 70, 3), (T0 + 90, 5)]
    assert_indexes(seg, model)
    ro = Segment(str(seg_dir), 0, settings_for(0), writable=False)
    assert ro.max_timestamp == T0 + 90
    for ts in (T0, T0 + 10, T0 + 11, T0 + 50, T0 + 55, T0 + 65, T0 + 90, T0 + 91):
        assert ro.find_offset_by_timestamp(ts) == model.offset_for_time(ts), ts
    ro.close()


# ---------------------------------------------------------------- seal, reopen, trim, delete


def test_seal_trims_and_syncs_the_indexes_then_the_log(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=20, interval=250)
    fs = ScriptedFS()
    with _io.use_backend(fs):
        seg.seal()
    assert not seg.writable
    model.seal()
    assert os.path.getsize(seg.index_path) == 8 * len(model.offset_entries)
    assert os.path.getsize(seg.timeindex_path) == 12 * len(model.time_entries)
    assert_indexes(seg, model)
    synced = [c.name for c in fs.calls if c.op == "fsync"]
    assert synced == ["00000000000000000000.index", "00000000000000000000.timeindex",
                      "00000000000000000000.log"]
    closed = [i for i, c in enumerate(fs.calls) if c.op == "close"]
    assert len(closed) == 3 and min(closed) > max(
        i for i, c in enumerate(fs.calls) if c.op == "fsync")  # synced before released
    assert [c.op for c in fs.calls if c.op in ("truncate", "fsync")] == [
        "truncate", "truncate", "fsync", "fsync", "fsync"]  # trim both indexes, sync all three
    mutations = fs.mutations
    with _io.use_backend(fs):
        seg.seal()  # sealing (or closing) a sealed segment does nothing
        seg.close()
    assert fs.mutations == mutations


def test_a_sealed_segment_reopens_read_only_with_the_same_answers(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=25, interval=200, base=7)
    seg.close()
    fs = ScriptedFS()
    with _io.use_backend(fs):
        ro = Segment(str(seg_dir), 7, settings_for(200), writable=False)
        assert ro.size == model.size and ro.next_offset == model.next_offset
        assert ro.max_timestamp == model.max_timestamp
        assert read_records(ro) == model.records
        for offset in range(0, model.next_offset + 2):
            assert ro.find_position(offset) == model.position_of(offset)
        for _, ts, _ in model.records[::3]:
            assert ro.find_offset_by_timestamp(ts) == model.offset_for_time(ts)
        ro.close()
    assert fs.calls == []  # a reader never goes through the mutation door


def test_a_reader_whose_index_is_closed_by_a_concurrent_seal_asks_again(
        seg_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seg, model = filled(seg_dir, batches=25, interval=200)
    stale = seg._offset_index()
    assert stale is not None
    current = Segment._offset_index
    calls = []

    def racing(self: Segment) -> object:
        # the first call hands out the writer's index and seals before the reader uses it
        calls.append(1)
        if len(calls) == 1:
            seg.seal()
            return stale
        return current(self)

    monkeypatch.setattr(Segment, "_offset_index", racing)
    offset = model.records[-1][0]
    assert stale.closed is False
    assert seg.find_position(offset) == model.position_of(offset)
    assert stale.closed and len(calls) == 2
    seg.close()


def test_a_reopened_active_segment_continues_where_it_stopped(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=15, interval=150)
    seg.close()
    model.seal()
    again = open_active(seg_dir, 0, settings_for(150))
    model.reopen()
    assert again.next_offset == model.next_offset and again.max_timestamp == model.max_timestamp
    for i in range(5):
        again.append(*model.add([b"more-%d" % i], [T0 + 10_000 + i]))
    assert read_records(again) == model.records
    again.seal()
    model.seal()
    assert_indexes(again, model)
    again.close()


@pytest.mark.parametrize("cut", ["first", "middle", "inside", "end", "past"])
def test_truncate_to_drops_the_batches_at_or_above_the_offset(seg_dir: Path, cut: str) -> None:
    seg, model = filled(seg_dir, batches=12, interval=100)
    mid = model.batches[6][2]
    offset = {"first": 0, "middle": mid.base_offset, "inside": mid.base_offset + 1,
              "end": model.next_offset, "past": model.next_offset + 10}[cut]
    seg.truncate_to(offset)
    model.truncate_to(offset)
    if cut == "inside" and mid.last_offset > mid.base_offset:
        assert model.batches[-1][2] == mid  # the batch holding the offset stays whole
    assert seg.size == model.size == os.path.getsize(seg.log_path)
    assert seg.next_offset == model.next_offset
    assert read_records(seg) == model.records
    seg.append(*model.add([b"after-trim"], [T0 + 99_999]))
    seg.seal()
    model.seal()
    assert_indexes(seg, model)
    assert read_records(seg) == model.records
    seg.close()


def test_delete_unlinks_the_four_files_and_open_readers_keep_reading(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=5)
    seg.seal()
    reader = seg.batches()
    first = next(reader)
    fs = ScriptedFS()
    with _io.use_backend(fs):
        seg.delete()
    assert os.listdir(seg_dir) == []
    assert sorted(c.name for c in fs.calls if c.op == "unlink") == [
        "00000000000000000000.index", "00000000000000000000.log",
        "00000000000000000000.timeindex", "00000000000000000000.txnindex"]
    assert 1 + sum(1 for _ in reader) == len(model.batches) and first[2] == model.batches[0][2]
    seg.close()


def test_every_file_a_segment_writes_is_created_through_the_io_door(seg_dir: Path) -> None:
    fs = ScriptedFS()
    with _io.use_backend(fs):
        seg, _ = filled(seg_dir, batches=8, interval=100)
        seg.truncate_to(3)
        seg.close()
    created = {c.name for c in fs.calls if c.op == "open" and c.flags & os.O_CREAT}
    assert created == set(os.listdir(seg_dir))
    assert {c.op for c in fs.calls} <= {"open", "pwrite", "truncate", "fsync", "close"}


# ---------------------------------------------------------------- roll rules


def test_should_roll_follows_kafkas_rules(seg_dir: Path) -> None:
    seg = open_active(seg_dir, 1000, settings_for(4096, index_bytes=8 * 3))
    assert not seg.should_roll(100, 1000, T0, cfg_ms=10, segment_bytes=50)  # empty: never
    assert seg.should_roll(100, 1000 + INT32_MAX + 1, T0, cfg_ms=10, segment_bytes=50)
    data = encode(1000, [b"x" * 40], [T0])
    seg.append(data, fmt.parse_header(data))
    size = seg.size
    common = {"cfg_ms": 1000, "segment_bytes": size + 100}
    assert not seg.should_roll(100, 1001, T0 + 1000, **common)
    assert seg.should_roll(101, 1001, T0, **common)  # would grow past segment.bytes
    assert seg.should_roll(10, 1001, T0 + 1001, **common)  # segment.ms after the first batch
    assert seg.should_roll(10, 1000 + INT32_MAX + 1, T0, **common)  # offset overflows int32
    for i in range(1, 3):  # 3 slots, one reserved for the seal: full after two entries
        d = encode(1000 + i, [b"y" * 5000], [T0 + i])
        seg.append(d, fmt.parse_header(d))
    assert seg.should_roll(10, 1003, T0 + 3, cfg_ms=10**9, segment_bytes=10**9)
    seg.close()


# ---------------------------------------------------------------- recovery and damage


def small(n: int, value: bytes = b"v") -> tuple[Model, bytes]:
    """``n`` one-record batches from offset 0, and the ``.log`` bytes they make."""
    model = Model(0, 100)
    for i in range(n):
        model.add([value + b"%d" % i], [T0 + i])
    return model, b"".join(b for _, b, _ in model.batches)


def write_log(seg_dir: Path, base: int, blob: bytes) -> None:
    (seg_dir / f"{base:020d}.log").write_bytes(blob)


def recovering(seg_dir: Path, base: int = 0, interval: int = 200) -> Segment:
    seg = Segment(str(seg_dir), base, settings_for(interval), writable=True)
    seg.open_indexes_for_append()
    return seg


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_recovery_cuts_a_torn_tail_and_rebuilds_the_indexes(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d:
        seg_dir = Path(d)
        n = data.draw(st.integers(1, 8))
        model = Model(0, 100)
        for i in range(n):
            model.add([b"r%d" % i * data.draw(st.integers(1, 30))], [T0 + i])
        whole = b"".join(b for _, b, _ in model.batches)
        extra = encode(model.next_offset, [b"torn"], [T0 + 100])
        cut = data.draw(st.integers(1, len(extra) - 1))
        write_log(seg_dir, 0, whole + extra[:cut])
        seg = recovering(seg_dir, interval=100)
        result = seg.recover()
        assert (result.valid_bytes, result.truncated_bytes) == (len(whole), cut)
        assert result.next_offset == model.next_offset and result.error is None
        assert os.path.getsize(seg.log_path) == len(whole) == seg.size
        assert read_records(seg) == model.records
        seg.seal()
        model.truncate_to(model.next_offset)  # recovery rebuilt the indexes from the log
        model.seal()
        assert_indexes(seg, model)
        seg.close()


def test_recovery_without_truncate_reports_but_keeps_the_bytes(seg_dir: Path) -> None:
    _, whole = small(3)
    write_log(seg_dir, 0, whole + b"\x00" * 7)
    seg = recovering(seg_dir)
    result = seg.recover(truncate=False)
    assert (result.valid_bytes, result.truncated_bytes) == (len(whole), 7)
    assert os.path.getsize(seg.log_path) == len(whole) + 7
    seg.close()


def damaged(model: Model, batch: int, byte: int) -> bytes:
    """The log with one byte flipped inside batch ``batch`` at ``byte`` from its start."""
    blob = bytearray(b"".join(b for _, b, _ in model.batches))
    blob[model.batches[batch][0] + byte] ^= 0xFF
    return bytes(blob)


@pytest.mark.parametrize("byte", [fmt.HEADER_SIZE + 3, fmt.CRC_OFFSET, fmt.ATTRIBUTES_OFFSET + 1])
def test_a_damaged_batch_is_found_where_it_is(seg_dir: Path, byte: int) -> None:
    model, _ = small(6, b"value-" * 4)
    write_log(seg_dir, 0, damaged(model, 3, byte))
    position = model.batches[3][0]
    ro = Segment(str(seg_dir), 0, settings_for(100), writable=False)
    with pytest.raises(CorruptBatchError) as info:
        list(ro.batches())
    assert info.value.position == position and info.value.path == ro.log_path
    ro.close()
    seg = recovering(seg_dir, interval=100)
    result = seg.recover()
    assert result.valid_bytes == position and result.error is not None
    assert result.next_offset == model.batches[3][2].base_offset
    assert os.path.getsize(seg.log_path) == position  # cut at the damage
    seg.close()


def test_an_incomplete_tail_is_damage_unless_the_segment_is_live(seg_dir: Path) -> None:
    model, whole = small(4)
    write_log(seg_dir, 0, whole + model.batches[0][1][:20])
    sealed = Segment(str(seg_dir), 0, settings_for(100), writable=False)
    with pytest.raises(CorruptBatchError, match="do not form a whole batch") as info:
        list(sealed.batches())
    assert info.value.position == len(whole)
    sealed.close()
    live = Segment(str(seg_dir), 0, settings_for(100), writable=False, live=True)
    assert [h for _, _, h in live.batches()] == [h for _, _, h in model.batches]
    assert live.find_position(model.next_offset) is None  # the writer is still at it
    live.close()


def test_batches_out_of_offset_order_are_damage(seg_dir: Path) -> None:
    first = encode(10, [b"a", b"b"], [T0, T0])
    again = encode(10, [b"c"], [T0])  # the same base offset once more
    write_log(seg_dir, 10, first + again)
    ro = Segment(str(seg_dir), 10, settings_for(100), writable=False)
    with pytest.raises(CorruptBatchError, match="out of order") as info:
        list(ro.batches())
    assert info.value.position == len(first)
    ro.close()
    seg = recovering(seg_dir, base=10)
    result = seg.recover()
    # Either base offset may be the damaged one (it is outside the CRC): neither batch is kept.
    assert result.valid_bytes == 0 and result.next_offset == 10
    assert "out of order" in (result.error or "")
    seg.close()


def test_forward_gaps_between_batches_are_legal_in_every_segment(seg_dir: Path) -> None:
    # A Kafka follower of a compacted topic appends its leader's compacted batches to its
    # active segment: offsets may jump forward anywhere, also before the first batch.
    batches = [encode(12, [b"a", b"b"], [T0, T0]), encode(20, [b"c"], [T0]),
               encode(104, [b"d"] * 10, [T0] * 10)]
    write_log(seg_dir, 10, b"".join(batches))
    for live in (False, True):
        ro = Segment(str(seg_dir), 10, settings_for(100), writable=False, live=live)
        assert [(h.base_offset, h.last_offset) for _, _, h in ro.batches()] == [
            (12, 13), (20, 20), (104, 113)]
        assert ro.next_offset == 114 and ro.find_position(15) == len(batches[0])
        ro.close()
    seg = recovering(seg_dir, base=10, interval=1)
    result = seg.recover()
    assert (result.valid_bytes, result.truncated_bytes, result.error) == (
        sum(map(len, batches)), 0, None)
    assert result.next_offset == 114
    seg.close()
    again = open_active(seg_dir, 10, settings_for(1))  # a clean open of the active segment
    assert again.next_offset == 114
    again.close()


def test_a_batch_below_the_base_offset_is_damage(seg_dir: Path) -> None:
    write_log(seg_dir, 100, encode(99, [b"a"], [T0]))
    ro = Segment(str(seg_dir), 100, settings_for(100), writable=False)
    with pytest.raises(CorruptBatchError, match="out of order"):
        list(ro.batches())
    ro.close()


def test_a_damaged_index_is_ignored_by_readers(seg_dir: Path) -> None:
    seg, model = filled(seg_dir, batches=30, interval=100)
    seg.close()
    entries = raw_entries(seg.index_path, ">ii")
    assert len(entries) > 2
    rel, _ = entries[-1]
    bad = b"".join(struct.pack(">ii", r, p) for r, p in entries[:-1])
    Path(seg.index_path).write_bytes(bad + struct.pack(">ii", rel, model.size + 500))
    ro = Segment(str(seg_dir), 0, settings_for(100), writable=False)
    for offset in range(model.next_offset + 1):
        assert ro.find_position(offset) == model.position_of(offset)
    assert ro.next_offset == model.next_offset
    ro.close()
    again = open_active(seg_dir, 0, settings_for(100))  # a clean open rebuilds it
    assert again.next_offset == model.next_offset
    again.seal()
    assert raw_entries(again.index_path, ">ii") == entries
    again.close()


def test_a_missing_log_cannot_be_opened_writable_in_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        Segment(str(tmp_path / "absent"), 0, settings_for(100), writable=True)
    ro = Segment(str(tmp_path), 0, settings_for(100), writable=False)  # nothing there: empty
    assert ro.size == 0 and list(ro.batches()) == [] and ro.next_offset == 0
    ro.close()


def test_a_symlink_in_place_of_the_log_is_refused(seg_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.log"
    target.write_bytes(b"")
    os.symlink(target, seg_dir / "00000000000000000000.log")
    with pytest.raises(CorruptionError, match="symbolic link"):
        Segment(str(seg_dir), 0, settings_for(100), writable=True)
    with pytest.raises(CorruptionError, match="symbolic link"):
        Segment(str(seg_dir), 0, settings_for(100), writable=False)
    assert target.read_bytes() == b""


# ---------------------------------------------------------------- the model, at random

batch_specs = st.lists(
    st.lists(st.tuples(st.integers(0, 60), st.integers(-5, 40)), min_size=1, max_size=5),
    min_size=0, max_size=25,
)


def _check_answers(seg: Segment, model: Model) -> None:
    assert seg.size == model.size and seg.next_offset == model.next_offset
    assert read_records(seg) == model.records
    for offset in range(model.base - 1, model.next_offset + 2):
        assert seg.find_position(offset) == model.position_of(offset), offset
    for ts in sorted({t for _, t, _ in model.records} | {T0 - 100, T0 + 10_000}):
        assert seg.find_offset_by_timestamp(ts) == model.offset_for_time(ts), ts


def _batches(specs: list[list[tuple[int, int]]]) -> Iterator[tuple[list[bytes], list[int]]]:
    for i, spec in enumerate(specs):
        yield [b"%d:" % i + b"v" * size for size, _ in spec], [T0 + t for _, t in spec]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs, interval=st.sampled_from([0, 50, 300, 4096]),
       base=st.sampled_from([0, 17, 2**40]), data=st.data())
def test_random_batches_match_the_list_model(
    specs: list[list[tuple[int, int]]], interval: int, base: int, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d:
        cfg = settings_for(interval)
        model = Model(base, interval)
        seg = open_active(d, base, cfg)
        for values, timestamps in _batches(specs):
            assert seg.append(*model.add(values, timestamps)) == model.batches[-1][0]
        _check_answers(seg, model)
        if model.batches:
            offset = data.draw(st.integers(base, model.next_offset), label="truncate_to")
            seg.truncate_to(offset)
            model.truncate_to(offset)
            _check_answers(seg, model)
        seg.close()
        model.seal()
        assert_indexes(seg, model)
        ro = Segment(d, base, cfg, writable=False)
        _check_answers(ro, model)
        assert ro.max_timestamp == model.max_timestamp
        ro.close()
        again = open_active(d, base, cfg)
        model.reopen()
        assert again.next_offset == model.next_offset
        assert again.max_timestamp == model.max_timestamp
        for values, timestamps in _batches(data.draw(batch_specs, label="after reopen")):
            again.append(*model.add(values, timestamps))
        _check_answers(again, model)
        again.close()
        model.seal()
        assert_indexes(again, model)



@pytest.mark.parametrize("record_bytes", [100, 300, 1_100, 3_000])
def test_a_scan_reads_batches_larger_than_a_chunk_about_once(seg_dir: Path,
                                                            record_bytes: int) -> None:
    """Batches of ~26 KB to ~760 KB (smaller than a chunk, a little larger than one, near the
    largest chunk): a walk yields each once and reads less than half the segment again (only
    what a chunk held of the batch it cut short), not each batch twice (a chunk too small for
    any of them, then the batch)."""
    seg = open_active(seg_dir, 0, settings_for(1 << 30))
    for i in range(12):
        data = encode(250 * i, [bytes([i]) * record_bytes] * 250, [T0 + i] * 250)
        seg.append(data, fmt.parse_header(data, 0))
    reads: list[int] = []
    real = Segment.pread

    def counted(self: Segment, position: int, length: int) -> bytes:
        got = real(self, position, length)
        reads.append(len(got))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Segment, "pread", counted)
        assert [h.base_offset for _, _, h in seg.batches(0)] == [250 * i for i in range(12)]
    assert seg.size <= sum(reads) < 1.5 * seg.size
    seg.close()
