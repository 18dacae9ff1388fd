"""The parsed forms of the options that name what to read: which partitions (topic selection)
and where to start or stop (offset specifications). Pure data, no Spark and no file access;
:mod:`embedlog.spark.options` builds them and :mod:`embedlog.spark.planning` resolves them
against a log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .._json import load_untrusted
from ..errors import InvalidConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Assign",
    "Earliest",
    "GlobalTimestamp",
    "Latest",
    "OffsetSpec",
    "PartitionOffsets",
    "PartitionTimestamps",
    "Subscribe",
    "SubscribePattern",
    "TopicSelection",
    "is_int",
    "json_object",
    "partition_table",
    "tp_name",
]

EARLIEST = -2
"""In offset JSON, Kafka's marker for "the log start offset"."""
LATEST = -1
"""In offset JSON, Kafka's marker for "the log end offset"."""


# -- topic selection -------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscribe:
    """``subscribe``: a comma-separated list of topic names."""

    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    """``subscribePattern``: topics whose whole name matches the regex."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    """``assign``: explicit partitions, JSON ``{"topicA": [0, 1], "topicB": [2]}``."""

    partitions: tuple[tuple[str, int], ...]


TopicSelection = Subscribe | SubscribePattern | Assign


# -- offset specifications -------------------------------------------------------------------


@dataclass(frozen=True)
class Earliest:
    """``"earliest"``: the log start offset of every partition."""


@dataclass(frozen=True)
class Latest:
    """``"latest"``: the log end offset of every partition."""


@dataclass(frozen=True)
class PartitionOffsets:
    """Kafka's offset JSON. ``-2`` = earliest, ``-1`` = latest.

    ``offsets`` maps topic -> partition -> offset. The topic ``None`` stands for "the one selected
    topic", from the short form ``{"0": 23}``.
    """

    option: str
    offsets: Mapping[str | None, Mapping[int, int]]


@dataclass(frozen=True)
class GlobalTimestamp:
    """``startingTimestamp`` / ``endingTimestamp``: one epoch-ms timestamp for all partitions."""

    option: str
    timestamp: int


@dataclass(frozen=True)
class PartitionTimestamps:
    """``...OffsetsByTimestamp``: JSON ``{"topicA": {"0": 1000}}`` of epoch-ms timestamps."""

    option: str
    timestamps: Mapping[str | None, Mapping[int, int]]


OffsetSpec = Earliest | Latest | PartitionOffsets | GlobalTimestamp | PartitionTimestamps


# -- JSON tables of the offset options ------------------------------------------------------


def partition_table(key: str, raw: str) -> dict[str | None, dict[int, int]]:
    """``{"topic": {"0": n}}`` (or the single-topic short form ``{"0": n}``) as ints."""
    data = json_object(key, raw, '{"topicA": {"0": 23, "1": -2}}')
    if data and all(is_int(v) for v in data.values()):
        return {None: _partition_numbers(key, None, data)}
    table: dict[str | None, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise InvalidConfigError(
                f"{key}: value for topic {topic!r} must be an object of partition -> number"
            )
        table[topic] = _partition_numbers(key, topic, parts)
    if not table:
        raise InvalidConfigError(f"{key}: no partitions given")
    return table


def _partition_numbers(key: str, topic: str | None, parts: dict[str, object]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p_text, value in parts.items():
        try:
            p = int(p_text)
        except ValueError:
            raise InvalidConfigError(
                f"{key}: partition {p_text!r} of topic {topic!r} is not a number"
            ) from None
        if p < 0:
            raise InvalidConfigError(f"{key}: partition {p} of topic {topic!r} is negative")
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidConfigError(f"{key}: value for {tp_name(topic, p)} must be an integer")
        out[p] = value
    return out


def json_object(key: str, raw: str, example: str) -> dict[str, object]:
    data = load_untrusted(raw, limit=None, fail=lambda why: InvalidConfigError(
        f"{key}: not valid JSON ({why}): {raw!r} (example: {example})"))
    if not isinstance(data, dict):
        raise InvalidConfigError(f"{key}: expected a JSON object such as {example}, got {raw!r}")
    return data


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tp_name(topic: str | None, partition: int) -> str:
    return f"{topic}-{partition}" if topic is not None else f"partition {partition}"
