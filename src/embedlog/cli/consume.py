"""``embedlog consume TOPIC``: print records (Kafka's console consumer).

Partitions are read round-robin in fetches of up to 500 records, so output interleaves them as
Kafka's does; within a partition records come in offset order. Where reading starts, per
partition, first match wins: ``--offset`` (needs ``--partition``), ``--from-time``,
``--from-beginning``, the ``--group``'s committed offset, then the log start -- or the log end
with ``--follow``, which then waits for new records (``--timeout-ms`` ends the wait).

Text output is Kafka's: optional ``CreateTime:<ms>``, ``Partition:<n>``, ``Offset:<n>``,
headers (``k:v,k2:v2`` or ``NO_HEADERS``) and key, then the value, separated by a tab; ``null``
for a null key or value. ``--format json`` writes one object per record with every field
(bytes as in :mod:`embedlog.cli.jsonbytes`); ``--format hex`` is text output
with keys, values and header values in hex.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import click

from ..errors import OffsetOutOfRangeError
from ..log import Log
from ..records import Record
from .jsonbytes import to_json
from .options import TIMESTAMP, dir_option, open_log, select_partitions

__all__ = ["consume", "record_json"]

FETCH = 500
IDLE_WAIT_S = 0.05
TIMESTAMP_NAMES = {0: "CreateTime", 1: "LogAppendTime"}


def record_json(r: Record) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": TIMESTAMP_NAMES.get(r.timestamp_type, "NoTimestampType"),
        "key": to_json(r.key),
        "value": to_json(r.value),
        "headers": [[k, to_json(v)] for k, v in r.headers],
    }


@dataclass(frozen=True, slots=True)
class TextFormat:
    """Which fields a text line shows, and how bytes are rendered."""

    hex: bool
    key: bool
    headers: bool
    offset: bool
    partition: bool
    timestamp: bool
    separator: bytes

    def _bytes(self, data: bytes | None) -> bytes:
        if data is None:
            return b"null"
        return data.hex().encode() if self.hex else data

    def line(self, r: Record) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            fields.append(f"{TIMESTAMP_NAMES.get(r.timestamp_type, 'NoTimestampType')}:"
                          f"{r.timestamp}".encode())
        if self.partition:
            fields.append(f"Partition:{r.partition}".encode())
        if self.offset:
            fields.append(f"Offset:{r.offset}".encode())
        if self.headers:
            fields.append(b",".join(k.encode() + b":" + self._bytes(v) for k, v in r.headers)
                          if r.headers else b"NO_HEADERS")
        if self.key:
            fields.append(self._bytes(r.key))
        fields.append(self._bytes(r.value))
        return self.separator.join(fields)


def fetch_round(log: Log, topic: str, positions: dict[int, int], *, fetch: int = FETCH
                ) -> Iterator[list[Record]]:
    """One fetch per partition: up to ``fetch`` records from its position (none when it has nothing
    new), advancing ``positions`` (the next offset to read) past them. A position below the log
    start (retention deleted it) moves to the log start, as Kafka's
    ``auto.offset.reset=earliest``."""
    for p, pos in positions.items():
        end = log.end_offset(topic, p)
        if pos >= end:
            continue
        try:
            records = list(log.read(topic, p, pos, max_records=fetch, end_offset=end))
        except OffsetOutOfRangeError:
            positions[p] = log.start_offset(topic, p)
            continue
        positions[p] = records[-1].offset + 1 if records else end
        yield records


def _starts(log: Log, topic: str, parts: Sequence[int], offset: str | None,
            from_time: int | None, from_beginning: bool, follow: bool,
            committed: dict[int, int]) -> dict[int, int]:
    starts: dict[int, int] = {}
    for p in parts:
        if offset is not None:
            starts[p] = _explicit_offset(log, topic, p, offset)
        elif from_time is not None:
            found = log.offsets_for_times(topic, p, from_time)
            starts[p] = log.end_offset(topic, p) if found is None else found
        elif from_beginning:
            starts[p] = log.start_offset(topic, p)
        elif p in committed:
            starts[p] = committed[p]
        elif follow:
            starts[p] = log.end_offset(topic, p)
        else:
            starts[p] = log.start_offset(topic, p)
    return starts


def _explicit_offset(log: Log, topic: str, p: int, offset: str) -> int:
    if offset == "earliest":
        return log.start_offset(topic, p)
    if offset == "latest":
        return log.end_offset(topic, p)
    try:
        value = int(offset)
    except ValueError:
        raise click.BadParameter(f"{offset!r} is not an offset, 'earliest' or 'latest'",
                                 param_hint="--offset") from None
    start, end = log.start_offset(topic, p), log.end_offset(topic, p)
    if not start <= value <= end:
        raise OffsetOutOfRangeError(
            f"offset {value} is out of range for {topic}-{p}: the log holds [{start}, {end})"
        )
    return value


@click.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset.")
@click.option("--offset", metavar="N|earliest|latest",
              help="Start at this offset (needs --partition).")
@click.option("--from-time", type=TIMESTAMP,
              help="Start at the first record at or after this time (epoch ms or ISO 8601).")
@click.option("--group", help="Consumer group: start at its committed offsets and commit "
                              "the position reached.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after N records.")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records (tail).")
@click.option("--timeout-ms", type=click.IntRange(min=0),
              help="With --follow: stop after this long without a new record.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "hex"]), default="text",
              show_default=True, help="Output: text lines, JSON lines, or text with hex bytes.")
@click.option("--print-key", is_flag=True, help="Text: show the key.")
@click.option("--print-headers", is_flag=True, help="Text: show the headers.")
@click.option("--print-offset", is_flag=True, help="Text: show the offset.")
@click.option("--print-partition", is_flag=True, help="Text: show the partition.")
@click.option("--print-timestamp", is_flag=True, help="Text: show the timestamp.")
@click.option("--key-separator", default="\t", show_default="tab",
              help="Text: separator between the fields of a line.")
@dir_option
def consume(topic: str, partition: int | None, from_beginning: bool, offset: str | None,
            from_time: int | None, group: str | None, max_messages: int | None, follow: bool,
            timeout_ms: int | None, fmt: str, print_key: bool, print_headers: bool,
            print_offset: bool, print_partition: bool, print_timestamp: bool,
            key_separator: str, log_dir: str) -> None:
    """Print the records of TOPIC, one per line."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if timeout_ms is not None and not follow:
        raise click.UsageError("--timeout-ms applies to --follow")
    text = TextFormat(fmt == "hex", print_key, print_headers, print_offset, print_partition,
                      print_timestamp, key_separator.encode())
    count = 0
    with open_log(log_dir) as log:
        parts = select_partitions(log, topic, [] if partition is None else [partition])
        committed: dict[int, int] = {}
        positions = _starts(log, topic, parts, offset, from_time, from_beginning, follow,
                            committed)
        idle_since = time.monotonic()
        try:
            while max_messages is None or count < max_messages:
                got = False
                for records in fetch_round(log, topic, positions):
                    if max_messages is not None and len(records) >= max_messages - count:
                        records = records[: max_messages - count]
                        positions[records[-1].partition] = records[-1].offset + 1
                    for r in records:
                        click.echo(json.dumps(record_json(r)) if fmt == "json"
                                   else text.line(r))
                    count += len(records)
                    got = got or bool(records)
                    if max_messages is not None and count >= max_messages:
                        break
                if got:
                    idle_since = time.monotonic()
                    continue
                if not follow:
                    break
                if timeout_ms is not None and time.monotonic() - idle_since >= timeout_ms / 1000:
                    break
                time.sleep(IDLE_WAIT_S)
        except KeyboardInterrupt:
            pass
    click.echo(f"Processed a total of {count} messages", err=True)
