"""The codec's decoded columns as the public :class:`~embedlog.records.RecordBatch`."""

from __future__ import annotations

from ._frozen import builder
from .records import RecordBatch
from .segment import format as fmt
from .segment.codecs import Compression
from .segment.header import COMPRESSION_MASK

__all__ = ["record_batch"]

_new = builder(RecordBatch)  # one per stored batch read: its slots set directly
_CODEC_NAMES = {c.value: c.name.lower() for c in Compression}


def record_batch(topic: str, partition: int, header: fmt.BatchHeader,
                 records: fmt.DecodedRecords) -> RecordBatch:
    """``records`` of the batch ``header`` of ``topic``-``partition`` (no copy of columns)."""
    codec = _CODEC_NAMES.get(header.attributes & COMPRESSION_MASK)
    return _new(
        topic, partition, header.base_offset, header.last_offset, header.timestamp_type,
        header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
        header.is_transactional, header.compression.name.lower() if codec is None else codec,
        records.data, records.offsets, records.timestamps, records.key_pos, records.key_len,
        records.value_pos, records.value_len, records.headers, header.is_control,
    )
