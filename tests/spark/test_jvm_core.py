"""The JVM reader core (src/embedlog/spark/java/embedlog) against embedlog's own read-only
Python reader: the same records, counts and log start for every codec, headers, null keys and
values, LogAppendTime, transactions (control batches never shown, aborted data shown as
read_uncommitted shows it), compacted logs, several segments, delete_records, ranges cut
mid-batch, real Kafka folders and random logs; and the same verdict on damaged segments.
No Spark session: one ``embedlog.Dump`` JVM per test runs every spec."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jvm_core_util import (
    Spec,
    damaged_copies,
    dump_while,
    open_view,
    python_result,
    run_dump,
    verdicts,
)

import embedlog
from embedlog.segment import format as fmt

KAFKA = Path(os.environ.get("EMBEDLOG_SHARED", "/work/shared")) / "fixtures" / "kafka-real"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _fill(log: embedlog.Log, topic: str, batches: int, codec: str | None, seed: int = 0) -> None:
    """``batches`` batches of 1-6 records: null keys and values, headers with null values."""
    rng = random.Random(seed)
    for i in range(batches):
        n = rng.randint(1, 6)
        log.append_batch(
            topic,
            [None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 40)) for _ in range(n)],
            keys=[None if rng.random() < 0.3 else b"k%d" % rng.randint(0, 9) for _ in range(n)],
            headers=[[("h\u00e9", b"x"), ("n", None)] if rng.random() < 0.5 else None
                     for _ in range(n)],
            timestamps=1_700_000_000_000 + i, compression=codec)


def _ranges(start: int, end: int, rng: random.Random, n: int = 6) -> Iterator[tuple[int, int]]:
    """The whole range, then random sub-ranges (cut mid-batch more often than not)."""
    yield start, end
    for _ in range(n):
        a = rng.randint(start, end)
        yield a, rng.randint(a, end)


def _specs(view: embedlog.Log, root: str, topic: str, seed: int = 0) -> list[Spec]:
    rng = random.Random(seed)
    out: list[Spec] = []
    for p in range(view.partition_count(topic)):
        s, e = view.start_offset(topic, p), view.end_offset(topic, p)
        for a, b in _ranges(s, e, rng):
            out += [(root, topic, p, a, b, "records"), (root, topic, p, a, b, "count")]
    return out


def _agree(classpath: str, root: str, specs: list[Spec]) -> list[dict[str, Any]]:
    """Dump's results for ``specs``, asserted equal to the Python reader's."""
    got = run_dump(classpath, specs)
    with open_view(root) as view:
        for spec, jvm in zip(specs, got, strict=True):
            assert jvm == python_result(view, spec), spec
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_as_python(classpath: str, tmp_path: Path, codec: str) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("c", 2, {"segment.bytes": 2048, "index.interval.bytes": 128})
        _fill(log, "c", 80, None if codec == "none" else codec)
    with open_view(root) as view:
        specs = _specs(view, root, "c")
        assert len(os.listdir(tmp_path / "c-0")) > 6  # several segments
    got = _agree(classpath, root, specs)
    assert any(r.get("records") for r in got)
    assert all("error" not in r for r in got)


def test_log_append_time(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("l", 1, {"message.timestamp.type": "LogAppendTime",
                                  "segment.bytes": 2048})
        _fill(log, "l", 30, "lz4")
    with open_view(root) as view:
        specs = _specs(view, root, "l")
    got = _agree(classpath, root, specs)
    rows = got[0]["records"]
    assert rows and all(r["timestampType"] == 1 for r in rows)


def _txn_log(root: str) -> None:
    """Committed and aborted transactions of two producers among plain batches."""
    txn = {"producer_epoch": 0, "is_transactional": True, "timestamps": 0}
    with embedlog.open(root) as log:
        log.create_topic("t", 1, {"segment.bytes": 1024})

        def batch(values: list[bytes], **kw: Any) -> None:
            log._append_encoded("t", 0, bytearray(fmt.encode_batch(values, **kw)))

        def marker(pid: int, kind: int) -> None:
            key, value = fmt.control_record(kind)
            batch([value], keys=[key], producer_id=pid, is_control=True, **txn)

        for round_ in range(6):
            batch([b"plain-%d" % round_], timestamps=5)
            batch([b"A%d" % round_, b"a"], producer_id=1, base_sequence=2 * round_, **txn)
            batch([b"B%d" % round_], producer_id=2, base_sequence=round_, **txn)
            marker(1, fmt.CONTROL_COMMIT)
            marker(2, fmt.CONTROL_ABORT if round_ % 2 else fmt.CONTROL_COMMIT)


def test_transactions_show_data_not_markers(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    _txn_log(root)
    with open_view(root) as view:
        specs = _specs(view, root, "t", seed=3)
        end = view.end_offset("t", 0)
    got = _agree(classpath, root, specs)
    values = [base64_text(r["value"]) for r in got[0]["records"]]
    assert "B1" in values  # aborted data is read (read_uncommitted)
    assert len(got[0]["records"]) < end  # the markers' offsets are not


def base64_text(v: str | None) -> str | None:
    import base64

    return None if v is None else base64.b64decode(v).decode()


def test_compacted_log_with_offset_gaps(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("k", 1, {"cleanup.policy": "compact", "segment.bytes": 1024,
                                  "min.cleanable.dirty.ratio": 0.01})
        rng = random.Random(5)
        for i in range(200):
            log.append_batch("k", [b"v%d" % i], keys=[b"key%d" % rng.randint(0, 15)],
                             compression="zstd" if i % 2 else None)
        log.compact("k")
    with open_view(root) as view:
        specs = _specs(view, root, "k", seed=9)
    got = _agree(classpath, root, specs)
    offsets = [r["offset"] for r in got[0]["records"]]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps


def test_delete_records_moves_the_log_start(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("d", 1, {"segment.bytes": 1024})
        _fill(log, "d", 60, None)
        log.delete_records("d", 0, 37)
    with open_view(root) as view:
        start = view.start_offset("d", 0)
        specs = _specs(view, root, "d", seed=4)
    assert start == 37
    _agree(classpath, root, specs)
    below = run_dump(classpath, [(root, "d", 0, 0, 0, "start"), (root, "d", 0, 36, 40, "records")])
    assert below[0] == {"logStart": 37}
    assert below[1]["error"] == "OffsetOutOfRangeException"


def _kafka_partitions() -> list[tuple[str, str, int]]:
    out = []
    for name in ("kafka30-multipartition", "kafka27-compacted-multiseg", "cp512-connect-lz4"):
        root = KAFKA / name
        if not root.is_dir():
            continue
        for entry in sorted(os.listdir(root)):
            topic, _, number = entry.rpartition("-")
            if number.isdigit() and (root / entry).is_dir():
                out.append((str(root), topic, int(number)))
    return out


def test_real_kafka_folders(classpath: str) -> None:
    parts = _kafka_partitions()
    if not parts:
        pytest.skip(f"no Kafka fixtures under {KAFKA}")
    rng = random.Random(1)
    specs: list[Spec] = []
    for root, topic, p in parts:
        with open_view(root) as view:
            s, e = view.start_offset(topic, p), view.end_offset(topic, p)
        for a, b in _ranges(s, e, rng, 2):
            specs += [(root, topic, p, a, b, mode) for mode in
                      ("records", "count", "committed-records", "committed-count")]
    got: list[dict[str, Any]] = []
    for root in sorted({s[0] for s in specs}):
        got += _agree(classpath, root, [s for s in specs if s[0] == root])
    for mode in ("count", "committed-count"):  # read_committed: no transaction in them
        whole = [r for spec, r in zip(specs, got, strict=True) if spec[5] == mode][::3]
        assert sum(r["count"] for r in whole) >= 3126 + 16 + 582  # SOURCES.md's totals


# -- damage ------------------------------------------------------------------------------------


def _planned(root: str, topic: str, rng: random.Random) -> list[Spec] | None:
    """Ranges a planner takes from the damaged log's bounds, None when the read-only view
    refuses the partition's bounds already (damage in the active segment's tail, which the
    view walks to find the log end: planning fails before any range is read)."""
    try:
        with open_view(root) as view:
            s, e = view.start_offset(topic, 0), view.end_offset(topic, 0)
    except embedlog.CorruptionError:
        return None
    return [(root, topic, 0, a, b, mode) for a, b in _ranges(s, e, rng, 3)
            for mode in ("records", "count")]


def test_damaged_segments_get_the_python_verdict(classpath: str, tmp_path: Path) -> None:
    """Wherever the Python reader raises CorruptBatchError for a range the JVM raises
    CorruptBatchException; wherever it returns records, the JVM returns the same ones."""
    base = tmp_path / "base"
    topics = list(CODECS)
    with embedlog.open(str(base)) as log:
        for c in topics:
            log.create_topic(c, 1, {"segment.bytes": 1500, "index.interval.bytes": 100})
            _fill(log, c, 40, None if c == "none" else c, seed=len(c))
    rng = random.Random(11)
    specs: list[Spec] = []
    refused = 0
    for root, topic in damaged_copies(base, tmp_path / "work", topics, 120, seed=7):
        planned = _planned(root, topic, rng)
        refused += planned is None
        specs += planned or []
    got = run_dump(classpath, specs)
    counts = verdicts(specs, got)
    assert counts["corrupt"] > 10 and counts["same"] > 100 and refused < 120


def test_a_sealed_segment_cut_at_a_batch_boundary_is_left_to_the_python_reader(
        classpath: str, tmp_path: Path) -> None:
    """The cut would read as a gap: the JVM compares each sealed segment it enters with the
    manifest and leaves a mismatch to the Python reader (FallbackException), which raises
    CorruptionError; a range that ends before the cut segment reads the same in both."""
    root = tmp_path / "log"
    with embedlog.open(str(root)) as log:
        log.create_topic("t", 1, {"segment.bytes": 1500})
        for i in range(120):
            log.append("t", b"value-%05d" % i * 4, key=b"k%d" % i)
    logs = sorted((root / "t-0").glob("*.log"))
    assert len(logs) > 3
    data = logs[1].read_bytes()
    logs[1].write_bytes(data[: 12 + int.from_bytes(data[8:12], "big")])
    second = int(logs[1].name[:20])
    specs = [(str(root), "t", 0, 0, 120, "records"), (str(root), "t", 0, 0, second, "records"),
             (str(root), "t", 0, second, 120, "count")]
    got = run_dump(classpath, specs)
    assert [r.get("error") for r in got] == ["FallbackException", None, "FallbackException"]
    with open_view(root) as view:
        assert python_result(view, specs[1]) == got[1]
        for spec in (specs[0], specs[2]):
            assert "sealed segment is" in python_result(view, spec)["message"]


# -- record layout and codec streams -------------------------------------------------------


def _rebuilt(batch: bytes, section: bytes, records: int | None = None) -> bytes:
    """``batch`` with its records section replaced by ``section`` (the batch length and the
    CRC-32C made right again, ``records`` the new recordCount): damage the CRC cannot see."""
    import struct

    import crc32c

    head = bytearray(batch[: fmt.HEADER_SIZE])
    struct.pack_into(">i", head, 8, fmt.HEADER_SIZE - 12 + len(section))
    if records is not None:
        struct.pack_into(">i", head, 57, records)
    body = bytes(head[21:]) + section
    struct.pack_into(">I", head, 17, crc32c.crc32c(body))
    return bytes(head) + section


def _mutate(section: bytes, rng: random.Random) -> bytes:
    data = bytearray(section)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(4)
        i = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(i, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i:i] = rng.randbytes(rng.randint(1, 3))
        elif op == 2:
            del data[i : i + rng.randint(1, 3)]
        else:
            data[min(i, len(data) - 1) : i + 1] = bytes([rng.choice([0x80, 0xFF, 0x01, 0x7F])])
    return bytes(data)


def _one_batch_log(root: Path, name: str, batch: bytes) -> Spec:
    folder = root / f"{name}-0"
    folder.mkdir(parents=True)
    (folder / "00000000000000000000.log").write_bytes(batch)
    return (str(root), name, 0, 0, 2**40, "records")


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), codec=st.sampled_from(range(5)))
def test_damaged_records_under_a_valid_crc(classpath: str, tmp_path_factory: pytest.TempPathFactory,
                                           seed: int, codec: int) -> None:
    """Records sections (and compressed streams) damaged behind a valid CRC: the JVM rejects
    exactly the batches the Python decoder rejects, and decodes the others the same."""
    from embedlog.segment.codecs import compress, decompress

    rng = random.Random(seed)
    root = tmp_path_factory.mktemp("records")
    specs = []
    for i in range(25):
        n = rng.randint(1, 5)
        batch = fmt.encode_batch(
            [None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 9)) for _ in range(n)],
            keys=[None if rng.random() < 0.3 else b"k" for _ in range(n)],
            headers=[[("h", None), ("\u00e9", b"v")] if rng.random() < 0.5 else None
                     for _ in range(n)], timestamps=1000 + i, compression=codec)
        section = batch[fmt.HEADER_SIZE:]
        if codec and rng.random() < 0.5:  # the records damaged, then compressed again
            raw = _mutate(decompress(codec, section, max_size=1 << 20), rng)
            section = compress(codec, raw)
        else:
            section = _mutate(section, rng)
        count = n + rng.choice([0, 0, 0, -1, 1]) if rng.random() < 0.3 else None
        specs.append(_one_batch_log(root, f"r{i}", _rebuilt(batch, section, count)))
    got = run_dump(classpath, specs)
    with open_view(root) as view:
        for spec, jvm in zip(specs, got, strict=True):
            py = python_result(view, (*spec[:4], view.end_offset(spec[1], 0), spec[5]))
            if py.get("corrupt"):
                assert jvm.get("error") in ("CorruptBatchException",
                                            "UnsupportedFormatException"), (spec, py, jvm)
            else:
                assert jvm == py, spec


# -- random logs ---------------------------------------------------------------------------

_BATCH = st.tuples(st.integers(1, 8), st.floats(0, 1), st.booleans(),
                   st.sampled_from([None, "gzip", "snappy", "lz4", "zstd"]))


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_BATCH, min_size=1, max_size=40), segment=st.sampled_from([600, 2000]),
       deleted=st.floats(0, 0.5), seed=st.integers(0, 2**16))
def test_random_logs_and_ranges(classpath: str, tmp_path_factory: pytest.TempPathFactory,
                                batches: list[tuple[int, float, bool, str | None]],
                                segment: int, deleted: float, seed: int) -> None:
    root = str(tmp_path_factory.mktemp("random"))
    rng = random.Random(seed)
    with embedlog.open(root) as log:
        log.create_topic("r", 1, {"segment.bytes": segment, "index.interval.bytes": 64})
        for n, nulls, headers, codec in batches:
            log.append_batch(
                "r", [None if rng.random() < nulls else rng.randbytes(rng.randint(0, 30))
                      for _ in range(n)],
                keys=[None if rng.random() < nulls else b"%d" % rng.randint(0, 3)
                      for _ in range(n)],
                headers=[[("k", None), ("v", b"1")] if headers else None for _ in range(n)],
                compression=codec)
        end = log.end_offset("r", 0)
        log.delete_records("r", 0, int(end * deleted))
    with open_view(root) as view:
        specs = _specs(view, root, "r", seed)
    got = _agree(classpath, root, specs)
    counts = [r["count"] for r in got if "count" in r]
    records = [len(r["records"]) for r in got if "records" in r]
    assert counts == records


# -- folders and names ---------------------------------------------------------------------


def test_a_compaction_swap_in_progress_falls_back(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("s", 1, {"segment.bytes": 1024})
        _fill(log, "s", 20, None)
    (tmp_path / "s-0" / "00000000000000000000.log.swap").write_bytes(b"")
    got = run_dump(classpath, [(root, "s", 0, 0, 5, "records"), (root, "s", 0, 0, 5, "count")])
    assert [r["error"] for r in got] == ["FallbackException"] * 2


def test_untrusted_names_and_files(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("n", 1, {"segment.bytes": 1024})
        _fill(log, "n", 20, None)
    folder = tmp_path / "n-0"
    (folder / "0000000000000000000x.log").write_bytes(b"junk")  # not a segment name: ignored
    (folder / "00000000000000000000.log.bak").write_bytes(b"junk")
    names = ["..", ".", "a/b", "x" * 250, "", "caf\u00e9"]
    got = run_dump(classpath, [(root, "n", 0, 0, 9, "count")]
                   + [(root, t, 0, 0, 1, "count") for t in names])
    assert got[0] == {"count": 9}
    assert all(r["error"] == "IllegalArgumentException" for r in got[1:])
    seg = folder / "00000000000000000000.log"
    seg.rename(folder / "real")
    seg.symlink_to(folder / "real")  # a link is never followed
    assert run_dump(classpath, [(root, "n", 0, 0, 9, "count")])[0]["error"] == \
        "FallbackException"


def test_a_scribbled_index_is_not_trusted(classpath: str, tmp_path: Path) -> None:
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("i", 1, {"segment.bytes": 100_000, "index.interval.bytes": 64})
        _fill(log, "i", 60, None)
    index = tmp_path / "i-0" / "00000000000000000000.index"
    with open_view(root) as view:
        specs = _specs(view, root, "i", seed=2)
        end = view.end_offset("i", 0)
    before = run_dump(classpath, specs)
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 16
    rng = random.Random(0)
    for i in range(0, len(entries), 8):  # positions inside batches, offsets out of order
        entries[i : i + 8] = (rng.randrange(end)).to_bytes(4, "big") + rng.randrange(
            100_000).to_bytes(4, "big")
    index.write_bytes(bytes(entries))
    assert run_dump(classpath, specs) == before


def _streams(raw: bytes) -> dict[str, tuple[int, bytes]]:
    """The records section ``raw`` in the stream variants the Python decoder accepts beyond
    what embedlog writes: (codec id, stream)."""
    import gzip

    import cramjam
    import lz4.frame
    import zstandard

    plain = zstandard.ZstdCompressor(write_content_size=False)
    half = len(raw) // 2
    skippable = (0x184D2A53).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    return {
        "gzip-members": (1, gzip.compress(raw[:half]) + gzip.compress(raw[half:])),
        "snappy-raw": (2, bytes(cramjam.snappy.compress_raw(raw))),
        "lz4-checksums": (3, lz4.frame.compress(raw, content_checksum=True, block_checksum=True,
                                                store_size=True)),
        "lz4-two-frames": (3, lz4.frame.compress(raw[:half]) + lz4.frame.compress(raw[half:])),
        "zstd-no-size": (4, plain.compress(raw)),
        "zstd-frames": (4, plain.compress(raw[:half]) + skippable
                        + zstandard.ZstdCompressor().compress(raw[half:])),
    }


def test_codec_stream_variants(classpath: str, tmp_path: Path) -> None:
    batch = fmt.encode_batch([b"v%d" % i * 50 for i in range(40)], timestamps=7,
                             headers=[[("h", None)]] * 40)
    raw = batch[fmt.HEADER_SIZE:]
    specs = []
    for name, (codec, stream) in _streams(raw).items():
        head = bytearray(batch[: fmt.HEADER_SIZE])
        head[22] = (head[22] & ~7) | codec
        specs.append(_one_batch_log(tmp_path, name, _rebuilt(bytes(head), stream)))
    got = run_dump(classpath, specs)
    with open_view(tmp_path) as view:
        for spec, jvm in zip(specs, got, strict=True):
            py = python_result(view, (*spec[:4], 40, spec[5]))
            assert len(py["records"]) == 40
            assert jvm == py, spec[1]


def test_reads_below_end_while_a_writer_appends(classpath: str, tmp_path: Path) -> None:
    """The active segment grows during the scans: ranges below the end offset seen before
    read the same records, whatever is being appended past them."""
    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("w", 1, {"segment.bytes": 50_000})
        _fill(log, "w", 50, "lz4")
        with open_view(root) as view:
            specs = _specs(view, root, "w", seed=6) * 20
            expected = [python_result(view, s) for s in specs]
        got = dump_while(classpath, specs, lambda: _fill(log, "w", 5, None))
        assert log.end_offset("w", 0) > max(s[4] for s in specs)
    assert got == expected


def test_a_gap_in_a_dense_active_segment_is_damage(classpath: str, tmp_path: Path) -> None:
    """The last batch's base offset (outside the CRC) moved forward in the active segment of
    an embedlog topic: the Python view refuses it, and so does the JVM told the tail is dense;
    without that it cannot tell the gap from a compacted one."""
    import struct

    root = str(tmp_path)
    with embedlog.open(root) as log:
        log.create_topic("g", 1, {"segment.bytes": 100_000})
        _fill(log, "g", 10, None)
        end = log.end_offset("g", 0)
    seg = tmp_path / "g-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    pos = 0
    while pos + fmt.HEADER_SIZE < len(data):
        last, pos = pos, pos + fmt.parse_header(data, pos).size
    base = fmt.parse_header(data, last).base_offset
    struct.pack_into(">q", data, last, base + 5)
    seg.write_bytes(bytes(data))
    with pytest.raises(embedlog.CorruptionError), open_view(root) as view:
        view.end_offset("g", 0)
    got = run_dump(classpath, [(root, "g", 0, 0, end + 5, "records", "dense"),
                               (root, "g", 0, 0, base, "records", "dense"),
                               (root, "g", 0, 0, end + 5, "records")])
    for refused in got[:2]:  # the batch after a range is checked whole too
        assert refused["error"] == "CorruptBatchException"
        assert "without gaps" in refused["message"]
    assert got[2]["records"][-1]["offset"] > end  # the moved batch, not told it is damage
