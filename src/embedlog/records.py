"""Value types handed to and returned by the public API (immutable, slotted)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from .segment import _native

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_TIMESTAMP_TYPE",
    "Header",
    "Record",
    "RecordBatch",
    "RecordMetadata",
    "TopicPartition",
]

Header = tuple[str, "bytes | None"]
"""A record header: a UTF-8 key and a value that may be ``None``."""

NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    """A partition of a topic; hashable, so it keys dicts like Kafka clients' ``TopicPartition``."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """What an append returns: where the record landed and the timestamp it was stored with."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class Record(NamedTuple):
    """One stored record.

    ``timestamp`` is epoch milliseconds; ``timestamp_type`` is 0 (CreateTime) or 1
    (LogAppendTime). ``key`` and ``value`` are ``None`` when null; a keyed record with a ``None``
    value is a tombstone. ``headers`` is a tuple of ``(str, bytes | None)``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class RecordBatch:
    """The records of one stored batch as columns (what :meth:`embedlog.Log.read_batches`
    yields): the batch's header fields, then numpy columns over ``buffer``.

    Record ``i`` has offset ``offsets[i]`` and timestamp ``timestamps[i]`` (epoch ms; with
    ``timestamp_type`` 1, LogAppendTime, every record carries ``max_timestamp``). Its key is
    ``buffer[key_positions[i] : key_positions[i] + key_lengths[i]]``, or ``None`` when
    ``key_lengths[i]`` is -1; the value likewise. ``headers`` is ``None`` when no record of the
    batch has headers, else one tuple of :data:`Header` per record. The columns are views that
    share ``buffer`` (the batch's decompressed records section): nothing is copied until a key
    or value is asked for, which is what makes an Arrow export cheap.

    The header fields describe the whole stored batch: ``base_offset``/``last_offset`` may lie
    outside ``offsets`` when a read started or ended inside the batch.
    """

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    timestamp_type: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    compression: str
    """Codec of the stored batch: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``."""
    buffer: bytes
    offsets: npt.NDArray[np.int64]
    timestamps: npt.NDArray[np.int64]
    key_positions: npt.NDArray[np.int64]
    key_lengths: npt.NDArray[np.int32]
    value_positions: npt.NDArray[np.int64]
    value_lengths: npt.NDArray[np.int32]
    headers: Sequence[tuple[Header, ...]] | None
    is_control: bool = False
    """A transaction marker's batch (only from ``read_batches(..., control=True)``)."""

    def __len__(self) -> int:
        return len(self.offsets)

    def key(self, i: int) -> bytes | None:
        n, p = int(self.key_lengths[i]), int(self.key_positions[i])
        return None if n < 0 else self.buffer[p : p + n]

    def value(self, i: int) -> bytes | None:
        n, p = int(self.value_lengths[i]), int(self.value_positions[i])
        return None if n < 0 else self.buffer[p : p + n]

    def keys(self) -> list[bytes | None]:
        """Every record's key (``None`` when null)."""
        return _slices(self.buffer, self.key_positions, self.key_lengths)

    def values(self) -> list[bytes | None]:
        """Every record's value (``None`` when null)."""
        return _slices(self.buffer, self.value_positions, self.value_lengths)

    def header(self, i: int) -> tuple[Header, ...]:
        """Record ``i``'s headers (``()`` when it has none)."""
        if self.headers is None:
            if not -len(self) <= i < len(self):
                raise IndexError(i)
            return ()
        return self.headers[i]

    def slice(self, lo: int, hi: int) -> RecordBatch:
        """Records ``[lo, hi)`` of this batch (views; ``buffer`` is shared)."""
        return RecordBatch(
            self.topic, self.partition, self.base_offset, self.last_offset,
            self.timestamp_type, self.max_timestamp, self.producer_id, self.producer_epoch,
            self.base_sequence, self.is_transactional, self.compression, self.buffer,
            self.offsets[lo:hi], self.timestamps[lo:hi], self.key_positions[lo:hi],
            self.key_lengths[lo:hi], self.value_positions[lo:hi], self.value_lengths[lo:hi],
            None if self.headers is None else self.headers[lo:hi], self.is_control,
        )

    def records(self) -> Iterator[Record]:
        """The batch's records as :class:`Record` tuples (built in C by the compiled core)."""
        core = _native.CORE
        if core is not None and self.buffer.__class__ is bytes and (
                self.headers is None or self.headers.__class__ is list):
            return iter(core.records(
                Record, self.topic, self.partition, self.timestamp_type, self.buffer,
                _c(self.offsets, np.int64), _c(self.timestamps, np.int64),
                _c(self.key_positions, np.int64), _c(self.key_lengths, np.int32),
                _c(self.value_positions, np.int64), _c(self.value_lengths, np.int32),
                self.headers,  # type: ignore[arg-type]
            ))  # fmt: skip
        return (Record(self.topic, self.partition, offset, ts, self.timestamp_type,
                       self.key(i), self.value(i), self.header(i))
                for i, (offset, ts) in enumerate(zip(self.offsets.tolist(),
                                                     self.timestamps.tolist(), strict=True)))


def _c(column: npt.NDArray[np.generic], dtype: type[np.generic]) -> npt.NDArray[np.generic]:
    return np.ascontiguousarray(column, dtype)


def _slices(buffer: bytes, positions: npt.NDArray[np.int64], lengths: npt.NDArray[np.int32]
            ) -> list[bytes | None]:
    """``buffer[p : p + n]`` for each position and length, ``None`` where the length is -1
    (one C pass with the compiled core; else the bounds are computed as whole columns and the
    slicing is one comprehension)."""
    if len(lengths) == 0:
        return []
    core = _native.CORE
    if core is not None and buffer.__class__ is bytes:
        return core.slices(buffer, _c(positions, np.int64), _c(lengths, np.int32))
    if int(lengths.min()) >= 0:
        ends = (positions + lengths).tolist()
        return [buffer[a:b] for a, b in zip(positions.tolist(), ends, strict=True)]
    if int(lengths.max()) < 0:
        return [None] * len(lengths)
    ends = (positions + np.maximum(lengths, 0)).tolist()
    nulls = (lengths < 0).tolist()
    return [None if z else buffer[a:b]
            for a, b, z in zip(positions.tolist(), ends, nulls, strict=True)]
