"""Producer-state snapshots: Kafka's ``.snapshot`` codec, and a writer's producer state loaded
from the newest usable snapshot and the batch headers after it."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import crc32c
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.cli import cli
from embedlog.errors import CorruptCheckpointError, OutOfOrderSequenceError
from embedlog.naming import SNAPSHOT_SUFFIX, segment_path
from embedlog.partition import Partition
from embedlog.producer_snapshot import (
    ENTRY_SIZE,
    HEADER_SIZE,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
)
from embedlog.producer_state import ProducerStateTable
from embedlog.producer_state_store import KEEP_SNAPSHOTS, read_snapshot, snapshot_offsets
from embedlog.segment import format as fmt
from embedlog.segment.segment import Segment
from embedlog.txn_coordinator import write_marker

INT32_MAX = 2**31 - 1


@st.composite
def entries(draw: st.DrawFn) -> SnapshotEntry:
    last_offset = draw(st.integers(-1, 2**63 - 1))
    delta = 0 if last_offset < 0 else draw(st.integers(0, min(last_offset, INT32_MAX)))
    return SnapshotEntry(
        producer_id=draw(st.integers(0, 2**63 - 1)),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        last_sequence=draw(st.integers(-1, INT32_MAX)),
        last_offset=last_offset,
        offset_delta=delta,
        timestamp=draw(st.integers(-(2**63), 2**63 - 1)),
        coordinator_epoch=draw(st.integers(-(2**31), INT32_MAX)),
        current_txn_first_offset=draw(st.integers(-1, 2**63 - 1)),
    )


# --------------------------------------------------------------------------- the codec


@given(st.lists(entries(), max_size=20))
def test_encode_decode_round_trip(rows: list[SnapshotEntry]) -> None:
    data = encode_snapshot(rows)
    assert len(data) == HEADER_SIZE + ENTRY_SIZE * len(rows)
    assert decode_snapshot(data) == rows


def test_layout_is_kafkas_version_1() -> None:
    """Built field by field from ``ProducerStateManager``'s schema: version int16, CRC-32C
    (uint32) of everything after it, the entry count, then eight fields per entry."""
    rows = [SnapshotEntry(4001, 3, 11, 11, 2, 1670068129797, 5, -1),
            SnapshotEntry(2**40, 0, -1, -1, 0, -7, -1, 123456789012)]
    body = struct.pack(">i", len(rows))
    for r in rows:
        body += (struct.pack(">q", r.producer_id) + struct.pack(">h", r.producer_epoch)
                 + struct.pack(">i", r.last_sequence) + struct.pack(">q", r.last_offset)
                 + struct.pack(">i", r.offset_delta) + struct.pack(">q", r.timestamp)
                 + struct.pack(">i", r.coordinator_epoch)
                 + struct.pack(">q", r.current_txn_first_offset))
    expected = struct.pack(">h", 1) + struct.pack(">I", crc32c.crc32c(body)) + body
    assert HEADER_SIZE == 10 and ENTRY_SIZE == 46
    assert encode_snapshot(rows) == expected
    assert decode_snapshot(expected) == rows
    assert encode_snapshot([]) == b"\x00\x01" + struct.pack(">I", crc32c.crc32c(b"\0" * 4)) \
        + b"\0" * 4


def _with_crc(buf: bytearray) -> bytes:
    buf[2:6] = struct.pack(">I", crc32c.crc32c(bytes(buf[6:])))
    return bytes(buf)


def _mutated(how: str) -> bytes:
    good = bytearray(encode_snapshot([SnapshotEntry(7, 1, 4, 10, 4, 1000, -1, -1),
                                      SnapshotEntry(8, 0, 0, 11, 0, 1001, -1, 11)]))
    if how == "empty":
        return b""
    if how == "short header":
        return bytes(good[:7])
    if how == "truncated entry":
        return bytes(good[:-1])
    if how == "trailing byte":
        return _with_crc(good + b"\0")
    if how == "bad crc":
        good[20] ^= 0x10
        return bytes(good)
    if how == "huge count":
        good[6:10] = struct.pack(">i", INT32_MAX)
        return _with_crc(good)
    if how == "negative count":
        good[6:10] = struct.pack(">i", -1)
        return _with_crc(good)
    if how == "version 2":
        good[0:2] = struct.pack(">h", 2)
        return bytes(good)  # the CRC does not cover the version
    if how == "negative producer id":
        good[10:18] = struct.pack(">q", -5)
        return _with_crc(good)
    if how == "offset delta past the offset":
        good[10 + 22 : 10 + 26] = struct.pack(">i", 11)
        return _with_crc(good)
    raise AssertionError(how)


CORRUPTIONS = ["empty", "short header", "truncated entry", "trailing byte", "bad crc",
               "huge count", "negative count", "version 2", "negative producer id",
               "offset delta past the offset"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_decode_refuses_damaged_snapshots(how: str) -> None:
    with pytest.raises(CorruptCheckpointError, match="producer snapshot"):
        decode_snapshot(_mutated(how), path="x.snapshot")


# --------------------------------------------------------------------------- the log


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def batch(pid: int, epoch: int, seq: int, n: int, *, txn: bool = False) -> bytearray:
    return bytearray(fmt.encode_batch([b"v%d" % i for i in range(n)], timestamps=now_ms(),
                                      producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                      is_transactional=txn))


def kept(table: ProducerStateTable) -> tuple[dict[int, Any], dict[int, int], int]:
    """What a Kafka snapshot keeps of a table: per producer its epoch, last sequence and last
    batch; the open transactions; the largest producer id."""
    producers = {}
    for pid, e in table.entries.items():
        last = e.batches[-1] if e.batches else None
        producers[pid] = (e.epoch, e.last_sequence, None if last is None else
                          (last.base_offset, last.last_offset, last.base_sequence))
    return producers, dict(table.txns.open), table.max_producer_id


def loaded(p: Partition) -> ProducerStateTable:
    with p.lock:
        return p.producer_states()


def full_scan(p: Partition) -> ProducerStateTable:
    return ProducerStateTable.scan(p.segments)


def partition_dir(log_dir: pathlib.Path) -> pathlib.Path:
    return log_dir / "t-0"


class Workload:
    """Idempotent producers 0 and 1, transactional producers 2 and 3 (data, COMMIT/ABORT
    markers, epoch bumps), plain batches and rolls, on ``t-0``; remembers each producer's last
    data batch and the offset it was stored at."""

    def __init__(self, log: embedlog.Log) -> None:
        self.log = log
        self.state = {pid: [0, 0] for pid in range(4)}
        self.last: dict[int, tuple[bytearray, int]] = {}

    def run(self, kind: str, pid: int, n: int) -> None:
        log, p = self.log, self.log._partition_of("t", 0)
        epoch, seq = self.state[pid]
        if kind == "data":
            raw = batch(pid, epoch, seq, n, txn=pid >= 2)
            header = log._append_encoded("t", 0, bytearray(raw))
            self.last[pid] = (raw, header.base_offset)
            self.state[pid][1] = seq + n
        elif kind in ("commit", "abort"):
            pid |= 2
            write_marker(p, pid, self.state[pid][0], kind == "commit", now_ms())
        elif kind == "bump":
            self.state[pid] = [epoch + 1, 0]
            self.last.pop(pid, None)
        elif kind == "plain":
            log._append_encoded("t", 0, bytearray(fmt.encode_batch([b"x"] * n,
                                                                   timestamps=now_ms())))
        elif kind == "roll":
            log.roll("t", 0)


OPS = st.lists(st.tuples(st.sampled_from(["data", "data", "commit", "abort", "bump", "plain",
                                          "roll"]),
                         st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=40)


@given(OPS, st.booleans())
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_snapshot_and_tail_equal_a_full_scan(tmp_path: pathlib.Path,
                                             ops: list[tuple[str, int, int]],
                                             drop_newest: bool) -> None:
    """After random appends, a close and a reopen, the state loaded from the newest snapshot
    (or, with ``drop_newest``, the one before it and the batches after it) is what a scan of
    every batch header gives, for what a snapshot keeps; a retry of each producer's last batch
    is still a duplicate."""
    path = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
        work = Workload(log)
        for op in ops:
            work.run(*op)
        p = log._partition_of("t", 0)
        assert kept(loaded(p)) == kept(full_scan(p))
        end = log.end_offset("t", 0)
    offsets = snapshot_offsets(str(partition_dir(path)))
    assert len(offsets) <= KEEP_SNAPSHOTS
    assert offsets or not work.last
    if offsets:
        assert offsets[-1] == end  # written at close (the state was loaded)
    if drop_newest and offsets:
        os.unlink(segment_path(str(partition_dir(path)), offsets[-1], SNAPSHOT_SUFFIX))
    with embedlog.open(path) as log:
        p = log._partition_of("t", 0)
        assert kept(loaded(p)) == kept(full_scan(p))
        for raw, base in work.last.values():
            assert log._append_encoded("t", 0, bytearray(raw)).base_offset == base
        assert log.end_offset("t", 0) == end


def _three_segments(log_dir: pathlib.Path) -> list[bytearray]:
    """``t-0`` with producer 7's batches over three segments; returns them."""
    sent = []
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        for i in range(9):
            sent.append(batch(7, 0, 3 * i, 3))
            log._append_encoded("t", 0, bytearray(sent[-1]))
            if i % 3 == 2 and i < 8:
                log.roll("t", 0)
        log._append_encoded("t", 0, batch(8, 0, 0, 1, txn=True))  # left open
    return sent


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """``(segment base, byte position)`` of every batch walk started."""
    calls: list[tuple[int, int]] = []
    walk = Segment.batches

    def spy(self: Segment, position: int = 0, *args: Any, **kwargs: Any) -> Any:
        calls.append((self.base_offset, position))
        return walk(self, position, *args, **kwargs)

    monkeypatch.setattr(Segment, "batches", spy)
    yield calls


def test_open_reads_no_batch_header_below_the_snapshot(
        log_dir: pathlib.Path, spied: list[tuple[int, int]]) -> None:
    _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    assert snapshot_offsets(folder) == [18, 28]  # the last roll's, the close's
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        spied.clear()
        table = loaded(p)
        assert spied == []  # the close's snapshot covers the whole log
        assert kept(table) == kept(full_scan(p))
        assert table.txns.open == {8: 27}
    os.unlink(segment_path(folder, 28, SNAPSHOT_SUFFIX))
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        spied.clear()
        table = loaded(p)
        assert spied == [(18, 0)]  # only the active segment, from its start
        assert kept(table) == kept(full_scan(p))
        log._append_encoded("t", 0, batch(7, 0, 27, 2))
        mid = log.end_offset("t", 0)
    # a snapshot inside a segment: the walk starts at its batch (offset index position)
    os.unlink(segment_path(folder, 18, SNAPSHOT_SUFFIX))
    with embedlog.open(log_dir) as log:
        log._append_encoded("t", 0, batch(7, 0, 29, 1))
    os.unlink(segment_path(folder, mid + 1, SNAPSHOT_SUFFIX))
    assert snapshot_offsets(folder) == [mid]
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        spied.clear()
        table = loaded(p)
        position = p.active.find_position(mid)
        assert position is not None and position > 0
        assert spied == [(18, position)]
        assert kept(table) == kept(full_scan(p))
        assert table.entries[7].last_sequence == 29


def _corrupt(path: str, how: str) -> None:
    os.chmod(path, 0o600)
    if how == "not a regular file":
        os.unlink(path)
        os.mkfifo(path)
        return
    if how == "symbolic link":
        os.unlink(path)
        os.symlink("/dev/zero", path)
        return
    pathlib.Path(path).write_bytes(_mutated(how))


@pytest.mark.parametrize("how", [*CORRUPTIONS, "not a regular file", "symbolic link"])
def test_a_corrupt_snapshot_is_passed_over(log_dir: pathlib.Path, how: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="embedlog")  # other tests may have raised it
    sent = _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    _corrupt(segment_path(folder, 28, SNAPSHOT_SUFFIX), how)
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        assert kept(loaded(p)) == kept(full_scan(p))  # from the snapshot at 18 and the tail
        assert "ignoring producer snapshot" in caplog.text
        assert log._append_encoded("t", 0, bytearray(sent[-1])).base_offset == 24
        with pytest.raises(OutOfOrderSequenceError):
            log._append_encoded("t", 0, batch(7, 0, 28, 1))


def test_every_snapshot_corrupt_falls_back_to_the_full_scan(log_dir: pathlib.Path) -> None:
    sent = _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    for offset in snapshot_offsets(folder):
        _corrupt(segment_path(folder, offset, SNAPSHOT_SUFFIX), "bad crc")
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        table = loaded(p)
        assert kept(table) == kept(full_scan(p))
        assert len(table.entries[7].batches) == 5  # a full scan keeps the last five
        for raw, base in zip(sent[-5:], range(12, 27, 3), strict=True):
            assert log._append_encoded("t", 0, bytearray(raw)).base_offset == base


def test_a_snapshot_beyond_the_recovered_end_is_deleted(log_dir: pathlib.Path) -> None:
    _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    stale = segment_path(folder, 40, SNAPSHOT_SUFFIX)
    shutil.copy(segment_path(folder, 28, SNAPSHOT_SUFFIX), stale)
    # a torn tail: the last batch (producer 8's) is cut by the next unclean open
    log_file = segment_path(folder, 18, ".log")
    os.truncate(log_file, os.path.getsize(log_file) - 3)
    os.unlink(log_dir / ".kafka_cleanshutdown")
    with embedlog.open(log_dir) as log:
        assert log.end_offset("t", 0) == 27
        assert snapshot_offsets(folder) == [18]  # 28 and 40 were beyond the end
        p = log._partition_of("t", 0)
        table = loaded(p)
        assert kept(table) == kept(full_scan(p))
        assert table.txns.open == {}


def test_a_read_only_open_leaves_snapshots_alone(log_dir: pathlib.Path) -> None:
    _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    shutil.copy(segment_path(folder, 28, SNAPSHOT_SUFFIX), segment_path(folder, 40,
                                                                        SNAPSHOT_SUFFIX))
    with embedlog.open(log_dir, read_only=True) as log:
        assert len(list(log.read("t", 0))) == 28
    assert snapshot_offsets(folder) == [18, 28, 40]
    with embedlog.open(log_dir) as log:  # the writer deletes the stale one
        assert snapshot_offsets(folder) == [18, 28]


def test_at_most_the_newest_snapshots_are_kept(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        for i in range(6):
            log._append_encoded("t", 0, batch(1, 0, i, 1))
            log.roll("t", 0)
            assert snapshot_offsets(str(partition_dir(log_dir))) == list(
                range(max(1, i), i + 2))[-KEEP_SNAPSHOTS:]


def test_an_open_transaction_survives_the_snapshot(log_dir: pathlib.Path) -> None:
    """Producer 5's transaction opened before the snapshot and aborted after the reopen: its
    ``.txnindex`` entry starts at the transaction's first offset, with the last stable offset
    held by producer 6's transaction, also open across the reopen."""
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        log._append_encoded("t", 0, batch(1, 0, 0, 2))
        log._append_encoded("t", 0, batch(5, 0, 0, 3, txn=True))  # offsets 2..4
        log._append_encoded("t", 0, batch(6, 0, 0, 1, txn=True))  # offset 5
        log._append_encoded("t", 0, batch(5, 0, 3, 1, txn=True))  # offset 6
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        assert loaded(p).txns.open == {5: 2, 6: 5}
        write_marker(p, 5, 0, False, now_ms())  # offset 7
    txnindex = partition_dir(log_dir) / "00000000000000000000.txnindex"
    data = txnindex.read_bytes()
    assert len(data) == 34
    version, pid, first, last, stable = struct.unpack(">hqqqq", data)
    assert (version, pid, first, last, stable) == (0, 5, 2, 7, 5)


# --------------------------------------------------------------------------- real brokers' files


def _fixture_snapshots(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(root.glob("*/*/*" + SNAPSHOT_SUFFIX))


def _scanned_below(folder: pathlib.Path, offset: int) -> dict[int, tuple[int, int, int]]:
    """Per producer id, (epoch, last sequence, last offset) of its last data batch below
    ``offset``, from the batch headers of a partition folder."""
    found: dict[int, tuple[int, int, int]] = {}
    for log_file in sorted(folder.glob("*.log")):
        data = log_file.read_bytes()
        for _, h in fmt.iter_batches(data):
            if h.producer_id >= 0 and not h.is_control and h.last_offset < offset:
                found[h.producer_id] = (h.producer_epoch, h.base_sequence + h.last_offset_delta,
                                        h.last_offset)
    return found


def test_real_kafka_snapshots_decode(kafka_fixtures: pathlib.Path) -> None:
    """Every ``.snapshot`` real brokers wrote decodes; its producers agree with the batch
    headers below its offset wherever those batches are still in the folder."""
    snapshots = _fixture_snapshots(kafka_fixtures)
    assert len(snapshots) >= 70
    with_entries = 0
    for path in snapshots:
        rows = read_snapshot(str(path))
        assert rows is not None, path
        offset = int(path.name[: -len(SNAPSHOT_SUFFIX)])
        scanned = _scanned_below(path.parent, offset)
        logs = sorted(path.parent.glob("*.log"))
        floor = int(logs[0].name[:20]) if logs else offset
        ours = {r.producer_id: (r.producer_epoch, r.last_sequence, r.last_offset)
                for r in rows if r.last_offset >= floor}
        assert ours == scanned, path
        with_entries += bool(rows)
    assert with_entries == 1


def test_real_kafka_snapshot_with_producers(kafka_fixtures: pathlib.Path) -> None:
    path = (kafka_fixtures / "kafka27-compacted-multiseg" / "myTopic-0"
            / "00000000000000000038.snapshot")
    assert read_snapshot(str(path)) == [
        SnapshotEntry(4001, 0, 11, 11, 2, 1670068129797, -1, -1),
        SnapshotEntry(4002, 0, 11, 23, 11, 1670068739452, -1, -1),
        SnapshotEntry(4003, 0, 13, 37, 13, 1670071262224, -1, -1),
    ]


def _writable_copy(src: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(src, dest)
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o750 if name in dirs else 0o640)
    os.chmod(dest, 0o750)
    return dest


def test_a_kafka_snapshot_drives_deduplication(kafka_fixtures: pathlib.Path,
                                               tmp_path: pathlib.Path) -> None:
    """The broker's snapshot of ``myTopic-0`` (its batches deleted by retention) is loaded by
    a writer: producer 4001's last batch (sequences 9..11, offsets 9..11) is a duplicate, a gap
    is refused, the next sequence is appended."""
    copy = _writable_copy(kafka_fixtures / "kafka27-compacted-multiseg", tmp_path / "k")
    clock: Callable[[], int] = lambda: 1670071262224 + 60_000  # noqa: E731
    with embedlog.Log(copy, adopt=True, upkeep=False, clock=clock) as log:
        assert log.end_offset("myTopic", 0) == 38
        dup = log._append_encoded("myTopic", 0, bytearray(fmt.encode_batch(
            [b"a", b"b", b"c"], timestamps=1, producer_id=4001, producer_epoch=0,
            base_sequence=9)))
        assert dup.base_offset == 9 and log.end_offset("myTopic", 0) == 38
        with pytest.raises(OutOfOrderSequenceError):
            log._append_encoded("myTopic", 0, bytearray(fmt.encode_batch(
                [b"x"], timestamps=1, producer_id=4001, producer_epoch=0, base_sequence=13)))
        got = log._append_encoded("myTopic", 0, bytearray(fmt.encode_batch(
            [b"x"], timestamps=1, producer_id=4001, producer_epoch=0, base_sequence=12)))
        assert got.base_offset == 38
    assert read_snapshot(str(copy / "myTopic-0" / "00000000000000000039.snapshot")) == [
        SnapshotEntry(4001, 0, 12, 38, 0, clock(), -1, -1),
        SnapshotEntry(4002, 0, 11, 23, 11, 1670068739452, -1, -1),
        SnapshotEntry(4003, 0, 13, 37, 13, 1670071262224, -1, -1),
    ]


# --------------------------------------------------------------------------- tools


def cli_run(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, list(args), prog_name="embedlog")
    assert result.exit_code == code, (result.output, result.exception)
    return result


def test_verify_reports_corrupt_and_stale_snapshots_as_warnings(log_dir: pathlib.Path) -> None:
    _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    doc = json.loads(cli_run("verify", str(log_dir), "--json").stdout)
    assert doc["healthy"] and doc["problems"] == []
    shutil.copy(segment_path(folder, 28, SNAPSHOT_SUFFIX), segment_path(folder, 40,
                                                                        SNAPSHOT_SUFFIX))
    _corrupt(segment_path(folder, 18, SNAPSHOT_SUFFIX), "bad crc")
    doc = json.loads(cli_run("verify", str(log_dir), "--json").stdout)
    assert doc["healthy"]
    problems = {p["path"]: (p["severity"], p["message"]) for p in doc["problems"]}
    assert problems[segment_path(folder, 18, SNAPSHOT_SUFFIX)][0] == "warning"
    assert "CRC-32C" in problems[segment_path(folder, 18, SNAPSHOT_SUFFIX)][1]
    assert problems[segment_path(folder, 40, SNAPSHOT_SUFFIX)] == (
        "warning", "producer snapshot beyond the log end offset 28: the next writer open "
        "deletes it")
    assert len(problems) == 2


def test_dump_log_prints_a_snapshot(log_dir: pathlib.Path) -> None:
    _three_segments(log_dir)
    path = segment_path(str(partition_dir(log_dir)), 28, SNAPSHOT_SUFFIX)
    [doc] = json.loads(cli_run("dump-log", path, "--json").stdout)["files"]
    assert doc["type"] == "snapshot"
    assert [(e["producer_id"], e["last_sequence"], e["last_offset"], e["offset_delta"],
             e["current_txn_first_offset"]) for e in doc["entries"]] == [
        (7, 26, 26, 2, -1), (8, 0, 27, 0, 27)]
    lines = cli_run("dump-log", path).stdout.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1].startswith("producerId: 7 producerEpoch: 0 coordinatorEpoch: -1 "
                               "currentTxnFirstOffset: -1 lastTimestamp: ")
    assert lines[1].endswith(" lastSequence: 26 lastOffset: 26 offsetDelta: 2")
    _corrupt(path, "truncated entry")
    assert "Error: " in cli_run("dump-log", path, code=3).stdout


def test_salvage_deletes_the_snapshots_above_a_loss(log_dir: pathlib.Path) -> None:
    _three_segments(log_dir)
    folder = str(partition_dir(log_dir))
    sealed = pathlib.Path(segment_path(folder, 9, ".log"))
    data = bytearray(sealed.read_bytes())
    data[-5] ^= 0x01  # a record of the segment's last batch (offsets 15..17)
    sealed.write_bytes(bytes(data))
    cli_run("recover", str(log_dir), "--truncate-damaged")
    assert snapshot_offsets(folder) == []  # 18 and 28 described the lost batch
    with embedlog.open(log_dir) as log:
        p = log._partition_of("t", 0)
        table = loaded(p)
        assert kept(table) == kept(full_scan(p))
        assert table.entries[7].last_sequence == 26


def test_the_first_segments_snapshot_below_the_log_start_is_kept(tmp_path: pathlib.Path
                                                                ) -> None:
    """``delete_records`` into the first segment left: that segment's snapshot, now below the
    log start, survives the writer's reopen (it still holds the producers whose batches went
    with the deleted segments) and is the one the state loads from."""
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t", config={"segment.bytes": 1024})
        producer = log.producer(idempotent=True)
        for i in range(59):
            producer.send("t", b"record-%02d" % i, partition=0)
            producer.flush()
        producer.close()
        first = int(sorted(p.name for p in (path / "t-0").glob("*.log"))[-1][:20])
        assert 0 < first < 58
        log.delete_records("t", 0, first + 3)
    snapshot = path / "t-0" / f"{first:020d}.snapshot"
    assert snapshot.exists()
    with embedlog.open(path) as log:
        assert snapshot.exists()
        assert log.start_offset("t", 0) == first + 3
        p = log._partition_of("t", 0)
        assert [e.producer_id for e in p.producer_states().snapshot_entries()] == [
            producer.producer_id]
