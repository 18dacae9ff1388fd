"""The compiled core's Arrow columns: one partition's rows appended batch by batch into growing
Arrow buffers (``_ccodec.ArrowSink``), with no per-batch column arrays in between.

A stored batch that lies wholly in the range read, is uncompressed or decompresses, and is
read by the decoder's one-pass common case (well-formed records, none with headers) goes
from the scan's read buffer straight into the buffers (:meth:`SinkColumns.append_stored`: one
C pass walks, checks and copies its records). Anything else -- a batch cut by the range, one
with headers, a damaged one -- is decoded the general way (:func:`embedlog.reader.restrict`,
which raises its ``CorruptBatchError``) and its columns appended (:meth:`SinkColumns.push`).
Either way the rows are the ones :func:`~embedlog.arrow.columns.records_to_batch` builds
from the decoded columns, and :meth:`SinkColumns.emit` makes the same Arrow arrays of them.

Layout handed over by the sink (native endianness): ``offset`` and ``timestamp`` as int64
per row; ``key``/``value`` as Arrow ``binary``: ``rows + 1`` int32 offsets, the items back to
back, a validity bitmap (LSB first; ``None`` without nulls) and the null count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..records import RecordBatch
from ..segment import _native
from ..segment import format as fmt
from ..segment.decode import records_section
from .arrays import Headers, constant_column, headers_array, timestamp_array, types_array

__all__ = ["SinkColumns", "make_sink"]

class SinkColumns:
    """The rows of the Arrow batch being built, in the compiled core's sink; ``runs`` holds
    ``(rows, timestamp type, headers)`` per appended chunk, in order."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.runs: list[tuple[int, int, Headers]] = []
        self._constants: dict[str, tuple[int, pa.Array]] = {}
        """The last ``topic``/``partition`` column built, by name, with its length: batches of
        the same length share it (Arrow arrays are immutable)."""

    def append_stored(self, buf: bytes, position: int, header: fmt.BatchHeader,
                      room: int) -> int:
        """Append every record of the stored batch at ``position`` of ``buf`` when its records
        section holds at most ``room`` bytes and the one-pass decode reads it: the key and
        value bytes appended, or -1 (nothing appended) otherwise."""
        end = position + header.size
        if not header.attributes & fmt.COMPRESSION_MASK and end <= len(buf) \
                and buf.__class__ is bytes:  # records_section's answer, without the calls
            data, start = buf, position + fmt.HEADER_SIZE
        else:
            data, start, end = records_section(buf, position, header)
        if end - start > room:
            return -1
        n = header.records_count
        got: int = self.sink.append(
            data, start, end, n, header.base_offset, header.base_timestamp,
            header.max_timestamp, header.last_offset_delta,
            bool(header.attributes & fmt.TIMESTAMP_TYPE_MASK),
        )  # fmt: skip
        if got >= 0:
            self.runs.append((n, header.timestamp_type, None))
        return got

    def push(self, timestamp_type: int, records: RecordBatch) -> None:
        """Append decoded records (any slice of a batch)."""
        self.sink.extend(
            records.buffer, _c(records.offsets, np.int64), _c(records.timestamps, np.int64),
            _c(records.key_positions, np.int64), _c(records.key_lengths, np.int32),
            _c(records.value_positions, np.int64), _c(records.value_lengths, np.int32),
        )  # fmt: skip
        self.runs.append((len(records), timestamp_type, records.headers))

    def emit(self, topic: str, partition: int, columns: Sequence[str], schema: pa.Schema
             ) -> pa.RecordBatch:
        """The rows so far as one ``RecordBatch`` of ``schema``; the sink starts over."""
        rows, offsets, stamps, key, value = self.sink.finish()
        runs, self.runs = self.runs, []
        built = {"key": key, "value": value}
        arrays = []
        for i, name in enumerate(columns):
            arrow_type = schema.field(i).type
            if name == "offset":
                arrays.append(pa.Array.from_buffers(pa.int64(), rows,
                                                    [None, pa.py_buffer(offsets)]))
            elif name == "timestamp":
                arrays.append(timestamp_array(
                    np.frombuffer(stamps, np.int64), arrow_type,
                    lambda row: int(np.frombuffer(offsets, np.int64)[row]),
                    f"{topic}-{partition}"))
            elif name in built:
                arrays.append(_binary(rows, built[name]))
            elif name in ("topic", "partition"):
                arrays.append(self._constant(name, topic, partition, rows))
            else:
                arrays.append(_from_runs(name, runs, rows, arrow_type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _constant(self, name: str, topic: str, partition: int, rows: int) -> pa.Array:
        known = self._constants.get(name)
        if known is None or known[0] != rows:
            known = self._constants[name] = (rows, constant_column(name, topic, partition, rows))
        return known[1]


def make_sink(columns: Sequence[str], max_bytes: int) -> SinkColumns | None:
    """Sink columns for a batcher of ``columns``, or None without the compiled core (or when
    ``max_bytes`` lets a batch pass int32 offsets)."""
    core = _native.CORE
    if core is None or max_bytes >= 1 << 31:
        return None
    return SinkColumns(core.ArrowSink("key" in columns, "value" in columns))


def _c(a: Any, dtype: type[np.generic]) -> Any:
    return np.ascontiguousarray(a, dtype=dtype)


def _binary(rows: int, parts: tuple[bytearray, bytearray, bytearray | None, int]) -> pa.Array:
    offsets, data, valid, nulls = parts
    bitmap = None if valid is None else pa.py_buffer(valid)
    return pa.Array.from_buffers(pa.binary(), rows,
                                 [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _from_runs(name: str, runs: list[tuple[int, int, Headers]], rows: int,
               arrow_type: pa.DataType) -> pa.Array:
    if name == "timestampType":
        return types_array([(n, t) for n, t, _ in runs], rows)
    if name == "headers":
        parts = [headers_array(n, h, arrow_type) for n, _, h in runs]
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    raise ValueError(f"unknown column {name!r}")
