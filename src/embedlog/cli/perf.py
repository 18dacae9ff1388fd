"""``embedlog perf-test produce|consume``: Kafka's ``*-perf-test`` tools for an embedded log.

``produce`` appends ``--num-records`` records of ``--record-size`` random bytes (one payload
pool, as Kafka's tool does) in calls of ``--batch-size`` records; a record's latency is the
duration of the append call that wrote it (with ``--durability fsync``, until it is on disk).
``consume`` reads a topic from the start with a consumer, ``poll`` returning up to
``--fetch-size`` records; latency is per poll. Both print Kafka's one-line summary, or with
``--json`` one JSON object: ``records``, ``bytes`` (keys + values), ``seconds``,
``records_per_sec``, ``mb_per_sec`` (MiB), ``latency_ms`` (``avg``, ``p50``, ``p95``, ``p99``,
``p999``, ``max``).
"""

from __future__ import annotations

import random
import time
from typing import Any

import click
import numpy as np

from .. import log as log_module
from ..log import Durability, Log
from ..records import TopicPartition
from .options import dir_option, json_option, open_log
from .output import echo_json, progressbar
from .produce import CODECS

__all__ = ["perf_test", "summary"]

MIB = 1024 * 1024


def summary(records: int, nbytes: int, seconds: float, latencies_ms: list[float]
            ) -> dict[str, Any]:
    """The machine-readable result of a run."""
    lat = np.asarray(latencies_ms or [0.0], dtype=np.float64)
    p50, p95, p99, p999 = (float(x) for x in np.percentile(lat, [50, 95, 99, 99.9]))
    seconds = max(seconds, 1e-9)
    return {
        "records": records,
        "bytes": nbytes,
        "seconds": round(seconds, 6),
        "records_per_sec": round(records / seconds, 1),
        "mb_per_sec": round(nbytes / MIB / seconds, 3),
        "latency_ms": {"avg": round(float(lat.mean()), 4), "p50": round(p50, 4),
                       "p95": round(p95, 4), "p99": round(p99, 4), "p999": round(p999, 4),
                       "max": round(float(lat.max()), 4)},
    }


def _line(verb: str, s: dict[str, Any], unit: str) -> str:
    lat = s["latency_ms"]
    return (f"{s['records']} records {verb}, {s['records_per_sec']:.1f} records/sec "
            f"({s['mb_per_sec']:.2f} MB/sec), {lat['avg']:.3f} ms avg latency, "
            f"{lat['max']:.3f} ms max latency, {lat['p50']:.3f} ms 50th, {lat['p95']:.3f} ms "
            f"95th, {lat['p99']:.3f} ms 99th, {lat['p999']:.3f} ms 99.9th ({unit}).")


def _rate(done: int, start: float) -> str:
    return f"{done / max(time.perf_counter() - start, 1e-9):,.0f} rec/s"


@click.group("perf-test")
def perf_test() -> None:
    """Measure append and read throughput and latency (Kafka's perf-test tools)."""


def _ensure_topic(log: Log, topic: str, partitions: int) -> None:
    if topic not in log.topics():
        log.create_topic(topic, partitions=partitions)


@perf_test.command("produce")
@click.option("--topic", default="perf-test", show_default=True,
              help="Topic (created with --partitions if missing).")
@click.option("--num-records", type=click.IntRange(min=1), default=1_000_000,
              show_default=True, help="Records to append.")
@click.option("--record-size", type=click.IntRange(min=0), default=100, show_default=True,
              help="Value bytes per record.")
@click.option("--key-size", type=click.IntRange(min=0), default=0, show_default=True,
              help="Key bytes per record (0: no key).")
@click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Records per append call.")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Partitions of a topic created by the test.")
@click.option("--compression", type=click.Choice(CODECS), help="Batch compression.")
@click.option("--durability", type=click.Choice(["none", "fsync"]), default="none",
              show_default=True, help="fsync: each call returns once its data is on disk.")
@click.option("--throughput", type=float, default=-1, show_default=True,
              help="Cap on records/s (-1: no cap).")
@click.option("--seed", type=int, default=0, show_default=True, help="Payload random seed.")
@dir_option
@json_option
def perf_produce(topic: str, num_records: int, record_size: int, key_size: int,
                 batch_size: int, partitions: int, compression: str | None, durability: str,
                 throughput: float, seed: int, log_dir: str, as_json: bool) -> None:
    """Append records as fast as possible (or at --throughput) and report the rates."""
    rng = random.Random(seed)
    letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    values = [bytes(rng.choices(letters, k=record_size)) for _ in range(batch_size)]
    keys = [rng.randbytes(key_size) for _ in range(batch_size)] if key_size else None
    mode: Durability = "fsync" if durability == "fsync" else "none"
    latencies: list[float] = []
    with log_module.open(log_dir, durability=mode) as log:
        _ensure_topic(log, topic, partitions)
        done = 0
        with progressbar(num_records, f"perf-test produce {topic}", status=True) as bar:
            start = time.perf_counter()
            while done < num_records:
                n = min(batch_size, num_records - done)
                t0 = time.perf_counter()
                log.append_batch(topic, values[:n], keys=keys[:n] if keys else None,
                                 compression=compression)
                t1 = time.perf_counter()
                latencies.extend([(t1 - t0) * 1000] * n)
                done += n
                bar.update(n, _rate(done, start))
                if throughput > 0:
                    ahead = done / throughput - (t1 - start)
                    if ahead > 0:
                        time.sleep(ahead)
            elapsed = time.perf_counter() - start
    result = summary(done, done * (record_size + key_size), elapsed, latencies)
    if as_json:
        echo_json(result)
    else:
        click.echo(_line("sent", result, f"per record, calls of {batch_size}"))


@perf_test.command("consume")
@click.option("--topic", default="perf-test", show_default=True, help="Topic to read.")
@click.option("--messages", type=click.IntRange(min=1), help="Stop after N records "
                                                             "(default: all).")
@click.option("--fetch-size", type=click.IntRange(min=1), default=500, show_default=True,
              help="Most records per poll.")
@dir_option
@json_option
def perf_consume(topic: str, messages: int | None, fetch_size: int, log_dir: str,
                 as_json: bool) -> None:
    """Read a topic from the start with a consumer and report the rates."""
    latencies: list[float] = []
    done = nbytes = 0
    with open_log(log_dir) as log, log.consumer(max_poll_records=fetch_size) as consumer:
        tps = [TopicPartition(topic, p) for p in range(log.partition_count(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        total = sum(log.end_offset(*tp) - log.start_offset(*tp) for tp in tps)
        goal = min(total, messages) if messages else total
        with progressbar(goal, f"perf-test consume {topic}", status=True) as bar:
            start = time.perf_counter()
            while done < goal:
                t0 = time.perf_counter()
                records = consumer.poll(0, max_records=min(fetch_size, goal - done))
                latencies.append((time.perf_counter() - t0) * 1000)
                if not records:
                    break
                nbytes += sum(len(r.key or b"") + len(r.value or b"") for r in records)
                done += len(records)
                bar.update(len(records), _rate(done, start))
            elapsed = time.perf_counter() - start
    result = summary(done, nbytes, elapsed, latencies)
    if as_json:
        echo_json(result)
    else:
        click.echo(_line("read", result, f"per poll of up to {fetch_size}"))
