"""Topic configuration under Kafka's topic config names, with Kafka's defaults.

A :class:`TopicConfig` is built from a mapping of Kafka names (``{"segment.bytes": 16384}``);
unknown names and out-of-range values raise :class:`~embedlog.errors.InvalidConfigError`.
The config is persisted in the log directory's ``embedlog.json`` and restored on open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidConfigError

__all__ = ["CLEANUP_POLICIES", "COMPRESSION_TYPES", "TopicConfig", "UpkeepConfig"]

LONG_MAX = 2**63 - 1
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _kafka(name: str, minimum: int | float | None = None, **kw: Any) -> Any:
    return field(metadata={"kafka": name, "min": minimum}, **kw)


@dataclass(frozen=True)
class TopicConfig:
    """Per-topic settings. Each field names its Kafka config and default."""

    segment_bytes: int = _kafka("segment.bytes", 14, default=1024**3)
    """Roll to a new segment before a batch would make the active one exceed this (1 GiB)."""
    segment_ms: int = _kafka("segment.ms", 1, default=7 * 24 * 3600 * 1000)
    """Roll when the active segment's records span more than this many ms (7 days); a compacted
    topic rolls after ``max.compaction.lag.ms`` when that is shorter (:attr:`roll_ms`)."""
    retention_ms: int = _kafka("retention.ms", -1, default=7 * 24 * 3600 * 1000)
    """Delete closed segments whose newest record is older than this (7 days); -1 = keep."""
    retention_bytes: int = _kafka("retention.bytes", -1, default=-1)
    """Delete oldest closed segments while the partition is larger than this; -1 = no limit."""
    cleanup_policy: str = _kafka("cleanup.policy", default="delete")
    """``delete``, ``compact`` or ``compact,delete`` (a list, as in Kafka: ``delete,compact``
    is taken and stored as ``compact,delete``)."""
    index_interval_bytes: int = _kafka("index.interval.bytes", 0, default=4096)
    """Bytes appended between two sparse index entries (4 KiB)."""
    segment_index_bytes: int = _kafka("segment.index.bytes", 12, default=10 * 1024 * 1024)
    """Preallocated size of each index file (10 MiB)."""
    max_message_bytes: int = _kafka("max.message.bytes", 64, default=1048588)
    """Largest record batch accepted (1 MiB + 12 bytes)."""
    message_timestamp_type: str = _kafka("message.timestamp.type", default="CreateTime")
    """``CreateTime`` (the producer's) or ``LogAppendTime`` (stamped on append)."""
    compression_type: str = _kafka("compression.type", default="producer")
    """``producer`` keeps the caller's codec; otherwise every batch uses this codec."""
    min_cleanable_dirty_ratio: float = _kafka("min.cleanable.dirty.ratio", 0.0, default=0.5)
    """Compact when dirty bytes / total bytes exceed this."""
    min_compaction_lag_ms: int = _kafka("min.compaction.lag.ms", 0, default=0)
    """Records younger than this are not compacted."""
    max_compaction_lag_ms: int = _kafka("max.compaction.lag.ms", 1, default=LONG_MAX)
    """Records older than this make the partition eligible for compaction whatever its ratio;
    on a compacted topic the active segment also rolls once its records span this long."""
    delete_retention_ms: int = _kafka("delete.retention.ms", 0, default=24 * 3600 * 1000)
    """How long tombstones survive after compaction reached them (1 day)."""
    remote_storage_enable: bool = _kafka("remote.storage.enable", default=False)
    """Tiered storage (KIP-405): copy each sealed segment to the log's remote URI
    (:mod:`embedlog.tiering`). Not with ``cleanup.policy=compact``."""
    local_retention_ms: int = _kafka("local.retention.ms", -2, default=-2)
    """With ``remote.storage.enable``: how long a segment copied to the remote stays in the
    local folder too; -2 = ``retention.ms``, -1 = keep (at most ``retention.ms``)."""
    local_retention_bytes: int = _kafka("local.retention.bytes", -2, default=-2)
    """With ``remote.storage.enable``: the local size kept; -2 = ``retention.bytes``."""
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False,
                                     metadata={"kafka": None, "min": None})
    """The Kafka names the user set, even to their default value (kept and shown, as Kafka's
    describe shows explicitly set values)."""

    def __post_init__(self) -> None:
        for f in _settings():
            value = getattr(self, f.name)
            name, minimum = f.metadata["kafka"], f.metadata["min"]
            if minimum is not None and value < minimum:
                raise InvalidConfigError(f"{name} must be >= {minimum}, got {value}")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise InvalidConfigError(
                f"cleanup.policy must be one of {', '.join(CLEANUP_POLICIES)}; "
                f"got {self.cleanup_policy!r}"
            )
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigError(
                f"compression.type must be one of {', '.join(COMPRESSION_TYPES)}; "
                f"got {self.compression_type!r}"
            )
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidConfigError(
                "message.timestamp.type must be CreateTime or LogAppendTime; "
                f"got {self.message_timestamp_type!r}"
            )
        if self.min_cleanable_dirty_ratio > 1:
            raise InvalidConfigError("min.cleanable.dirty.ratio must be <= 1")
        self._check_tiering()

    def _check_tiering(self) -> None:
        """Kafka's rules: no tiered compacted topic; the local retention within the total."""
        if not isinstance(self.remote_storage_enable, bool):
            raise InvalidConfigError("remote.storage.enable must be true or false")
        if self.remote_storage_enable and self.compact:
            raise InvalidConfigError(
                "remote.storage.enable=true needs cleanup.policy=delete (a compacted topic "
                "cannot be tiered)")
        for local, total, name in ((self.local_retention_ms, self.retention_ms, "ms"),
                                   (self.local_retention_bytes, self.retention_bytes, "bytes")):
            if local >= 0 and total >= 0 and local > total:
                raise InvalidConfigError(
                    f"local.retention.{name} ({local}) must be <= retention.{name} ({total})")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """Kafka's ``maxSegmentMs``: the span of record timestamps after which the active
        segment rolls. A compacted topic rolls after ``max.compaction.lag.ms`` when that is
        shorter than ``segment.ms``, so the records it bounds leave the active segment (which
        is never cleaned) in time to be compacted."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def check_change(self, before: TopicConfig | None = None) -> None:
        """Kafka's ``LogConfig.validateValues``, run when a topic is created or altered from
        ``before`` (a config already stored is loaded as it is): ``min.compaction.lag.ms``
        must not exceed ``max.compaction.lag.ms``, and ``remote.storage.enable`` once on
        stays on (Kafka: "disabling remote storage ... is not supported" without deleting the
        remote data; here the topic is deleted for that)."""
        if before is not None and before.remote_storage_enable and not self.remote_storage_enable:
            raise InvalidConfigError(
                "remote.storage.enable cannot be turned off once on: the remote holds segments "
                "of the topic (delete the topic to remove them)")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must be <= "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")

    @property
    def local_retention(self) -> tuple[int, int]:
        """``(ms, bytes)`` a tiered segment stays local: -2 resolved to the total retention."""
        ms = self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms
        size = (self.retention_bytes if self.local_retention_bytes == -2
                else self.local_retention_bytes)
        return ms, size

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any] | None = None) -> TopicConfig:
        """Build from Kafka config names; values may be strings (as on a command line)."""
        by_name = {f.metadata["kafka"]: f for f in _settings()}
        kwargs: dict[str, Any] = {"explicit": frozenset((values or {}).keys())}
        for key, raw in (values or {}).items():
            f = by_name.get(key)
            if f is None:
                raise InvalidConfigError(
                    f"unknown topic config {key!r}; known: {', '.join(sorted(by_name))}"
                )
            kwargs[f.name] = _coerce(key, f.type, raw)
        if "cleanup_policy" in kwargs:
            kwargs["cleanup_policy"] = _policy(kwargs["cleanup_policy"])
        return cls(**kwargs)

    def to_kafka(self) -> dict[str, Any]:
        """Every setting under its Kafka name."""
        return {f.metadata["kafka"]: getattr(self, f.name) for f in _settings()}

    def overrides(self) -> dict[str, Any]:
        """The settings the user set explicitly or that differ from Kafka's defaults: what
        ``embedlog.json`` stores and ``topics describe`` shows."""
        default = _DEFAULTS
        return {k: v for k, v in self.to_kafka().items()
                if k in self.explicit or default[k] != v}

    def merged(self, values: Mapping[str, Any]) -> TopicConfig:
        """A copy with some Kafka-named settings changed (they count as explicitly set); a
        ``None`` value resets that setting to Kafka's default."""
        merged = self.overrides()
        for key, value in values.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return TopicConfig.from_kafka(merged)


def _settings() -> tuple[dataclasses.Field[Any], ...]:
    """The fields that are Kafka settings (not the bookkeeping ``explicit``)."""
    return tuple(f for f in dataclasses.fields(TopicConfig) if f.metadata["kafka"] is not None)


_DEFAULTS = TopicConfig().to_kafka()


def _policy(value: str) -> str:
    """``cleanup.policy`` is a list in Kafka: ``delete,compact`` names the same policy as
    ``compact,delete``, written in that one order (anything else is left for the check)."""
    items = set(value.split(","))
    return ",".join(sorted(items)) if items and items <= {"compact", "delete"} else value


def _coerce(key: str, type_name: Any, raw: Any) -> Any:
    kind = type_name if isinstance(type_name, str) else getattr(type_name, "__name__", "")
    if kind == "bool":
        return _boolean(key, raw)
    try:
        if kind == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw)
        if kind == "float":
            return float(raw)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key} must be a {kind}, got {raw!r}") from None
    if not isinstance(raw, str):
        raise InvalidConfigError(f"{key} must be a string, got {raw!r}")
    return raw.replace(" ", "")


_UPKEEP_NAMES = {
    "log.initial.delay.ms": "initial_delay_ms",
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "log.cleaner.enable": "cleaner_enable",
    "log.cleaner.backoff.ms": "cleaner_backoff_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "remote.log.manager.task.interval.ms": "remote_log_manager_task_interval_ms",
}


@dataclass(frozen=True)
class UpkeepConfig:
    """The writer's background upkeep, under Kafka's broker config names and defaults
    (``embedlog.open(path, upkeep={...})``; ``upkeep=False`` turns it off)."""

    initial_delay_ms: int = 30 * 1000
    """``log.initial.delay.ms``: the wait after the open before the first retention run and
    the first cleaner round (30 s)."""
    retention_check_interval_ms: int = 5 * 60 * 1000
    """``log.retention.check.interval.ms``: how often retention runs (5 minutes)."""
    cleaner_enable: bool = True
    """``log.cleaner.enable``: run the log cleaner on compacted topics."""
    cleaner_backoff_ms: int = 15 * 1000
    """``log.cleaner.backoff.ms``: the pause between two cleaner rounds (15 s)."""
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    """``transactional.id.expiration.ms``: a transactional id with no transaction open and no
    activity for this long is forgotten (7 days; applied whenever the transaction coordinator
    is used, with or without the upkeep thread)."""
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    """``producer.id.expiration.ms``: a partition forgets the sequence state of a producer that
    wrote nothing to it for this long (1 day; applied as batches are appended, with or without
    the upkeep thread)."""
    remote_log_manager_task_interval_ms: int = 30 * 1000
    """``remote.log.manager.task.interval.ms``: how often a tiered log uploads its sealed
    segments and applies the local retention (30 s; :mod:`embedlog.tiering`)."""

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any]) -> UpkeepConfig:
        """Build from Kafka broker config names; values may be strings."""
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            name = _UPKEEP_NAMES.get(key)
            if name is None:
                raise InvalidConfigError(
                    f"unknown upkeep config {key!r}; known: {', '.join(sorted(_UPKEEP_NAMES))}"
                )
            if name == "cleaner_enable":
                kwargs[name] = _boolean(key, raw)
                continue
            value = _coerce(key, "int", raw)
            minimum = 0 if name == "initial_delay_ms" else 1
            if value < minimum:
                raise InvalidConfigError(f"{key} must be >= {minimum}, got {value}")
            kwargs[name] = value
        return cls(**kwargs)


def _boolean(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise InvalidConfigError(f"{key} must be true or false, got {raw!r}")
