"""The decoded records of one batch as columns (:class:`DecodedRecords`), what
:mod:`embedlog.segment.decode` returns: numpy columns over the batch's records section, turned
into keys, values and :class:`~embedlog.records.Record` tuples by the compiled core when it runs
(``EMBEDLOG_PURE=1``: by C-level ``map``/``zip`` over the columns)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

import numpy as np
import numpy.typing as npt

from embedlog._frozen import builder
from embedlog.records import Record
from embedlog.segment import _native

__all__ = ["DecodedRecords", "new_decoded"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class DecodedRecords:
    """The records of one batch as columns over ``data`` (the decompressed records section).

    ``key_len``/``value_len`` are -1 for null. ``headers`` is None when no record has headers,
    else one tuple per record.
    """

    data: bytes
    offsets: npt.NDArray[np.int64]
    timestamps: npt.NDArray[np.int64]
    key_pos: npt.NDArray[np.int64]
    key_len: npt.NDArray[np.int32]
    value_pos: npt.NDArray[np.int64]
    value_len: npt.NDArray[np.int32]
    headers: list[tuple[tuple[str, bytes | None], ...]] | None

    def __len__(self) -> int:
        return len(self.offsets)

    def _slices(self, pos: I64, lens: npt.NDArray[np.int32]) -> list[bytes | None]:
        n = len(lens)
        if n == 0:
            return []
        core = _native.CORE
        if core is not None:
            return core.slices(self.data, _c64(pos), _c32(lens))
        d = self.data
        lo = int(lens.min())
        if lo >= 0:
            return [d[a:b] for a, b in zip(pos.tolist(), (pos + lens).tolist(), strict=True)]
        if int(lens.max()) < 0:
            return [None] * n
        ends = (pos + np.maximum(lens, 0)).tolist()
        nulls = (lens < 0).tolist()
        return [None if z else d[a:b] for a, b, z in zip(pos.tolist(), ends, nulls, strict=True)]

    def slice(self, lo: int, hi: int) -> DecodedRecords:
        """Records ``[lo, hi)`` (numpy views; ``data`` is shared, nothing is copied)."""
        return DecodedRecords(
            self.data,
            self.offsets[lo:hi],
            self.timestamps[lo:hi],
            self.key_pos[lo:hi],
            self.key_len[lo:hi],
            self.value_pos[lo:hi],
            self.value_len[lo:hi],
            None if self.headers is None else self.headers[lo:hi],
        )

    def keys(self) -> list[bytes | None]:
        return self._slices(self.key_pos, self.key_len)

    def values(self) -> list[bytes | None]:
        return self._slices(self.value_pos, self.value_len)

    def records(self, topic: str, partition: int, timestamp_type: int) -> list[Record]:
        """One :class:`~embedlog.records.Record` per row (built in C by the compiled core,
        which leaves records of atomic fields untracked by the garbage collector)."""
        core = _native.CORE
        if core is not None:
            return core.records(
                Record, topic, partition, timestamp_type, self.data, _c64(self.offsets),
                _c64(self.timestamps), _c64(self.key_pos), _c32(self.key_len),
                _c64(self.value_pos), _c32(self.value_len), self.headers,
            )  # fmt: skip
        n = len(self)
        return list(map(tuple.__new__, repeat(Record, n), zip(
            repeat(topic, n), repeat(partition, n), self.offsets.tolist(),
            self.timestamps.tolist(), repeat(timestamp_type, n), self.keys(), self.values(),
            repeat((), n) if self.headers is None else self.headers, strict=True,
        )))  # fmt: skip

    def key(self, i: int) -> bytes | None:
        n = int(self.key_len[i])
        p = int(self.key_pos[i])
        return None if n < 0 else self.data[p : p + n]

    def value(self, i: int) -> bytes | None:
        n = int(self.value_len[i])
        p = int(self.value_pos[i])
        return None if n < 0 else self.data[p : p + n]

    def header(self, i: int) -> tuple[tuple[str, bytes | None], ...]:
        if self.headers is None:
            if not -len(self) <= i < len(self):
                raise IndexError(i)
            return ()
        return self.headers[i]


new_decoded = builder(DecodedRecords)
"""``DecodedRecords(*fields)``, its slots set directly (one is built per batch decoded)."""


def _c64(a: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return np.ascontiguousarray(a, np.int64)


def _c32(a: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    return np.ascontiguousarray(a, np.int32)
