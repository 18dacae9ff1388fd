"""Checks of the arguments of public calls: each returns the value in its canonical form or
raises an error of embedlog's own tree naming the argument.

Rules (the same everywhere):

* An **integer** is an ``int`` or any object with ``__index__`` (numpy's integer scalars);
  ``bool`` (and ``numpy.bool_``), floats, ``Decimal`` and strings are not integers, whatever
  their value. The result is a plain ``int``.
* **Offsets** and **timestamps** fit Kafka's signed 64-bit fields: ``0 <= x < 2**63``. A
  **partition** is ``0 <= x < 2**31``; whether it exists is the log's check.
* **Bytes** are ``bytes``, ``bytearray`` or ``memoryview`` (kept as given; a memoryview of
  another shape or item size becomes a flat view of its bytes, a released or non-contiguous one
  is refused); a ``str`` is refused with a hint to encode it.
* A **header** is a ``(str, bytes-like | None)`` pair.

Wrong types raise :class:`~embedlog.errors.InvalidArgumentError` (also a ``TypeError``), values
outside their range :class:`~embedlog.errors.ArgumentOutOfRangeError` (also a ``ValueError``),
offsets outside their range :class:`~embedlog.errors.OffsetOutOfRangeError`. Every check starts
with a ``type(x) is int`` (or ``bytes``) fast path: they run on every ``send``.
"""

from __future__ import annotations

import math
import operator
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from .errors import (
    ArgumentOutOfRangeError,
    InvalidArgumentError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnknownTopicError,
    UsageError,
)
from .naming import validate_topic
from .records import Header, TopicPartition
from .segment import _native

__all__ = [
    "INT64_LIMIT",
    "batch_args",
    "bytes_values",
    "cleaner_args",
    "compact_args",
    "config_count",
    "config_mapping",
    "consumer_options",
    "count",
    "headers",
    "integer",
    "iterable",
    "listed",
    "local_path",
    "mapping",
    "offset",
    "optional",
    "optional_bytes",
    "optional_offset",
    "partition",
    "partition_of",
    "read_range",
    "record",
    "seconds",
    "timestamp_ms",
    "timestamps_ms",
    "topic_names",
    "topic_partition",
]

_T = TypeVar("_T")
INT64_LIMIT: Final = 1 << 63
PARTITION_LIMIT: Final = 1 << 31
_CONSUMER_DURATIONS: Final = ("auto_commit_interval_ms", "session_timeout_ms",
                              "heartbeat_interval_ms", "consumer_timeout_ms")


def _type_name(value: object) -> str:
    return type(value).__name__


def integer(value: object, name: str) -> int:
    """``value`` as an ``int``; bools, floats, ``Decimal`` and strings are refused."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be an integer, not a bool ({value!r})")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidArgumentError(
            f"{name} must be an integer, not {_type_name(value)} ({value!r:.60})"
        ) from None


def _ranged(value: object, name: str, low: int, high: int) -> int:
    v = integer(value, name)
    if not low <= v < high:
        raise ArgumentOutOfRangeError(f"{name} must be in [{low}, {high}), not {v}")
    return v


def offset(value: object, name: str = "offset") -> int:
    """An offset: an integer in ``[0, 2**63)`` (:class:`OffsetOutOfRangeError` outside)."""
    v = value if type(value) is int else integer(value, name)
    if not 0 <= v < INT64_LIMIT:  # type: ignore[operator]
        raise OffsetOutOfRangeError(f"{name} must be in [0, 2**63), not {v}")
    return v  # type: ignore[return-value]


def optional_offset(value: object, name: str = "offset") -> int | None:
    return None if value is None else offset(value, name)


def partition(value: object, name: str = "partition") -> int:
    """A partition number: an integer in ``[0, 2**31)``."""
    if type(value) is int and 0 <= value < PARTITION_LIMIT:
        return value
    return _ranged(value, name, 0, PARTITION_LIMIT)


def partition_of(value: object, count: int, topic: str) -> int:
    """A partition of a topic with ``count`` partitions (:class:`UnknownTopicError` for an
    integer that is not one of them)."""
    p = value if type(value) is int else partition(value)
    if not 0 <= p < count:  # type: ignore[operator]
        raise UnknownTopicError(f"topic {topic!r} has partitions 0..{count - 1}, not {p!r}")
    return p  # type: ignore[return-value]


def timestamp_ms(value: object, name: str = "timestamp") -> int:
    """Epoch milliseconds: an integer in ``[0, 2**63)``; never coerced from str or float."""
    if type(value) is int and 0 <= value < INT64_LIMIT:
        return value
    return _ranged(value, name, 0, INT64_LIMIT)


def timestamps_ms(values: object, n: int, name: str = "timestamps") -> int | list[int]:
    """One timestamp for every record, or a sequence of ``n`` of them."""
    if type(values) is int or not isinstance(values, Iterable) or isinstance(
            values, str | bytes | bytearray | memoryview):
        return timestamp_ms(values, name)
    out = list(values)
    if len(out) != n:
        raise ArgumentOutOfRangeError(f"{name} has {len(out)} entries for {n} values")
    if _all_int64(out):
        return out
    return [timestamp_ms(t, f"{name}[{i}]") for i, t in enumerate(out)]


def count(value: object, name: str, minimum: int = 1) -> int:
    """A count such as ``max_records``: an integer in ``[minimum, 2**63)``."""
    if type(value) is int and minimum <= value < INT64_LIMIT:
        return value
    return _ranged(value, name, minimum, INT64_LIMIT)


def seconds(value: object, name: str) -> float:
    """A duration in seconds: a finite non-negative real (int or float, not bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds, not {_type_name(value)}")
    try:
        v = float(value)
    except OverflowError:  # an int beyond a float's range
        v = math.inf
    if not (math.isfinite(v) and v >= 0):
        raise ArgumentOutOfRangeError(f"{name} must be finite and >= 0, not {value!r}")
    return v


def optional_bytes(value: object, name: str) -> Any:
    """``None`` or a bytes-like value (returned as given; a memoryview as a flat byte view)."""
    if value is None or type(value) is bytes or isinstance(value, bytearray):
        return value
    if isinstance(value, memoryview):
        return _byte_view(value, name)
    if isinstance(value, bytes):
        return bytes(value)
    hint = " (encode it first, e.g. value.encode())" if isinstance(value, str) else ""
    raise InvalidArgumentError(
        f"{name} must be bytes, bytearray, memoryview or None, not {_type_name(value)}{hint}")


def _byte_view(value: memoryview, name: str) -> memoryview:
    """``value`` as a one-dimensional view of unsigned bytes, so that its length is its size in
    bytes whatever its shape or item format; a released or non-contiguous view is refused."""
    try:
        contiguous = value.c_contiguous
    except ValueError:
        raise InvalidArgumentError(f"{name} is a released memoryview") from None
    if not contiguous:
        raise InvalidArgumentError(
            f"{name} is a non-contiguous memoryview (copy it first, e.g. bytes(view))")
    if value.ndim == 1 and value.itemsize == 1:
        return value
    return value.cast("B") if value.nbytes else memoryview(b"")  # (cast refuses empty shapes)


def bytes_values(values: object, name: str) -> Sequence[Any]:
    """A sequence of ``None`` or bytes-like values (``append_batch`` values and keys)."""
    if isinstance(values, str | bytes | bytearray | memoryview) or not isinstance(
            values, Sequence):
        if not (hasattr(values, "__len__") and hasattr(values, "__getitem__")) or isinstance(
                values, str | bytes | bytearray | memoryview | dict):
            raise InvalidArgumentError(
                f"{name} must be a sequence of bytes or None, not {_type_name(values)}")
        values = list(values)  # type: ignore[call-overload]
    seq: Sequence[Any] = values  # type: ignore[assignment]
    if not _all_bytes(seq):
        checked = [optional_bytes(v, f"{name}[{i}]") for i, v in enumerate(seq)]
        if any(a is not b for a, b in zip(checked, seq, strict=True)):
            return checked  # a memoryview made a flat byte view
    return seq


def _all_bytes(seq: Sequence[Any]) -> bool:
    """Every item is None or exactly bytes (one C pass with the compiled core)."""
    core = _native.CORE
    if core is not None and (seq.__class__ is list or seq.__class__ is tuple):
        return core.first_not_bytes(seq) < 0  # type: ignore[arg-type]
    return all(v is None or v.__class__ is bytes for v in seq)


def _all_int64(seq: list[Any]) -> bool:
    """Every item is exactly an int in ``[0, 2**63)`` (one C pass with the compiled core)."""
    core = _native.CORE
    if core is not None:
        return core.first_not_int64(seq) < 0
    return all(type(t) is int for t in seq) and (not seq or (min(seq) >= 0
                                                             and max(seq) < INT64_LIMIT))


def headers(value: object, name: str = "headers") -> list[Header] | None:
    """``None`` or a list of ``(str key, bytes-like | None value)`` pairs."""
    if value is None:
        return None
    if isinstance(value, str | bytes | bytearray | memoryview | dict) or not isinstance(
            value, Iterable):
        raise InvalidArgumentError(
            f"{name} must be a list of (str, bytes | None) pairs, not {_type_name(value)}")
    out: list[Header] = []
    for i, item in enumerate(value):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidArgumentError(
                f"{name}[{i}] must be a (str, bytes | None) pair, not {item!r:.60}")
        k, v = item
        if type(k) is not str:
            raise InvalidArgumentError(f"{name}[{i}] key must be a str, not {_type_name(k)}")
        if not k.isascii():
            try:
                k.encode()
            except UnicodeEncodeError:
                raise ArgumentOutOfRangeError(f"{name}[{i}] key is not valid UTF-8") from None
        out.append((k, optional_bytes(v, f"{name}[{i}] value")))
    return out or None


def topic_partition(value: object, name: str = "partition") -> TopicPartition:
    """A ``(topic, partition)`` pair as a :class:`TopicPartition` with a valid topic name
    (whether the partition exists is the log's check)."""
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidArgumentError(
            f"{name} must be a TopicPartition (topic, partition), not {value!r:.60}")
    topic, part = value
    validate_topic(topic)
    if type(value) is TopicPartition and type(part) is int and 0 <= part < PARTITION_LIMIT:
        return value
    return TopicPartition(topic, partition(part, f"{name} partition"))


def iterable(value: Any, name: str, of: str = "TopicPartition") -> Iterable[Any]:
    """``value`` if it is an iterable other than a str or bytes."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be an iterable of {of}, not {_type_name(value)}")
    return value  # type: ignore[no-any-return]


def local_path(value: object, name: str = "path") -> str:
    """A local path: a ``str`` (or an ``os.PathLike`` giving one) without NUL characters."""
    try:
        text = os.fspath(value)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            f"{name} must be a str or os.PathLike, not {_type_name(value)}") from None
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be a str path, not {_type_name(text)}")
    if "\x00" in text:
        raise ArgumentOutOfRangeError(f"{name} must not contain a NUL character: {text!r:.200}")
    return text


def listed(value: Any, name: str = "partitions", of: str = "TopicPartition") -> list[Any]:
    """:func:`iterable`'s ``value`` as a list (a copy for another thread to read)."""
    return list(iterable(value, name, of))


def mapping(value: Any, name: str = "timestamps", of: str = "TopicPartition to ms"
            ) -> dict[Any, Any]:
    """``value`` copied to a dict if it is a ``Mapping``, else :class:`InvalidArgumentError`."""
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{name} must map {of}, not {_type_name(value)}")
    return dict(value)


def topic_names(value: object, name: str = "topics") -> list[str]:
    """One topic name or an iterable of them: the valid names, sorted, without repeats."""
    items = [value] if isinstance(value, str) else list(iterable(value, name, "topic names"))
    for t in items:
        validate_topic(t)
    return sorted(set(items))


def consumer_options(auto_offset_reset: object, isolation_level: object,
                     max_poll_records: object, *durations_ms: object, group: object = None
                     ) -> None:
    """A consumer's choices, ``max_poll_records`` and ms durations (in the order of
    :data:`_CONSUMER_DURATIONS`; only the last may be ``None``), as
    :class:`~embedlog.errors.InvalidConfigError`. With a ``group`` the heartbeat interval must
    be below the session timeout (kafka-python's rule): a member heartbeats only that often, so
    the others would evict it while it polls."""
    try:
        count(max_poll_records, "max_poll_records")
        ms = {name: seconds(value, name)
              for name, value in zip(_CONSUMER_DURATIONS, durations_ms, strict=True)
              if value is not None or name != "consumer_timeout_ms"}
    except UsageError as exc:
        raise InvalidConfigError(str(exc)) from None
    if group is not None and ms["heartbeat_interval_ms"] >= ms["session_timeout_ms"]:
        raise InvalidConfigError(
            f"heartbeat_interval_ms ({durations_ms[2]!r}) must be lower than session_timeout_ms "
            f"({durations_ms[1]!r}): a member heartbeats that often, and is evicted after it")
    if auto_offset_reset not in ("earliest", "latest", "none"):
        raise InvalidConfigError(
            f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError("isolation_level must be read_uncommitted or read_committed, "
                                 f"not {isolation_level!r}")


def optional(check: Callable[[object, str], _T], value: object, name: str) -> _T | None:
    """``None`` or ``check(value, name)``."""
    return None if value is None else check(value, name)


def config_count(value: object, name: str) -> int:
    """A positive count in a configuration (:class:`InvalidConfigError` otherwise)."""
    if type(value) is int and value >= 1:
        return value
    try:
        return count(value, name)
    except UsageError as exc:
        raise InvalidConfigError(str(exc)) from None


def config_mapping(value: object, *, required: bool = False) -> Any:
    """A topic configuration: a mapping (or ``None`` unless ``required``)."""
    if (value is None and not required) or isinstance(value, Mapping):
        return value
    raise InvalidConfigError(f"config must be a mapping, not {_type_name(value)}")


def batch_args(
    values: object, keys: object, per_value: object
) -> tuple[Sequence[bytes | None], Sequence[bytes | None] | None,
           Sequence[Sequence[Header] | None] | None]:
    """``append_batch``'s values, keys and headers, checked: sequences of the same length."""
    vals = bytes_values(values, "values")
    ks = None if keys is None else bytes_values(keys, "keys")
    if ks is not None and len(ks) != len(vals):
        raise UsageError("keys and values have different lengths")
    if per_value is None:
        return vals, ks, None
    if not isinstance(per_value, Sequence) or isinstance(per_value, str | bytes):
        raise InvalidArgumentError(
            f"headers must be a sequence (one entry per value), not {_type_name(per_value)}")
    if len(per_value) != len(vals):
        raise UsageError("headers and values have different lengths")
    return vals, ks, [headers(h, f"headers[{i}]") for i, h in enumerate(per_value)]


def record(value: object, key: object, hdrs: object) -> tuple[Any, Any, list[Header] | None]:
    """One record's value, key and headers."""
    return optional_bytes(value, "value"), optional_bytes(key, "key"), headers(hdrs)


def read_range(start: object, end: object, max_records: object
               ) -> tuple[int | None, int | None, int | None]:
    """A read's optional start and end offsets and record count."""
    if (start.__class__ is int and end is None and max_records.__class__ is int
            and 0 <= start < INT64_LIMIT and 1 <= max_records < INT64_LIMIT):  # type: ignore[operator]
        return start, None, max_records  # a point read: what offset() and count() give  # type: ignore[return-value]
    return (None if start is None else offset(start, "offset"),
            None if end is None else offset(end, "end_offset"),
            None if max_records is None else count(max_records, "max_records"))


def compact_args(now_ms: object, map_bytes: object) -> tuple[int | None, int | None]:
    """``compact``'s optional clock and key-map size."""
    return optional(timestamp_ms, now_ms, "now_ms"), optional(count, map_bytes, "map_bytes")


def cleaner_args(interval_s: object, map_bytes: object) -> tuple[float, int | None]:
    """``start_cleaner``'s interval (at most ``threading.TIMEOUT_MAX``, the longest wait the
    cleaner thread can make) and optional key-map size."""
    interval = seconds(interval_s, "interval_s")
    if interval > threading.TIMEOUT_MAX:
        raise ArgumentOutOfRangeError(
            f"interval_s must be at most {threading.TIMEOUT_MAX:g}, not {interval_s!r}")
    return interval, optional(count, map_bytes, "map_bytes")
