"""Compaction throughput, key-map memory and read speed after compaction.

    python benches/bench_compaction.py [--records 1000000] [--keys 100000] [--batch 1000]

Builds a compacted topic of ``--records`` records over ``--keys`` random keys (``key-NNNNNNN``,
11 B) with 100 B random values, written in batches of ``--batch`` records, ``--segment-mb``
segments, everything sealed. Then, in a fresh process (so its memory is the compaction's own):

* **compaction**: ``Log.compact`` wall time and CPU time; input records per second (records in
  the input log / wall time, and / CPU time, the figure that does not depend on the other
  tenants of a shared machine; a budget too small for the keys makes several passes, each
  re-reading what the previous ones cleaned); the map's bytes against its budget; peak RSS
  (VmHWM) of the process over its RSS before the compaction;
* **reads**: a full scan (``Log.read`` records and ``Log.read_batches`` columns) of the compacted
  partition against an uncompacted partition holding the same number of records in batches of
  the same average size as the compacted ones, and against one with ``--batch``-record batches.

Repeat with ``--runs`` (medians are printed) and compare within one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

import embedlog

VALUE_BYTES = 100


def _rss_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def build(path: str, records: int, keys: int, batch: int, segment_mb: int, seed: int) -> None:
    """The input log: ``records`` random-key records, sealed."""
    rng = np.random.default_rng(seed)
    key_ids = rng.integers(0, keys, records)
    values = rng.integers(0, 256, (records, VALUE_BYTES), dtype=np.uint8)
    with embedlog.open(path) as log:
        log.create_topic("t", config={"cleanup.policy": "compact",
                                      "segment.bytes": segment_mb << 20})
        for lo in range(0, records, batch):
            hi = min(lo + batch, records)
            log.append_batch(
                "t",
                [v.tobytes() for v in values[lo:hi]],
                keys=[b"key-%07d" % k for k in key_ids[lo:hi].tolist()],
                timestamps=1_700_000_000_000,
                partition=0,
            )
        log.roll("t", 0)


def build_plain(path: str, records: int, batch: int, seed: int) -> None:
    """An uncompacted partition of ``records`` records in batches of ``batch``."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 256, (records, VALUE_BYTES), dtype=np.uint8)
    with embedlog.open(path) as log:
        log.create_topic("t")
        for lo in range(0, records, batch):
            hi = min(lo + batch, records)
            log.append_batch("t", [v.tobytes() for v in values[lo:hi]],
                             keys=[b"key-%07d" % i for i in range(lo, hi)],
                             timestamps=1_700_000_000_000, partition=0)


def compact_child(path: str, map_bytes: int) -> dict[str, Any]:
    """Runs in a fresh process: open, compact, report."""
    with embedlog.open(path) as log:
        before = _rss_kib("VmRSS")
        wall, cpu = time.perf_counter(), time.process_time()
        stats = log.compact("t", map_bytes=map_bytes)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peak = _rss_kib("VmHWM")
        batches = sum(1 for _ in log.read_batches("t", 0))
        kept = sum(len(r) for r in log.read_batches("t", 0))
        out = {
            "wall_s": wall,
            "cpu_s": cpu,
            "records_read": stats.records_read,
            "records_kept": kept,
            "passes": stats.passes,
            "map_bytes": stats.map_bytes,
            "map_entries": stats.map_entries,
            "rss_before_mib": before / 1024,
            "rss_growth_mib": (peak - before) / 1024,
            "segments_read": stats.segments_read,
            "segments_written": stats.segments_written,
            "batches_after": batches,
        }
    return out


def scan(path: str, repeat: int = 5) -> tuple[float, float, int]:
    """Best seconds of ``repeat`` full record scans and columnar scans; record count."""
    records_s = columns_s = float("inf")
    with embedlog.open(path, read_only=True) as log:
        for _ in range(repeat):
            t = time.perf_counter()
            n = sum(1 for _ in log.read("t", 0))
            records_s = min(records_s, time.perf_counter() - t)
            t = time.perf_counter()
            m = sum(len(r) for r in log.read_batches("t", 0))
            columns_s = min(columns_s, time.perf_counter() - t)
    assert n == m
    return records_s, columns_s, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--map-mb", type=int, default=128,
                    help="compaction memory budget (MiB; Kafka's dedupe buffer default)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(compact_child(args.child, args.map_mb << 20)))
        return
    results, reads = [], []
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        for run in range(args.runs):
            path = os.path.join(tmp, f"log{run}")
            build(path, args.records, args.keys, args.batch, args.segment_mb, seed=run)
            child = subprocess.run(
                [sys.executable, __file__, "--child", path, "--map-mb", str(args.map_mb)],
                check=True, capture_output=True, text=True,
            )
            r = json.loads(child.stdout.strip().splitlines()[-1])
            results.append(r)
            retained = r["records_kept"]
            per_batch = max(1, round(retained / max(1, r["batches_after"])))
            same = os.path.join(tmp, f"plain{run}")
            build_plain(same, retained, per_batch, seed=run)
            big = os.path.join(tmp, f"big{run}")
            build_plain(big, retained, args.batch, seed=run)
            reads.append((scan(path), scan(same), scan(big), per_batch))
            print(f"run {run}: {args.records / r['wall_s']:,.0f} records/s wall, "
                  f"{args.records / r['cpu_s']:,.0f} records/s CPU", file=sys.stderr)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    n_in = args.records
    print(f"input: {args.records:,} records, {args.keys:,} keys, {VALUE_BYTES} B values, "
          f"batches of {args.batch}, {args.segment_mb} MiB segments; map budget "
          f"{args.map_mb} MiB; median of {args.runs} runs")
    print(f"compaction: {med('wall_s'):.3f} s wall, {med('cpu_s'):.3f} s CPU -> "
          f"{n_in / med('wall_s'):,.0f} input records/s (wall), "
          f"{n_in / med('cpu_s'):,.0f} input records/s (CPU); {med('passes'):.0f} pass(es); "
          f"{med('records_read'):,.0f} records read; {med('records_kept'):,.0f} kept; segments "
          f"{med('segments_read'):.0f} -> {med('segments_written'):.0f}")
    print(f"memory: key map {med('map_bytes') / 2**20:.1f} MiB of {args.map_mb} MiB budget "
          f"({med('map_entries'):,.0f} keys); RSS {med('rss_before_mib'):.0f} MiB before, "
          f"+{med('rss_growth_mib'):.1f} MiB peak during compaction")
    for label, i in (("records", 0), ("columns", 1)):
        comp = statistics.median(rd[0][i] for rd in reads)
        same = statistics.median(rd[1][i] for rd in reads)
        big = statistics.median(rd[2][i] for rd in reads)
        n = reads[0][0][2]
        print(f"read ({label}): compacted {n / comp:,.0f} rec/s; uncompacted, same batch size "
              f"({reads[0][3]}) {n / same:,.0f} rec/s (ratio {same / comp:.2f}); uncompacted, "
              f"batches of {args.batch} {n / big:,.0f} rec/s (ratio {big / comp:.2f})")


if __name__ == "__main__":
    main()
