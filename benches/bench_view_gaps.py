"""What a read-only view's check of sealed segments' ends costs (:mod:`embedlog.view_tail`).

    python benches/bench_view_gaps.py [--segments 300] [--records 100] [--repeat 30] [--dir D]

A compacted topic whose every sealed segment ends short of the next one (its last record's key
is written again in the next segment: the cleaner drops that batch), the worst case for the
check: one gap per ``records`` records. A view reads the whole partition again and again, the
check on and off (replaced by a no-op) alternating in this process; medians of wall and CPU
time (``time.process_time``) per full read. The machine is shared: report ``uptime``'s load
average with the figures.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import tempfile
import time

import embedlog
from embedlog import view_tail
from embedlog.segment.segment import Segment


def build(path: pathlib.Path, segments: int, records: int) -> None:
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 8000})
        for s in range(segments):
            keys = [b"k%d-%d" % (s, j) for j in range(records - 1)]
            log.append_batch("t", [b"v" * 50] * len(keys), keys=keys, partition=0)
            log.append("t", b"v" * 50, key=b"x", partition=0)  # its own batch: dropped
            log.roll("t", 0)
        log.append("t", b"end", key=b"x", partition=0)
        log.compact("t")


def off(seg: Segment, ceiling: int) -> None:
    """The check turned off."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=300)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(dir=args.dir))
    try:
        build(root / "log", args.segments, args.records)
        real, checks = view_tail.check_gap, [0]

        def counted(seg: Segment, ceiling: int) -> None:
            checks[0] += 1
            real(seg, ceiling)

        wall: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        with embedlog.open(root / "log", read_only=True) as view:
            view_tail.check_gap = counted
            total = sum(1 for _ in view.read("t", 0))
            for i in range(args.repeat):
                for mode in ("on", "off") if i % 2 else ("off", "on"):
                    view_tail.check_gap = real if mode == "on" else off
                    t0, c0 = time.perf_counter(), time.process_time()
                    assert sum(1 for _ in view.read("t", 0)) == total
                    wall[mode].append(time.perf_counter() - t0)
                    cpu[mode].append(time.process_time() - c0)
            view_tail.check_gap = real
        print(f"{total} records, {checks[0]} gaps checked per read")
        for mode in ("off", "on"):
            print(f"check {mode:3}: median {1e3 * statistics.median(wall[mode]):.2f} ms wall, "
                  f"{1e3 * statistics.median(cpu[mode]):.2f} ms CPU per full read")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
