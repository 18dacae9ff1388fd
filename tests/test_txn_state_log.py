"""The transaction state log (embedlog.txn_state_log): frames, torn tails, damage, compaction,
the legacy JSON file, and the coordinator's use of it (fsyncs per commit, crash points between
the commit decision and the Complete record)."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition, _io
from embedlog import txn_state_log as tsl
from embedlog.errors import CorruptCheckpointError, CorruptionError

STATE = "embedlog.transactions"


def _fresh(path: pathlib.Path, writes: list[tuple[str, dict[str, Any] | None, bool]]
           ) -> tsl.TxnStateLog:
    store = tsl.TxnStateLog(str(path))
    assert store.open(clean=False) == {}
    for key, value, sync in writes:
        store.append(key, value, sync=sync)
    return store


def _reopen(path: pathlib.Path, *, clean: bool = False) -> dict[str, dict[str, Any]]:
    store = tsl.TxnStateLog(str(path))
    try:
        return store.open(clean=clean)
    finally:
        store.abandon()


def _frame_positions(data: bytes) -> list[int]:
    pos, out = len(tsl.MAGIC), []
    while pos < len(data):
        out.append(pos)
        length = int.from_bytes(data[pos + 4:pos + 8], "big")
        pos += tsl.FRAME_HEADER + length
    return out


def test_latest_record_of_each_key_wins_and_none_forgets(tmp_path: pathlib.Path) -> None:
    path = tmp_path / STATE
    store = _fresh(path, [("a", {"n": 1}, False), ("b", {"n": 2}, True), ("a", {"n": 3}, False),
                          ("b", None, False), ("c", {"n": 4}, False)])
    store.close()
    assert _reopen(path, clean=True) == {"a": {"n": 3}, "c": {"n": 4}}
    data = path.read_bytes()
    assert data.startswith(tsl.MAGIC) and len(_frame_positions(data)) == 5


def test_durable_field_says_what_was_synced(tmp_path: pathlib.Path) -> None:
    path = tmp_path / STATE
    store = _fresh(path, [("a", {"n": 1}, True), ("a", {"n": 2}, False), ("a", {"n": 3}, False)])
    data = path.read_bytes()
    first, second, third = _frame_positions(data)
    durable = [int.from_bytes(data[p + 8:p + 16], "big") for p in (first, second, third)]
    assert durable == [first, second, second]  # the third was appended before any new fsync
    store.close()


@pytest.mark.parametrize("damage", ["cut", "zeros", "garbage", "header"])
def test_torn_tail_is_cut(tmp_path: pathlib.Path, damage: str) -> None:
    path = tmp_path / STATE
    _fresh(path, [("a", {"n": 1}, True), ("b", {"n": 2}, False), ("a", {"n": 3}, False)]
           ).abandon()
    data = bytearray(path.read_bytes())
    last = _frame_positions(bytes(data))[-1]
    if damage == "cut":
        del data[last + 30:]
    elif damage == "zeros":
        data[last + tsl.FRAME_HEADER:] = bytes(len(data) - last - tsl.FRAME_HEADER)
    elif damage == "garbage":
        data[last:] = os.urandom(len(data) - last)
    else:  # the length field: the frame seems to run past the end of the file
        data[last + 4] ^= 0x40
    path.write_bytes(bytes(data))
    assert _reopen(path) == {"a": {"n": 1}, "b": {"n": 2}}
    assert path.stat().st_size == last  # cut on disk, where the torn frame began
    store = tsl.TxnStateLog(str(path))
    store.open(clean=False)
    store.append("c", {"n": 5}, sync=True)
    store.close()
    assert _reopen(path, clean=True) == {"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 5}}


def test_torn_frame_before_unsynced_ones_is_a_tail(tmp_path: pathlib.Path) -> None:
    """Writes may land out of order: a torn frame followed by intact frames appended after the
    same fsync is still a torn tail (none of them was ever durable)."""
    path = tmp_path / STATE
    _fresh(path, [("a", {"n": 1}, True), ("b", {"n": 2}, False), ("c", {"n": 3}, False)]
           ).abandon()
    data = bytearray(path.read_bytes())
    middle = _frame_positions(bytes(data))[1]
    data[middle + tsl.FRAME_HEADER + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert _reopen(path) == {"a": {"n": 1}}


@pytest.mark.parametrize("where", ["payload", "length", "magic"])
def test_damage_before_a_durable_record_is_refused(tmp_path: pathlib.Path, where: str) -> None:
    path = tmp_path / STATE
    _fresh(path, [("a", {"n": 1}, True), ("b", {"n": 2}, True), ("a", {"n": 3}, True)]
           ).close()
    before = bytearray(path.read_bytes())
    first = _frame_positions(bytes(before))[0]
    offset = {"payload": tsl.FRAME_HEADER + 3, "length": 6, "magic": 1}[where]
    before[first + offset] ^= 0x10
    path.write_bytes(bytes(before))
    with pytest.raises(CorruptionError) as info:
        _reopen(path)
    assert isinstance(info.value, CorruptCheckpointError) and info.value.position == first
    assert path.read_bytes() == bytes(before)  # nothing was cut


def _header(length: int, durable: int) -> bytes:
    import crc32c

    head = tsl._HEAD.pack(tsl.FRAME_MAGIC, length, durable)
    return head + tsl._CRCS.pack(crc32c.crc32c(head), 0)


def test_frame_headers_after_damage(tmp_path: pathlib.Path) -> None:
    """After damage, only a frame header that claims the damaged byte was durable makes it
    corruption; headers that claim less (however many, however long their payloads) leave
    a torn tail, cut."""
    path = tmp_path / STATE
    _fresh(path, [("a", {"n": 1}, True)]).close()
    pos = path.stat().st_size
    crafted = b"".join(_header(tsl.MAX_FRAME, pos) for _ in range(5000))
    path.write_bytes(path.read_bytes() + b"\xff" * 7 + crafted)
    assert _reopen(path) == {"a": {"n": 1}}
    assert path.stat().st_size == pos
    path.write_bytes(path.read_bytes() + b"\xff" * 7 + _header(10, pos + 1) + b"x" * 10)
    with pytest.raises(CorruptCheckpointError, match="durable"):
        _reopen(path)


def test_damaged_tail_after_a_clean_close_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / STATE
    _fresh(path, [("a", {"n": 1}, False), ("b", {"n": 2}, False)]).close()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError):
        _reopen(path, clean=True)
    assert _reopen(path) == {"a": {"n": 1}}  # unclean: the last frame is a torn tail


@pytest.mark.parametrize("content", [b"", b"embedlog-txn-state 9\n", b"\x00" * 40])
def test_bad_header_is_refused(tmp_path: pathlib.Path, content: bytes) -> None:
    path = tmp_path / STATE
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError):
        _reopen(path)


def test_frame_with_bad_json_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / STATE
    _fresh(path, [("a", {"n": 1}, True)]).close()
    import crc32c

    payload = b'{"id": 3, "value": {}}'
    head = tsl._HEAD.pack(tsl.FRAME_MAGIC, len(payload), path.stat().st_size)
    frame = head + tsl._CRCS.pack(crc32c.crc32c(head), crc32c.crc32c(payload)) + payload
    with open(path, "ab") as f:
        f.write(frame)
    with pytest.raises(CorruptCheckpointError, match="malformed"):
        _reopen(path)


def test_compaction_keeps_the_live_state(tmp_path: pathlib.Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tsl, "COMPACT_MIN", 0)
    path = tmp_path / STATE
    store = _fresh(path, [])
    for i in range(200):
        store.append(f"k{i % 3}", {"i": i}, sync=i % 7 == 0)
        live = store._live_bytes()
        assert live == len(tsl.MAGIC) + sum(store.live.values())
        assert store.size <= tsl.COMPACT_RATIO * live + 200  # bounded by the live state
    store.append("k0", None, sync=False)
    store.close()
    assert _reopen(path, clean=True) == {"k1": {"i": 199}, "k2": {"i": 197}}
    frame = tsl.FRAME_HEADER + len(b'{"id":"k1","value":{"i":199}}')
    assert path.stat().st_size <= tsl.COMPACT_RATIO * (len(tsl.MAGIC) + 3 * frame) + frame
    assert path.stat().st_size < 201 * frame // 10  # the 201 records were not all kept


@settings(max_examples=60, deadline=None)
@given(writes=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9), st.booleans()),
                       min_size=1, max_size=12),
       cut=st.integers(0, 2000))
def test_any_cut_after_the_last_fsync_keeps_a_prefix(tmp_path_factory: Any, writes: Any,
                                                     cut: int) -> None:
    """Property: whatever length of the unsynced end survives, the state read is the state
    after some prefix of the appends that includes every synced one."""
    path = tmp_path_factory.mktemp("s") / STATE
    store = _fresh(path, [])
    states: list[dict[str, Any]] = [{}]
    synced = 0
    for key, n, sync in writes:
        store.append(key, None if n == 0 else {"n": n}, sync=sync)
        nxt = dict(states[-1])
        if n == 0:
            nxt.pop(key, None)
        else:
            nxt[key] = {"n": n}
        states.append(nxt)
        if sync:
            synced = len(states) - 1
    durable = store.durable
    store.abandon()
    data = path.read_bytes()
    path.write_bytes(data[:durable + cut % (len(data) - durable + 1)])
    got = _reopen(path)
    assert got in states[synced:]


def _producer(path: pathlib.Path, parts: int = 1) -> tuple[embedlog.Log, Any]:
    """A writer with topic ``out`` of ``parts`` partitions and an initialised producer."""
    log = embedlog.Log(path, durability="fsync")
    log.create_topic("out", partitions=parts)
    p = log.producer(transactional_id="t")
    p.init_transactions()
    return log, p


def test_legacy_json_file_is_migrated(tmp_path: pathlib.Path) -> None:
    """A state file in the JSON format of earlier versions: read, settled, rewritten."""
    log, p = _producer(tmp_path / "log")
    p.begin_transaction()
    p.send("out", b"open", partition=0)
    p.flush()
    pid = p.producer_id
    log.close()
    legacy = {"version": 1, "transactions": {
        "t": {"producer_id": pid, "epoch": 4, "state": "Ongoing", "timeout_ms": 60000,
              "started_ms": 1, "partitions": [["out", 0]], "offsets": {}},
        "idle": {"producer_id": pid + 1, "epoch": 9, "state": "CompleteCommit",
                 "timeout_ms": 60000, "started_ms": -1, "partitions": [], "offsets": {}}}}
    (tmp_path / "log" / STATE).write_text(json.dumps(legacy))
    log = embedlog.Log(tmp_path / "log", durability="fsync")
    assert (tmp_path / "log" / STATE).read_bytes().startswith(tsl.MAGIC)
    assert log.last_stable_offset("out", 0) == log.end_offset("out", 0)  # aborted
    q = log.producer(transactional_id="idle")
    q.init_transactions()
    assert (q.producer_id, q.producer_epoch) == (pid + 1, 10)
    log.close()


def test_malformed_legacy_file_is_refused(tmp_path: pathlib.Path) -> None:
    log = embedlog.Log(tmp_path / "log", durability="fsync")
    log.close()
    (tmp_path / "log" / STATE).write_text('{"version": 2, "transactions": {}}')
    with pytest.raises(CorruptCheckpointError):
        embedlog.Log(tmp_path / "log", durability="fsync")


# ---------------------------------------------------------------------- the coordinator


class _Counting(_io.FileSystem):
    def __init__(self) -> None:
        self.fsyncs = self.dir_fsyncs = self.renames = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self.dir_fsyncs += 1
        super().fsync_dir(path)

    def rename(self, src: str, dst: str) -> None:
        self.renames += 1
        super().rename(src, dst)


@pytest.mark.parametrize("parts", [1, 3])
def test_fsyncs_per_commit_and_abort(tmp_path: pathlib.Path, parts: int) -> None:
    log, p = _producer(tmp_path / "log", parts)
    for commit in (True, False, True):
        fs = _Counting()
        with _io.use_backend(fs):
            p.begin_transaction()
            for i in range(parts):
                p.send("out", b"v", partition=i)
            if commit:
                p.commit_transaction()
            else:
                p.flush()
                p.abort_transaction()
        # commit: partitions recorded, data, decision, markers; abort: partitions recorded,
        # data (flush() in fsync durability), .txnindex entries and markers; no decision
        assert fs.fsyncs == (2 * parts + 2 if commit else 3 * parts + 1)
        assert fs.dir_fsyncs == fs.renames == 0
    log.close()


def test_offsets_commit_makes_complete_durable(tmp_path: pathlib.Path) -> None:
    """After a commit with group offsets the Complete record is durable, so a newer offset a
    consumer commits next is never undone by a replayed commit after a crash."""
    log, p = _producer(tmp_path / "log")
    p.begin_transaction()
    p.send("out", b"v", partition=0)
    p.send_offsets_to_transaction({TopicPartition("in", 0): 5}, "g")
    p.commit_transaction()
    store = log._transactions().store
    assert store.durable == store.size
    c = log.consumer(group="g")
    c.commit({TopicPartition("in", 0): 8})
    c.close()
    log.close()
    log = embedlog.Log(tmp_path / "log", durability="fsync")
    assert log.consumer(group="g").committed(TopicPartition("in", 0)) == 8
    log.close()


def test_state_log_is_compacted_under_load(tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tsl, "COMPACT_MIN", 4096)
    log, p = _producer(tmp_path / "log", 2)
    for i in range(60):
        p.begin_transaction()
        p.send("out", b"%d" % i, partition=i % 2)
        (p.commit_transaction if i % 3 else p.abort_transaction)()
    size = (tmp_path / "log" / STATE).stat().st_size
    assert size <= 4096 + 2 * 1024
    log.close()
    log = embedlog.Log(tmp_path / "log", durability="fsync")
    q = log.producer(transactional_id="t")
    q.init_transactions()
    assert (q.producer_id, q.producer_epoch) == (p.producer_id, 1)
    c = log.consumer(isolation_level="read_committed")
    c.assign([TopicPartition("out", 0), TopicPartition("out", 1)])
    seen: list[bytes] = []
    while batch := c.poll():
        seen += [r.value for r in batch]
    c.close()
    assert sorted(seen) == sorted(b"%d" % i for i in range(60) if i % 3)
    log.close()
