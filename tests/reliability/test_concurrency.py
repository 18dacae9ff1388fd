"""Concurrency (issue 7, item 8; reliability.md section 3.8 and G14).

* A reader *process* tails the log (read-only open) while the writer appends, rolls, compacts
  and applies retention for ``EMBEDLOG_TAIL_SECONDS`` (default 12): it must see only complete,
  intact batches in offset order, never die of SIGBUS, and never fail on a partial tail.
* Many threads append to and read one ``Log`` at once: every acknowledged record lands exactly
  once, each thread's records in its own order, and readers only ever see valid records.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import embedlog

from .kill9_zygote import value_for
from .workloads import scratch_dir

TAIL_SECONDS = float(os.environ.get("EMBEDLOG_TAIL_SECONDS", "12"))

READER = textwrap.dedent(
    """
    import os, sys, time, embedlog
    sys.path.insert(0, sys.argv[2])
    from kill9_zygote import value_for
    path, stop = sys.argv[1], sys.argv[3]
    with embedlog.open(path, read_only=True) as log:
        print("READY", flush=True)
        position = {p: 0 for p in range(2)}
        batches = records = resets = 0
        done = False
        while not done:
            done = os.path.exists(stop)  # one last pass after the writer stopped
            for p in range(2):
                try:
                    for recs in log.read_batches("c", p, position[p]):
                        keys, values = recs.keys(), recs.values()
                        offsets = recs.offsets.tolist()
                        for o, k, v in zip(offsets, keys, values):
                            if o < position[p]:
                                raise SystemExit(f"offset {o} went back below {position[p]}")
                            if k is None or v != value_for(k):
                                raise SystemExit(f"damaged record at {o}")
                            position[p] = o + 1
                        batches += 1
                        records += len(offsets)
                except embedlog.OffsetOutOfRangeError:
                    resets += 1  # retention moved the log start past our position
                    position[p] = log.start_offset("c", p)
    print("STATS", batches, records, resets, flush=True)
    """
)


def _write_for(log: embedlog.Log, seconds: float, rng: random.Random) -> int:
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        p = rng.randrange(2)
        keys = [b"key-%d" % rng.randrange(200) for _ in range(rng.randint(1, 40))]
        log.append_batch("c", [value_for(k) for k in keys], keys=keys, partition=p,
                         compression=rng.choice([None, "zstd", "lz4"]))
        n += len(keys)
        r = rng.random()
        if r < 0.02:
            log.roll("c", p)
        elif r < 0.03:
            log.compact("c")
        elif r < 0.04:
            log.enforce_retention()
    return n


@pytest.mark.slow
def test_reader_process_tails_while_the_writer_rolls_compacts_and_retains() -> None:
    _tail(TAIL_SECONDS)


def test_reader_process_tails_briefly() -> None:
    _tail(2.0)


def _tail(seconds: float) -> None:
    root = scratch_dir()
    path = os.path.join(root, "log")
    stop = os.path.join(root, "stop")
    with embedlog.open(path) as log:
        log.create_topic("c", 2, config={
            "segment.bytes": 64 * 1024, "cleanup.policy": "compact,delete",
            "retention.bytes": 512 * 1024, "retention.ms": -1, "index.interval.bytes": 1024,
            "min.cleanable.dirty.ratio": 0.0, "segment.index.bytes": 4096})
        log.append("c", value_for(b"first"), key=b"first", partition=0)
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, path, os.path.dirname(__file__), stop],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "READY"
        written = _write_for(log, seconds, random.Random(7))
        with open(stop, "w"):
            pass
        out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, f"reader exited {reader.returncode}: {err[-3000:]}"
    stats = out.split()
    batches, records = int(stats[1]), int(stats[2])
    assert written > 0 and batches > 0 and records > 0


def test_many_threads_append_and_read_one_log() -> None:
    root = scratch_dir()
    path = os.path.join(root, "log")
    writers, per_writer = 6, 150
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("m", 2, config={"segment.bytes": 4096, "index.interval.bytes": 256})
        acked: dict[int, list[tuple[int, int, bytes]]] = {w: [] for w in range(writers)}
        problems: list[str] = []
        done = threading.Event()

        def write(w: int) -> None:
            for i in range(per_writer):
                key = b"w%d-%d" % (w, i)
                if i % 5 == 4:
                    metas = log.append_batch("m", [value_for(key + b"a"), value_for(key + b"b")],
                                             keys=[key + b"a", key + b"b"], partition=w % 2)
                    acked[w] += [(metas[0].partition, metas[0].offset, key + b"a"),
                                 (metas[0].partition, metas[0].offset + 1, key + b"b")]
                else:
                    meta = log.append("m", value_for(key), key=key, partition=w % 2)
                    acked[w].append((meta.partition, meta.offset, key))
                if i % 50 == 49:
                    log.roll("m", w % 2)

        def read() -> None:
            while not done.is_set():
                for p in range(2):
                    last = -1
                    for r in log.read("m", p):
                        if r.offset <= last or r.key is None or r.value != value_for(r.key):
                            problems.append(f"reader saw {r.offset} after {last}: {r.key!r}")
                            return
                        last = r.offset

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in threads + readers:
            t.start()
        for t in threads:
            t.join()
        done.set()
        for t in readers:
            t.join()
        assert problems == []
        stored = {(p, r.offset): r.key for p in range(2) for r in log.read("m", p)}
    every = [a for w in range(writers) for a in acked[w]]
    assert len({(p, o) for p, o, _ in every}) == len(every)  # no offset handed out twice
    assert all(stored[(p, o)] == key for p, o, key in every)
    assert len(stored) == len(every)
    for w in range(writers):  # each thread's records in its own order
        offsets = [o for _, o, _ in acked[w]]
        assert offsets == sorted(offsets)
