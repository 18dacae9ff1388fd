"""pytest-benchmark: encode and decode one 1000-record v2 batch with each codec.

    pytest benches/bench_format.py --benchmark-only --benchmark-columns=median,ops
    python benches/bench_format.py [--rounds 15]   # compiled core vs pure Python, one run

Records as in design/performance.md: 8-16 B random keys, int64 ms timestamps (increasing by
1 ms), 100 B values -- random bytes for ``none`` and ~100 B JSON click events for the
compressed codecs (random bytes would not compress). Records/s = 1000 x ops. The kafka-python
rows (its ``DefaultRecordBatchBuilder`` and ``DefaultRecordBatch``) are the reference the
performance targets are stated against.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from embedlog.records import Record
from embedlog.segment import _native
from embedlog.segment.codecs import Compression
from embedlog.segment.format import decode_records, encode_batch, next_batch, parse_header

N = 1000
T0 = 1_700_000_000_000
CODECS = list(Compression)


def _records(codec: Compression) -> tuple[list[bytes], list[bytes], np.ndarray]:
    rng = random.Random(42)
    keys = [rng.randbytes(rng.randint(8, 16)) for _ in range(N)]
    if codec is Compression.NONE:
        values = [rng.randbytes(100) for _ in range(N)]
    else:
        values = [
            b'{"user_id":%06d,"event":"purchase","page":"/help/item/%04d","device":"mobile"}'
            % (rng.randrange(10**6), rng.randrange(10**4))
            for _ in range(N)
        ]
    return keys, values, np.arange(T0, T0 + N, dtype=np.int64)


def _info(benchmark: Any, batch: bytes) -> None:
    benchmark.extra_info["records"] = N
    benchmark.extra_info["batch_bytes"] = len(batch)


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_encode(benchmark: Any, codec: Compression) -> None:
    keys, values, stamps = _records(codec)
    batch = benchmark(lambda: encode_batch(values, keys=keys, timestamps=stamps, compression=codec))
    _info(benchmark, batch)


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_decode(benchmark: Any, codec: Compression) -> None:
    """CRC check + decompression + full validation + keys and values as bytes."""
    keys, values, stamps = _records(codec)
    batch = encode_batch(values, keys=keys, timestamps=stamps, compression=codec)

    def run() -> list[bytes | None]:
        header = next_batch(batch, 0)
        assert header is not None
        records = decode_records(batch, 0, header)
        records.keys()
        return records.values()

    assert benchmark(run) == values
    _info(benchmark, batch)


def test_decode_columns_only(benchmark: Any) -> None:
    """decode_records alone: offsets/timestamps/positions as numpy columns, no bytes objects."""
    keys, values, stamps = _records(Compression.NONE)
    batch = encode_batch(values, keys=keys, timestamps=stamps)
    header = next_batch(batch, 0)
    assert header is not None
    benchmark(lambda: decode_records(batch, 0, header))
    _info(benchmark, batch)


def test_encode_with_headers(benchmark: Any) -> None:
    """One record in ten has a header: only their header sections are encoded per record."""
    keys, values, stamps = _records(Compression.NONE)
    headers = [[("trace", b"%08d" % i)] if i % 10 == 0 else None for i in range(N)]
    batch = benchmark(lambda: encode_batch(values, keys=keys, headers=headers, timestamps=stamps))
    _info(benchmark, batch)


def test_kafka_python_encode(benchmark: Any) -> None:
    keys, values, stamps = _records(Compression.NONE)
    ts = stamps.tolist()

    def run() -> bytearray:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 22,
        )
        for i in range(N):
            builder.append(i, timestamp=ts[i], key=keys[i], value=values[i], headers=[])
        return builder.build()

    _info(benchmark, bytes(benchmark(run)))


def test_kafka_python_decode(benchmark: Any) -> None:
    keys, values, stamps = _records(Compression.NONE)
    batch = encode_batch(values, keys=keys, timestamps=stamps)

    def run() -> list[bytes | None]:
        kb = DefaultRecordBatch(bytearray(batch))
        kb.validate_crc()
        return [r.value for r in kb]

    assert benchmark(run) == values
    _info(benchmark, batch)


# --------------------------------------------------------------------------- C vs pure


def _steps() -> dict[str, Any]:
    """name -> (callable, records it handles) for one 1000-record batch."""
    keys, values, stamps = _records(Compression.NONE)
    _, jvalues, _ = _records(Compression.ZSTD)
    batch = encode_batch(values, keys=keys, timestamps=stamps)
    header = parse_header(batch)

    def full_decode() -> None:
        r = decode_records(batch, 0, header)
        r.keys()
        r.values()

    def records() -> None:
        decode_records(batch, 0, header).records("t", 0, 0)

    def records_python() -> None:  # the map/zip path partition.read uses today
        r = decode_records(batch, 0, header)
        list(map(tuple.__new__, [Record] * N, zip(
            ["t"] * N, [0] * N, r.offsets.tolist(), r.timestamps.tolist(), [0] * N,
            r.keys(), r.values(), [()] * N, strict=True)))

    return {
        "encode none (header+CRC)": (lambda: encode_batch(values, keys=keys, timestamps=stamps),
                                     N),
        "encode zstd": (lambda: encode_batch(jvalues, keys=keys, timestamps=stamps,
                                             compression=Compression.ZSTD), N),
        "decode columns": (lambda: decode_records(batch, 0, header), N),
        "decode + keys/values": (full_decode, N),
        "decode + Record objects": (records, N),
        "decode + Records by map/zip": (records_python, N),
        "point decode (500th)": (lambda: decode_records(batch, 0, header, first=500, count=1),
                                 1),
    }


def _time(fn: Any, rounds: int) -> float:
    import time

    times = []
    for _ in range(rounds):
        t0 = time.process_time()  # CPU time: neighbours on a shared machine do not count
        for _ in range(5):
            fn()
        times.append((time.process_time() - t0) / 5)
    return sorted(times)[len(times) // 2]


def compare(rounds: int) -> None:
    """Median time per call of each step with the compiled core and with pure Python,
    interleaved round by round, and the ratio."""
    from embedlog.segment import _ccodec

    steps = _steps()
    print(f"{'step':32} {'C rec/s':>14} {'pure rec/s':>14} {'C us':>9} {'pure us':>9} "
          f"{'x':>6}")
    saved = _native.CORE
    try:
        for name, (fn, count) in steps.items():
            _native.CORE = _ccodec
            c = _time(fn, rounds)
            _native.CORE = None
            py = _time(fn, rounds)
            print(f"{name:32} {count / c:14,.0f} {count / py:14,.0f} {c * 1e6:9.1f} "
                  f"{py * 1e6:9.1f} {py / c:6.1f}")
    finally:
        _native.CORE = saved


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    compare(parser.parse_args().rounds)
