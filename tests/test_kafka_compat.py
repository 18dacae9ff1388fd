"""What embedlog writes is read by an independent Kafka implementation (kafka-python), segment
file by segment file, and the external cross-check tool accepts every segment."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import embedlog
from helpers import KAFKA_VECTORS, small_segments

memory_records = pytest.importorskip("kafka.record.memory_records")


def write_sample(log_dir: pathlib.Path) -> dict[int, tuple[bytes | None, bytes | None, list]]:
    expected: dict[int, tuple[bytes | None, bytes | None, list]] = {}
    with embedlog.open(log_dir) as log:
        log.create_topic("k", config=small_segments())
        for i in range(120):
            key = None if i % 9 == 0 else b"k%d" % (i % 37)
            value = None if i % 13 == 5 else b"value-%d" % i * (i % 5 + 1)
            hdrs = [("i", b"%d" % i), ("none", None)] if i % 4 == 0 else []
            m = log.append("k", value, key=key, headers=hdrs, timestamp=1_700_000_000_000 + i)
            expected[m.offset] = (key, value, hdrs)
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            vals = [b"batch-%s-%d" % (codec.encode(), j) * 3 for j in range(50)]
            m = log.append_batch("k", vals, compression=codec)[0]
            for j, v in enumerate(vals):
                expected[m.offset + j] = (None, v, [])
    return expected


def test_kafka_python_reads_every_segment(log_dir: pathlib.Path) -> None:
    expected = write_sample(log_dir)
    seen: dict[int, tuple[bytes | None, bytes | None, list]] = {}
    segments = sorted((log_dir / "k-0").glob("*.log"))
    assert len(segments) > 3
    for seg in segments:
        base = int(seg.name.split(".")[0])
        records = memory_records.MemoryRecords(seg.read_bytes())
        first = True
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            if first:
                assert batch.base_offset == base
                first = False
            for r in batch:
                seen[r.offset] = (r.key, r.value, [tuple(h) for h in r.headers])
        assert records.valid_bytes() == seg.stat().st_size
    assert {o: (k, v, [tuple(h) for h in hs]) for o, (k, v, hs) in expected.items()} == seen


def test_external_cross_check_tool_accepts_segments(log_dir: pathlib.Path) -> None:
    if not KAFKA_VECTORS.exists():
        pytest.skip("../shared/tools/kafka_vectors.py is not present")
    write_sample(log_dir)
    for seg in sorted((log_dir / "k-0").glob("*.log")):
        proc = subprocess.run(
            [sys.executable, str(KAFKA_VECTORS), "read", str(seg), "--no-records"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
