"""One deterministic test per bug the reliability suite found in the core (see the report of
issue 7); each failed before its fix."""

from __future__ import annotations

import errno
import os
import pathlib

import pytest

import embedlog
from doubles import ScriptedFS
from embedlog import _io
from embedlog.metadata import parse_metadata
from helpers import writer_open

from .workloads import scratch_dir

CFG = {"segment.bytes": 600, "index.interval.bytes": 100, "segment.index.bytes": 240}


def build(n: int = 30, *, batch: int = 1) -> tuple[pathlib.Path, list[bytes]]:
    path = pathlib.Path(scratch_dir()) / "log"
    values = [b"value-%03d" % i * 4 for i in range(n)]
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t", config=CFG)
        for i in range(0, n, batch):
            log.append_batch("t", values[i : i + batch], keys=[b"k"] * len(values[i : i + batch]),
                             timestamps=[1000 + j for j in range(i, i + len(values[i:i + batch]))])
    return path, values


def segs(path: pathlib.Path, suffix: str = ".log") -> list[pathlib.Path]:
    return sorted((path / "t-0").glob("*" + suffix))


def first_batch_size(data: bytes) -> int:
    return 12 + int.from_bytes(data[8:12], "big")


def read_all(path: pathlib.Path, **kw: object) -> list[embedlog.Record]:
    with embedlog.open(path, **kw) as log:  # type: ignore[arg-type]
        return list(log.read("t", 0))


def unclean(path: pathlib.Path) -> None:
    (path / ".kafka_cleanshutdown").unlink(missing_ok=True)


def test_sealed_segment_straddling_the_log_start_is_still_size_checked() -> None:
    path, _ = build()
    with embedlog.open(path) as log:
        log.delete_records("t", 0, 2)  # inside the first (sealed) segment
    first = segs(path)[0]
    data = first.read_bytes()
    first.write_bytes(data[: first_batch_size(data) * 3])  # cut at a batch boundary
    with pytest.raises(embedlog.CorruptionError):
        writer_open(path)


def test_flipped_length_in_a_sealed_segment_is_an_error_not_a_silent_skip() -> None:
    path, _ = build()
    sealed = segs(path)[1]
    data = bytearray(sealed.read_bytes())
    data[9] ^= 0x40  # batch length: the batch now "runs past the end"
    sealed.write_bytes(bytes(data))
    with pytest.raises(embedlog.CorruptionError):
        read_all(path)


@pytest.mark.parametrize("which", [0, -1])
def test_flipped_base_offset_is_an_error_not_wrong_offsets(which: int) -> None:
    path, _ = build()
    target = segs(path)[which]
    data = bytearray(target.read_bytes())
    second = first_batch_size(bytes(data))
    data[second + 3] ^= 0x10  # base offset of the second batch (outside the CRC)
    target.write_bytes(bytes(data))
    for read_only in (False, True):
        with pytest.raises(embedlog.CorruptionError):
            read_all(path, read_only=read_only)


def read_from(path: pathlib.Path, offset: int, **kw: object) -> list[embedlog.Record]:
    with embedlog.open(path, **kw) as log:  # type: ignore[arg-type]
        return list(log.read("t", 0, offset))


@pytest.mark.parametrize("moved", [3, 2**63])
def test_first_base_offset_moved_below_the_segment_base_is_an_error_not_a_skip(
        moved: int) -> None:
    """A sealed segment's first batch (3 records) moved below the segment's base offset (by
    its record count, or its sign bit flipped): a read looking for the segment's first offset
    walked past it (its last offset is below the one wanted) and went on with the next batch,
    losing its records without a word."""
    path, _ = build(batch=3)
    target = segs(path)[1]
    base = int(target.name.split(".")[0])
    data = bytearray(target.read_bytes())
    data[0:8] = (base - moved).to_bytes(8, "big", signed=True)
    target.write_bytes(bytes(data))
    for read_only in (False, True):
        with pytest.raises(embedlog.CorruptionError):
            read_from(path, base, read_only=read_only)
        with pytest.raises(embedlog.CorruptionError):
            read_all(path, read_only=read_only)


def test_base_offset_moved_back_into_the_previous_batch_is_an_error_not_wrong_records() -> None:
    """The second batch of a sealed segment (offsets 3..5) moved back to 1..3: a read from
    offset 3 found it by its last offset and, starting there, could not see that it goes back
    into the batch before it, so it returned offset 5's record as offset 3 (and skipped 4, 5)."""
    path, _ = build(batch=3)
    first = segs(path)[0]
    data = bytearray(first.read_bytes())
    second = first_batch_size(bytes(data))
    assert int.from_bytes(data[second : second + 8], "big") == 3
    data[second + 7] ^= 0x02  # base offset 3 -> 1 (outside the CRC)
    first.write_bytes(bytes(data))
    for read_only in (False, True):
        with pytest.raises(embedlog.CorruptionError):
            read_from(path, 3, read_only=read_only)
        with embedlog.open(path, read_only=read_only) as log, \
                pytest.raises(embedlog.CorruptionError):
            list(log.read("t", 0, 3, max_records=1))


@pytest.mark.parametrize("cut", [1, 30, 60])
def test_sealed_segment_cut_inside_its_first_header_is_an_error_in_a_view(cut: int) -> None:
    """A sealed segment cut to fewer bytes than a batch header: a read-only open (which has no
    recovery and no manifest check) looked for the segment's first offset, found no header to
    walk and went on with the next segment, so the segment's records vanished without a
    word; the walk itself calls such bytes damage."""
    path, _ = build(batch=3)
    target = segs(path)[1]
    target.write_bytes(target.read_bytes()[:cut])
    base = int(target.name.split(".")[0])
    with pytest.raises(embedlog.CorruptionError):
        read_all(path, read_only=True)
    with pytest.raises(embedlog.CorruptionError):
        read_from(path, base, read_only=True)


def test_active_segment_cut_at_a_batch_boundary_after_a_clean_close_is_an_error() -> None:
    path, _ = build()
    active = segs(path)[-1]
    data = active.read_bytes()
    active.write_bytes(data[: first_batch_size(data)])
    with pytest.raises(embedlog.CorruptionError):
        writer_open(path)


def test_recovery_never_keeps_a_batch_with_a_damaged_base_offset() -> None:
    path, values = build()
    unclean(path)
    active = segs(path)[-1]
    base = int(active.name.split(".")[0])
    data = bytearray(active.read_bytes())
    data[5] ^= 0x08  # first batch's base offset jumps by 2**19 (outside the CRC)
    active.write_bytes(bytes(data))
    records = read_all(path)
    assert [r.value for r in records] == values[: len(records)]
    assert all(r.offset < base for r in records)


@pytest.mark.parametrize("doc", [b"[]", b'{"version": 1, "topics": {"t": {}}}',
                                 b'{"version": 1, "topics": {"t": {"partitions": 10000000}}}',
                                 b'{"version": 1, "topics": {"t": {"partitions": 1, '
                                 b'"config": []}}}',
                                 b'{"version": 1, "topics": {"t": {"partitions": 1, '
                                 b'"config": {"segment.bytes": Infinity}}}}',
                                 b"[" * 100_000, b'{"version": 1, "topics": {"../x": {}}}',
                                 b"\xff\xfe"])
def test_damaged_topic_metadata_is_a_checkpoint_error(doc: bytes) -> None:
    with pytest.raises(embedlog.CorruptCheckpointError):
        parse_metadata(doc)


def test_metadata_naming_a_missing_partition_folder_is_a_checkpoint_error() -> None:
    path, _ = build(3)
    meta = (path / "embedlog.json").read_text().replace('"partitions": 1', '"partitions": 2')
    (path / "embedlog.json").write_text(meta)
    with pytest.raises(embedlog.CorruptCheckpointError):
        embedlog.open(path)


def test_damaged_active_time_index_is_rebuilt_not_a_crash_at_close() -> None:
    path, values = build()
    tindex = segs(path, ".timeindex")[-1]
    data = bytearray(tindex.read_bytes())
    assert len(data) >= 12
    data[8:12] = (10_000).to_bytes(4, "big")  # an offset far past the end of the segment
    tindex.write_bytes(bytes(data))
    with embedlog.open(path) as log:
        assert [r.value for r in log.read("t", 0)] == values
        assert log.offsets_for_times("t", 0, 1000 + len(values) - 1) == len(values) - 1
        assert log.append("t", b"more", key=b"k").offset == len(values)


def test_time_index_cut_at_an_entry_boundary_does_not_hide_timestamps() -> None:
    path, values = build()
    tindex = segs(path, ".timeindex")[1]
    tindex.write_bytes(tindex.read_bytes()[:12])
    with embedlog.open(path) as log:
        for i in range(len(values)):
            assert log.offsets_for_times("t", 0, 1000 + i) == i


def test_offset_index_pointing_into_a_batch_or_past_its_offset_is_ignored() -> None:
    path, values = build(60, batch=3)
    for index, damage in zip(segs(path, ".index")[:2], ("position", "offset"), strict=True):
        data = bytearray(index.read_bytes())
        assert len(data) >= 8
        if damage == "position":
            data[4:8] = (int.from_bytes(data[4:8], "big") + 5).to_bytes(4, "big")
        else:
            data[0:4] = (int.from_bytes(data[0:4], "big") - 2).to_bytes(4, "big")
        index.write_bytes(bytes(data))
    with embedlog.open(path) as log:
        for start in range(len(values)):
            assert next(iter(log.read("t", 0, start))).offset == start


def test_damaged_active_offset_index_does_not_move_the_end_offset() -> None:
    path, values = build(60, batch=3)
    index = segs(path, ".index")[-1]
    data = bytearray(index.read_bytes())
    last = max(i for i in range(0, len(data), 8) if any(data[i : i + 8]))
    log_size = segs(path)[-1].stat().st_size
    data[last + 4 : last + 8] = (log_size + 100).to_bytes(4, "big")  # points past the log
    index.write_bytes(bytes(data))
    with embedlog.open(path) as log:
        assert log.end_offset("t", 0) == len(values)
        assert log.append("t", b"next", key=b"k").offset == len(values)


def _fail_index_open() -> ScriptedFS:
    fs = ScriptedFS()
    fs.fail("open", persistent=True, match=lambda call: call.name.endswith(".index"))
    return fs


def test_failed_open_raises_the_io_error_and_releases_the_writer_lock() -> None:
    path, values = build()
    unclean(path)
    with _io.use_backend(_fail_index_open()), pytest.raises(embedlog.StorageError):
        embedlog.open(path)
    assert [r.value for r in read_all(path)] == values  # the lock was released


def _fail_create() -> ScriptedFS:
    """Creating a file fails (the disk is full); opening existing ones works."""
    fs = ScriptedFS()
    fs.fail("open", persistent=True, code=errno.ENOSPC,
            match=lambda call: bool(call.flags & os.O_CREAT)
            and not os.path.exists(call.path or ""))
    return fs


@pytest.mark.parametrize("op", ["roll", "delete_records", "retention"])
def test_io_error_in_roll_or_deletion_poisons_the_partition(op: str) -> None:
    path, values = build()
    log = embedlog.open(path, durability="fsync")
    log.alter_topic("t", {"retention.bytes": 100, "retention.ms": -1})
    with _io.use_backend(_fail_create()), pytest.raises(embedlog.StorageError):
        if op == "roll":
            log.roll("t", 0)
        elif op == "delete_records":
            log.delete_records("t", 0, 25)
        else:
            log.enforce_retention()
    with pytest.raises(embedlog.LogPoisonedError):
        log.append("t", b"refused", key=b"k")
    log.close()
    with embedlog.open(path) as again:
        assert [r.value for r in again.read("t", 0, 25)] == values[25:]


def test_symlinked_segment_is_a_storage_error() -> None:
    path, _ = build()
    victim = path.parent / "victim"
    victim.write_bytes(b"x")
    seg = segs(path)[-1]  # the active segment: not in the manifest of sealed sizes
    seg.unlink()
    seg.symlink_to(victim)
    with pytest.raises(embedlog.CorruptionError, match="symbolic link"):
        embedlog.open(path)
    assert victim.read_bytes() == b"x"


def test_symlinked_partition_folder_is_refused() -> None:
    path, _ = build(3)
    outside = path.parent / "outside"
    outside.mkdir()
    (path / "t-0").rename(path / "t-0.real")
    (path / "t-0").symlink_to(outside)
    for read_only in (False, True):
        with pytest.raises(embedlog.StorageError):
            embedlog.open(path, read_only=read_only).read("t", 0)
    assert list(outside.iterdir()) == []
