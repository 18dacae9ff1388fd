"""``embedlog get-offsets`` and ``embedlog delete-records`` (Kafka's ``kafka-get-offsets`` and
``kafka-delete-records``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import click

from .._json import load_untrusted
from ..errors import OffsetOutOfRangeError, UsageError
from ..log import Log
from ..retention import check_deletable
from .options import dir_option, json_option, open_log, parse_time_ms, select_partitions
from .output import echo_json

__all__ = ["delete_records", "get_offsets", "offsets_at"]

EARLIEST, LATEST = -2, -1
_MAX_JSON_FILE: Final = 16 << 20
"""The largest ``--offset-json-file`` read (some hundred thousand partitions)."""


def _time_spec(text: str) -> int:
    names = {"earliest": EARLIEST, "latest": LATEST}
    if text in names:
        return names[text]
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--time") from None


def offsets_at(log: Log, topic: str, partition: int, when: int) -> int | None:
    """Kafka's ListOffsets: -2 the log start, -1 the log end, else the first offset whose
    timestamp is >= ``when`` (``None`` when every record is older)."""
    if when == EARLIEST:
        return log.start_offset(topic, partition)
    if when == LATEST:
        return log.end_offset(topic, partition)
    return log.offsets_for_times(topic, partition, when)


def _partition_list(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of partitions",
                                 param_hint="--partitions") from None


@click.command("get-offsets")
@click.option("--topic", "topics", multiple=True, help="Topic (repeatable; default: all).")
@click.option("--partitions", metavar="P1,P2", help="Comma-separated partitions (default: all).")
@click.option("--time", "when", default="latest", show_default=True,
              metavar="earliest|latest|-2|-1|TIME",
              help="Log start, log end, or the first offset at or after TIME (epoch ms or "
                   "ISO 8601).")
@dir_option
@json_option
def get_offsets(topics: Sequence[str], partitions: str | None, when: str, log_dir: str,
                as_json: bool) -> None:
    """Print topic:partition:offset for each partition."""
    at = _time_spec(when)
    rows: list[dict[str, Any]] = []
    with open_log(log_dir) as log:
        for topic in topics or log.topics():
            for p in select_partitions(log, topic, _partition_list(partitions)):
                rows.append({"topic": topic, "partition": p,
                             "offset": offsets_at(log, topic, p, at)})
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        if r["offset"] is not None:
            click.echo(f"{r['topic']}:{r['partition']}:{r['offset']}")


def _targets(log: Log, topic: str | None, partition: int | None, offset: int | None,
             json_file: str | None) -> list[tuple[str, int, int]]:
    if json_file is not None:
        if topic is not None or offset is not None or partition is not None:
            raise click.UsageError("--offset-json-file replaces --topic, --partition, --offset")
        return _json_targets(json_file)
    if topic is None or offset is None:
        raise click.UsageError("give --topic and --offset, or --offset-json-file")
    parts = select_partitions(log, topic, [] if partition is None else [partition])
    return [(topic, p, offset) for p in parts]


def _json_targets(json_file: str) -> list[tuple[str, int, int]]:
    """The targets of Kafka's offset JSON file: read no more than :data:`_MAX_JSON_FILE`
    bytes (it may be a pipe or a device), anything but the format a :class:`UsageError`."""
    def refused(why: str | None = None) -> UsageError:
        return UsageError(
            f"{json_file}: " + (f"{why}; " if why else "") + 'expected {"partitions": '
            '[{"topic": ..., "partition": ..., "offset": ...}], "version": 1}')

    with open(json_file, "rb") as f:
        raw = f.read(_MAX_JSON_FILE + 1)
    doc = load_untrusted(raw, limit=_MAX_JSON_FILE, fail=refused)
    try:  # no number is infinite or NaN, so int() raises nothing but these
        return [(str(e["topic"]), int(e["partition"]), int(e["offset"]))
                for e in doc["partitions"]]
    except (ValueError, KeyError, TypeError):
        raise refused() from None


def _checked(log: Log, targets: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """``targets`` with -1 as the log end, once every one of them names a partition and an
    offset in ``[0, log end]``: a request that fails deletes nothing (not the records of the
    targets before the one it fails on)."""
    out = []
    for t, p, before in targets:
        select_partitions(log, t, [p])
        check_deletable(t, p, log.topic_config(t))
        end = log.end_offset(t, p)
        before = end if before == LATEST else before
        if not 0 <= before <= end:
            raise OffsetOutOfRangeError(f"cannot delete records before {before}: {t}-{p} ends "
                                        f"at {end}; nothing was deleted")
        out.append((t, p, before))
    return out


@click.command("delete-records")
@click.option("--topic", help="Topic.")
@click.option("--partition", type=click.IntRange(min=0), help="Partition (default: all).")
@click.option("--offset", type=int,
              help="Delete every record below this offset (-1: the log end).")
@click.option("--offset-json-file", type=click.Path(dir_okay=False, exists=True),
              help='Kafka\'s format: {"partitions": [{"topic": "t", "partition": 0, '
                   '"offset": 5}], "version": 1}.')
@dir_option
@json_option
def delete_records(topic: str | None, partition: int | None, offset: int | None,
                   offset_json_file: str | None, log_dir: str, as_json: bool) -> None:
    """Move the log start offset up: records below the offset become unreadable and whole
    segments below it are deleted. Every partition and offset is checked first (and that the
    topic's cleanup.policy includes delete, as Kafka's): a request that fails deletes
    nothing."""
    with open_log(log_dir, write=True) as log:
        targets = _checked(log, _targets(log, topic, partition, offset, offset_json_file))
        done = [{"topic": t, "partition": p, "low_watermark": log.delete_records(t, p, before)}
                for t, p, before in targets]
    if as_json:
        echo_json(done)
        return
    click.echo("Records delete operation completed:")
    for d in done:
        click.echo(f"partition: {d['topic']}-{d['partition']}\tlow_watermark: "
                   f"{d['low_watermark']}")
