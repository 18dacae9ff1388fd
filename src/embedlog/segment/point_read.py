"""A segment's reads of the records :mod:`.point_memo` remembers the ends of: a point read
(``Log.read(..., max_records=k)``) of a batch read before reads only its records.

A point read of a remembered batch (:meth:`PointReads.remembered_records`) takes, in order:

1. the segment pinned in the descriptor cache (:mod:`embedlog._handles`), so its ``.log``
   descriptor is neither closed nor reused while it is read;
2. the remembered batch holding the offset among those of the file identity (device, inode,
   size, modification time) this segment object last remembered or found
   (:func:`.point_memo.find_latest`);
3. one compiled call (``_ccodec.point_run``): ``fstat`` of the descriptor, compared with that
   identity; only if they are equal, one ``pread`` of the records' bytes and the records built
   in one pass (or the bytes handed back for :func:`.run_records.run_records`, whose decoder
   reports damage). Without the compiled core (``EMBEDLOG_PURE=1``) its pure twin
   :func:`point_run` checks and reads the same way and :func:`.run_records.run_records`
   decodes: the same records and errors.

When the file's identity is not the one remembered last (a live segment appended to, a file
changed in place), or the file is filled on demand (:mod:`.ondemand`, whose filler must run
between the identity and the read), the read takes the identity first and looks the batch up
under it (:func:`.point_memo.find`) through :meth:`PointReads.remembered_span`: an entry is
only ever used for the file identity it was made under, whichever way the read goes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .._handles import CACHE
from ..records import Record
from . import _native, point_memo
from .crc_memo import Identity, identity
from .decode import decode_run
from .decoded import DecodedRecords
from .files import SegmentFiles
from .header import BatchHeader
from .run_records import run_records

__all__ = ["PointReads", "deferred", "point_run"]

_T = TypeVar("_T")


def deferred(fn: Callable[..., Iterable[_T]], args: tuple[Any, ...]) -> Iterator[_T]:
    """An iterator over ``fn(*args)``, ``fn`` called at the first ``next()``: the pure twin of
    ``_ccodec.deferred`` (the same items and exceptions, without a generator frame to create
    and resume), through which a point read hands out its records."""
    yield from fn(*args)


def point_run(fd: int, ident: Identity, start: int, length: int) -> bytes | None:
    """The ``length`` bytes at ``start`` of the open file ``fd`` if its identity is ``ident``
    now (one ``fstat``, then one ``pread``); None if it is not, or if the read comes up
    short. ``_ccodec.point_run``'s pure twin (which also builds the records)."""
    if identity(fd) != ident:
        return None
    data = os.pread(fd, length, start)
    return data if len(data) == length else None


class PointReads(SegmentFiles):
    """The point reads of a segment (see the module notes); ``_point_owner`` is the segment
    object's :func:`.point_memo.new_owner` number."""

    _point_owner: int

    def remembered_run(self, offset: int, stop: int, wanted: int
                       ) -> tuple[BatchHeader, DecodedRecords] | None:
        """:meth:`remembered_span`, its records decoded (:func:`~.decode.decode_run`)."""
        run = self.remembered_span(offset, stop, wanted)
        if run is None:
            return None
        header, data, n, position = run
        return header, decode_run(data, n, header, position)

    def remembered_span(self, offset: int, stop: int, wanted: int
                        ) -> tuple[BatchHeader, bytes, int, int] | None:
        """Up to ``wanted`` records from ``offset`` (below ``stop``) of a batch whose record
        ends :mod:`.point_memo` holds for this segment file as it is now, read with one
        ``pread`` of their bytes: ``(header, run, count, position)``, the run holding the
        ``count`` records (:func:`~.decode.decode_run`) of the batch at ``position``. None
        when no such batch is remembered, or when it holds fewer than ``wanted`` records from
        ``offset`` and ends below ``stop`` (the caller reads the batch whole). A segment with
        nothing remembered costs one set lookup."""
        owner = self._point_owner
        if self.writable or not point_memo.holds(owner):
            return None
        CACHE.pin(self)  # as @pinned does (inlined: a point read's every microsecond counts)
        opened = self._rfd is None
        try:
            fd = self._read_fd()
            run = None if fd is None else point_memo.find((owner, identity(fd)), offset, stop,
                                                          wanted)
            if run is None:
                return None
            entry, start, length, count = run
            data = self.pread_pinned(start, length)
        finally:
            # The .log open already: nothing was opened or closed.
            CACHE.unpin(self, self._descriptors() if opened else None)
        return None if len(data) != length else (entry.header, data, count, entry.position)

    def remembered_records(self, offset: int, stop: int, wanted: int, ceiling: int | None,
                           whole: bool, topic: str, partition: int) -> list[Record] | None:
        """The records of :meth:`remembered_span`'s run as ``Record`` tuples of
        ``topic``/``partition``; None also when the run holds fewer than ``wanted`` records
        unless ``whole`` (the read stops there), or when the batch reaches ``ceiling`` (the
        next segment's base: damage the scan reports). First from the batch of the file
        identity remembered or found last (:func:`.point_memo.find_latest`), in one compiled
        call when the file still has that identity; any other read goes through
        :meth:`remembered_span` (see the module notes)."""
        owner = self._point_owner
        if self.writable or not point_memo.holds(owner):
            return None
        run = None if self._filler is not None else point_memo.find_latest(
            owner, offset, stop, wanted)
        if run is not None and _takes(run[3], run[0].last, wanted, ceiling, whole):
            entry, start, length, n = run
            CACHE.pin(self)  # as @pinned does (inlined: a point read's every microsecond counts)
            opened = self._rfd is None
            try:
                fd = self._rfd
                if fd is None and (fd := self._read_fd()) is None:
                    return None
                core = _native.CORE
                got = point_run(fd, entry.key[1], start, length) if core is None else (
                    core.point_run(fd, entry.key[1], start, length, n, entry.fields, Record,
                                   topic, partition))
            finally:
                CACHE.unpin(self, self._descriptors() if opened else None)
            if isinstance(got, list):  # the file has the identity the entry was made under
                return got
            if got is not None:  # the bytes: decoded (damage reported) by run_records
                return run_records(got, n, entry.header, entry.position, topic, partition)
        span = self.remembered_span(offset, stop, wanted)
        if span is None or not _takes(span[2], span[0].last_offset, wanted, ceiling, whole):
            return None
        header, data, n, position = span
        return run_records(data, n, header, position, topic, partition)


def _takes(n: int, last: int, wanted: int, ceiling: int | None, whole: bool) -> bool:
    """Whether a run of ``n`` records of a batch ending at offset ``last`` answers a read of
    ``wanted`` (fewer only when the read stops there: ``whole``) below ``ceiling``."""
    return (n >= wanted or whole) and (ceiling is None or last < ceiling)
