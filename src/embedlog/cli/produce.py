"""``embedlog produce TOPIC [FILE]``: one record per input line (Kafka's console producer).

Text lines (the default)::

    [headers<TAB>][key<SEP>]value        headers = k1:v1,k2:v2 (with --headers),
                                         SEP = --key-separator

JSON lines (``--format json``), every field optional but ``value``::

    {"key": "user-1", "value": {"page": "/"}, "headers": [["trace", "abc"]],
     "partition": 0, "timestamp": 1714564800000}

Keys, values and header values follow :mod:`embedlog.cli.jsonbytes` (a string is its UTF-8
bytes, ``{"base64": ...}`` raw bytes, ``null`` a null value, anything else its JSON text), so
``consume --format json`` output can be produced back unchanged. Headers are a list of
``[key, value]`` pairs or an object.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import click

from .._json import load_untrusted
from ..errors import UsageError
from ..log import Log
from ..records import Header
from .jsonbytes import from_json
from .options import TIMESTAMP, dir_option, json_option, open_log
from .output import echo_json, progressbar

__all__ = ["produce"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(slots=True)
class _Line:
    value: bytes | None
    key: bytes | None = None
    headers: list[Header] | None = None
    partition: int | None = None
    timestamp: int | None = None


class InputError(UsageError):
    """A line of input that cannot be turned into a record."""


def _text_headers(text: bytes, number: int) -> list[Header]:
    headers: list[Header] = []
    for item in text.split(b","):
        if not item:
            continue
        name, sep, value = item.partition(b":")
        if not sep:
            raise InputError(f"line {number}: header {item.decode(errors='replace')!r} has no ':'")
        headers.append((name.decode(errors="replace"), value))
    return headers


def _parse_text(line: bytes, number: int, key_sep: bytes | None, headers: bool) -> _Line:
    parsed = _Line(None)
    if headers:
        head, tab, line = line.partition(b"\t")
        if not tab:
            raise InputError(f"line {number}: no tab after the headers")
        parsed.headers = _text_headers(head, number)
    if key_sep is not None:
        key, sep, line = line.partition(key_sep)
        if not sep:
            raise InputError(f"line {number}: no key separator {key_sep.decode()!r}")
        parsed.key = key
    parsed.value = line
    return parsed


def _parse_json(line: bytes, number: int) -> _Line:
    doc = load_untrusted(line, limit=None,
                         fail=lambda why: InputError(f"line {number}: invalid JSON ({why})"))
    if not isinstance(doc, dict) or "value" not in doc:
        raise InputError(f"line {number}: expected a JSON object with a \"value\" field")
    raw_headers = doc.get("headers") or []
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    try:
        headers = [(str(k), from_json(v, f"line {number}: header")) for k, v in pairs]
    except (TypeError, ValueError):
        raise InputError(f"line {number}: headers must be [[key, value], ...] or an object"
                         ) from None
    for name in ("partition", "timestamp"):
        if doc.get(name) is not None and not isinstance(doc[name], int):
            raise InputError(f"line {number}: {name} must be an integer")
    return _Line(
        from_json(doc["value"], f"line {number}: value"),
        from_json(doc.get("key"), f"line {number}: key"),
        headers or None,
        doc.get("partition"),
        doc.get("timestamp"),
    )


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(stream, 1):
        yield number, raw.rstrip(b"\n").rstrip(b"\r")


class _Batcher:
    """Collects parsed lines into ``append_batch`` calls of up to ``size`` records, one
    explicit partition (or none) per call."""

    def __init__(self, log: Log, topic: str, size: int, compression: str | None) -> None:
        self.log, self.topic, self.size, self.compression = log, topic, size, compression
        self.pending: list[_Line] = []
        self.records = 0
        self.batches = 0

    def add(self, line: _Line) -> None:
        if self.pending and (len(self.pending) >= self.size
                             or line.partition != self.pending[0].partition):
            self.flush()
        self.pending.append(line)

    def flush(self) -> None:
        lines, self.pending = self.pending, []
        if not lines:
            return
        keys = [x.key for x in lines]
        headers = [x.headers for x in lines]
        stamps = [x.timestamp for x in lines]
        now = self.log.clock()
        written = self.log.append_batch(
            self.topic,
            [x.value for x in lines],
            keys=keys if any(k is not None for k in keys) else None,
            headers=headers if any(headers) else None,
            timestamps=None if all(t is None for t in stamps) else
            [now if t is None else t for t in stamps],
            partition=lines[0].partition,
            compression=self.compression,
        )
        self.records += len(lines)
        self.batches += len(written)


@click.command()
@click.argument("topic")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Input: one value per line, or JSON lines.")
@click.option("--key-separator", metavar="SEP",
              help="Text input: each line is KEY<SEP>VALUE (Kafka's parse.key).")
@click.option("--headers", is_flag=True,
              help="Text input: each line starts with k1:v1,k2:v2 and a tab (Kafka's "
                   "parse.headers).")
@click.option("--partition", type=click.IntRange(min=0),
              help="Write every record to this partition (default: by key, else spread).")
@click.option("--compression", type=click.Choice(CODECS),
              help="Batch compression (default: the topic's compression.type).")
@click.option("--timestamp", type=TIMESTAMP,
              help="Record timestamp for lines that have none (default: now).")
@click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Records per appended batch.")
@dir_option
@json_option
def produce(topic: str, file: str, fmt: str, key_separator: str | None, headers: bool,
            partition: int | None, compression: str | None, timestamp: int | None,
            batch_size: int, log_dir: str, as_json: bool) -> None:
    """Append one record per line of FILE (default: stdin) to TOPIC."""
    if fmt == "json" and (key_separator is not None or headers):
        raise click.UsageError("--key-separator and --headers apply to --format text only")
    if key_separator == "":
        raise click.BadParameter("the separator cannot be empty", param_hint="--key-separator")
    key_sep = key_separator.encode() if key_separator is not None else None
    with contextlib.ExitStack() as stack:
        stream: IO[bytes] = (sys.stdin.buffer if file == "-" else
                             stack.enter_context(open(file, "rb")))
        total = os.fstat(stream.fileno()).st_size if file != "-" else 0
        log = stack.enter_context(open_log(log_dir, write=True))
        log.partition_count(topic)  # unknown topic: fail before reading any input
        batcher = _Batcher(log, topic, batch_size, compression)
        bar = stack.enter_context(progressbar(total, f"producing to {topic}"))
        for number, line in _lines(stream):
            if fmt == "json":
                if not line.strip():
                    continue
                parsed = _parse_json(line, number)
            else:
                parsed = _parse_text(line, number, key_sep, headers)
            if partition is not None:
                parsed.partition = partition
            if parsed.timestamp is None:
                parsed.timestamp = timestamp
            batcher.add(parsed)
            if total and number % 1024 == 0:
                bar.update(stream.tell() - bar.pos)
        batcher.flush()
        bar.update(total - bar.pos)
    summary = {"topic": topic, "records": batcher.records, "batches": batcher.batches}
    if as_json:
        echo_json(summary)
    else:
        click.echo(f"Produced {batcher.records} records to {topic} "
                   f"in {batcher.batches} batches.", err=True)
