"""The transaction index (``.txnindex``): the entry codec, the files a transactional workload
leaves (Kafka's layout), their rebuild by recovery, compaction and retention, and
``read_committed`` with and without them (differential)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import struct
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from doubles import ScriptedFS
from embedlog import TopicPartition, _io
from embedlog.arrow import read_table
from embedlog.errors import CorruptIndexError
from embedlog.index.txn_index import (
    ENTRY_SIZE,
    TxnIndexEntry,
    decode_entries,
    encode_entries,
    encode_entry,
)
from embedlog.naming import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from embedlog.transactions import TxnTracker
from helpers import small_segments
from test_transactions import OPS, Op, encode, layout, model

TP0 = TopicPartition("t", 0)
COMMIT, ABORT = 1, 0
I64 = st.integers(-(2**63), 2**63 - 1)


# ---------------------------------------------------------------- the codec


@st.composite
def entry_lists(draw: st.DrawFn) -> tuple[int, list[TxnIndexEntry]]:
    base = draw(st.integers(0, 2**40))
    lasts = sorted(set(draw(st.lists(st.integers(base, 2**62), max_size=20))))
    out = []
    for last in lasts:
        first = draw(st.integers(0, last))
        out.append(TxnIndexEntry(draw(I64), first, last, draw(I64)))
    return base, out


@settings(max_examples=300, deadline=None)
@given(entry_lists())
def test_entries_round_trip(case: tuple[int, list[TxnIndexEntry]]) -> None:
    base, entries = case
    data = encode_entries(entries)
    assert len(data) == ENTRY_SIZE * len(entries)
    assert decode_entries(data, base_offset=base) == entries
    for i, e in enumerate(entries):  # Kafka's AbortedTxn: version int16 0, then four int64
        assert data[i * 34 : (i + 1) * 34] == struct.pack(">hqqqq", 0, *e)


@settings(max_examples=200, deadline=None)
@given(entry_lists(), st.integers(1, ENTRY_SIZE - 1))
def test_a_torn_file_is_refused(case: tuple[int, list[TxnIndexEntry]], cut: int) -> None:
    data = encode_entries(case[1]) + b"\0" * cut
    with pytest.raises(CorruptIndexError, match="whole number"):
        decode_entries(data, path="x.txnindex")


@pytest.mark.parametrize("raw, message", [
    (struct.pack(">hqqqq", 1, 7, 0, 5, 6), "version 1"),
    (struct.pack(">hqqqq", -1, 7, 0, 5, 6), "version -1"),
    (struct.pack(">hqqqq", 0, 7, 6, 5, 6), "above its last offset"),
    (struct.pack(">hqqqq", 0, 7, -1, 5, 6), "negative"),
    (struct.pack(">hqqqq", 0, 7, 0, 5, 6) + struct.pack(">hqqqq", 0, 7, 0, 5, 6), "below 6"),
    (struct.pack(">hqqqq", 0, 7, 0, 9, 10), "below 10"),
])
def test_bad_entries_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(CorruptIndexError, match=message) as info:
        decode_entries(raw, path="p.txnindex", base_offset=10 if "10" in message else 0)
    assert info.value.path == "p.txnindex" and info.value.position is not None


def test_encode_refuses_what_no_index_may_hold() -> None:
    with pytest.raises(CorruptIndexError):
        encode_entry(TxnIndexEntry(1, 5, 4, 6))
    with pytest.raises(CorruptIndexError):
        encode_entry(TxnIndexEntry(2**63, 0, 4, 6))


# ---------------------------------------------------------------- files a workload leaves


def write(log: embedlog.Log, ops: list[Op]) -> None:
    base = log.end_offset("t", 0)
    for op in ops:
        base = log._append_encoded("t", 0, bytearray(encode(op, base))).next_offset


def txn_files(part: pathlib.Path) -> dict[int, bytes]:
    return {int(n[:20]): (part / n).read_bytes() for n in sorted(os.listdir(part))
            if n.endswith(".txnindex")}


def bases(part: pathlib.Path) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(part) if n.endswith(".log"))


def expected_files(ops: list[Op], segment_bases: list[int]) -> dict[int, bytes]:
    """Each segment's .txnindex, built here from the batches: the entries of the ABORT
    markers that fall in it, with Kafka's last stable offset."""
    tracker = TxnTracker()
    for op, header in layout(ops):
        tracker.on_batch(header, op.marker)
    out = {}
    for i, base in enumerate(segment_bases):
        hi = segment_bases[i + 1] if i + 1 < len(segment_bases) else 2**63
        out[base] = b"".join(struct.pack(">hqqqq", 0, *e) for e in tracker.entries
                             if base <= e.last_offset < hi)
    return out


def test_a_workload_leaves_kafkas_layout(tmp_path: pathlib.Path) -> None:
    """Offsets written by hand: the bytes are those Kafka's TransactionIndex holds."""
    ops = [
        Op(7, txn=True, size=2),     # 0-1  pid 7 opens at 0
        Op(8, txn=True),             # 2    pid 8 opens at 2
        Op(7, marker=ABORT),         # 3    abort 7: [0, 3], pid 8 still open -> LSO 2
        Op(-1),                      # 4
        Op(8, marker=COMMIT),        # 5
        Op(9, txn=True),             # 6
        Op(9, marker=ABORT),         # 7    abort 9: [6, 7], nothing open -> LSO 8
        Op(7, marker=ABORT),         # 8    abort 7 with nothing open: [8, 8], LSO 9
    ]
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        write(log, ops)
    assert txn_files(tmp_path / "log" / "t-0") == {0: (
        struct.pack(">hqqqq", 0, 7, 0, 3, 2) + struct.pack(">hqqqq", 0, 9, 6, 7, 8)
        + struct.pack(">hqqqq", 0, 7, 8, 8, 9))}


def test_every_segment_gets_a_file_with_its_own_markers(tmp_path: pathlib.Path) -> None:
    ops = [Op(1, txn=True, size=3), Op(2, txn=True, size=3)] * 8 + [
        Op(1, marker=ABORT), Op(2, txn=True, size=3), Op(2, marker=ABORT)] + [
        Op(3, txn=True, size=2), Op(3, marker=ABORT), Op(-1, size=3)] * 10
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t", config=small_segments(**{"segment.bytes": 300}))
        write(log, ops)
    part = tmp_path / "log" / "t-0"
    assert len(bases(part)) > 5
    files = txn_files(part)
    assert set(files) == set(bases(part))
    assert files == expected_files(ops, bases(part))
    assert sum(len(b) for b in files.values()) == ENTRY_SIZE * 12


# ---------------------------------------------------------------- read_committed, differential


def committed_offsets(path: pathlib.Path) -> tuple[list[int], int, list[int]]:
    with embedlog.open(path, read_only=True) as log:
        consumer = log.consumer("t", isolation_level="read_committed")
        got: list[int] = []
        while batch := consumer.poll(max_records=3):
            got += [r.offset for r in batch]
        position = consumer.position(TP0)
        consumer.close()
        table = read_table(log, "t", isolation_level="read_committed")
        return got, position, table.column("offset").to_pylist()


@contextlib.contextmanager
def written(ops: list[Op]) -> Iterator[pathlib.Path]:
    """A fresh log whose partition ``t-0`` holds ``ops`` in 300-byte segments."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "log"
        with embedlog.open(path) as log:
            log.create_topic("t", config=small_segments(**{"segment.bytes": 300}))
            write(log, ops)
        yield path


@settings(max_examples=30, deadline=None)
@given(OPS)
def test_read_committed_is_the_same_with_and_without_the_index(ops: list[Op]) -> None:
    shown, stop = model(ops)
    with written(ops) as path:
        part = path / "t-0"
        assert txn_files(part) == expected_files(ops, bases(part))
        with_index = committed_offsets(path)
        for base in bases(part):
            os.unlink(part / f"{base:020d}.txnindex")
        without = committed_offsets(path)
        assert with_index == without
        assert with_index[0] == shown and with_index[1] == stop
        assert with_index[2] == [o for o in shown if o < stop]


def test_an_index_that_contradicts_the_markers_is_an_error_not_hidden_records(
        tmp_path: pathlib.Path) -> None:
    """The fetcher takes the aborted ranges from the index where every segment has one; an
    entry that aborts a transaction whose marker reads COMMIT, or an ABORT marker the index
    does not list, is damage (the file has no checksum): the read fails rather than hide
    committed records or hand out aborted ones. An unusable file leaves it to the markers."""
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        write(log, [Op(4, txn=True), Op(-1), Op(4, marker=COMMIT),
                    Op(5, txn=True), Op(5, marker=ABORT), Op(-1)])
    index = tmp_path / "log" / "t-0" / f"{0:020d}.txnindex"
    assert committed_offsets(tmp_path / "log")[0] == [0, 1, 5]
    good = index.read_bytes()
    assert good == struct.pack(">hqqqq", 0, 5, 3, 4, 5)
    for damaged, message in [
        (struct.pack(">hqqqq", 0, 4, 0, 2, 3) + good, "COMMIT marker at offset 2"),
        (b"", "ABORT marker at offset 4 that the index does not list"),
        (struct.pack(">hqqqq", 0, 5, 3, 5, 6), "ABORT marker at offset 4, but the index"),
        (struct.pack(">hqqqq", 0, 4, 3, 4, 5), "ABORT marker at offset 4 that the index"),
    ]:
        index.write_bytes(damaged)
        with pytest.raises(CorruptIndexError, match=message):
            committed_offsets(tmp_path / "log")
    index.write_bytes(b"\0" * 5)  # unusable: the markers decide
    assert committed_offsets(tmp_path / "log")[0] == [0, 1, 5]


DAMAGES = st.sampled_from(["drop", "first", "last", "pid", "extra", "lso"])


@settings(max_examples=60, deadline=None)
@given(OPS, DAMAGES, st.integers(0, 2**16), st.integers(-3, 3))
def test_a_damaged_index_never_shows_aborted_or_skips_committed_records(
        ops: list[Op], damage: str, pick: int, delta: int) -> None:
    """One entry of one ``.txnindex`` changed (still a well-formed file): a read_committed
    reader either fails with CorruptIndexError or shows a prefix of what the markers decide
    -- never an aborted record, never a committed one skipped."""
    shown, _ = model(ops)
    with written(ops) as path:
        part = path / "t-0"
        files = [(b, data) for b, data in sorted(txn_files(part).items())
                 if data or damage == "extra"]
        if not files:
            return
        base, data = files[pick % len(files)]
        entries = decode_entries(data, base_offset=base)
        entries = _damaged(entries, damage, pick, delta, base)
        try:
            raw = encode_entries(entries)
            decode_entries(raw, base_offset=base)
        except CorruptIndexError:
            return  # not a well-formed file: the open's own checks cover it
        (part / f"{base:020d}.txnindex").write_bytes(raw)
        try:
            got = committed_offsets(path)
        except CorruptIndexError:
            return
        assert got[0] == shown[: len(got[0])]
        assert got[2] == shown[: len(got[2])]


def _damaged(entries: list[TxnIndexEntry], damage: str, pick: int, delta: int,
             base: int) -> list[TxnIndexEntry]:
    if damage == "extra":
        return [*entries, TxnIndexEntry(pick % 3, base + pick % 7, base + pick % 7 + 2**20, 2**21)]
    i = pick % len(entries)
    e = entries[i]
    changed = {
        "drop": None,
        "first": e._replace(first_offset=max(0, e.first_offset + delta)),
        "last": e._replace(last_offset=max(e.first_offset, e.last_offset + delta)),
        "pid": e._replace(producer_id=(e.producer_id + 1 + pick % 3) % 4 - 1),
        "lso": e._replace(last_stable_offset=max(0, e.last_stable_offset + delta * 5)),
    }[damage]
    return entries[:i] + ([] if changed is None else [changed]) + entries[i + 1:]


def test_the_entry_is_durable_before_its_marker_is_written(tmp_path: pathlib.Path) -> None:
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        write(log, [Op(5, txn=True)])
        fs = ScriptedFS()
        with _io.use_backend(fs):
            write(log, [Op(5, marker=ABORT)])
        names = [(c.op, c.name) for c in fs.calls if c.op in ("pwrite", "fsync")]
    txn = [i for i, (_, n) in enumerate(names) if n.endswith(".txnindex")]
    logs = [i for i, (op, n) in enumerate(names) if op == "pwrite" and n.endswith(".log")]
    assert [names[i][0] for i in txn] == ["pwrite", "fsync"] and txn[-1] < logs[0]


# ---------------------------------------------------------------- recovery, compaction, retention


def test_recovery_rebuilds_every_validated_index(tmp_path: pathlib.Path) -> None:
    ops = [Op(1, txn=True, size=2), Op(2, txn=True), Op(1, marker=ABORT), Op(-1, size=2),
           Op(2, marker=COMMIT), Op(3, txn=True), Op(2, txn=True)] * 6 + [
        Op(3, marker=ABORT), Op(2, marker=ABORT)]
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t", config=small_segments(**{"segment.bytes": 400}))
        write(log, ops)
    part = path / "t-0"
    good = txn_files(part)
    assert good == expected_files(ops, bases(part)) and any(good.values())
    for i, base in enumerate(bases(part)):  # damaged, stale, missing
        name = part / f"{base:020d}.txnindex"
        if i % 3 == 0:
            name.write_bytes(b"junk")
        elif i % 3 == 1:
            name.write_bytes(struct.pack(">hqqqq", 0, 99, base, base, base + 1))
        else:
            name.unlink()
    (path / CLEAN_SHUTDOWN_FILE).unlink()  # a crash: validate from the recovery point (none)
    (path / RECOVERY_POINT_CHECKPOINT).unlink()
    with embedlog.open(path) as log:
        assert txn_files(part) == good
        log.consumer("t", isolation_level="read_committed").close()


def test_a_clean_open_rebuilds_a_missing_active_index(tmp_path: pathlib.Path) -> None:
    """A folder whose active segment was written without the index (an older embedlog)."""
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
        write(log, [Op(1, txn=True), Op(1, marker=ABORT)])
    (path / "t-0" / f"{0:020d}.txnindex").unlink()
    with embedlog.open(path) as log:
        write(log, [Op(1, txn=True), Op(1, marker=ABORT)])
    assert txn_files(path / "t-0") == {0: struct.pack(">hqqqq", 0, 1, 0, 1, 2)
                                       + struct.pack(">hqqqq", 0, 1, 2, 3, 4)}


def test_compaction_carries_the_entries(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    ops = ([Op(1, txn=True, size=2), Op(-1, size=2), Op(1, marker=ABORT),
            Op(2, txn=True), Op(2, marker=COMMIT)] * 12)
    with embedlog.open(path) as log:
        log.create_topic("t", config=small_segments(**{
            "segment.bytes": 400, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
            "min.compaction.lag.ms": 0}))
        base = 0
        for op in ops:  # every record has the same key: compaction keeps the last of each
            raw = encode(op, base) if op.marker is not None else _keyed(op, base)
            base = log._append_encoded("t", 0, bytearray(raw)).next_offset
        before = committed_offsets_of(log)
        log.compact("t")
        part = path / "t-0"
        files = txn_files(part)
        assert set(files) == set(bases(part))
        assert files == expected_files(ops, bases(part))
        after = committed_offsets_of(log)
        assert after and set(after) < set(before)  # compaction removed records
        for base in bases(part):
            os.unlink(part / f"{base:020d}.txnindex")
        assert committed_offsets_of(log) == after  # the same decided by the markers


def _keyed(op: Op, base: int) -> bytes:
    from embedlog.segment import format as fmt
    ids = {} if op.pid < 0 else {"producer_id": op.pid, "producer_epoch": 0}
    return fmt.encode_batch([b"%d" % (base + i) for i in range(op.size)],
                            keys=[b"k"] * op.size, timestamps=0, base_offset=base,
                            is_transactional=op.txn, **ids)  # type: ignore[arg-type]


def committed_offsets_of(log: embedlog.Log) -> list[int]:
    consumer = log.consumer("t", isolation_level="read_committed")
    got: list[int] = []
    while batch := consumer.poll():
        got += [r.offset for r in batch]
    consumer.close()
    return got


def test_retention_removes_the_index_with_its_segment(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t", config=small_segments(**{"segment.bytes": 300}))
        write(log, [Op(1, txn=True, size=3), Op(1, marker=ABORT)] * 20)
        part = path / "t-0"
        assert len(bases(part)) > 3
        log.delete_records("t", 0, log.end_offset("t", 0) - 1)
        assert set(txn_files(part)) == set(bases(part)) and len(bases(part)) < 3
