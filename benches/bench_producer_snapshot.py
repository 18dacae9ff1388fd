"""The first idempotent append after an open: producer state loaded from the snapshot written at
close (and the batch headers after it) against a scan of every batch header.

    python benches/bench_producer_snapshot.py [--batches 200000] [--producers 50]
                                              [--segment-mb 16] [--repeat 3] [--dir SCRATCH]

One partition holds ``--batches`` batches of 4 records (100 B values) from ``--producers``
idempotent producers in turn, over segments of ``--segment-mb`` MiB. Timed, after a fresh
open (medians of the repetitions; the files are in the page cache):

  P1  open + the producer state, from the close's snapshot      (nothing to replay)
  P2  open + the producer state, from the last roll's snapshot  (the active segment replayed)
  P3  open + the producer state, no snapshot                     (every batch header scanned)

The machine is shared and noisy: run it twice and read the medians.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import tempfile
import time

import embedlog
from embedlog.naming import SNAPSHOT_SUFFIX
from embedlog.segment import format as fmt


def build(path: str, batches: int, producers: int, segment_mb: int) -> None:
    with embedlog.open(path) as log:
        log.create_topic("t", config={"segment.bytes": segment_mb << 20})
        seqs = [0] * producers
        values = [b"v" * 100] * 4
        for i in range(batches):
            pid = i % producers
            log._append_encoded("t", 0, bytearray(fmt.encode_batch(
                values, timestamps=time.time_ns() // 1_000_000, producer_id=pid,
                producer_epoch=0, base_sequence=seqs[pid])))
            seqs[pid] += 4


def load_once(path: str) -> float:
    start = time.perf_counter()
    with embedlog.open(path, upkeep=False) as log:
        p = log._partition_of("t", 0)
        with p.lock:
            table = p.producer_states()
        elapsed = time.perf_counter() - start
        assert table.entries
    return elapsed


def snapshots(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(SNAPSHOT_SUFFIX))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200_000)
    parser.add_argument("--producers", type=int, default=50)
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(dir=args.dir)
    try:
        path = os.path.join(scratch, "log")
        build(path, args.batches, args.producers, args.segment_mb)
        folder = os.path.join(path, "t-0")
        segments = sum(n.endswith(".log") for n in os.listdir(folder))
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)
                   if n.endswith(".log"))
        print(f"{args.batches} batches, {segments} segments, {size / 2**20:.0f} MiB")
        kept = snapshots(folder)
        results = {}
        # P1: each close finds its snapshot there and writes none; P3, P2: the snapshots an
        # open's close writes are removed after it
        results["P1 close snapshot"] = [load_once(path) for _ in range(args.repeat)]
        saved = {n: pathlib.Path(folder, n).read_bytes() for n in kept}
        for n in kept:
            os.unlink(os.path.join(folder, n))
        p3 = []
        for _ in range(args.repeat):
            p3.append(load_once(path))
            for n in snapshots(folder):
                os.unlink(os.path.join(folder, n))
        results["P3 full scan"] = p3
        p2 = []
        for _ in range(args.repeat):
            with open(os.path.join(folder, kept[0]), "wb") as f:
                f.write(saved[kept[0]])
            p2.append(load_once(path))
            for n in snapshots(folder):
                os.unlink(os.path.join(folder, n))
        results["P2 roll snapshot"] = p2
        for name in ("P1 close snapshot", "P2 roll snapshot", "P3 full scan"):
            times = results[name]
            print(f"{name:20s} median {statistics.median(times) * 1000:9.1f} ms  "
                  f"(runs: {', '.join(f'{t * 1000:.1f}' for t in times)})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
