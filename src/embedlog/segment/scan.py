"""Walking one segment's ``.log`` batch by batch: the scan half of
:class:`~embedlog.segment.segment.Segment`.

:meth:`SegmentScan.batches` is the one walk every reader of a segment uses -- reads, tail walks,
index rebuilds, recovery and ``embedlog verify`` -- so the framing, CRC and offset rules
(:mod:`.rules`) are applied the same way everywhere. It reads in chunks (a first small one, so
a point lookup does not read much; then at most 256 KiB, so that what one step reads is still
in the core's L2 cache when its batches are checked and decoded; up to 1 MiB, two at a time,
once batches larger than a chunk turn up), verifies each batch's CRC
once per sealed file (:mod:`.crc_memo`), and names the file and byte position of the first
invalid batch.

The offset rules that depend on the segment's place in its partition (:class:`.rules.Bounds`:
the next segment's base offset, whether the segment has no gaps) are given to the segment by
whoever lists the partition (:mod:`embedlog.loader`); a segment opened on its own has none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import CorruptBatchError
from ..naming import segment_bases
from . import format as fmt
from .crc_memo import Checked, Identity, Memo, identity
from .files import SegmentFiles, pinned
from .rules import FREE, BackwardsError, Bounds, GapError, check_order

__all__ = ["FIRST_CHUNK", "LARGE_CHUNK", "READ_CHUNK", "SegmentScan", "SegmentSettings", "located"]

READ_CHUNK = 1 << 18  # largest pread while scanning batches that fit it
LARGE_CHUNK = 1 << 20  # largest pread once a batch larger than a chunk was met (two of its size)
FIRST_CHUNK = 1 << 16  # first pread of a scan: a point lookup should not read much


@dataclass(frozen=True, slots=True)
class SegmentSettings:
    """The topic settings a segment needs."""

    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    max_batch_bytes: int = 64 * 1024 * 1024
    dense_tail: bool = False
    """The topic was created by embedlog: its active segment has no offset gap
    (:mod:`.rules`)."""


class SegmentScan(SegmentFiles):
    """The batch walk of one segment's ``.log`` (see the module notes)."""

    base_offset: int
    directory: str
    live: bool
    settings: SegmentSettings
    crc_memo: Memo
    bounds: Bounds = FREE
    """The partition's offset rules for this segment (:class:`.rules.Bounds`)."""

    def batches(
        self,
        position: int = 0,
        end: int | None = None,
        *,
        verify: bool = True,
        partial_tail: bool | None = None,
        exact_first: bool = False,
        head: bytes | None = None,
    ) -> Iterator[tuple[bytes, int, fmt.BatchHeader]]:
        """Yield ``(buffer, position in buffer, header)`` for each batch from byte ``position``.

        With ``exact_first`` (a point read, which usually stops after the first batch) the first
        batch is read with one exact ``pread`` of its bytes and the next batch's header
        (:meth:`_exact`; ``head``: the header bytes at ``position`` when the caller has read
        them), and yielded before the walk goes on; every check and error is the walk's.

        Raises :class:`CorruptBatchError` with the file position at the first invalid batch.
        An incomplete final batch ends the walk quietly only where one can exist: in a ``live``
        segment another process is appending to, or with ``partial_tail`` (recovery, which cuts
        it). Anywhere else -- a sealed segment, the writer's recovered active segment -- bytes
        that do not form a whole batch are damage (a flipped length field is outside the CRC),
        and so are batch offsets that break the rules of :mod:`.rules` (the base offset is
        outside the CRC too): offsets that go backwards, do not fit a 32-bit delta from the
        base, reach the next segment's base offset, or leave a gap in a dense segment.

        A batch is yielded only once the batch after it was read (or the walk ended): when the
        next batch's offsets go back into it, either base offset may be the damaged one, so
        neither is yielded -- a reader never hands out the records of a batch whose base
        offset moved forward, and recovery cuts before both. Any other damage is the next
        batch's own: the batch before it is yielded first.
        """
        floor: int | None = self.base_offset if position == 0 else None
        if exact_first:
            first = self._exact(position, end, verify, floor, head)
            if first is not None:
                yield first
                position += first[2].size
                floor = first[2].next_offset
        held: tuple[bytes, int, fmt.BatchHeader] | None = None
        try:
            for batch in self._walk(position, end, verify, partial_tail, floor):
                if held is not None:
                    yield held
                held = batch
        except BackwardsError:
            raise  # the held batch collides with the next one: neither is yielded
        except CorruptBatchError:
            if held is not None:
                yield held
            raise
        if held is not None:
            yield held

    def _exact(self, position: int, end: int | None, verify: bool, floor: int | None,
               head: bytes | None = None) -> tuple[bytes, int, fmt.BatchHeader] | None:
        """The batch at ``position`` and, in the same ``pread``, the next batch's header: the
        batch is returned when the walk would yield it (its own checks pass, and the next
        header's offsets do not go back into it: :class:`.rules.BackwardsError` is raised as the
        walk raises it); None when this cannot be decided from those bytes (the caller walks)."""
        limit = self.size if end is None else min(end, self.size)
        if position + fmt.HEADER_SIZE > limit:
            return None
        if head is None:
            head = self.pread(position, fmt.HEADER_SIZE)
        if len(head) < fmt.HEADER_SIZE:
            return None
        try:
            size = fmt.parse_header(head, 0).size
        except CorruptBatchError:
            return None  # the walk reports it
        if size > self.settings.max_batch_bytes or position + size > limit:
            return None
        buf = self.pread(position, size + fmt.HEADER_SIZE)
        checked = Checked(self.crc_memo, self._sealed_identity()) if verify else None
        header = self._next(buf, 0, position, checked, self.settings.max_batch_bytes)
        if header is None or header.size != size:
            return None
        after = self._ordered(header, floor, position)
        if len(buf) - size < fmt.HEADER_SIZE:
            return buf, 0, header  # no whole header follows: the walk would yield it too
        try:
            following = fmt.parse_header(buf, size)
            check_order(following, after, self.base_offset, self.log_path, position + size,
                        self.bounds)
        except BackwardsError:
            raise  # it goes back into this batch: either base offset may be the damaged one
        except CorruptBatchError:
            pass  # the next batch's own damage, reported by the walk that reads it
        return buf, 0, header

    def _ordered(self, header: fmt.BatchHeader, floor: int | None, position: int) -> int:
        """:func:`.rules.check_order` under this segment's bounds. A read-only view's last
        segment (``live``) is dense because it was the active segment when the view listed the
        folder; if the writer has rolled past it since (a later segment is listed now), it is a
        sealed segment like any other, which compaction may have rewritten with gaps (the view
        can list the folder before the roll and open the file after the swap): the rule is
        dropped for it and the batch checked again without it."""
        try:
            return check_order(header, floor, self.base_offset, self.log_path, position,
                               self.bounds)
        except GapError:
            later = self._later_bases() if self.live else []
            if not later:
                raise  # still the active segment: a gap in it is damage
            self.bounds = Bounds(min(later), False)
            return check_order(header, floor, self.base_offset, self.log_path, position,
                               self.bounds)

    def _later_bases(self) -> list[int]:
        """Base offsets of the segments listed after this one in its folder now."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return [b for b in segment_bases(names) if b > self.base_offset]

    def _walk(self, position: int, end: int | None, verify: bool, partial_tail: bool | None,
              floor: int | None) -> Iterator[tuple[bytes, int, fmt.BatchHeader]]:
        """The batches from byte ``position``, each checked on its own (:meth:`batches`);
        ``floor`` as :func:`.rules.check_order` takes it."""
        tail_ok = self.live if partial_tail is None else partial_tail
        limit = self.size if end is None else min(end, self.size)
        max_batch = self.settings.max_batch_bytes
        chunk, cap = FIRST_CHUNK, READ_CHUNK
        checked = Checked(self.crc_memo, self._sealed_identity()) if verify else None
        while position < limit:
            buf = self.pread(position, min(chunk, limit - position))
            chunk = min(chunk * 4, cap)
            p = 0
            while (header := self._next(buf, p, position, checked, max_batch)) is not None:
                floor = self._ordered(header, floor, position + p)
                yield buf, p, header
                p += header.size
            if p == 0:
                # The batch at `position` is larger than the chunk: read it whole, unless it is
                # an incomplete tail.
                if len(buf) < 12:
                    break
                total = 12 + int.from_bytes(buf[8:12], "big", signed=True)
                if total <= len(buf) or total > limit - position:
                    break
                # Later reads take two batches of this size at once (at most LARGE_CHUNK), so
                # that batches a little larger than a chunk are not each read twice.
                cap = chunk = max(cap, min(2 * total, LARGE_CHUNK))
                buf = self.pread(position, total)
                header = self._next(buf, 0, position, checked, max_batch)
                if header is None:
                    break
                floor = self._ordered(header, floor, position)
                yield buf, 0, header
                p = header.size
            position += p
        if position < limit and limit == self.size and not tail_ok:
            raise CorruptBatchError(
                f"{limit - position} bytes at the end do not form a whole batch",
                path=self.log_path,
                position=position,
            )

    @pinned
    def _sealed_identity(self) -> Identity | None:
        """The identity of the segment's file, whose CRC checks are remembered under it; None
        for the writer's active segment, whose checks never are. A read-only view's live tail
        is remembered too: the writer only appends to it (a batch's bytes never change in place;
        only recovery and salvage cut a file, and that changes its size and modification
        time), and every append gives the file a new identity."""
        if self.writable:
            return None
        fd = self._read_fd()
        return None if fd is None else identity(fd)

    def _next(
        self, buf: bytes, p: int, base: int, checked: Checked | None, max_batch: int
    ) -> fmt.BatchHeader | None:
        verify = checked is not None and not checked.known(base + p)
        try:
            header = fmt.next_batch(buf, p, verify=verify, max_batch_size=max_batch)
        except CorruptBatchError as exc:
            raise located(exc, self.log_path, base + p) from exc
        if verify and header is not None and checked is not None:
            checked.remember(base + p)
        return header


def located(exc: CorruptBatchError, path: str, position: int) -> CorruptBatchError:
    """The same error (same class), naming the file and the batch's position in it."""
    return type(exc)(exc.reason, path=path, position=position)
