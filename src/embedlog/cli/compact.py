"""``embedlog compact TOPIC``: run keyed compaction now (Kafka's log cleaner, on demand).

The topic must have ``cleanup.policy=compact`` (or ``compact,delete``). Sealed segments are
cleaned (the active segment never is; ``--roll`` seals it first so everything written so far is
compacted); the report gives each partition's segments and bytes before and after, plus the
cleaner's own counters.
"""

from __future__ import annotations

import dataclasses

import click

from ..log import Log
from .options import dir_option, json_option, open_log
from .output import echo_json, human_bytes, run_with_spinner, table

__all__ = ["compact"]


def _sizes(log: Log, topic: str) -> list[tuple[int, int]]:
    """(segments, bytes) per partition."""
    out = []
    for p in range(log.partition_count(topic)):
        segs = log.segments(topic, p)
        out.append((len(segs), sum(s.size for s in segs)))
    return out


@click.command()
@click.argument("topic")
@click.option("--roll", is_flag=True,
              help="Seal each partition's active segment first, so it is compacted too.")
@dir_option
@json_option
def compact(topic: str, roll: bool, log_dir: str, as_json: bool) -> None:
    """Compact TOPIC: keep the latest record of every key in its sealed segments."""
    with open_log(log_dir, write=True) as log:
        before = _sizes(log, topic)
        if roll:
            for p in range(log.partition_count(topic)):
                log.roll(topic, p)
        stats = run_with_spinner(lambda: log.compact(topic), f"compacting {topic}")
        after = _sizes(log, topic)
    counters = dataclasses.asdict(stats)
    rows = [{"partition": p, "segments_before": b[0], "bytes_before": b[1],
             "segments_after": a[0], "bytes_after": a[1]}
            for p, (b, a) in enumerate(zip(before, after, strict=True))]
    if as_json:
        echo_json({"topic": topic, "partitions": rows, "stats": counters})
        return
    table(["PARTITION", "SEGMENTS", "BYTES", "->", "SEGMENTS", "BYTES"],
          [[r["partition"], r["segments_before"], human_bytes(r["bytes_before"]), "->",
            r["segments_after"], human_bytes(r["bytes_after"])] for r in rows])
    total_before = sum(r["bytes_before"] for r in rows)
    total_after = sum(r["bytes_after"] for r in rows)
    click.echo(f"Compacted {topic}: {human_bytes(total_before)} -> {human_bytes(total_after)}; "
               f"{stats.records_read} records read, {stats.records_retained} kept, "
               f"{stats.tombstones_removed} tombstones removed.")
