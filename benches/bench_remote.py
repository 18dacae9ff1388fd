"""Reading a log through its URI (``embedlog.open(uri, read_only=True)``): what a point read,
a tail read and a full scan fetch and how long they take, from a cold cache.

    python benches/bench_remote.py [--mib 64] [--segment-mib 8] [--record-bytes 1000]
                                   [--batch 1000] [--s3]

A log of ``--mib`` MiB of records (``--record-bytes`` values, ``--batch`` a batch) in one
partition (``segment.bytes`` = ``--segment-mib``) is served by ``file://`` (the folder itself)
and with ``--s3`` by moto's S3 server on 127.0.0.1 (``moto[server]`` and ``boto3``; one
PutObject a file). Each row opens the URI afresh (a cold private cache), then:

  point   one record near the end (``read(..., end - 10, max_records=1)``)
  tail    a consumer from ``end - 1000`` polling to the end
  scan    every record from the log start

``fetched`` is what the cache folder holds then (allocated bytes: the sparse parts of a
``.log`` not fetched count nothing), as a share of the partition's ``.log`` bytes; ``s`` the wall
time of open + operation. The machine is shared and noisy: compare rows of one run.
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


def _write(path: Path, mib: int, segment_mib: int, record_bytes: int = 1000,
           per_batch: int = 1000) -> int:
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", config={"segment.bytes": segment_mib << 20})
        batch = [b"x" * record_bytes] * per_batch
        for _ in range((mib << 20) // (record_bytes * per_batch)):
            log.append_batch("t", batch, partition=0)
        return log.end_offset("t", 0)


def _allocated(folder: str) -> int:
    return sum(os.lstat(os.path.join(top, f)).st_blocks * 512
               for top, _, files in os.walk(folder) for f in files)


def _point(log: embedlog.Log, end: int) -> None:
    assert len(list(log.read("t", 0, end - 10, max_records=1))) == 1


def _tail(log: embedlog.Log, end: int) -> None:
    consumer = log.consumer()
    tp = embedlog.TopicPartition("t", 0)
    consumer.assign([tp])
    consumer.seek(tp, end - 1000)
    got = 0
    while batch := consumer.poll(max_records=5000):
        got += len(batch)
    consumer.close()
    assert got == 1000


def _scan(log: embedlog.Log, end: int) -> None:
    assert sum(1 for _ in log.read("t", 0, 0)) == end


ROWS: dict[str, Callable[[embedlog.Log, int], None]] = {
    "point": _point, "tail": _tail, "scan": _scan}


def run(uri: str, end: int, log_bytes: int, cache: Path) -> None:
    for row, op in ROWS.items():
        start = time.perf_counter()
        log = embedlog.open(uri, read_only=True, cache_dir=cache)
        try:
            op(log, end)
            took = time.perf_counter() - start
            fetched = _allocated(log.path)
        finally:
            log.close()
        print(f"{uri.split(':')[0]:6} {row:6} {fetched / (1 << 20):10.2f} "
              f"{100 * fetched / log_bytes:6.1f}% {took:8.3f}")


def _upload(endpoint: str, folder: Path, prefix: str) -> str:
    import boto3

    client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.put_object(Bucket="embedlog-test", Key=f"{prefix}/{path.relative_to(folder)}",
                              Body=path.read_bytes())
    return (f"s3://embedlog-test/{prefix}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1")


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default in (("--mib", 64), ("--segment-mib", 8), ("--record-bytes", 1000),
                          ("--batch", 1000)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--s3", action="store_true", help="also moto's S3 server")
    return parser.parse_args()


def main() -> None:
    args = _options()
    root = Path(tempfile.mkdtemp(prefix="embedlog-bench-remote-"))
    try:
        folder = root / "log"
        end = _write(folder, args.mib, args.segment_mib, args.record_bytes, args.batch)
        log_bytes = sum(p.stat().st_size for p in (folder / "t-0").glob("*.log"))
        (root / "cache").mkdir()
        print(f"{'remote':6} {'row':6} {'fetched MiB':>10} {'share':>7} {'s':>8}")
        run(folder.resolve().as_uri(), end, log_bytes, root / "cache")
        if args.s3:
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
            from s3_endpoint import moto_s3

            with moto_s3() as endpoint:
                run(_upload(endpoint, folder, "bench"), end, log_bytes, root / "cache")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
