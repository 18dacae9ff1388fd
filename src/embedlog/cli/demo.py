"""``embedlog demo``: the tour in one command.

1. write an hour of click events (JSON values, user keys) to ``clicks`` (8 partitions) with the
   producer, and each user's latest non-view event to ``profiles``, a compacted topic, plus a
   few tombstones (deleted users);
2. a consumer group, ``analytics``, reads half of ``clicks`` and commits;
3. ``profiles`` is compacted;
4. the log is closed and read back by Spark in local mode (``spark.read.format("embedlog")``);
5. a report: write and read throughput, compaction sizes, offsets and lag per partition, events
   per minute, top pages.

The log goes to a new folder (``./embedlog-demo-<time>`` unless ``--dir`` names a folder that
does not exist yet or is empty) and stays there: the demo deletes nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import click

from .. import log as log_module
from ..errors import UsageError
from ..log import Log
from .demo_data import ACTIONS, make_events
from .demo_spark import SparkReport, require_spark, spark_report
from .groups import GroupView, describe_group
from .options import json_option
from .output import echo_json, human_bytes, progressbar, table

__all__ = ["demo"]

PARTITIONS = 8
GROUP = "analytics"
CLICKS_CONFIG = {"segment.bytes": 16 * 1024 * 1024}
PROFILES_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 1024 * 1024}
VIEW = ACTIONS.index("view")
SPARK_CHARS = " ▁▂▃▄▅▆▇█"


def _fresh_dir(requested: str | None) -> str:
    """The demo's folder: ``requested`` if it does not exist or is empty, else an error; by
    default a new ``embedlog-demo-<time>`` folder in the current directory."""
    if requested is not None:
        if os.path.exists(requested) and (not os.path.isdir(requested) or os.listdir(requested)):
            raise UsageError(f"{requested} already exists and is not empty; the demo only "
                             "writes into a new or empty folder")
        os.makedirs(requested, exist_ok=True)
        return os.path.abspath(requested)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = os.path.abspath(f"embedlog-demo-{stamp}" + (f"-{n}" if n else ""))
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return path
    raise UsageError("could not find a free embedlog-demo-<time> folder name")


def disk_usage(path: str) -> int:
    """Bytes the folder occupies on disk (allocated blocks: the preallocated, sparse index
    files of active segments count only for what they hold)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def _topic_size(log: Log, topic: str) -> tuple[int, int]:
    """(log bytes, segments holding data) of a topic: the empty active segments a roll leaves
    are not counted, so a compaction's before and after compare like with like."""
    segs = [s for p in range(log.partition_count(topic)) for s in log.segments(topic, p)
            if s.size]
    return sum(s.size for s in segs), len(segs)


def _count_records(log: Log, topic: str) -> int:
    return sum(len(records) for p in range(log.partition_count(topic))
               for records in log.read_batches(topic, p))


@dataclass
class Write:
    records: int
    bytes: int
    seconds: float
    profile_updates: int
    tombstones: int


def _produce(log: Log, n: int) -> Write:
    """Send the events (timing the sends, not the generation of the JSON values)."""
    users = max(100, n // 50)
    now_ms = int(time.time() * 1000)
    events = make_events(n, users=users, end_ms=now_ms - now_ms % 60_000)
    updates = nbytes = 0
    seconds = 0.0
    chunk = 10_000
    with progressbar(n, "producing click events") as bar, log.producer() as producer:
        send = producer.send
        for lo in range(0, n, chunk):
            records = list(events.records(lo, min(n, lo + chunk)))
            start = time.perf_counter()
            for key, value, ts, action in records:
                send("clicks", value, key, timestamp=ts)
                if action != VIEW:
                    send("profiles", value, key, timestamp=ts)
                    updates += 1
            seconds += time.perf_counter() - start
            nbytes += sum(len(k) + len(v) for k, v, _, _ in records)
            bar.update(len(records))
        start = time.perf_counter()
        deleted = range(0, users, 50)  # 2% of the users leave: tombstones
        for u in deleted:
            send("profiles", None, b"u%05d" % u)
        producer.flush()
        seconds += time.perf_counter() - start
    return Write(n, nbytes, seconds, updates, len(deleted))


def _consume_half(log: Log, n: int) -> tuple[int, float]:
    """The ``analytics`` group reads half of ``clicks`` and commits; (records, seconds)."""
    want = n // 2
    got = 0
    with log.consumer("clicks", group=GROUP) as consumer:
        start = time.perf_counter()
        while got < want:
            records = consumer.poll(1.0, max_records=min(500, want - got))
            if not records and consumer.assignment():
                break
            got += len(records)
        consumer.commit()
        return got, time.perf_counter() - start


def _compact(log: Log) -> dict[str, Any]:
    before_bytes, before_segments = _topic_size(log, "profiles")
    before_records = _count_records(log, "profiles")
    dir_before = disk_usage(log.path)
    for p in range(log.partition_count("profiles")):
        log.roll("profiles", p)  # the active segment is never compacted: seal it first
    start = time.perf_counter()
    log.compact("profiles")
    seconds = time.perf_counter() - start
    after_bytes, after_segments = _topic_size(log, "profiles")
    return {"topic": "profiles", "seconds": round(seconds, 3),
            "before_bytes": before_bytes, "after_bytes": after_bytes,
            "before_segments": before_segments, "after_segments": after_segments,
            "before_records": before_records, "after_records": _count_records(log, "profiles"),
            "dir_bytes_before": dir_before, "dir_bytes_after": disk_usage(log.path)}


def _partitions(path: str, spark: SparkReport) -> list[dict[str, Any]]:
    seen = {p: (lo, hi, rows) for p, lo, hi, rows in spark.partitions}
    with log_module.open(path, read_only=True) as log:
        group = describe_group(log, GroupView.load(log, GROUP))
    rows = []
    for r in group["offsets"]:
        lo, hi, count = seen.get(r["partition"], (None, None, 0))
        rows.append({"partition": r["partition"], "start_offset": r["log_start"],
                     "end_offset": r["log_end"], "committed": r["committed"], "lag": r["lag"],
                     "spark_rows": count, "spark_first": lo, "spark_last": hi})
    return rows


def _rate(count: float, seconds: float) -> float:
    return round(count / max(seconds, 1e-9), 1)


def run_demo(path: str, n: int) -> dict[str, Any]:
    """Every step; the report as a JSON-able dict."""
    started = time.perf_counter()
    with log_module.open(path) as log:
        log.create_topic("clicks", partitions=PARTITIONS, config=CLICKS_CONFIG)
        log.create_topic("profiles", partitions=1, config=PROFILES_CONFIG)
        write = _produce(log, n)
        consumed, consume_s = _consume_half(log, n)
        compaction = _compact(log)
    spark = spark_report(path, time.perf_counter())
    partitions = _partitions(path, spark)
    return {
        "dir": path,
        "records": n,
        "write": {**asdict(write), "records_per_sec": _rate(write.records, write.seconds),
                  "mb_per_sec": round(write.bytes / 2**20 / max(write.seconds, 1e-9), 2)},
        "consumer": {"group": GROUP, "records": consumed, "seconds": round(consume_s, 3),
                     "records_per_sec": _rate(consumed, consume_s)},
        "compaction": compaction,
        "spark": {"startup_s": round(spark.startup_s, 2), "scan_rows": spark.scan_rows,
                  "scan_bytes": spark.scan_bytes, "scan_s": round(spark.scan_s, 3),
                  "rows_per_sec": _rate(spark.scan_rows, spark.scan_s),
                  "mb_per_sec": round(spark.scan_bytes / 2**20 / max(spark.scan_s, 1e-9), 2)},
        "partitions": partitions,
        "total_lag": sum(p["lag"] or 0 for p in partitions),
        "events_per_minute": spark.per_minute,
        "top_pages": spark.top_pages,
        "profiles": {"rows": spark.profiles_rows, "live_users": spark.profiles_live},
        "seconds": round(time.perf_counter() - started, 2),
    }


def _sparkline(values: list[int]) -> str:
    if not values:
        return ""
    top = max(values)
    return "".join(SPARK_CHARS[round(v / top * (len(SPARK_CHARS) - 1))] for v in values)


def _print_report(r: dict[str, Any]) -> None:
    w, c, k, s = r["write"], r["consumer"], r["compaction"], r["spark"]
    echo = click.echo
    echo(f"embedlog demo: {r['records']:,} click events in {r['dir']}")
    echo()
    echo(f"write     {w['records']:,} events to clicks ({PARTITIONS} partitions) and "
         f"{w['profile_updates'] + w['tombstones']:,} records to profiles in "
         f"{w['seconds']:.2f} s: {w['records_per_sec']:,.0f} events/s, "
         f"{w['mb_per_sec']:.1f} MB/s of events (producer.send, one record per call)")
    echo(f"consume   group '{c['group']}' read {c['records']:,} events in {c['seconds']:.2f} s "
         f"({c['records_per_sec']:,.0f} records/s) and committed")
    echo(f"compact   profiles: {human_bytes(k['before_bytes'])} in {k['before_segments']} "
         f"segments, {k['before_records']:,} records -> {human_bytes(k['after_bytes'])} in "
         f"{k['after_segments']} segments, {k['after_records']:,} records "
         f"({k['seconds']:.2f} s; segments holding data)")
    echo(f"spark     local[2] up in {s['startup_s']:.1f} s; full scan of clicks: "
         f"{s['scan_rows']:,} rows in {s['scan_s']:.2f} s ({s['rows_per_sec']:,.0f} rows/s, "
         f"{s['mb_per_sec']:.1f} MB/s of values)")
    echo()
    counts = [n for _, n in r["events_per_minute"]]
    if counts:
        first, last = r["events_per_minute"][0][0], r["events_per_minute"][-1][0]
        echo(f"Events per minute ({first}-{last} UTC, Spark): min {min(counts):,}, "
             f"avg {sum(counts) // len(counts):,}, max {max(counts):,}")
        echo(f"  {_sparkline(counts)}")
        echo()
    echo("Top pages (Spark)")
    for page, n in r["top_pages"]:
        echo(f"  {page:<14} {n:>10,}")
    echo()
    echo(f"clicks partitions (consumer group '{GROUP}')")
    table(["  PARTITION", "START", "END", "COMMITTED", "LAG", "SPARK-ROWS"],
          [[f"  {p['partition']}", f"{p['start_offset']:,}", f"{p['end_offset']:,}",
            "-" if p["committed"] is None else f"{p['committed']:,}",
            "-" if p["lag"] is None else f"{p['lag']:,}", f"{p['spark_rows']:,}"]
           for p in r["partitions"]])
    echo(f"  total lag: {r['total_lag']:,}")
    echo()
    prof = r["profiles"]
    echo(f"profiles: {prof['live_users']:,} live users in {prof['rows']:,} records after "
         f"compaction (latest value per key; {w['tombstones']} users deleted)")
    echo(f"on disk: {human_bytes(k['dir_bytes_before'])} before compaction, "
         f"{human_bytes(k['dir_bytes_after'])} after")
    echo()
    echo(f"Done in {r['seconds']:.1f} s. The log stays in {r['dir']}; look around with:")
    for cmd in (f"embedlog topics describe --dir {r['dir']}",
                f"embedlog consume clicks --dir {r['dir']} --max-messages 3 --print-key",
                f"embedlog groups describe {GROUP} --dir {r['dir']}",
                f"embedlog verify {r['dir']}"):
        echo(f"  {cmd}")


@click.command()
@click.option("--dir", "log_dir", type=click.Path(file_okay=False, path_type=str),
              help="Folder for the demo's log; must be new or empty (default: a new "
                   "./embedlog-demo-<time>).")
@click.option("--records", type=click.IntRange(min=1000), default=1_000_000,
              show_default=True, help="Click events to write.")
@json_option
def demo(log_dir: str | None, records: int, as_json: bool) -> None:
    """Write click events, consume half with a group, compact a topic, read everything back
    with Spark, and print a report. Deletes nothing."""
    require_spark()  # before writing anything
    path = _fresh_dir(log_dir)
    report = run_demo(path, records)
    if as_json:
        echo_json(report)
    else:
        _print_report(report)
