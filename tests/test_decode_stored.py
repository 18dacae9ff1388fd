"""A stored batch decoded whole by one call of the compiled core (``_ccodec.decode_stored``:
the records section copied out of the read buffer and decoded in one pass) against the
pure-Python reference and against the compiled core's general path.

Batches are built by hypothesis (every codec, keys, nulls, headers, LogAppendTime, offset
gaps), damaged (bit flips, truncation, inserted and deleted bytes, lying varints, lying record
counts and last offset deltas) and placed anywhere in a larger read buffer, between other
bytes, as a scan finds them. Every implementation must give the same columns, records and
buffer, or raise the same exception with the same message (which names the batch's position).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedlog.errors import CorruptBatchError
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression
from helpers import both_cores, codec_core
from test_codec_core import _damaged_batch, batches

try:
    from embedlog.segment import _ccodec
except ImportError:  # pragma: no cover - the pure-only install
    pytest.skip("the compiled codec core is not built", allow_module_level=True)


def _columns(buf: bytes | memoryview, pos: int) -> Any:
    """Every record of the batch at ``pos`` of ``buf``, as a scan's read decodes it."""
    header = fmt.parse_header(buf, pos)
    r = fmt.decode_records(buf, pos, header)
    return (r.data, r.offsets.tolist(), r.timestamps.tolist(), r.key_pos.tolist(),
            r.key_len.tolist(), r.value_pos.tolist(), r.value_len.tolist(), r.keys(),
            r.values(), r.headers, r.records("t", 1, header.timestamp_type))


@given(batches(), st.integers(0, 5), st.integers(0, 10**6), st.binary(min_size=1, max_size=12),
       st.integers(-2, 3), st.integers(-1, 3), st.binary(max_size=90), st.binary(max_size=90),
       st.integers(0, 3), st.booleans())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_stored_batch_decodes_identically_anywhere_in_a_read(
    args: dict[str, Any], how: int, at: int, blob: bytes, count_extra: int, lod_extra: int,
    before: bytes, after: bytes, cut: int, plain: bool,
) -> None:
    if plain:  # the case the one call takes: an uncompressed batch
        args = {**args, "compression": Compression.NONE}
    batch = _damaged_batch(args, how, at, blob, count_extra, lod_extra)
    read = before + batch + after
    if cut:  # the read ends inside the batch (its header still whole)
        read = read[: max(len(before) + fmt.HEADER_SIZE, len(before) + len(batch) - cut)]
    pos = len(before)
    c, py = both_cores(_ccodec, lambda: _columns(read, pos))
    assert c == py
    with codec_core(_ccodec):  # a memoryview takes the general path of the compiled core
        try:
            general = _columns(memoryview(read), pos)
        except CorruptBatchError as e:
            general = ("raised", type(e), str(e))
    assert c == general


def _cols(n: int) -> tuple[Any, Any]:
    return np.empty((4, n), np.int64), np.empty((2, n), np.int32)


def test_decode_stored_refuses_a_batch_outside_the_buffer() -> None:
    batch = fmt.encode_batch([b"a", b"bc"], keys=[None, b"k"], timestamps=7, base_offset=3)
    header = fmt.parse_header(batch, 0)
    fields = (header.base_offset, header.base_timestamp, header.max_timestamp,
              header.last_offset_delta, False)
    read = b"\xff" * 5 + batch
    data, headers = _ccodec.decode_stored(read, 5, header.size, 2, *fields, *_cols(2))
    assert data == batch[fmt.HEADER_SIZE :] and headers is None
    for pos, size in [(-1, header.size), (6, header.size), (5, fmt.HEADER_SIZE - 1),
                      (len(read) + 1, fmt.HEADER_SIZE), (5, 2**62), (2**62, header.size)]:
        with pytest.raises(ValueError):
            _ccodec.decode_stored(read, pos, size, 2, *fields, *_cols(2))
    with pytest.raises(ValueError):  # columns of the wrong length
        _ccodec.decode_stored(read, 5, header.size, 2, *fields, *_cols(3))
    with pytest.raises(ValueError):  # more records than the section can hold
        _ccodec.decode_stored(read, 5, header.size, 10**6, *fields, *_cols(10**6))


class _Counting:
    """The compiled core, counting its ``decode_stored`` calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(_ccodec, name)

    def decode_stored(self, *args: Any) -> Any:
        self.calls += 1
        return _ccodec.decode_stored(*args)


def test_a_whole_uncompressed_batch_is_decoded_by_one_call() -> None:
    batch = fmt.encode_batch([b"v" * 30] * 4, keys=[b"k", None, b"", b"kk"], timestamps=9)
    read = b"\0" * 3 + batch + fmt.encode_batch([b"w"], timestamps=1, compression=Compression.GZIP)
    counting = _Counting()
    with codec_core(counting):
        whole = _columns(read, 3)
        header = fmt.parse_header(read, 3)
        fmt.decode_records(read, 3, header, first=1)  # a point read's range: the general path
        fmt.decode_records(read, 3 + len(batch), fmt.parse_header(read, 3 + len(batch)))
    assert counting.calls == 1
    c, py = both_cores(_ccodec, lambda: _columns(read, 3))
    assert whole == c == py and whole[8] == [b"v" * 30] * 4
