"""Parse the reader and writer options, with the names, meanings and precedence of Spark's Kafka
source (Structured Streaming + Kafka Integration Guide).

Pure Python, no Spark and no file access: :func:`parse_read_options` turns the string options
Spark hands a data source into a frozen :class:`ReadOptions`; offsets that depend on the log
(earliest/latest/timestamps) stay symbolic and are resolved by :mod:`embedlog.spark.planning`.
Every bad value raises :class:`~embedlog.errors.InvalidConfigError` naming the option.

Precedence, as in Kafka: ``startingTimestamp`` > ``startingOffsetsByTimestamp`` >
``startingOffsets`` and ``endingTimestamp`` > ``endingOffsetsByTimestamp`` > ``endingOffsets``.
Lower-precedence options are still validated, so a typo never hides.

As in Kafka, a read names exactly one of ``subscribe``/``subscribePattern``/``assign``.
Differences from Kafka: offset JSON may use the short form ``{"0": 23}`` when one topic is
selected; options only a broker understands (``kafka.*`` other than
``kafka.isolation.level``, ``groupIdPrefix``, ``fetchOffset.*``...) are accepted and ignored, any
other unknown option is an error. ``kafka.isolation.level=read_committed`` drops the records of
aborted transactions, as a ``read_committed`` consumer does; ``maxTriggerDelay`` (Kafka's duration
syntax, default ``15m``) lets a trigger below ``minOffsetsPerTrigger`` through once that long has
passed since the last batch; ``maxRecordsPerPartition`` (Spark 4) caps the offsets of one Spark
task. embedlog's own options:

* ``pushFilters`` (false): use the filter-pushdown reader (also needs
  ``spark.sql.python.filterPushdown.enabled=true``);
* ``maxRecordsPerBatch`` (32768): rows per Arrow batch handed to Spark (the JVM reader's
  column batches: 4096 unless given, at most 65536);
* ``jvmReader`` (true): let the JVM reader (:mod:`embedlog.spark.jvm`), when its jar is on
  Spark's classpath, read batch tasks; ``false`` reads them through the Python reader;
* ``maxBytesPerPartition`` (128 MiB): adjacent segments of a partition, and small partitions,
  share one task up to this size.

Write options: ``topic``, and ``writerLockTimeoutMs`` (60000): how long a write waits for the
log's writer lock (held by a producer or another writer) before it fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .._json import load_untrusted
from ..errors import InvalidConfigError
from .specs import (
    EARLIEST,
    LATEST,
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    PartitionOffsets,
    PartitionTimestamps,
    Subscribe,
    SubscribePattern,
    TopicSelection,
    json_object,
    partition_table,
    tp_name,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "SELECTION_OPTIONS",
    "Assign",
    "Earliest",
    "GlobalTimestamp",
    "Latest",
    "OffsetSpec",
    "PartitionOffsets",
    "PartitionTimestamps",
    "ReadOptions",
    "Subscribe",
    "SubscribePattern",
    "TopicSelection",
    "WriteOptions",
    "check_read_options",
    "parse_include_headers",
    "parse_read_options",
    "parse_write_options",
]

DEFAULT_BATCH_ROWS = 32_768
"""Rows per Arrow batch handed to Spark; spark.md measured 16-64k as the sweet spot."""
SELECTION_OPTIONS = ("subscribe", "subscribePattern", "assign")
"""What to read: a read must be given exactly one of these (as Spark's Kafka source)."""
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
"""Adjacent small segments of one partition are read by one task up to this many bytes."""

# Options of Spark's Kafka source that make no sense without a broker; accepted and ignored so
# that a Kafka job runs unchanged apart from format and path.
_IGNORED_PREFIXES = ("kafka.", "fetchoffset.")
_IGNORED = frozenset({"groupidprefix", "kafkaconsumer.polltimeoutms"})
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
"""Kafka's default ``maxTriggerDelay`` (15m)."""
DEFAULT_WRITER_LOCK_TIMEOUT_MS = 60_000
"""How long a Spark write waits for the writer lock by default."""
_DURATION_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                   "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class ReadOptions:
    """Everything the batch and streaming readers take from ``.option(...)``."""

    path: str
    selection: TopicSelection
    starting: OffsetSpec = field(default_factory=Earliest)
    ending: OffsetSpec = field(default_factory=Latest)
    timestamp_strategy: Literal["error", "latest"] = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    push_filters: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    max_records_per_partition: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    read_committed: bool = False
    jvm_reader: bool = True
    """``jvmReader``: batch tasks are read by the JVM reader when its jar is on Spark's
    classpath (:mod:`embedlog.spark.jvm`); ``false`` keeps them on the Python reader."""


@dataclass(frozen=True)
class WriteOptions:
    """Options of ``df.write.format("embedlog")``."""

    path: str
    topic: str | None = None
    lock_timeout_ms: int = DEFAULT_WRITER_LOCK_TIMEOUT_MS
    remote_uri: str | None = None
    """``remoteUri``: the tiered storage of the log written to (a writer of a tiered folder
    must name it: :mod:`embedlog.tiering.manager`)."""


# -- parsing ---------------------------------------------------------------------------------

_KNOWN_READ = frozenset(
    {
        "path",
        "paths",
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "failondataloss",
        "minpartitions",
        "includeheaders",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "pushfilters",
        "maxrecordsperbatch",
        "maxbytesperpartition",
        "maxrecordsperpartition",
        "maxtriggerdelay",
        "kafka.isolation.level",
        "topic",
        "jvmreader",
    }
)


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate ``options`` (Spark's case-insensitive string map) for a batch or stream read."""
    opts = _lower(options)
    _reject_unknown(opts)
    selection = _selection(opts)

    starting = _offset_spec(
        opts,
        timestamp_key="startingTimestamp",
        by_timestamp_key="startingOffsetsByTimestamp",
        offsets_key="startingOffsets",
        default=Latest() if streaming else Earliest(),
        allow_latest=streaming,
        allow_earliest=True,
    )
    ending_keys = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
    if streaming:
        for key in ending_keys:
            if key.lower() in opts:
                raise InvalidConfigError(f"{key}: not valid in streaming queries (batch only)")
        ending: OffsetSpec = Latest()
    else:
        ending = _offset_spec(
            opts,
            timestamp_key="endingTimestamp",
            by_timestamp_key="endingOffsetsByTimestamp",
            offsets_key="endingOffsets",
            default=Latest(),
            allow_latest=True,
            allow_earliest=False,
        )

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidConfigError(
            f"startingOffsetsByTimestampStrategy: expected 'error' or 'latest', got {strategy!r}"
        )
    max_rows, min_rows = _trigger_limits(opts)
    return ReadOptions(
        path=_path(opts),
        selection=selection,
        starting=starting,
        ending=ending,
        timestamp_strategy="latest" if strategy == "latest" else "error",
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        push_filters=_bool(opts, "pushFilters", False),
        batch_rows=_positive_int(opts, "maxRecordsPerBatch") or DEFAULT_BATCH_ROWS,
        max_partition_bytes=(
            _positive_int(opts, "maxBytesPerPartition") or DEFAULT_MAX_PARTITION_BYTES
        ),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        read_committed=_isolation(opts),
        jvm_reader=_bool(opts, "jvmReader", True),
    )


def check_read_options(options: Mapping[str, str]) -> None:
    """Raise what :func:`parse_read_options` would raise for *both* a batch and a streaming
    read (the check ``load()`` can make before Spark says which it is)."""
    try:
        parse_read_options(options, streaming=False)
    except InvalidConfigError as batch_error:
        try:
            parse_read_options(options, streaming=True)
        except InvalidConfigError:
            raise batch_error from None


def parse_include_headers(options: Mapping[str, str]) -> bool:
    """Just ``includeHeaders`` (what the schema depends on)."""
    return _bool(_lower(options), "includeHeaders", False)


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the options of a write: the log directory and an optional fixed ``topic``."""
    opts = _lower(options)
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise InvalidConfigError("topic: must not be empty")
    timeout = opts.get("writerlocktimeoutms", str(DEFAULT_WRITER_LOCK_TIMEOUT_MS))
    try:
        lock_timeout_ms = int(timeout.strip())
    except ValueError:
        lock_timeout_ms = -1
    if lock_timeout_ms < 0:
        raise InvalidConfigError(
            f"writerLockTimeoutMs: expected milliseconds >= 0, got {timeout!r}")
    remote_uri = opts.get("remoteuri")
    if remote_uri is not None and "://" not in remote_uri:
        raise InvalidConfigError(f"remoteUri: expected <scheme>://..., got {remote_uri!r}")
    return WriteOptions(path=_path(opts), topic=topic, lock_timeout_ms=lock_timeout_ms,
                        remote_uri=remote_uri)


def _trigger_limits(opts: Mapping[str, str]) -> tuple[int | None, int | None]:
    """``maxOffsetsPerTrigger`` and ``minOffsetsPerTrigger``, checked against each other."""
    max_rows = _positive_int(opts, "maxOffsetsPerTrigger")
    min_rows = _positive_int(opts, "minOffsetsPerTrigger")
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise InvalidConfigError(
            f"minOffsetsPerTrigger ({min_rows}) must not exceed maxOffsetsPerTrigger ({max_rows})"
        )
    return max_rows, min_rows


def _isolation(opts: Mapping[str, str]) -> bool:
    level = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError(
            "kafka.isolation.level: expected 'read_uncommitted' or 'read_committed', "
            f"got {level!r}")
    return level == "read_committed"


def _duration_ms(opts: Mapping[str, str], key: str, default: int) -> int:
    """Spark's time strings: ``15m``, ``30s``, ``500ms``, ``2h``, ``1d``; a bare number is
    milliseconds."""
    raw = opts.get(key.lower())
    if raw is None:
        return default
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if m is None or m.group(2) not in ("", *_DURATION_UNITS):
        raise InvalidConfigError(
            f"{key}: expected a duration such as '15m', '30s' or '500ms', got {raw!r}")
    return int(int(m.group(1)) * _DURATION_UNITS.get(m.group(2) or "ms", 1))


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _reject_unknown(opts: Mapping[str, str]) -> None:
    for key in opts:
        if key in _KNOWN_READ or key in _IGNORED or key.startswith(_IGNORED_PREFIXES):
            continue
        raise InvalidConfigError(f"unknown option {key!r} for the embedlog source")


def _path(opts: Mapping[str, str]) -> str:
    path = opts.get("path")
    if path is None and "paths" in opts:
        paths = load_untrusted(opts["paths"], limit=None, fail=lambda why: InvalidConfigError(
            f"paths: not a JSON list ({why}): {opts['paths']!r}"))
        if not isinstance(paths, list) or len(paths) != 1 or not isinstance(paths[0], str):
            raise InvalidConfigError(
                "path: the embedlog source reads exactly one log directory, "
                f"got {opts['paths']}"
            )
        path = paths[0]
    if not path:
        raise InvalidConfigError(
            "path: give the log directory, e.g. spark.read.format('embedlog').load('/data/log')"
        )
    return path


def _selection(opts: Mapping[str, str]) -> TopicSelection:
    """Exactly one of ``subscribe``, ``subscribePattern``, ``assign`` (Kafka's
    ``validateGeneralOptions``: none, or more than one, is an error)."""
    given = [k for k in SELECTION_OPTIONS if k.lower() in opts]
    if len(given) != 1:
        names = ", ".join(SELECTION_OPTIONS)
        if not given:
            raise InvalidConfigError(
                f"one of the options {names} must be given: which topics or partitions to "
                "read (subscribePattern '.*' reads every topic)")
        raise InvalidConfigError(
            f"only one of the options {names} can be given, got {', '.join(given)}")
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidConfigError(f"subscribe: no topic names in {opts['subscribe']!r}")
        return Subscribe(tuple(dict.fromkeys(topics)))
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise InvalidConfigError("subscribePattern: must not be empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidConfigError(f"subscribePattern: invalid regex {pattern!r}: {exc}") from exc
        return SubscribePattern(pattern)
    return Assign(_assign(opts["assign"]))


def _assign(text: str) -> tuple[tuple[str, int], ...]:
    data = json_object("assign", text, '{"topicA": [0, 1], "topicB": [2, 4]}')
    pairs: list[tuple[str, int]] = []
    for topic, parts in data.items():
        if not isinstance(parts, list):
            raise InvalidConfigError(f"assign: partitions of {topic!r} must be a JSON list")
        for p in parts:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise InvalidConfigError(f"assign: bad partition {p!r} for topic {topic!r}")
            pairs.append((topic, p))
    if not pairs:
        raise InvalidConfigError("assign: no partitions given")
    return tuple(dict.fromkeys(pairs))


def _offset_spec(
    opts: Mapping[str, str],
    *,
    timestamp_key: str,
    by_timestamp_key: str,
    offsets_key: str,
    default: OffsetSpec,
    allow_latest: bool,
    allow_earliest: bool,
) -> OffsetSpec:
    """Parse the three options of one end; the most specific present one wins (Kafka's order)."""
    candidates: list[OffsetSpec] = []
    if timestamp_key.lower() in opts:
        raw = opts[timestamp_key.lower()].strip()
        candidates.append(GlobalTimestamp(timestamp_key, _timestamp(timestamp_key, raw)))
    if by_timestamp_key.lower() in opts:
        table = partition_table(by_timestamp_key, opts[by_timestamp_key.lower()])
        for topic, parts in table.items():
            for p, ts in parts.items():
                if ts < 0:
                    raise InvalidConfigError(
                        f"{by_timestamp_key}: timestamp {ts} for {tp_name(topic, p)} "
                        "must be >= 0 (epoch milliseconds)"
                    )
        candidates.append(PartitionTimestamps(by_timestamp_key, table))
    if offsets_key.lower() in opts:
        raw = opts[offsets_key.lower()]
        candidates.append(_offsets(offsets_key, raw, allow_latest, allow_earliest))
    return candidates[0] if candidates else default


def _offsets(key: str, raw: str, allow_latest: bool, allow_earliest: bool) -> OffsetSpec:
    word = raw.strip().lower()
    if word == "earliest":
        if not allow_earliest:
            raise InvalidConfigError(f"{key}: 'earliest' is not allowed here; use 'latest' or JSON")
        return Earliest()
    if word == "latest":
        if not allow_latest:
            raise InvalidConfigError(f"{key}: 'latest' is not allowed for batch queries")
        return Latest()
    table = partition_table(key, raw)
    for topic, parts in table.items():
        for p, off in parts.items():
            where = tp_name(topic, p)
            if off == LATEST and not allow_latest:
                raise InvalidConfigError(
                    f"{key}: -1 (latest) for {where} is not allowed for batch queries"
                )
            if off == EARLIEST and not allow_earliest:
                raise InvalidConfigError(f"{key}: -2 (earliest) for {where} is not allowed")
            if off < EARLIEST:
                raise InvalidConfigError(
                    f"{key}: bad offset {off} for {where}; use an offset >= 0, "
                    "-2 (earliest) or -1 (latest)"
                )
    return PartitionOffsets(key, table)


def _timestamp(key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfigError(
            f"{key}: expected epoch milliseconds such as '1700000000000', got {raw!r}"
        ) from None
    if value < 0:
        raise InvalidConfigError(f"{key}: timestamp must be >= 0, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    word = raw.strip().lower()
    if word not in ("true", "false"):
        raise InvalidConfigError(f"{key}: expected 'true' or 'false', got {raw!r}")
    return word == "true"


def _positive_int(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidConfigError(f"{key}: expected a positive integer, got {raw!r}") from None
    if value <= 0:
        raise InvalidConfigError(f"{key}: expected a positive integer, got {value}")
    return value
