"""Decoded record batches -> ``pyarrow.RecordBatch`` columns, without a Python loop per row.

:class:`ArrowBatcher` collects the records of successive Kafka batches of one partition and
emits Arrow batches of about ``batch_rows`` rows (spark.md: 16-64k rows is the fast range; 256k
is twice as slow) and :data:`MAX_BATCH_BYTES` of keys and values.

With the compiled core the rows go into its Arrow buffers (:mod:`.sink`): a scan that uses
:meth:`ArrowBatcher.decode` as its decode step has a stored batch wholly in range appended
there in one C pass, with no decoded columns at all; anything else is decoded and its columns
appended (:meth:`ArrowBatcher.add`). Without it (the reference, giving identical arrays),
columns are built from the decoder's numpy arrays (:func:`records_to_batch`): ``offset`` and
``timestamp`` from views, ``key``/``value`` one gather each per Arrow batch over the chunks'
buffers joined once (see :class:`_Joined` and :func:`_binary`; ``_ccodec.gather`` when the
core is there but the sink is not used), ``topic``/``partition`` constants. Only the columns of
the requested schema are built, so a subset schema skips the key/value copies. ``headers`` is
the one column built from Python objects, and only for records that have headers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .._batch import record_batch
from ..reader import restrict
from ..records import RecordBatch
from ..segment import _native
from ..segment import format as fmt
from .arrays import constant_column, headers_array, timestamp_array, types_array
from .sink import make_sink

__all__ = ["APPENDED", "MAX_BATCH_BYTES", "Appended", "ArrowBatcher", "records_to_batch"]

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Key+value bytes per Arrow batch: keeps big records (up to ``max.message.bytes`` each) from
making huge batches, and every ``binary`` column far below Arrow's 2 GiB int32-offset limit."""


class ArrowBatcher:
    """Accumulates one partition's decoded batches and yields ``RecordBatch``es of
    ``schema`` (whose field order and names follow ``columns``) of at most ``batch_rows`` rows
    and about :data:`MAX_BATCH_BYTES` of keys and values."""

    def __init__(
        self,
        topic: str,
        partition: int,
        columns: Sequence[str],
        schema: pa.Schema,
        batch_rows: int,
        max_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.columns = tuple(columns)
        self.schema = schema
        self.batch_rows = batch_rows
        self.max_bytes = max_bytes
        self._pending: list[tuple[int, RecordBatch]] = []
        self._rows = 0
        self._bytes = 0
        self._sink = make_sink(self.columns, max_bytes)

    def decode(self, buf: bytes, position: int, header: fmt.BatchHeader, offset: int,
               stop: int, wanted: int | None) -> fmt.DecodedRecords | Appended:
        """The scan's :data:`embedlog.reader.Decode` for :meth:`take`: a stored batch wholly in
        ``[offset, stop)`` that fits the Arrow batch being built goes straight into the
        compiled core's columns (:mod:`.sink`; :data:`APPENDED` is returned); any other is
        decoded and restricted as every read does (:func:`embedlog.reader.restrict`)."""
        sink = self._sink
        if sink is not None and header.base_offset >= offset and header.last_offset < stop \
                and header.records_count <= self.batch_rows - self._rows:
            got = sink.append_stored(buf, position, header, self.max_bytes - self._bytes)
            if got >= 0:
                self._rows += header.records_count
                self._bytes += got
                return APPENDED
        return restrict(buf, position, header, offset, stop, wanted)

    def take(self, header: fmt.BatchHeader, found: fmt.DecodedRecords | Appended
             ) -> Iterable[pa.RecordBatch]:
        """Queue what :meth:`decode` made of the batch ``header``; the full Arrow batches now
        available."""
        if found is APPENDED:
            if self._rows >= self.batch_rows or self._bytes >= self.max_bytes:
                return (self._emit(),)
            return ()
        assert isinstance(found, fmt.DecodedRecords)
        return self.add(header.timestamp_type,
                        record_batch(self.topic, self.partition, header, found))

    def add(self, timestamp_type: int, records: RecordBatch) -> Iterator[pa.RecordBatch]:
        """Queue one Kafka batch's records; yield every full Arrow batch now available."""
        n = len(records)
        if n <= self.batch_rows - self._rows and \
                self._bytes + len(records.buffer) <= self.max_bytes:
            # The whole batch fits (its buffer bounds its keys and values): no per-record sizes.
            self._push(timestamp_type, records)
            self._rows += n
            self._bytes += _item_bytes(records)
            if self._rows >= self.batch_rows or self._bytes >= self.max_bytes:
                yield self._emit()
            return
        sizes = np.cumsum(np.maximum(records.key_lengths, 0) + np.maximum(records.value_lengths, 0),
                          dtype=np.int64)
        start = 0
        while start < n:
            before = int(sizes[start - 1]) if start else 0
            take = min(n - start, self.batch_rows - self._rows)
            room = self.max_bytes - self._bytes
            if int(sizes[start + take - 1]) - before > room:
                fit = int(np.searchsorted(sizes[start : start + take], before + room, "right"))
                if fit == 0 and self._rows:
                    yield self._emit()
                    continue
                take = max(fit, 1)
            part = records if take == n else records.slice(start, start + take)
            self._push(timestamp_type, part)
            self._rows += take
            self._bytes += int(sizes[start + take - 1]) - before
            start += take
            if self._rows >= self.batch_rows or self._bytes >= self.max_bytes:
                yield self._emit()

    def flush(self) -> Iterator[pa.RecordBatch]:
        """Yield what is left (nothing if empty)."""
        if self._rows:
            yield self._emit()

    def _push(self, timestamp_type: int, records: RecordBatch) -> None:
        if self._sink is None:
            self._pending.append((timestamp_type, records))
        else:
            self._sink.push(timestamp_type, records)

    def _emit(self) -> pa.RecordBatch:
        if self._sink is None:
            batch = records_to_batch(
                self._pending, self.topic, self.partition, self.columns, self.schema
            )
        else:
            batch = self._sink.emit(self.topic, self.partition, self.columns, self.schema)
        self._pending, self._rows, self._bytes = [], 0, 0
        return batch


class Appended:
    """:meth:`ArrowBatcher.decode`'s answer for a batch appended to the compiled core's columns
    (one record for the scan: it is yielded)."""

    __slots__ = ()

    def __len__(self) -> int:
        return 1


APPENDED = Appended()


def _item_bytes(records: RecordBatch) -> int:
    """The bytes of ``records``' keys and values (nulls count 0)."""
    kl, vl = records.key_lengths, records.value_lengths
    total = int(kl.sum(dtype=np.int64)) + int(vl.sum(dtype=np.int64))
    if len(kl) and (int(kl.min()) < 0 or int(vl.min()) < 0):  # nulls (-1) count 0
        total = int(np.maximum(kl, 0).sum(dtype=np.int64) + np.maximum(vl, 0).sum(dtype=np.int64))
    return total


def records_to_batch(
    chunks: Sequence[tuple[int, RecordBatch]],
    topic: str,
    partition: int,
    columns: Sequence[str],
    schema: pa.Schema,
) -> pa.RecordBatch:
    """One ``RecordBatch`` from ``(timestamp_type, RecordBatch)`` chunks of one partition."""
    n = sum(len(r) for _, r in chunks)
    joined = _Joined(chunks)
    arrays = [_column(name, chunks, topic, partition, n, schema.field(i).type, joined)
              for i, name in enumerate(columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _Joined:
    """The chunks' ``data`` buffers as one (built on first use and shared by ``key`` and
    ``value``), so that each binary column is one gather per Arrow batch rather than one per
    Kafka batch plus a concatenation. Consecutive slices of one decoded batch share its buffer,
    which is then taken once. ``None`` when the joined buffer would pass int32 offsets."""

    def __init__(self, chunks: Sequence[tuple[int, RecordBatch]]) -> None:
        self._chunks = chunks
        self._done = False
        self.data: bytes | None = None
        self.bases: list[int] = []

    def build(self) -> bytes | None:
        if not self._done:
            self._done = True
            buffers: list[bytes] = []
            base = 0
            for _, r in self._chunks:
                if not buffers or r.buffer is not buffers[-1]:
                    if buffers:
                        base += len(buffers[-1])
                    buffers.append(r.buffer)
                self.bases.append(base)
            if base + len(buffers[-1]) < _MAX_JOINED:
                self.data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
        return self.data


_MAX_JOINED = 1 << 31


def _column(
    name: str,
    chunks: Sequence[tuple[int, RecordBatch]],
    topic: str,
    partition: int,
    n: int,
    arrow_type: pa.DataType,
    joined: _Joined,
) -> pa.Array:
    if name == "offset":
        return pa.array(_concat([r.offsets for _, r in chunks], np.int64), type=pa.int64())
    if name == "timestamp":
        millis = np.ascontiguousarray(_concat([r.timestamps for _, r in chunks], np.int64))
        return timestamp_array(millis, arrow_type, lambda row: int(
            _concat([r.offsets for _, r in chunks], np.int64)[row]), f"{topic}-{partition}")
    if name == "timestampType":
        return types_array([(len(r), t) for t, r in chunks], n)
    if name in ("key", "value"):
        return _binary_column(chunks, name, joined)
    if name == "headers":
        return _concat_arrays([headers_array(len(r), r.headers, arrow_type) for _, r in chunks],
                              arrow_type)
    return constant_column(name, topic, partition, n)


def _binary_column(chunks: Sequence[tuple[int, RecordBatch]], which: str, joined: _Joined
                   ) -> pa.Array:
    compiled = _compiled_binary(chunks, which)
    if compiled is not None:
        return compiled
    data = joined.build()
    if data is None:  # too big to join: one gather per chunk
        return _concat_arrays([_binary(r.buffer, *_pos_len(r, which)) for _, r in chunks],
                              pa.binary())
    parts = [_pos_len(r, which) for _, r in chunks]
    pos = _concat([p + base if base else p for (p, _), base in zip(parts, joined.bases,
                                                                    strict=True)], np.int64)
    return _binary(data, pos, _concat([ln for _, ln in parts], np.int32))


def _pos_len(records: RecordBatch, which: str) -> tuple[Any, Any]:
    if which == "key":
        pos, lens = records.key_positions, records.key_lengths
    else:
        pos, lens = records.value_positions, records.value_lengths
    return (np.ascontiguousarray(pos, dtype=np.int64),
            np.ascontiguousarray(lens, dtype=np.int32))


def _compiled_binary(chunks: Sequence[tuple[int, RecordBatch]], which: str) -> pa.Array | None:
    """The column built by the compiled core's ``gather`` (one C pass copying the items out of
    the chunks' buffers): a null item is an empty one marked invalid, exactly what
    :func:`_binary` builds. ``None`` without the core or past 2 GiB of items."""
    core = _native.CORE
    if core is None:
        return None
    sources = [(r.buffer, *_pos_len(r, which)) for _, r in chunks]
    try:
        offsets, data, nulls = core.gather(sources)
    except OverflowError:
        return None
    lens = [lens for _, _, lens in sources]
    n = len(offsets) // 4 - 1
    bitmap = None
    if nulls:
        valid = np.concatenate(lens) >= 0 if len(lens) > 1 else lens[0] >= 0
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _concat(parts: list[Any], dtype: type[np.generic]) -> Any:
    return parts[0].astype(dtype, copy=False) if len(parts) == 1 else np.concatenate(parts)


def _concat_arrays(parts: list[pa.Array], arrow_type: pa.DataType) -> pa.Array:
    if len(parts) == 1:
        return parts[0]
    return pa.concat_arrays(parts) if parts else pa.array([], type=arrow_type)


def _binary(data: bytes, pos: Any, lens: Any) -> pa.Array:
    """Items ``data[pos[i] : pos[i] + lens[i]]`` (null where ``lens[i] < 0``) as an Arrow
    ``binary`` array.

    Items are in increasing position order, so ``data`` viewed as a ``2n``-item binary array --
    item, gap to the next item, item, ... -- is valid Arrow with no copy (its int32 offsets
    buffer is computed with numpy); taking the even items is one C++ memcpy pass (about 10x
    faster than a numpy fancy-index gather).
    """
    n = len(lens)
    if n == 0:
        return pa.array([], type=pa.binary())
    valid = lens >= 0
    nulls = n - int(np.count_nonzero(valid))
    if nulls == 0:
        starts, ends = pos, pos + lens
    else:  # a null item becomes an empty one at the previous item's end
        ends = pos + np.maximum(lens, 0)
        prev = np.maximum.accumulate(np.where(valid, ends, 0))
        prev = np.concatenate((np.zeros(1, dtype=prev.dtype), prev[:-1]))
        starts, ends = np.where(valid, pos, prev), np.where(valid, ends, prev)
    bounds = np.empty(2 * n + 1, dtype=np.int32)
    bounds[0 : 2 * n : 2] = starts
    bounds[1 : 2 * n : 2] = ends
    bounds[2 * n] = ends[-1]
    bitmap = None
    if nulls:
        wide_valid = np.ones(2 * n, dtype=bool)
        wide_valid[0::2] = valid
        bitmap = pa.py_buffer(np.packbits(wide_valid, bitorder="little"))
    wide = pa.Array.from_buffers(
        pa.binary(), 2 * n, [bitmap, pa.py_buffer(bounds), pa.py_buffer(data)],
        null_count=nulls,
    )
    return wide.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
