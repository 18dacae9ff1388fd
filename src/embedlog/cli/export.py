"""Where ``embedlog consume`` writes, and its file exports.

Record by record (text, hex, ``json``/``jsonl``, ``csv``), through the consumer: to stdout, or
to ``--output FILE``. ``jsonl`` is ``json``: one object per line with every field (bytes as in
:mod:`embedlog.cli.jsonbytes`). ``csv`` has a header line and the same fields; a null key or
value is an empty field, bytes that are not UTF-8 are their ``{"base64": ...}`` JSON text, and
headers are the JSON text of ``[[key, value], ...]``.

Columnar (``parquet``, ``arrow`` -- an Arrow IPC file), through
:func:`embedlog.arrow.read_arrow`: only to ``--output FILE``, with the schema of Spark's Kafka
source including ``headers``, partition after partition, from each partition's start to its end
when the command started.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from ..log import Log
from ..records import Record, TopicPartition
from .jsonbytes import to_json
from .output import progressbar, timestamp_type_name

__all__ = ["COLUMNAR", "FORMATS", "export_columnar", "record_json", "record_sink"]

FORMATS = ("text", "json", "jsonl", "hex", "csv", "parquet", "arrow")
COLUMNAR = ("parquet", "arrow")
CSV_FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
              "headers")

Sink = Callable[[list[Record]], None]


def record_json(r: Record) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": timestamp_type_name(r.timestamp_type),
        "key": to_json(r.key),
        "value": to_json(r.value),
        "headers": [[k, to_json(v)] for k, v in r.headers],
    }


def _csv_bytes(data: bytes | None) -> str:
    text = to_json(data)
    return "" if text is None else text if isinstance(text, str) else json.dumps(text)


def _csv_sink(text: IO[str]) -> Sink:
    writer = csv.writer(text)
    writer.writerow(CSV_FIELDS)

    def sink(records: list[Record]) -> None:
        writer.writerows(
            (r.topic, r.partition, r.offset, r.timestamp, timestamp_type_name(r.timestamp_type),
             _csv_bytes(r.key), _csv_bytes(r.value),
             json.dumps([[k, to_json(v)] for k, v in r.headers]) if r.headers else "")
            for r in records)
    return sink


@contextlib.contextmanager
def record_sink(fmt: str, line: Callable[[Record], bytes], output: str | None
                ) -> Iterator[Sink]:
    """A function writing records in ``fmt`` (``line`` renders text and hex) to ``output`` or
    stdout; the file is closed on exit."""
    with contextlib.ExitStack() as stack:
        binary: IO[bytes] = (stack.enter_context(open(output, "wb")) if output is not None
                             else sys.stdout.buffer)
        if fmt == "csv":
            text = io.TextIOWrapper(binary, encoding="utf-8", newline="", write_through=True)
            try:
                yield _csv_sink(text)
            finally:
                text.flush()
                text.detach()  # the binary stream stays open (stdout) or is closed below
            return
        as_json = fmt in ("json", "jsonl")

        def write(records: list[Record]) -> None:
            binary.write(b"".join(
                (json.dumps(record_json(r)).encode() if as_json else line(r)) + b"\n"
                for r in records))
            binary.flush()
        yield write


def export_columnar(log: Log, fmt: str, output: str, ranges: Mapping[TopicPartition,
                    tuple[int, int]], max_messages: int | None) -> int:
    """Write ``ranges`` (``[start, end)`` per partition) as a Parquet or Arrow IPC file, with a
    progress bar on a terminal; returns the number of records written."""
    from ..arrow import read_arrow

    starts = {tp: lo for tp, (lo, hi) in ranges.items()}
    ends = {tp: hi for tp, (lo, hi) in ranges.items()}
    topics = sorted({tp.topic for tp in ranges})
    reader = read_arrow(log, topics, partitions=sorted({tp.partition for tp in ranges}),
                        start_offset=starts, end_offset=ends, include_headers=True)
    total = sum(max(0, hi - lo) for lo, hi in ranges.values())
    if max_messages is not None:
        total = min(total, max_messages)
    count = 0
    with _columnar_writer(fmt, output, reader.schema) as write, \
            progressbar(total, f"Exporting {fmt}") as bar:
        for batch in reader:
            if max_messages is not None and count + batch.num_rows > max_messages:
                batch = batch.slice(0, max_messages - count)
            write(batch)
            count += batch.num_rows
            bar.update(batch.num_rows)
            if max_messages is not None and count >= max_messages:
                break
    return count


@contextlib.contextmanager
def _columnar_writer(fmt: str, output: str, schema: Any) -> Iterator[Callable[[Any], None]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if fmt == "parquet":
        with pq.ParquetWriter(output, schema) as writer:
            yield writer.write_batch
    else:
        with pa.OSFile(output, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            yield writer.write_batch
