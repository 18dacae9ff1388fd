"""A segment's ``.txnindex`` file (layout: :mod:`embedlog.index.txn_index`).

The file holds no descriptor between uses: ABORT markers are rare, so an entry is appended by
opening, writing, fsyncing and closing the file, and a reader reads it whole. Rules:

* the writer creates an **empty** file with every new segment, so a segment with the file has
  *every* ABORT marker it holds indexed; a segment without one (a Kafka folder, which creates
  the file only for its first entry, or a folder written before embedlog kept the index) is
  read by scanning its markers instead;
* an entry is written (and made durable) **before** its marker is appended to the ``.log``: a
  reader may see the entry before the marker, never the marker without the entry; a crash in
  between leaves an entry whose marker is missing, which recovery removes (it rebuilds the
  index of every segment it validates, :mod:`embedlog.loader`);
* a rewrite (recovery, compaction) replaces the file atomically
  (:func:`embedlog._io.write_atomic`);
* a file that is not a regular file, or whose bytes fail :func:`decode_entries`, is unusable:
  readers fall back to the scan, recovery rebuilds it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from .. import _io
from ..errors import CorruptionError
from ..index.txn_index import ENTRY_SIZE, TxnIndexEntry, decode_entries, encode_entries

__all__ = ["TxnIndexFile"]

log = logging.getLogger(__name__)


class TxnIndexFile:
    """The ``.txnindex`` at ``path`` of the segment based at ``base_offset``."""

    __slots__ = ("base_offset", "path")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset

    def create_empty(self) -> None:
        """Create the file, empty, unless it exists (a new segment; the caller fsyncs the
        directory)."""
        if not os.path.lexists(self.path):
            _io.close(_io.open_file(self.path, os.O_WRONLY | os.O_CREAT))

    def entries(self, log_size: int) -> list[TxnIndexEntry] | None:
        """The entries, or ``None`` when the file is missing or unusable (logged). A segment
        of ``log_size`` bytes holds at most one marker per 61 bytes, which bounds the read."""
        limit = (log_size // 61 + 1) * ENTRY_SIZE
        try:
            data = _io.read_regular(self.path, limit + 1)
            if data is None:
                return None
            if len(data) > limit:
                raise CorruptionError(f"transaction index larger than {limit} bytes",
                                      path=self.path)
            return decode_entries(data, path=self.path, base_offset=self.base_offset)
        except CorruptionError as exc:
            log.warning("ignoring %s; scanning the markers instead", exc)
            return None

    def append(self, entry: TxnIndexEntry) -> None:
        """Append ``entry`` durably (before its marker reaches the ``.log``)."""
        fd = _io.open_file(self.path, os.O_WRONLY | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            _io.pwrite(fd, encode_entries([entry]), size - size % ENTRY_SIZE)
            _io.fsync(fd)
        finally:
            _io.close(fd)

    def rewrite(self, entries: Sequence[TxnIndexEntry]) -> None:
        """Replace the file with ``entries`` (atomically, durably)."""
        _io.write_atomic(self.path, encode_entries(entries))

    def unlink(self) -> None:
        if os.path.lexists(self.path):
            _io.unlink(self.path)
