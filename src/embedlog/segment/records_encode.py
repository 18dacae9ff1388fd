"""The records section of a v2 batch in pure Python and numpy (no header, no I/O).

The reference encoder behind :func:`embedlog.segment.encode.encode_batch` (the compiled core
replaces it when built). Large batches are encoded with numpy: varint widths and positions as
arrays, written into zero-padded byte matrices and joined with one C-level ``b"".join``; up to
:data:`SCALAR_MAX_RECORDS` records a plain Python loop is cheaper. Both give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from embedlog.segment.header import INT32_MAX, encode_varint

__all__ = ["SCALAR_MAX_RECORDS", "encode_records_scalar", "encode_records_vectorised"]

I64 = npt.NDArray[np.int64]
Values = Sequence[bytes | None]
Headers = Sequence[Sequence[tuple[str, bytes | None]] | None]

_SLACK: Final = 9
"""Zero bytes after each row of the encoder's varint matrices (see :func:`_put_varints`)."""

SCALAR_MAX_RECORDS: Final = 8  # below this, numpy's per-call overhead exceeds a Python loop


def encode_records_scalar(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
    tsd: list[int],
    od: list[int],
) -> bytes:
    """The records section of a small batch, one record at a time."""
    n = len(values)
    if keys is not None and len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} values")
    if headers is not None and len(headers) != n:
        raise ValueError(f"{len(headers)} headers for {n} values")
    out = []
    for i in range(n):
        key = None if keys is None else keys[i]
        value = values[i]
        body = b"".join(
            (
                b"\x00",
                encode_varint(tsd[i]),
                encode_varint(od[i]),
                b"\x01" if key is None else encode_varint(len(key)) + bytes(key),
                b"\x01" if value is None else encode_varint(len(value)) + bytes(value),
                _encode_headers(headers[i] if headers is not None else None),
            )
        )
        out.append(encode_varint(len(body)))
        out.append(body)
    return b"".join(out)



# --------------------------------------------------------------------------- vector helpers


def _zigzag(x: I64) -> npt.NDArray[np.uint64]:
    z: npt.NDArray[np.uint64] = ((x << 1) ^ (x >> 63)).view(np.uint64)
    return z


def _widths(z: npt.NDArray[np.uint64]) -> I64:
    """Bytes of each varint (1-10)."""
    w = np.ones(z.shape, np.int64)
    if z.size:
        hi = int(z.max())
        t = 0x80
        while t <= hi:
            w += z >= t
            t <<= 7
    return w


_Z14 = np.arange(1 << 14, dtype=np.int64)
_VARINT2_BYTE0: Final = ((_Z14 & 0x7F) | np.where(_Z14 >= 0x80, 0x80, 0)).astype(np.uint8)
_VARINT2_BYTE1: Final = (_Z14 >> 7).astype(np.uint8)
"""First and second byte of the varint of each zigzag value below 2**14 (0 if one byte)."""
del _Z14


def _put_varints(out: npt.NDArray[np.uint8], pos: I64, z: npt.NDArray[np.uint64], w: I64) -> None:
    """Write varints ``z`` (already zigzagged) of widths ``w`` at positions ``pos`` of ``out``.

    Every varint is written as ``max(w)`` bytes, the ones past its width being 0x00, so no
    per-width selection is needed: callers write a row's fields left to right (a later field
    overwrites those zeros) and leave ``max(w) - 1`` bytes of slack at the end of each row.
    """
    wmax = int(w.max())
    if wmax == 1:
        out[pos] = z
        return
    if wmax == 2:  # z < 2**14: both bytes from tables
        out[pos] = _VARINT2_BYTE0[z]
        out[pos + 1] = _VARINT2_BYTE1[z]
        return
    for j in range(wmax):
        byte = (z >> np.uint64(7 * j)) & np.uint64(0x7F)
        if j + 1 < wmax:
            byte |= (w > j + 1).astype(np.uint64) << np.uint64(7)
        out[pos + j] = byte


def _rows_to_pieces(
    flat: npt.NDArray[np.uint8], width: int, row_w: I64, zero_end: I64 | None
) -> list[bytes]:
    """Split a row-major (n, width) byte matrix into n bytes objects of lengths ``row_w``.

    Rows are zero padded; numpy's fixed-width ``S`` dtype strips trailing zeros, which gives
    each row's bytes unless the row itself ends in 0x00: those rows (``zero_end`` = their
    indices) are sliced explicitly.
    """
    pieces: list[bytes] = flat.view(f"S{width}").tolist()
    if zero_end is not None and zero_end.size:
        raw = flat.tobytes()
        for i, wi in zip(zero_end.tolist(), row_w[zero_end].tolist(), strict=True):
            pieces[i] = raw[i * width : i * width + wi]
    return pieces


def _lengths(items: Sequence[bytes | None], n: int) -> tuple[I64, bool]:
    """(lengths with -1 for None, whether any None)."""
    try:
        return np.fromiter(map(len, items), np.int64, n), False  # type: ignore[arg-type]
    except TypeError:
        lens = np.fromiter((-1 if v is None else len(v) for v in items), np.int64, n)
        return lens, True


def _encode_headers(hs: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    if not hs:
        return b"\x00"
    parts = [encode_varint(len(hs))]
    for k, v in hs:
        if not isinstance(k, str):
            raise TypeError(f"header keys must be str, not {type(k).__name__}")
        kb = k.encode("utf-8")
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if v is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(v)))
            parts.append(bytes(v))
    return b"".join(parts)




def encode_records_vectorised(
    values: Values, keys: Values | None, headers: Headers | None, tsd: I64, od: I64
) -> bytes:
    """The records section of a batch with no per-record Python work except header sections."""
    n = len(values)
    vl, v_null = _lengths(values, n)
    if keys is None:
        kl, k_null, keyed = np.full(n, -1, np.int64), True, False
    else:
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if not isinstance(keys, list):
            keys = list(keys)
        kl, k_null = _lengths(keys, n)
        keyed = int(kl.max()) >= 0  # all-null keys are laid out like keys=None
    hsec: list[bytes] | None = None
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"{len(headers)} headers for {n} values")
        if any(headers):
            hsec = [_encode_headers(h) for h in headers]
    hl = np.ones(n, np.int64) if hsec is None else np.fromiter(map(len, hsec), np.int64, n)
    pieces_a, pieces_b = _varint_rows(tsd, od, kl, vl, hl, keyed, hsec is None)

    # ---- interleave: A, [key, B = valueLength], value, [header section]
    k = 4 if keyed else 2
    if hsec is not None:
        k += 1
    parts: list[bytes | None] = [None] * (k * n + (hsec is None))
    parts[0::k] = pieces_a if hsec is not None else [*pieces_a, b"\x00"]
    if keyed:
        parts[1::k] = keys  # type: ignore[assignment]
        parts[2::k] = pieces_b
        parts[3::k] = values
    else:
        parts[1::k] = values
    if hsec is not None:
        parts[k - 1 :: k] = hsec
    # None (null) items carry no bytes: drop them (filter also drops b"", harmlessly)
    chunks = filter(None, parts) if v_null or (keyed and k_null) else parts
    return b"".join(chunks)  # type: ignore[arg-type]


def _varint_rows(
    tsd: I64, od: I64, kl: I64, vl: I64, hl: I64, keyed: bool, no_headers: bool
) -> tuple[list[bytes], list[bytes]]:
    """The varint pieces of every record: the "A" rows (length, attributes, timestampDelta,
    offsetDelta, keyLength, + valueLength when unkeyed) and, when keyed, the "B" rows
    (valueLength). Each is written into a zero-padded matrix, then split into bytes. Without
    headers, row i > 0 starts with record i-1's headersCount byte 0x00."""
    n = len(tsd)
    z_tsd, z_od, z_kl, z_vl = _zigzag(tsd), _zigzag(od), _zigzag(kl), _zigzag(vl)
    w_tsd, w_od, w_kl, w_vl = _widths(z_tsd), _widths(z_od), _widths(z_kl), _widths(z_vl)
    body = 1 + w_tsd + w_od + w_kl + np.maximum(kl, 0) + w_vl + np.maximum(vl, 0) + hl
    if int(body.max()) > INT32_MAX:
        raise ValueError("record too large")
    z_body = _zigzag(body)
    w_body = _widths(z_body)
    lead: I64 | int = 0  # where the length varint starts in the row
    if no_headers:
        lead = np.ones(n, np.int64)
        lead[0] = 0
    w_body_end = lead + w_body
    c_tsd = w_body_end + 1
    c_od = c_tsd + w_tsd
    c_kl = c_od + w_od
    row_a = c_kl + w_kl
    if not keyed:
        c_vl = row_a
        row_a = row_a + w_vl
    wa = int(row_a.max()) + _SLACK
    base_a = np.arange(0, n * wa, wa, dtype=np.int64)
    mat_a = np.zeros(n * wa, np.uint8)
    _put_varints(mat_a, base_a + lead, z_body, w_body)
    if z_tsd.any():
        _put_varints(mat_a, base_a + c_tsd, z_tsd, w_tsd)
    _put_varints(mat_a, base_a + c_od, z_od, w_od)
    _put_varints(mat_a, base_a + c_kl, z_kl, w_kl)
    if not keyed:
        _put_varints(mat_a, base_a + c_vl, z_vl, w_vl)
    last_a = kl if keyed else vl
    zero_a = np.flatnonzero(last_a == 0) if int(last_a.min()) <= 0 else None
    pieces_a = _rows_to_pieces(mat_a, wa, row_a, zero_a)
    if not keyed:
        return pieces_a, []
    wb = int(w_vl.max()) + _SLACK
    mat_b = np.zeros(n * wb, np.uint8)
    _put_varints(mat_b, np.arange(0, n * wb, wb, dtype=np.int64), z_vl, w_vl)
    zero_b = np.flatnonzero(vl == 0) if int(vl.min()) <= 0 else None
    return pieces_a, _rows_to_pieces(mat_b, wb, w_vl, zero_b)
