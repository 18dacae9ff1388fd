"""``embedlog consume TOPIC``: print records (Kafka's console consumer), through the
:class:`~embedlog.consumer.Consumer`.

Where reading starts, per partition: ``--offset`` (needs ``--partition``), else ``--from-time``,
else the log start -- or, with ``--follow`` (tail, like Kafka's ``latest``), the log end unless
``--from-beginning``. Under ``--isolation-level read_committed`` that end (of a tail, of
``--offset latest``, of a read without ``--follow``) is the last stable offset, as a Kafka
consumer's is: the records of a transaction open at the start are printed once it commits. With
``--group`` the command is a member of the group: it reads the partitions the group gives it,
from the committed offsets (``--from-beginning`` or the rule above when there are none), commits
as it goes and when it stops; ``groups reset-offsets`` moves a group's offsets. Without
``--follow`` the command stops once it has printed what the log held when it started; with it,
it waits for new records (``--timeout-ms`` ends the wait).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import click

from ..consumer import Consumer
from ..errors import OffsetOutOfRangeError
from ..log import Log
from ..records import Record, TopicPartition
from .export import COLUMNAR, FORMATS, export_columnar, record_json, record_sink
from .options import TIMESTAMP, dir_option, open_log, select_partitions
from .output import progressbar, timestamp_type_name

__all__ = ["consume", "record_json"]

FETCH = 500
IDLE_WAIT_S = 0.1
GROUP_JOIN_S = 2.0
"""Without --follow, how long a group member waits for partitions before giving up."""


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
            fields.append(f"{timestamp_type_name(r.timestamp_type)}:{r.timestamp}".encode())
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


def _start(log: Log, tp: TopicPartition, offset: str | None, from_time: int | None,
           tail: bool, latest: int) -> int:
    """Where an explicitly placed partition starts (see the module docstring); ``latest``:
    the end the isolation level sees (the last stable offset under ``read_committed``, as a
    Kafka consumer's ``seekToEnd``)."""
    if offset is not None:
        return _explicit_offset(log, tp, offset, latest)
    if from_time is not None:
        found = log.offsets_for_times(tp.topic, tp.partition, from_time)
        return log.end_offset(*tp) if found is None else found
    return latest if tail else log.start_offset(*tp)


def _explicit_offset(log: Log, tp: TopicPartition, offset: str, latest: int) -> int:
    if offset == "earliest":
        return log.start_offset(*tp)
    if offset == "latest":
        return latest
    try:
        value = int(offset)
    except ValueError:
        raise click.BadParameter(f"{offset!r} is not an offset, 'earliest' or 'latest'",
                                 param_hint="--offset") from None
    start, end = log.start_offset(*tp), log.end_offset(*tp)
    if not start <= value <= end:
        raise OffsetOutOfRangeError(
            f"offset {value} is out of range for {tp.topic}-{tp.partition}: the log holds "
            f"[{start}, {end})"
        )
    return value


def caught_up(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether every assigned partition's position reached the end it had at the start."""
    assigned = consumer.assignment()
    return bool(assigned) and all(consumer.position(tp) >= ends.get(tp, 0) for tp in assigned)


def _stop(consumer: Consumer, ends: dict[TopicPartition, int], follow: bool,
          timeout_ms: int | None, idle_s: float) -> bool:
    """After an empty poll: a tail stops only on its idle timeout; otherwise stop once caught
    up (or when a group gave this member nothing for a while)."""
    if follow:
        return timeout_ms is not None and idle_s >= timeout_ms / 1000
    return caught_up(consumer, ends) or idle_s >= GROUP_JOIN_S


def _check_usage(partition: bool, offset: bool, from_time: bool, group: str | None,
                 follow: bool, timeout_ms: int | None, fmt: str, output: str | None) -> None:
    if offset and not partition:
        raise click.UsageError("--offset needs --partition")
    if group and (partition or from_time):
        raise click.UsageError("--group reads the partitions the group assigns from its "
                               "committed offsets; move them with 'groups reset-offsets'")
    if timeout_ms is not None and not follow:
        raise click.UsageError("--timeout-ms applies to --follow")
    if fmt in COLUMNAR and (output is None or follow or group):
        raise click.UsageError(f"--format {fmt} writes a file: it needs --output and takes "
                               "neither --follow nor --group")


@click.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option("--from-beginning", is_flag=True,
              help="With --follow: start at the log start instead of the end (without "
                   "--follow, and for a group without committed offsets, reading starts at "
                   "the log start anyway).")
@click.option("--offset", metavar="N|earliest|latest",
              help="Start at this offset (needs --partition).")
@click.option("--from-time", type=TIMESTAMP,
              help="Start at the first record at or after this time (epoch ms or ISO 8601).")
@click.option("--group", help="Consume as a member of this consumer group, from its committed "
                              "offsets, committing the positions reached.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after N records.")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records (tail).")
@click.option("--timeout-ms", type=click.IntRange(min=0),
              help="With --follow: stop after this long without a new record.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="Output: text lines, JSON lines (json, jsonl), text with hex bytes, or an "
                   "export: csv, parquet, arrow (an Arrow IPC file).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True),
              help="Write to this file instead of stdout (needed by parquet and arrow).")
@click.option("--print-key", is_flag=True, help="Text: show the key.")
@click.option("--print-headers", is_flag=True, help="Text: show the headers.")
@click.option("--print-offset", is_flag=True, help="Text: show the offset.")
@click.option("--print-partition", is_flag=True, help="Text: show the partition.")
@click.option("--print-timestamp", is_flag=True, help="Text: show the timestamp.")
@click.option("--key-separator", default="\t", show_default="tab",
              help="Text: separator between the fields of a line.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="read_committed: only committed transactions, up to the last stable offset.")
@dir_option
def consume(topic: str, partition: int | None, from_beginning: bool, offset: str | None,
            from_time: int | None, group: str | None, max_messages: int | None, follow: bool,
            timeout_ms: int | None, fmt: str, print_key: bool, print_headers: bool,
            print_offset: bool, print_partition: bool, print_timestamp: bool,
            key_separator: str, output: str | None, isolation_level: str,
            log_dir: str) -> None:
    """Print the records of TOPIC, one per line, or export them to a file."""
    committed = isolation_level == "read_committed"
    if committed and fmt in COLUMNAR:
        raise click.UsageError("--isolation-level read_committed is for the text formats")
    _check_usage(partition is not None, offset is not None, from_time is not None, group,
                 follow, timeout_ms, fmt, output)
    text = TextFormat(fmt == "hex", print_key, print_headers, print_offset, print_partition,
                      print_timestamp, key_separator.encode())
    tail, count = follow and not from_beginning, 0
    with open_log(log_dir) as log:
        parts = select_partitions(log, topic, [] if partition is None else [partition])
        end_of = log.last_stable_offset if committed else log.end_offset
        ends = {TopicPartition(topic, p): end_of(topic, p) for p in parts}
        if fmt in COLUMNAR:
            assert output is not None
            ranges = {tp: (_start(log, tp, offset, from_time, False, end), end)
                      for tp, end in ends.items()}
            count = export_columnar(log, fmt, output, ranges, max_messages)
            click.echo(f"Processed a total of {count} messages", err=True)
            return
        consumer = log.consumer(group=group, max_poll_records=FETCH,
                                auto_offset_reset="latest" if tail else "earliest",
                                enable_auto_commit=group is not None,
                                isolation_level=isolation_level)
        total = 0
        with consumer, record_sink(fmt, text.line, output) as emit:
            if group:
                consumer.subscribe([topic])
            else:
                consumer.assign(list(ends))
                for tp in ends:
                    at = _start(log, tp, offset, from_time, tail, ends[tp])
                    consumer.seek(tp, at)
                    total += max(0, ends[tp] - at)
            bar = progressbar(0 if follow else min(total, max_messages or total), "Exporting")
            idle_since = time.monotonic()
            try:
                while max_messages is None or count < max_messages:
                    wait = IDLE_WAIT_S if follow or group else 0.0
                    limit = FETCH if max_messages is None else min(FETCH, max_messages - count)
                    records = consumer.poll(wait, max_records=limit)
                    emit(records)
                    bar.update(len(records))
                    count += len(records)
                    if records:
                        idle_since = time.monotonic()
                    elif _stop(consumer, ends, follow, timeout_ms,
                               time.monotonic() - idle_since):
                        break
            except KeyboardInterrupt:
                pass
            finally:
                bar.render_finish()
    click.echo(f"Processed a total of {count} messages", err=True)
