"""The compiled record walks of compaction (compaction/walk.py, _cclean.h) against the decoded
columns path and the pure reference: the same logs compacted with the walks, without them, and
with no compiled code at all (``EMBEDLOG_PURE=1``'s modules) give identical files, statistics
and errors, whatever the batches hold (null keys, tombstones, headers, compression,
LogAppendTime, non-minimal varints, damage under a valid CRC)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedlog import Log
from embedlog.compaction import _native as keymap_native
from embedlog.compaction import walk
from embedlog.errors import CorruptBatchError, EmbedlogError
from embedlog.segment import _native as codec_native
from embedlog.segment import format as fmt

DAY = 86_400_000
T0 = 1_700_000_000_000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 1024, "index.interval.bytes": 128}
MODES = ("walk", "columns", "pure")

pytestmark = pytest.mark.skipif(keymap_native.CORE is None or codec_native.CORE is None,
                                reason="the compiled cores are not built")


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """``walk``: everything compiled; ``columns``: the compiled walks off; ``pure``: no
    compiled code."""
    saved = codec_native.CORE, keymap_native.CORE, walk.ENABLED
    walk.ENABLED = name == "walk"
    if name == "pure":
        codec_native.CORE = keymap_native.CORE = None
    try:
        yield
    finally:
        codec_native.CORE, keymap_native.CORE, walk.ENABLED = saved


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


# ---------------------------------------------------------------------------- batches


def _varint_at(section: bytes, pos: int) -> tuple[int, int]:
    value, after = fmt.decode_varint(section, pos, 10)
    return value, after


def _pad_varint(section: bytes, field: int) -> bytes | None:
    """The records section with record 0's ``field`` (0 keyLength, 1 headersCount) written as a
    two-byte varint (valid, not minimal), its length adjusted; None when it does not apply."""
    length, body = _varint_at(section, 0)
    end = body + length
    if length + 1 >= 64:  # the new length must stay a one-byte varint
        return None
    p = body + 1  # attributes
    for _ in range(2):  # timestampDelta, offsetDelta
        p = _varint_at(section, p)[1]
    if field == 0:
        klen, after = _varint_at(section, p)
        if after != p + 1 or klen > 63:
            return None
        at = p
    else:
        at = end - 1
        if section[at] != 0:  # headers: leave it
            return None
    zigzag = section[at]
    record = section[body:at] + bytes([zigzag | 0x80, 0]) + section[at + 1 : end]
    return fmt.encode_varint(len(record)) + record + section[end:]


@st.composite
def batches(draw: st.DrawFn) -> bytearray:
    n = draw(st.integers(1, 12))
    keys = draw(st.lists(st.one_of(st.sampled_from([b"a", b"bb", b"key-0123456789"]),
                                   st.none()), min_size=n, max_size=n))
    values = draw(st.lists(st.one_of(st.binary(max_size=12), st.none()), min_size=n,
                           max_size=n))
    headers = [[("h", b"x")] if draw(st.integers(0, 40)) == 0 else None for _ in range(n)]
    codec = draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1, 4]))
    log_append = draw(st.integers(0, 4)) == 0
    ts = draw(st.integers(0, 1000))
    raw = fmt.encode_batch(values, keys=keys, headers=headers, compression=codec,
                           timestamps=[T0 + ts + 7 * i for i in range(n)],
                           timestamp_type=1 if log_append else 0)
    pad = draw(st.integers(0, 15))
    if codec == 0 and pad < 2:
        h = fmt.parse_header(raw, 0)
        section = _pad_varint(raw[fmt.HEADER_SIZE :], pad)
        if section is not None:
            raw = fmt.rebuild_batch(h, section, n, h.max_timestamp)
    return bytearray(raw)


ops = st.lists(
    st.one_of(batches(), batches(), batches(), st.just("roll"),
              st.integers(0, 3).map(lambda d: ("compact", d))),
    min_size=4, max_size=40,
)


def _damage(folder: pathlib.Path, seed: int) -> None:
    """Change one byte of the records of an uncompressed batch of a sealed segment and fix
    its CRC (damage only the record walk can see)."""
    rng = np.random.default_rng(seed)
    segments = sorted(folder.glob("*.log"))[:-1]
    for seg in segments:
        data = bytearray(seg.read_bytes())
        for pos, h in fmt.iter_batches(bytes(data)):
            if h.compression == 0 and h.size > fmt.HEADER_SIZE and not h.is_control:
                at = pos + fmt.HEADER_SIZE + int(rng.integers(0, h.size - fmt.HEADER_SIZE))
                data[at] ^= int(rng.integers(1, 256))
                crc = crc32c.crc32c(bytes(data[pos + 21 : pos + h.size]))
                data[pos + 17 : pos + 21] = crc.to_bytes(4, "big")
                seg.write_bytes(bytes(data))
                return


def _run(root: pathlib.Path, plan: list[Any], damage: int | None
         ) -> tuple[list[Any], dict[str, bytes]]:
    """Play ``plan`` in a fresh log; returns what each compaction gave and the final files."""
    clock = Clock()
    outcomes: list[Any] = []
    with Log(root, clock=clock) as log:
        log.create_topic("t", config=CONFIG)
        for op in plan:
            if op == "roll":
                log.roll("t", 0)
            elif isinstance(op, tuple):
                clock.now = T0 + op[1] * DAY // 2
                if damage is not None:
                    log.roll("t", 0)
                    _damage(root / "t-0", damage)
                try:
                    stats = log.compact("t", now_ms=clock.now)
                    outcomes.append(dataclasses.replace(stats, elapsed_s=0.0))
                except EmbedlogError as e:
                    outcomes.append((type(e).__name__, str(e)))
                    break
            else:
                log._append_encoded("t", 0, bytearray(op))
    files = {p.name: p.read_bytes() for p in sorted((root / "t-0").iterdir())}
    return outcomes, files


def _compare(plan: list[Any], damage: int | None = None) -> None:
    results = {}
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # thousands of fsyncs
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-walk-", dir=shm))
    try:
        for name in MODES:
            with mode(name):
                results[name] = _run(scratch / name, plan, damage)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    want = results["pure"]
    for name in ("walk", "columns"):
        assert results[name][0] == want[0], name
        assert results[name][1].keys() == want[1].keys(), name
        for file, data in want[1].items():
            assert results[name][1][file] == data, (name, file)


# ---------------------------------------------------------------------------- tests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=ops)
def test_walks_give_the_files_of_the_reference(plan: list[Any]) -> None:
    _compare([*plan, "roll", ("compact", 3)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=ops, seed=st.integers(0, 2**32 - 1))
def test_walks_give_the_errors_of_the_reference(plan: list[Any], seed: int) -> None:
    _compare([*plan, ("compact", 1)], damage=seed)


def test_many_batches_and_every_outcome() -> None:
    """Long runs in one buffer: batches copied, shrunk, emptied, re-encoded with a horizon,
    then tombstones removed past it; older clean records looked up in the map."""
    rng = np.random.default_rng(3)
    plan: list[Any] = []
    for i in range(300):
        n = int(rng.integers(1, 20))
        keys = [b"k%03d" % k for k in rng.integers(0, 150 if i < 200 else 40, n)]
        values = [None if rng.random() < 0.05 else b"v%d" % i for _ in range(n)]
        plan.append(bytearray(fmt.encode_batch(values, keys=keys, timestamps=T0 + i)))
        if i in (120, 250):
            plan += ["roll", ("compact", 0)]
    plan += ["roll", ("compact", 1), ("compact", 3)]
    _compare(plan)


def test_walk_skips_what_it_does_not_read() -> None:
    """A compressed batch or a record with headers goes to the columns path: readable() and the
    batches the compiled walk refuses are left out of the map, the others of the run put."""
    plain = fmt.parse_header(fmt.encode_batch([b"v"], keys=[b"k"], timestamps=T0), 0)
    zipped = fmt.parse_header(fmt.encode_batch([b"v"], keys=[b"k"], timestamps=T0,
                                               compression=1), 0)
    assert walk.readable(plain) and not walk.readable(zipped)
    raw = fmt.encode_batch([b"v"], keys=[b"k"], headers=[[("h", b"x")]], timestamps=T0)
    from embedlog.compaction.digest import Digester
    from embedlog.compaction.offset_map import OffsetMap

    omap = OffsetMap(1 << 16)
    bad = (raw, 0, fmt.parse_header(raw, 0))
    assert walk.map_run(omap, Digester(1), [bad], 0) == [bad]
    assert omap.size == 0
    good = fmt.encode_batch([b"v", None], keys=[b"k", b"j"], timestamps=T0)
    both = good + raw  # one buffer, the second batch not read
    run = [(both, 0, fmt.parse_header(both, 0)), (both, len(good), bad[2])]
    assert walk.map_run(omap, Digester(1), run, 0) == run[1:]
    assert omap.size == 2


def _fixture_files(src: pathlib.Path, dest: pathlib.Path, topic: str) -> dict[str, bytes]:
    """``src`` (a real Kafka folder) adopted at ``dest``, ``topic`` compacted from scratch;
    the files of its partitions after."""
    shutil.copytree(src, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o750 if path.is_dir() else 0o640)
    (dest / "cleaner-offset-checkpoint").unlink(missing_ok=True)
    with Log(dest, adopt=True) as log:
        log.alter_topic(topic, {"cleanup.policy": "compact"})
        log.compact(topic, now_ms=T0)
    return {f"{p.parent.name}/{p.name}": p.read_bytes()
            for p in sorted(dest.glob(f"{topic}-*/*")) if p.is_file()}


def test_real_kafka_folder_compacts_to_the_same_files(kafka_fixtures: pathlib.Path,
                                                      tmp_path: pathlib.Path) -> None:
    src = kafka_fixtures / "kafka27-compacted-multiseg"
    results = {}
    for name in MODES:
        with mode(name):
            results[name] = _fixture_files(src, tmp_path / name, "__consumer_offsets")
    assert any(len(data) for data in results["pure"].values())
    assert results["walk"] == results["pure"] and results["columns"] == results["pure"]


def _offsets_swapped() -> bytearray:
    """A two-record batch (a value, then a tombstone) whose records carry offset deltas 1 then
    0, under a valid CRC: readable, but not a batch the cleaner may rewrite."""
    raw = bytearray(fmt.encode_batch([b"x", None], keys=[b"a", b"b"], timestamps=T0))
    h = fmt.parse_header(bytes(raw), 0)
    at = fmt.HEADER_SIZE
    for delta in (2, 0):  # zigzag(1), zigzag(0): both one byte, so nothing else moves
        length, body = _varint_at(bytes(raw), at)
        raw[_varint_at(bytes(raw), body + 1)[1]] = delta  # after attributes, timestampDelta
        at = body + length
    raw[17:21] = crc32c.crc32c(bytes(raw[21 : h.size])).to_bytes(4, "big")
    return raw


def test_records_out_of_offset_order_are_refused_as_corrupt_and_nothing_is_lost() -> None:
    """The tombstone's delete horizon makes the cleaner encode the batch afresh; records out of
    offset order are damage (CorruptBatchError in every mode, the files as they were), not a
    bare ValueError from the encoder."""
    raw = _offsets_swapped()
    decoded = fmt.decode_records(bytes(raw), 0, fmt.parse_header(bytes(raw), 0))
    assert [int(o) for o in decoded.offsets] == [1, 0]
    for name in MODES:
        with mode(name), tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            with Log(root, clock=Clock()) as log:
                log.create_topic("t", config=CONFIG)
                log._append_encoded("t", 0, bytearray(raw))
                log.roll("t", 0)
                before = {p.name: p.read_bytes() for p in (root / "t-0").glob("*.log")}
                with pytest.raises(CorruptBatchError, match="not increasing"):
                    log.compact("t", now_ms=T0 + DAY)
                after = {p.name: p.read_bytes() for p in (root / "t-0").glob("*.log")}
                assert after == before, name


def test_an_offset_delta_past_the_last_one_is_the_same_error_in_every_mode() -> None:
    """A record whose offset delta exceeds its batch's lastOffsetDelta (under a valid CRC): the
    batch's own decoder reports it, with its byte, whichever path read the batch first."""
    raw = bytearray(fmt.encode_batch([b"x", b"y"], keys=[b"a", b"a"], timestamps=T0))
    raw[23:27] = (0).to_bytes(4, "big")  # lastOffsetDelta 0; the second record says 1
    raw[17:21] = crc32c.crc32c(bytes(raw[21:])).to_bytes(4, "big")
    _compare([bytes(raw), "roll", ("compact", 1)])
    with mode("walk"), tempfile.TemporaryDirectory() as tmp:
        outcome, _ = _run(pathlib.Path(tmp), [bytes(raw), "roll", ("compact", 1)], None)
    assert outcome[0][0] == "CorruptBatchError" and "(byte" in outcome[0][1]
