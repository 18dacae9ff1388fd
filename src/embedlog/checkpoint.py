"""Kafka's text checkpoint files (``recovery-point-offset-checkpoint`` and friends).

Layout (UTF-8, ``\\n`` line ends)::

    0                      version
    2                      number of entries
    orders 0 1042          one entry per line, fields split on whitespace
    orders 1 977

An empty file means no entries (Kafka writes one for a cleaner that never ran). Files are
replaced whole through :func:`embedlog._io.write_atomic`, so a crash leaves the old or the new
checkpoint. Parsing is pure; a malformed file raises
:class:`~embedlog.errors.CorruptCheckpointError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import _io
from .errors import CorruptCheckpointError
from .records import TopicPartition

__all__ = [
    "format_offsets",
    "parse_offsets",
    "read_offsets",
    "write_offsets",
]

VERSION = 0


def parse_offsets(text: str, *, path: str | None = None) -> dict[TopicPartition, int]:
    """Parse the ``topic partition offset`` checkpoint format."""
    if not text.strip():
        return {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed checkpoint: {msg}", path=path)

    if len(lines) < 2:
        raise bad("missing header lines")
    try:
        version, count = int(lines[0]), int(lines[1])
    except ValueError:
        raise bad("version and entry count must be integers") from None
    if version != VERSION:
        raise bad(f"unsupported version {version}")
    if count != len(lines) - 2:
        raise bad(f"header says {count} entries, file has {len(lines) - 2}")
    out: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        fields = line.split()
        if len(fields) != 3:
            raise bad(f"entry {line!r} does not have three fields")
        try:
            partition, offset = int(fields[1]), int(fields[2])
        except ValueError:
            raise bad(f"entry {line!r} has a non-integer partition or offset") from None
        if partition < 0 or offset < 0:
            raise bad(f"entry {line!r} has a negative value")
        out[TopicPartition(fields[0], partition)] = offset
    return out


def format_offsets(offsets: Mapping[TopicPartition, int]) -> str:
    entries = sorted(offsets.items())
    lines = [str(VERSION), str(len(entries))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in entries]
    return "\n".join(lines) + "\n"


def read_offsets(path: str) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; a missing file has none."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * 1024 * 1024)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CorruptCheckpointError(f"cannot read checkpoint: {exc}", path=path) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError("checkpoint is not UTF-8", path=path) from None
    return parse_offsets(text, path=path)


def write_offsets(path: str, offsets: Mapping[TopicPartition, int]) -> None:
    _io.write_atomic(path, format_offsets(offsets).encode())
