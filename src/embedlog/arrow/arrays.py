"""Arrow arrays shared by the two builders of :mod:`embedlog.arrow.columns` (numpy columns) and
:mod:`embedlog.arrow.sink` (the compiled core's buffers): the per-partition constants, the
``timestamp`` column (epoch milliseconds as ``timestamp[us]``, checked to fit), the
``timestampType`` column and the ``headers`` column."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from ..errors import UsageError

__all__ = ["constant_column", "headers_array", "timestamp_array", "types_array"]

_MAX_MILLIS = (2**63 - 1) // 1000
"""The largest epoch millisecond whose microseconds fit Arrow's int64 ``timestamp[us]``; a
stored timestamp may be up to ``2**63 - 1`` ms (year 292 million), and a negative one down to
``-2**63`` (Kafka never writes below -1)."""
_MIN_MILLIS = -(2**63 // 1000)

Headers = Sequence[tuple[tuple[str, bytes | None], ...]] | None


def constant_column(name: str, topic: str, partition: int, n: int) -> pa.Array:
    """``partition`` (int32) or ``topic`` (string) repeated over ``n`` rows."""
    if name == "partition":
        return _int32(np.full(n, partition, dtype=np.int32))
    if name == "topic":  # built from its buffers: pa.repeat imports pyarrow.compute (0.3 s)
        raw = topic.encode()
        if n * len(raw) >= 2**31:  # past string's int32 offsets: let pyarrow choose
            return pa.repeat(pa.scalar(topic, type=pa.string()), n)
        offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(raw * n)])
    raise ValueError(f"unknown column {name!r}")


def timestamp_array(millis: np.ndarray, arrow_type: pa.DataType,
                    offset_at: Callable[[int], int], where: str) -> pa.Array:
    """``timestamp[us, tz=UTC]`` of int64 epoch ``millis``; a timestamp whose microseconds pass
    int64 raises :class:`~embedlog.UsageError` naming the record (``where``, its offset from
    ``offset_at(row)``) instead of wrapping around, as Spark's Kafka source refuses it."""
    if len(millis) and (int(millis.max()) > _MAX_MILLIS or int(millis.min()) < _MIN_MILLIS):
        row = int(np.argmax((millis > _MAX_MILLIS) | (millis < _MIN_MILLIS)))
        raise UsageError(
            f"the record at offset {offset_at(row)} of {where} has timestamp {int(millis[row])} "
            "ms, beyond what Arrow's timestamp[us] holds: leave out the timestamp column "
            "(columns=...) to export it")
    micros = millis * 1000
    return pa.Array.from_buffers(arrow_type, len(micros), [None, pa.py_buffer(micros)])


def types_array(runs: Sequence[tuple[int, int]], n: int) -> pa.Array:
    """``timestampType`` (int32) of ``runs`` of ``(rows, type)`` holding ``n`` rows in all."""
    kinds = {t for _, t in runs}
    if len(kinds) == 1:  # the usual case: one type for the whole partition
        return _int32(np.full(n, kinds.pop(), dtype=np.int32))
    return _int32(np.concatenate([np.full(rows, t, dtype=np.int32) for rows, t in runs]))


def _int32(values: np.ndarray) -> pa.Array:
    """An int32 array without nulls over ``values``' buffer (``pa.array`` of a numpy array
    imports pandas on its first call: 0.3 s in a fresh Spark worker)."""
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def headers_array(n: int, heads: Headers, arrow_type: pa.DataType) -> pa.Array:
    """``list<struct<key, value>>`` of ``n`` records: null for a record without headers, as
    Spark's Kafka source does (``heads``: None when no record has any)."""
    if heads is None:
        return pa.nulls(n, type=arrow_type)
    lengths = np.fromiter((len(h) if h else 0 for h in heads), dtype=np.int32, count=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    keys = [k for h in heads if h for k, _ in h]
    values = [v for h in heads if h for _, v in h]
    struct_type = arrow_type.value_type
    items = pa.StructArray.from_arrays(
        [pa.array(keys, type=pa.string()), pa.array(values, type=pa.binary())],
        fields=list(struct_type),
    )
    mask = pa.array(lengths == 0)
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=arrow_type, mask=mask)
