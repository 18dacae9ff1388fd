"""Layer tests of a partition on its own: the tail contract, append/read, roll, retention and
reopen, and the modules it builds on (loader, manifest, the batch writer)."""

from __future__ import annotations

import os
import pathlib
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import batch_writer, checkpoint, manifest
from embedlog.config import TopicConfig
from embedlog.errors import CorruptCheckpointError
from embedlog.partition import Partition
from embedlog.producer_state import ProducerStamp
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression


def _open(folder: pathlib.Path, config: TopicConfig | None = None, *, clean: bool = True,
          recovery_point: int | None = None, start_offset: int = 0, **kwargs: object
          ) -> Partition:
    folder.mkdir(exist_ok=True)
    p = Partition(str(folder), "t", 0, config or TopicConfig(), writable=True, **kwargs)  # type: ignore[arg-type]
    p.load(recovery_point=recovery_point, start_offset=start_offset, clean=clean)
    return p


def _batch(*values: bytes, ts: int = 1000) -> bytearray:
    return bytearray(fmt.encode_batch(list(values), keys=[b"k"] * len(values), timestamps=ts))


def _values(p: Partition, start: int = 0) -> list[bytes | None]:
    return [r.value for r in p.read(start)]


class _Tail:
    """A TailBatch that writes its records as one batch when settled."""

    waited = False

    def __init__(self, p: Partition, *values: bytes) -> None:
        self.p, self.values, self.base, self.writes = p, list(values), -1, 0

    def open_at(self, base: int) -> None:
        self.base = base

    def write(self) -> None:
        self.writes += 1
        header = self.p.append_encoded(_batch(*self.values))
        assert header.base_offset == self.base


def test_append_assigns_offsets_and_reads_back(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0")
    assert p.append_encoded(_batch(b"a", b"b")).base_offset == 0
    assert p.append_encoded(_batch(b"c")).base_offset == 2
    assert (p.start_offset, p.end_offset) == (0, 3)
    assert _values(p) == [b"a", b"b", b"c"]
    assert _values(p, 1) == [b"b", b"c"]
    assert [r.offset for r in p.read(0, 2)] == [0, 1]
    with pytest.raises(embedlog.OffsetOutOfRangeError):
        list(p.read(4))
    p.close()


def test_a_reservation_is_written_before_anything_else_appends(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0")
    p.append_encoded(_batch(b"first"))
    tail = _Tail(p, b"reserved-1", b"reserved-2")
    assert p.reserve(tail) and tail.base == 1
    assert p.reserve(tail)  # holding it already: no second opening
    assert p.end_offset == 1  # nothing written yet
    assert p.append_encoded(_batch(b"after")).base_offset == 3
    assert tail.writes == 1
    assert _values(p) == [b"first", b"reserved-1", b"reserved-2", b"after"]
    p.close()


def test_settle_writes_only_the_given_reservation(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0")
    mine, other = _Tail(p, b"mine"), _Tail(p, b"other")
    assert p.reserve(mine)
    p.settle(other)  # not the holder: nothing happens
    assert mine.writes == 0 and p.end_offset == 0
    assert p.reserve(other)  # takes the tail: the holder is written first
    assert (mine.writes, other.base) == (1, 1)
    p.settle(other)
    assert _values(p) == [b"mine", b"other"]
    p.close()


def test_close_writes_the_reservation_and_a_closed_partition_reserves_nothing(
    tmp_path: pathlib.Path,
) -> None:
    p = _open(tmp_path / "t-0")
    tail = _Tail(p, b"x")
    p.reserve(tail)
    p.close()
    assert tail.writes == 1
    assert not p.reserve(_Tail(p, b"y"))
    p = _open(tmp_path / "t-0")
    assert _values(p) == [b"x"]
    p.close()


def test_sync_through_writes_the_reservation_and_reports_coverage(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0")
    tail = _Tail(p, b"a", b"b")
    p.reserve(tail)
    assert p.sync_through(1)
    assert tail.writes == 1 and p.end_offset == 2
    assert p.sync_through(0)  # already durable: covered without a write
    assert not p.sync_through(5)  # never written
    p.close()


def test_roll_seals_the_segment_in_the_manifest(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "t-0"
    rolls: list[int] = []
    p = _open(folder, on_roll=lambda part: rolls.append(part.active.base_offset))
    p.append_encoded(_batch(b"a", b"b"))
    p.roll()
    p.roll()  # the new active segment is empty: nothing to seal
    p.append_encoded(_batch(b"c"))
    assert [s.base_offset for s in p.segment_infos()] == [0, 2]
    assert rolls == [2]
    sealed = manifest.read_manifest(str(folder))
    assert sealed == {0: p.segment_infos()[0].size}
    p.close()


def _full_parse(folder: pathlib.Path) -> dict[int, int] | str:
    """The manifest as the format's full parser reads it (or its error's class name)."""
    try:
        rows = checkpoint.SEGMENT_MANIFEST.read(str(folder / manifest.MANIFEST))
    except CorruptCheckpointError:
        return "CorruptCheckpointError"
    return {int(b): int(s) for b, s in rows or ()}


_entries = st.dictionaries(st.integers(0, 2**63 + 5), st.integers(0, 2**63 + 5), max_size=6)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    _entries.map(lambda d: "embedlog-segments 1\n" + "".join(f"{b} {s}\n" for b, s in d.items())),
    st.lists(st.sampled_from(["embedlog-segments 1", "embedlog-segments 2", "0 1", "007 9",
                              "1  2", " 3 4", "5 6\r", "-1 2", "x 1", "", "9" * 20 + " 1",
                              "1 2 3"]), max_size=5).map(lambda ls: "\n".join(ls)),
).map(str.encode) | st.binary(max_size=40))
def test_the_quick_manifest_read_agrees_with_the_format(tmp_path: pathlib.Path,
                                                        data: bytes) -> None:
    """Whatever the bytes: the entries, or the error, of the format's full parser."""
    (tmp_path / manifest.MANIFEST).write_bytes(data)
    try:
        got: dict[int, int] | str = manifest.read_manifest(str(tmp_path))
    except CorruptCheckpointError:
        got = "CorruptCheckpointError"
    assert got == _full_parse(tmp_path)


def test_a_manifest_with_more_entries_than_segments_is_refused(tmp_path: pathlib.Path) -> None:
    manifest.write_manifest(str(tmp_path), {0: 10, 10: 20, 30: 5})
    assert manifest.read_manifest(str(tmp_path), max_entries=3) == {0: 10, 10: 20, 30: 5}
    with pytest.raises(CorruptCheckpointError, match="more than the 2"):
        manifest.read_manifest(str(tmp_path), max_entries=2)
    (tmp_path / manifest.MANIFEST).write_bytes(b"embedlog-segments 1\n" + b"0 1\n" * 1000)
    with pytest.raises(CorruptCheckpointError):  # refused having read ~120 bytes, not 4000
        manifest.read_manifest(str(tmp_path), max_entries=2)


def test_rolls_at_segment_bytes(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0", TopicConfig.from_kafka({"segment.bytes": 200}))
    for i in range(6):
        p.append_encoded(_batch(b"%d" % i * 40))
    assert len(p.segment_infos()) > 1
    assert _values(p) == [b"%d" % i * 40 for i in range(6)]
    p.close()


def test_retention_persists_the_start_before_unlinking(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "t-0"
    seen: list[tuple[int, bool]] = []

    def on_start(part: Partition) -> None:  # the first segment must still exist here
        seen.append((part.start_offset, os.path.exists(folder / f"{0:020d}.log")))

    cfg = TopicConfig.from_kafka({"retention.bytes": 1})
    p = _open(folder, cfg, on_start_offset=on_start)
    for v in (b"a", b"b", b"c"):
        p.append_encoded(_batch(v))
        p.roll()
    assert p.enforce_retention(now=0) == 2  # never the active segment
    assert seen == [(2, True)]
    assert p.start_offset == 2 and _values(p, 2) == [b"c"]
    assert not os.path.exists(folder / f"{0:020d}.log")
    p.close()


def test_delete_records_moves_the_log_start(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0")
    p.append_encoded(_batch(b"a", b"b", b"c"))
    assert p.delete_records(2) == 2
    assert _values(p, 2) == [b"c"]
    with pytest.raises(embedlog.OffsetOutOfRangeError):
        p.delete_records(9)
    p.close()


def test_reopen_cuts_a_torn_tail(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "t-0"
    p = _open(folder)
    p.append_encoded(_batch(b"kept"))
    p.close()
    with open(folder / f"{0:020d}.log", "ab") as f:
        f.write(bytes(_batch(b"torn"))[:-5])
    p = _open(folder, clean=False, recovery_point=0)
    assert p.end_offset == 1 and _values(p) == [b"kept"]
    p.close()


def test_reopen_refuses_a_truncated_sealed_segment(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "t-0"
    p = _open(folder)
    p.append_encoded(_batch(b"a", b"b"))
    p.roll()
    p.append_encoded(_batch(b"c"))
    p.close()
    first = folder / f"{0:020d}.log"
    os.truncate(first, first.stat().st_size - 1)
    p = _open(folder, clean=False, recovery_point=0)
    assert p.damage is not None and "sealed segment" in str(p.damage)
    with pytest.raises(embedlog.PartitionQuarantinedError, match="sealed segment"):
        p.append_encoded(_batch(b"d"))
    with pytest.raises(embedlog.CorruptionError):  # the damage is in the first batch
        list(p.read(0))
    p.close()


def test_a_read_only_view_follows_the_writer(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "t-0"
    writer = _open(folder)
    writer.append_encoded(_batch(b"a"))
    view = Partition(str(folder), "t", 0, TopicConfig(), writable=False)
    view.load(recovery_point=None, start_offset=0, clean=True)
    writer.roll()
    writer.append_encoded(_batch(b"b"))
    assert _values(view) == [b"a", b"b"]
    view.close()
    writer.close()


# ---------------------------------------------------------------------------- the batch writer


def test_write_records_halves_an_oversized_batch(tmp_path: pathlib.Path) -> None:
    p = _open(tmp_path / "t-0", TopicConfig.from_kafka({"max.message.bytes": 300}))
    values = [bytes([i]) * 60 for i in range(8)]
    stamp = ProducerStamp(producer_id=7, epoch=0)
    headers = batch_writer.write_records(p, values, [b"k"] * 8, None, 5, codec=Compression.NONE,
                                         stamp=stamp, expect_base=0)
    assert len(headers) > 1
    assert [h.base_offset for h in headers] == sorted(h.base_offset for h in headers)
    assert [h.base_sequence for h in headers] == [h.base_offset for h in headers]
    assert stamp.sequence == 8
    assert _values(p) == values
    with pytest.raises(embedlog.RecordTooLargeError):
        batch_writer.write_records(p, [b"x" * 400], None, None, 5, codec=Compression.NONE)
    p.close()


def test_write_records_applies_the_topic_rules(tmp_path: pathlib.Path) -> None:
    cfg = TopicConfig.from_kafka({"cleanup.policy": "compact",
                                  "message.timestamp.type": "LogAppendTime",
                                  "compression.type": "gzip"})
    p = _open(tmp_path / "t-0", cfg, clock=lambda: 4242)
    with pytest.raises(embedlog.UsageError, match="every record needs a key"):
        batch_writer.write_records(p, [b"v"], [None], None, 1, codec=Compression.NONE)
    codec = batch_writer.choose_codec(cfg, "zstd")
    assert codec == Compression.GZIP
    header, = batch_writer.write_records(p, [b"v"], [b"k"], None, 1, codec=codec)
    assert (header.timestamp_type, header.max_timestamp) == (1, 4242)
    assert header.compression == Compression.GZIP
    assert batch_writer.choose_codec(TopicConfig(), None) == Compression.NONE
    p.close()


def test_spread_groups_records_by_partition_in_order() -> None:
    keys = [b"a", None, b"b", b"a", None]
    groups = batch_writer.spread(keys, 3, keyless=2)
    assert sorted(i for _, idx in groups for i in idx) == list(range(5))
    where = {i: part for part, idx in groups for i in idx}
    assert where[0] == where[3] and where[1] == where[4] == 2
    assert all(idx == sorted(idx) for _, idx in groups)


def test_a_write_reaching_a_closed_partition_is_refused(tmp_path: pathlib.Path) -> None:
    """A durable append queued in the group commit when the log closes reaches the partition
    after its close: LogClosedError, as every write to a closed log (it was a bare
    IndexError from the emptied segment list), and nothing is written."""
    p = _open(tmp_path / "t-0")
    p.append_encoded(_batch(b"a"))
    p.close()
    for write in (lambda: p.append_encoded(_batch(b"late")), lambda: p.delete_records(1),
                  lambda: p.sync_through(5)):
        with pytest.raises(embedlog.LogClosedError, match="closed"):
            write()
    reopened = _open(tmp_path / "t-0")
    assert _values(reopened) == [b"a"]
    reopened.close()


def test_durable_appends_racing_close_are_written_or_refused(tmp_path: pathlib.Path) -> None:
    """Writers appending with ``durability="fsync"`` while another thread closes the log get
    an offset (then the record is there after a reopen) or LogClosedError, nothing else."""
    for trial in range(20):
        path = tmp_path / str(trial)
        acked, errors = _append_while_closing(path)
        assert errors == []
        with embedlog.open(path, read_only=True) as view:
            stored = {r.offset for r in view.read("t", 0)}
        assert set(acked) <= stored


def _append_while_closing(path: pathlib.Path) -> tuple[list[int], list[BaseException]]:
    """Four threads appending durably until the log, closed by this one, refuses them: the
    offsets acknowledged and any error other than LogClosedError."""
    log = embedlog.open(path, durability="fsync")
    log.create_topic("t")
    acked: list[int] = []
    errors: list[BaseException] = []

    def writer() -> None:
        while True:
            try:
                acked.append(log.append("t", b"x", partition=0).offset)
            except embedlog.LogClosedError:
                return
            except BaseException as exc:  # anything else is the failure
                errors.append(exc)
                return

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.01)
    log.close()
    for t in threads:
        t.join(10)
    return acked, errors
