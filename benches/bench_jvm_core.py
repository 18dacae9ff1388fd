"""Decode rate of the JVM reader core (``embedlog.Dump`` in ``time`` mode: every record of a
partition handed to a sink that only sums key and value lengths) against embedlog's Python
read-only reader on the same log, in one run.

    python benches/bench_jvm_core.py [--records 1000000] [--repeat 5] [--dir SCRATCH]

One partition of ``--records`` records (16 B keys, 100 B values, batches of 500), one log per
codec in ``--codecs``. The JVM reads the whole partition ``--repeat`` times in one process
(the first runs warm the JIT; the median of the rest is reported, with the JVM's CPU time);
the Python figure is ``Log.read_batches`` over the same range, alternated with the JVM runs.
Rates are records/s; the ``uptime`` load average is printed with them (a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "spark"))

from jvm_core_util import compile_core

import embedlog


def make_log(root: str, records: int, codec: str | None) -> None:
    rng = random.Random(0)
    values = [rng.randbytes(100) for _ in range(1000)]
    with embedlog.open(root) as log:
        log.create_topic("b", 1)
        for start in range(0, records, 500):
            n = min(500, records - start)
            log.append_batch("b", [values[(start + i) % 1000] for i in range(n)],
                             keys=[b"%016d" % (start + i) for i in range(n)], partition=0,
                             compression=codec)


def jvm_rates(classpath: str, root: str, records: int, repeat: int) -> tuple[list[float], float]:
    """Records/s of each run in one JVM, and the JVM's CPU seconds in all."""
    spec = f"{root}\tb\t0\t0\t{records}\ttime\n" * repeat
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["java", "-cp", classpath, "embedlog.Dump"], input=spec.encode(),
                         capture_output=True, check=True).stdout.decode().splitlines()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rates = []
    for line in out:
        r = json.loads(line)
        assert r["records"] == records, r
        rates.append(r["records"] / (r["nanos"] / 1e9))
    return rates, cpu


def python_rate(root: str, records: int) -> tuple[float, float]:
    """Records/s and CPU seconds of one ``read_batches`` pass."""
    with embedlog.open(root, read_only=True) as view:
        t0, c0 = time.perf_counter(), time.process_time()
        n = sum(len(b) for b in view.read_batches("b", 0, 0, records))
        t, c = time.perf_counter() - t0, time.process_time() - c0
    assert n == records
    return n / t, c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--codecs", default="none,lz4,zstd")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(dir=args.dir)
    try:
        classpath = compile_core(Path(scratch) / "classes")
        if classpath is None:
            sys.exit("javac, java or pyspark's jars are missing")
        for codec in args.codecs.split(","):
            root = os.path.join(scratch, codec)
            make_log(root, args.records, None if codec == "none" else codec)
            runs: list[float] = []
            cpus: list[float] = []
            py: list[float] = []
            for _ in range(3):
                rates, cpu = jvm_rates(classpath, root, args.records, args.repeat)
                runs += rates[1:]
                cpus.append(cpu)
                py.append(python_rate(root, args.records)[0])
            load = os.getloadavg()
            print(f"{codec:5s} JVM {statistics.median(runs) / 1e6:6.2f} M rec/s (median of "
                  f"{len(runs)} warm runs; JVM CPU {statistics.median(cpus):.2f} s per process "
                  f"of {args.repeat} passes)  Python read_batches "
                  f"{statistics.median(py) / 1e6:6.2f} M rec/s  load {load[0]:.2f} {load[1]:.2f} "
                  f"{load[2]:.2f}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
