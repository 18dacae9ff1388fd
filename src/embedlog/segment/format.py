"""Kafka's v2 record batch (message format "magic 2"): the one import for the whole codec.

This module only re-exports; the codec lives in three modules with one-way imports:

* :mod:`embedlog.segment.header` -- the layout (documented there), :class:`BatchHeader`, the
  file walk, the CRC check, scalar varints, control records;
* :mod:`embedlog.segment.encode` -- :class:`BatchAttributes` and :func:`encode_batch`
  (imports ``header``);
* :mod:`embedlog.segment.decode` -- :class:`DecodedRecords` and :func:`decode_records`
  (imports ``header``).

The batch encoder here keeps the keyword form of its parameters (each batch attribute its own
keyword) for existing callers; new code passes a :class:`BatchAttributes` to
:func:`embedlog.segment.encode.encode_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from embedlog.segment import encode as _encode
from embedlog.segment.codecs import Compression
from embedlog.segment.decode import DecodedRecords, decode_records, decode_run
from embedlog.segment.encode import PLAIN, BatchAttributes, join_ranges, rebuild_batch
from embedlog.segment.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    FIELDS,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    control_record,
    decode_control_record,
    decode_varint,
    encode_varint,
    iter_batches,
    next_batch,
    parse_header,
    set_base_offset,
    verify_crc,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "COMPRESSION_MASK",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CONTROL_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_MASK",
    "FIELDS",
    "HEADER",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MIN_BATCH_LENGTH",
    "PLAIN",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "BatchAttributes",
    "BatchHeader",
    "Compression",
    "DecodedRecords",
    "control_record",
    "decode_control_record",
    "decode_records",
    "decode_run",
    "decode_varint",
    "encode_batch",
    "encode_varint",
    "iter_batches",
    "join_ranges",
    "next_batch",
    "parse_header",
    "rebuild_batch",
    "set_base_offset",
    "verify_crc",
]


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    timestamps: int | Sequence[int] | npt.NDArray[np.int64],
    base_offset: int = 0,
    compression: int = Compression.NONE,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    leader_epoch: int = 0,
    offset_deltas: Sequence[int] | npt.NDArray[np.int64] | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
    max_timestamp: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """:func:`embedlog.segment.encode.encode_batch` with the batch attributes as keywords
    (the fields of :class:`BatchAttributes`); same bytes, same errors."""
    attrs = BatchAttributes(
        Compression(compression), compression_level, timestamp_type, is_transactional,
        is_control, producer_id, producer_epoch, base_sequence, base_offset, leader_epoch,
        delete_horizon_ms,
    )  # fmt: skip
    return _encode.encode_batch(
        values, keys=keys, headers=headers, timestamps=timestamps, attrs=attrs,
        offset_deltas=offset_deltas, last_offset_delta=last_offset_delta,
        max_timestamp=max_timestamp,
    )  # fmt: skip
