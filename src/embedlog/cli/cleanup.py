"""``embedlog cleanup``: run retention and the log cleaner once, or show what they would do.

A writer applies retention on its own (when it opens, then every
``log.retention.check.interval.ms``) and compacts compacted topics in the background
(:mod:`embedlog.upkeep`); this command is the one-off run for a log no process keeps open, and,
with ``--dry-run``, a read-only inspection (no lock, beside a running writer): per partition,
the segments retention would delete now and the log start offset that would follow.

A run deletes the expired segments of every ``cleanup.policy=delete`` topic and compacts every
compacted partition whose dirty ratio or ``max.compaction.lag.ms`` makes it due, as the
background cleaner would; in a tiered log (:mod:`embedlog.tiering`) it also runs a tiering
round (sealed segments uploaded, local copies past the local retention deleted). It prints
what it deleted, uploaded and compacted.
"""

from __future__ import annotations

from typing import Any

import click

from ..log import Log
from .app import CommandError
from .options import dir_option, json_option, open_log
from .output import echo_json, table

__all__ = ["cleanup"]


def _preview(log: Log) -> list[dict[str, Any]]:
    rows = []
    for (topic, partition), (segments, start) in sorted(log.upkeep.preview().items()):
        cfg = log.topic_config(topic)
        rows.append({"topic": topic, "partition": partition, "cleanup_policy": cfg.cleanup_policy,
                     "retention_ms": cfg.retention_ms, "retention_bytes": cfg.retention_bytes,
                     "start_offset": log.start_offset(topic, partition),
                     "segments_to_delete": segments, "new_start_offset": start})
    return rows


@click.command()
@click.option("--dry-run", is_flag=True,
              help="Only show what retention would delete now (read-only, no lock).")
@click.option("--no-compact", is_flag=True, help="Apply retention only; do not compact.")
@dir_option
@json_option
def cleanup(dry_run: bool, no_compact: bool, log_dir: str, as_json: bool) -> None:
    """Apply retention.ms / retention.bytes and compact due compacted topics, once."""
    if dry_run:
        with open_log(log_dir) as log:
            rows = _preview(log)
        if as_json:
            echo_json(rows)
            return
        table(["TOPIC", "PARTITION", "POLICY", "START", "DELETE SEGMENTS", "NEW START"],
              [[r["topic"], r["partition"], r["cleanup_policy"], r["start_offset"],
                r["segments_to_delete"], r["new_start_offset"]] for r in rows])
        return
    with open_log(log_dir, write=True, upkeep=False) as log:
        retention = log.upkeep.run_once("retention")
        tiering = log.upkeep.run_once("tiering")
        cleaner = None if no_compact else log.upkeep.run_once("cleaner")
    for run in (retention, tiering, cleaner):  # each ran; a failure is not a success
        if run is not None and run.error is not None:
            raise CommandError(f"{run.kind} round failed: {run.error}")
    report = {"deleted_segments": retention.deleted_segments,
              "uploaded_segments": tiering.uploaded,
              "local_deleted_segments": tiering.deleted_segments,
              "compacted_partitions": 0 if cleaner is None else cleaner.cleaned,
              "records_removed": 0 if cleaner is None else cleaner.records_removed}
    if as_json:
        echo_json(report)
        return
    for name, count in sorted(retention.deleted_segments.items()):
        click.echo(f"{name}: deleted {count} segment{'s' if count != 1 else ''}")
    if tiering.uploaded or tiering.deleted_segments:
        click.echo(f"Tiering uploaded {tiering.uploaded} segments and deleted "
                   f"{sum(tiering.deleted_segments.values())} local copies.")
    click.echo(f"Retention deleted {sum(retention.deleted_segments.values())} segments; "
               f"the cleaner compacted {report['compacted_partitions']} partitions "
               f"({report['records_removed']} records removed).")
