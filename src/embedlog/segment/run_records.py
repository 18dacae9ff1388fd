"""The records of a run of a batch's records, as :class:`~embedlog.records.Record` tuples: the
last step of a point read answered from :mod:`.point_memo` (a run read with one ``pread``).

:func:`run_records` equals ``decode_run(data, n, header, position).records(topic, partition,
header.timestamp_type)`` (:func:`.decode.decode_run`) record for record and error for error.
The compiled core (``_ccodec.run_records``) builds the records in one pass over the run when
it holds ``n`` well-formed records without headers and nothing else; any other run (a damaged
one, records with headers) and the pure codec (``EMBEDLOG_PURE=1``) take the decoder, whose
checks and errors are the reference.
"""

from __future__ import annotations

from embedlog.records import Record
from embedlog.segment import _native
from embedlog.segment.decode import decode_run
from embedlog.segment.header import TIMESTAMP_TYPE_MASK, BatchHeader

__all__ = ["run_records"]


def run_records(data: bytes, n: int, header: BatchHeader, position: int, topic: str,
                partition: int) -> list[Record]:
    """The ``n`` records of ``data``, a run of consecutive whole records of the uncompressed
    batch ``header`` (at byte ``position`` of its file, named in errors), as ``Record`` tuples
    of ``topic``/``partition``."""
    core = _native.CORE
    ttype = (header.attributes & TIMESTAMP_TYPE_MASK) >> 3  # header.timestamp_type
    if core is not None and n > 0:
        found: list[Record] | None = core.run_records(
            Record, topic, partition, ttype, data, n, header.base_offset,
            header.base_timestamp, header.max_timestamp, header.last_offset_delta, ttype == 1)
        if found is not None:
            return found
    return decode_run(data, n, header, position).records(topic, partition, ttype)
