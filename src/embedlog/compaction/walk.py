"""The compiled record walks of a cleaning pass (``map_batches`` and ``filter_batches`` of
``_ckeymap``, in ``_cclean.h``), and what they need from Python.

Both read uncompressed data batches where the segment walk left them (its read buffer), with
no copy and no columns: the map phase digests each key and puts it in the map in the same walk,
the rewrite decides on each record and builds the shrunk batch in one C call. A batch the
compiled walk does not read (compressed, a record with headers, damage) is left to the numpy
path (:mod:`.columns`), which gives the same answer or raises the error; so does everything
when the compiled key map is not built or ``EMBEDLOG_PURE=1``. The numpy path is the
reference: the two give the same map and the same output bytes (``tests/test_compaction_walk.py``).

A *run* is a list of ``(buffer, position, header)`` of batches in one buffer; the C calls take
one run and a table of its batches (8 int64 per batch, the layout in ``_cclean.h``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ..segment import format as fmt
from . import _native
from .digest import Digester
from .offset_map import OffsetMap

__all__ = ["Outcome", "Run", "filter_run", "map_run", "readable", "runs"]

I64 = npt.NDArray[np.int64]
Run = list[tuple[bytes, int, fmt.BatchHeader]]

ENABLED = True
"""Whether the compiled walks are used (when built); tests and benches turn them off to compare
with the decoded columns path."""

FLAG_LOG_APPEND: Final = 1
FLAG_HAS_HORIZON: Final = 2
FLAG_EXPIRED: Final = 4

NOTHING_KEPT: Final = 0
COPIED: Final = 1
SHRUNK: Final = 2
REENCODE: Final = 3
NOT_READ: Final = 4


def readable(header: fmt.BatchHeader) -> bool:
    """Whether the compiled walk may take the batch: built, an uncompressed data batch."""
    return (
        ENABLED
        and _native.CORE is not None
        and not header.is_control
        and header.records_count > 0
        and header.attributes & fmt.COMPRESSION_MASK == 0
    )


def runs(items: Sequence[tuple[bytes, int, fmt.BatchHeader]]) -> Iterator[Run]:
    """``items`` cut into runs of consecutive batches in the same buffer."""
    run: Run = []
    for item in items:
        if run and run[-1][0] is not item[0]:
            yield run
            run = []
        run.append(item)
    if run:
        yield run


def _table(run: Run, now: int | None) -> I64:
    """The batch table of ``run`` (8 int64 per batch, the layout in ``_cclean.h``)."""
    rows = []
    for _, pos, h in run:
        flags = FLAG_LOG_APPEND if h.timestamp_type == 1 else 0
        if h.has_delete_horizon:
            flags |= FLAG_HAS_HORIZON
            if now is not None and now >= h.base_timestamp:  # the horizon has passed
                flags |= FLAG_EXPIRED
        rows.append((pos, h.size, h.records_count, h.base_offset, h.last_offset_delta,
                     h.base_timestamp, h.max_timestamp, flags))
    return np.array(rows, np.int64).reshape(-1)


def map_run(omap: OffsetMap, digester: Digester, run: Run, first_dirty: int) -> Run:
    """Put the keys of ``run`` at or past ``first_dirty`` in ``omap`` (the caller made room
    for all its records); returns the batches the compiled walk does not read (nothing of
    them put: the caller maps them from decoded columns)."""
    core = _native.CORE
    if core is None:
        return run
    records = sum(h.records_count for _, _, h in run)
    if records > omap.room:
        raise ValueError(f"{records} digests may not fit: room for {omap.room}")
    added, left = core.map_batches(run[0][0], _table(run, None), first_dirty, *digester.seeds,
                                   *omap.arrays())
    omap.size += added
    return [run[i] for i in left]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the compiled walk made of one batch: ``how`` (:data:`NOTHING_KEPT`,
    :data:`COPIED`, :data:`SHRUNK`, :data:`REENCODE`, or :data:`NOT_READ`: a batch it does not
    read, left to the decoded columns), the records kept, and the shrunk batch (SHRUNK) or one
    byte per record, bit 0 kept and bit 1 null value (REENCODE)."""

    how: int
    kept: int
    payload: bytes | None


def filter_run(
    run: Run, *, omap: OffsetMap, digester: Digester, survivors: I64, first_dirty: int,
    end_offset: int, now: int,
) -> tuple[list[Outcome], int]:
    """The outcome of each batch of ``run`` (all :data:`NOT_READ` when the compiled walk is
    not built) and the tombstones removed."""
    core = _native.CORE
    if core is None:
        return [Outcome(NOT_READ, 0, None)] * len(run), 0
    out = np.empty(2 * len(run), np.int64)
    payloads, gone = core.filter_batches(
        run[0][0], _table(run, now), first_dirty, end_offset,
        np.ascontiguousarray(survivors, np.int64), *omap.arrays(), omap.size, *digester.seeds,
        out,
    )  # fmt: skip
    how = out.tolist()
    return [Outcome(how[2 * i], how[2 * i + 1], p) for i, p in enumerate(payloads)], gone
