"""Tiered storage: upload and remote read rates, against a local read.

    python benches/bench_tiering.py [--mib 32] [--segment-mib 1] [--s3]

A log of ``--mib`` MiB of 1 KiB records (``segment.bytes`` = ``--segment-mib``) is tiered to a
``file://`` folder (with ``--s3`` also to moto's S3 server on 127.0.0.1, which needs
``moto[server]``; its objects go in one PutObject each, ``allow_delayed_open``). Rows:

  upload          one tiering round: every sealed segment put (4 files) and published, the
                  local copies then deleted (``local.retention.bytes=0``)
  read-remote     reading every record from the log start, every segment fetched from the
                  remote into the cold read cache (and checked against its CRC-32)
  read-cached     the same read again (the last segments are still in the cache)
  read-local      the same records from a log never tiered

Rates are MiB of record batches per second of wall time. The machine is shared and noisy:
compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import embedlog

VALUE = b"x" * 1000


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _fill(log: embedlog.Log, mib: int) -> None:
    batch = [VALUE] * 1000
    for _ in range(mib):
        log.append_batch("t", batch, partition=0)


def _drain(log: embedlog.Log) -> int:
    return sum(1 for _ in log.read("t", 0, 0))


def run(uri: str, root: Path, mib: int, segment_mib: int) -> dict[str, float]:
    config = {"segment.bytes": segment_mib << 20}
    plain = embedlog.open(root / "plain", upkeep=False)
    plain.create_topic("t", config=config)
    _fill(plain, mib)
    tiered = embedlog.open(root / "tiered", upkeep=False, remote_uri=uri)
    tiered.create_topic("t", config={**config, "remote.storage.enable": True,
                                     "local.retention.bytes": 0})
    _fill(tiered, mib)
    size = sum(s.size for s in plain.segments("t", 0)) / (1 << 20)
    rates = {"upload": size / _timed(lambda: tiered.upkeep.run_once("tiering"))}
    rates["read-remote"] = size / _timed(lambda: _drain(tiered))
    rates["read-cached"] = size / _timed(lambda: _drain(tiered))
    rates["read-local"] = size / _timed(lambda: _drain(plain))
    assert _drain(tiered) == _drain(plain)
    tiered.close()
    plain.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--segment-mib", type=int, default=1)
    parser.add_argument("--s3", action="store_true")
    args = parser.parse_args()
    targets: list[tuple[str, Callable[[Path], str]]] = [
        ("file", lambda root: (root / "remote").resolve().as_uri())]
    if args.s3:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from s3_endpoint import BUCKET, moto_s3

        stack = moto_s3()
        endpoint = stack.__enter__()
        targets.append(("s3", lambda root: (
            f"s3://{BUCKET}/{root.name}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1&allow_delayed_open=true")))
    print(f"{'remote':8} {'row':12} {'MiB/s':>8}")
    for name, make in targets:
        root = Path(tempfile.mkdtemp(prefix="embedlog-bench-tier-"))
        try:
            (root / "remote").mkdir()
            for row, rate in run(make(root), root, args.mib, args.segment_mib).items():
                print(f"{name:8} {row:12} {rate:8.1f}")
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
