"""The consumer's fetcher: per-partition read state and the filling of records from partitions.

The :class:`~embedlog.consumer.Consumer` decides *which* partitions it reads (subscription,
group, commits, polling); the :class:`Fetcher` reads them. Each assigned partition has a
:class:`Fetch`:

* ``position`` -- the offset of the next record to hand out (``None`` until first needed: then
  the committed offset, else ``auto_offset_reset``);
* ``fetched`` -- where reading continues; the records in ``[position, fetched)`` are ``cols``
  from index ``i`` on (or were gaps: compaction, control batches, aborted transactions);
* ``stop`` -- the end offset the partition had when it was last found drained (a waiting poll
  wakes once the end moves past it).

Filling decodes one batch at a time (``read_uncommitted``), or with ``read_committed`` every
batch up to the current end at once, handing out records only below the last stable offset and
none of aborted transactions (the rules are :mod:`embedlog.transactions`'). Records are kept as
columns (:class:`Columns`) and become :class:`~embedlog.records.Record` tuples only when handed
out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import repeat
from typing import Any, Final, NamedTuple

from . import _validate
from ._client_api import ClientLog, ClientPartition
from ._wake import POLL_S, Armed, WakeSource
from .errors import InvalidArgumentError, OffsetOutOfRangeError
from .naming import partition_dir_name
from .records import Header, Record, TopicPartition
from .segment import format as fmt
from .transactions import CommittedFilter, marker_type

__all__ = [
    "EMPTY",
    "Columns",
    "Fetch",
    "Fetcher",
    "Iteration",
    "OffsetAndTimestamp",
    "Run",
    "concat",
    "folder_names",
    "offsets_for_times",
    "wait_for_records",
]

_new = tuple.__new__
_SLICE_S: Final = 0.002
"""Wait slice per partition when waiting on several partitions of a writer in this process."""

Deserializer = Callable[[bytes], Any]


class Columns:
    """Decoded records as plain lists; :class:`Record` objects are made only for the records
    handed out (records are tuples the garbage collector tracks: the fewer alive, the fewer
    collections a poll loop triggers)."""

    __slots__ = ("headers", "keys", "n", "offsets", "timestamps", "ttypes", "values")

    def __init__(self, offsets: list[int], timestamps: list[int], ttypes: list[int],
                 keys: list[Any], values: list[Any],
                 headers: list[tuple[Header, ...]] | None) -> None:
        self.offsets, self.timestamps, self.ttypes = offsets, timestamps, ttypes
        self.keys, self.values, self.headers = keys, values, headers
        self.n = len(offsets)

    def records(self, tp: TopicPartition, i: int, j: int) -> list[Record]:
        """Records ``i`` up to ``j`` (clipped to the end) as :class:`Record` tuples."""
        m = min(j, self.n) - i
        whole = i == 0 and m == self.n
        rows = zip(
            repeat(tp.topic, m),
            repeat(tp.partition, m),
            self.offsets if whole else self.offsets[i:j],
            self.timestamps if whole else self.timestamps[i:j],
            self.ttypes if whole else self.ttypes[i:j],
            self.keys if whole else self.keys[i:j],
            self.values if whole else self.values[i:j],
            repeat((), m) if self.headers is None else self.headers[i:j],
            strict=True,
        )
        return list(map(_new, repeat(Record, m), rows))


EMPTY: Final = Columns([], [], [], [], [], None)
"""No records (shared: never mutated)."""


def concat(parts: list[Columns]) -> Columns:
    """``parts`` one after another (the one part itself when there is one)."""
    if len(parts) == 1:
        return parts[0]
    out = Columns([], [], [], [], [], None)
    for c in parts:
        if c.headers is not None and out.headers is None:
            out.headers = [()] * out.n
        out.offsets += c.offsets
        out.timestamps += c.timestamps
        out.ttypes += c.ttypes
        out.keys += c.keys
        out.values += c.values
        if out.headers is not None:
            out.headers += c.headers if c.headers is not None else [()] * c.n
        out.n += c.n
    return out


class Fetch:
    """Read state of one assigned partition (see the module notes)."""

    __slots__ = ("cols", "fetched", "gen", "i", "p", "position", "seen", "stop", "tp")

    def __init__(self, tp: TopicPartition, p: ClientPartition) -> None:
        self.tp = tp
        self.p = p
        self.position: int | None = None
        self.fetched = 0
        self.cols = EMPTY
        self.i = 0
        self.gen: Iterator[tuple[fmt.BatchHeader, fmt.DecodedRecords]] | None = None
        self.stop = 0
        self.seen = False

    def move_to(self, offset: int) -> None:
        """Continue at ``offset``: drop what was decoded."""
        self.position = self.fetched = offset
        self.cols, self.i, self.gen = EMPTY, 0, None


Run = tuple[Fetch, list[Record]]
"""Records of one partition handed to an iteration, in order."""


class Iteration:
    """The records handed to a consumer's iterator, per partition, until all are yielded.

    Per record only the last one yielded is noted (``last``); positions are settled from it
    when asked for (:meth:`settle`), at the end of each partition's run, or when the iteration
    is abandoned (:meth:`abandon`: a seek, a rebalance, a ``poll``).
    """

    __slots__ = ("last", "runs")

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.last: Record | None = None

    def hand_out(self, runs: list[Run]) -> Iterator[Record]:
        """Yield the records of ``runs``, moving each partition's position past its run once
        the run is through (and past trailing gaps the fetcher skipped)."""
        self.runs = runs
        for f, run in runs:
            for r in run:
                self.last = r
                yield r
            if not run:
                break  # abandoned meanwhile (cleared by abandon)
            self.last = None
            f.position = run[-1].offset + 1
            if f.i >= f.cols.n and f.position < f.fetched:
                f.position = f.fetched
        if self.runs is runs:
            self.runs = []

    def settle(self, fetches: Mapping[TopicPartition, Fetch]) -> None:
        """Position of the partition whose run is being yielded."""
        last = self.last
        if last is not None:
            f = fetches.get(TopicPartition(last.topic, last.partition))
            if f is not None:
                f.position = last.offset + 1

    def abandon(self, fetches: Mapping[TopicPartition, Fetch]) -> None:
        """Stop: settle, drop what was not yielded, re-read from the positions."""
        runs = self.runs
        if not runs:
            return
        self.settle(fetches)
        self.runs, self.last = [], None
        for f, run in runs:
            if run and f.position is not None and f.position <= run[-1].offset:
                f.move_to(f.position)  # not all handed out: read again from the position
            run.clear()


class Fetcher:
    """Fills :class:`Fetch` states from their partitions.

    Args:
        log: where partitions are refreshed (read-only opens) and reset against.
        isolation_level: ``"read_uncommitted"`` or ``"read_committed"`` (checked by the caller).
        auto_offset_reset: ``"earliest"``, ``"latest"`` or ``"none"`` (checked by the caller).
        committed: the group's committed offsets, read when positions are first needed.
        key_deserializer, value_deserializer: applied to non-``None`` keys and values.
    """

    def __init__(
        self,
        log: ClientLog,
        *,
        isolation_level: str,
        auto_offset_reset: str,
        committed: Callable[[], Mapping[TopicPartition, int]],
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
    ) -> None:
        self.log = log
        self.read_committed = isolation_level == "read_committed"
        self.auto_offset_reset = auto_offset_reset
        self._committed = committed
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._rotation = 0
        self.waker = WakeSource(log.path) if log.read_only else None
        """Wake-ups on changes by the writer, another process (a read-only open)."""

    def close(self) -> None:
        """Close the wake source (a wait in another thread ends first). Idempotent."""
        if self.waker is not None:
            self.waker.close()

    def arm(self, fetches: Iterable[Fetch]) -> Armed | None:
        """Watch the folders of ``fetches`` (``None`` on the writer: no wake source)."""
        return None if self.waker is None else self.waker.arm(folder_names(fetches))

    # ------------------------------------------------------------------ handing out

    def collect(self, fetches: list[Fetch], limit: int, runs: list[Run] | None
                ) -> tuple[list[Record], Exception | None]:
        """Take up to ``limit`` buffered or newly decoded records from ``fetches``, starting
        one partition further on each call (so that none starves), and move the positions past
        them -- or, given ``runs``, leave the positions to the caller and list the records per
        partition there. An error after some records were taken is returned (to be raised
        later) instead of raised."""
        if self.waker is not None:
            self.waker.drain()  # a change after this is read below or ends the next wait
        out: list[Record] = []
        n = len(fetches)
        start = self._rotation % n if n else 0
        self._rotation += 1
        for f in fetches[start:] + fetches[:start]:
            first = len(out)
            try:
                while len(out) < limit:
                    if f.i >= f.cols.n and not self.fill(f):
                        break
                    j = min(f.i + limit - len(out), f.cols.n)
                    out += f.cols.records(f.tp, f.i, j)
                    f.i = j
            except Exception as exc:
                if not out:
                    raise
                return out, exc
            finally:
                if runs is None:
                    if f.position is not None:
                        f.position = f.cols.offsets[f.i] if f.i < f.cols.n else f.fetched
                elif len(out) > first:
                    runs.append((f, out[first:]))
            if len(out) >= limit:
                break
        return out, None

    # ------------------------------------------------------------------ filling

    def fill(self, f: Fetch) -> bool:
        """Decode the next batch with records into ``f.cols``; ``False`` if none is there."""
        if f.position is None:
            self.init_positions([f])
        f.cols, f.i = EMPTY, 0
        while True:
            if f.gen is None:
                end = self._end_offset(f.p)
                if f.fetched >= end:
                    if f.fetched > end:
                        self.reset(f, f"position {f.fetched} is beyond the log end {end}")
                        continue
                    f.stop = end
                    return False
                if self.read_committed:
                    return self._fill_committed(f, end)
                f.gen = f.p.batches(f.fetched, end, control=True)
                f.stop, f.seen = end, False
            elif f.fetched < f.p.start_offset:  # deleted since the scan began: not handed out
                f.gen = None
                self.reset(f, f"position {f.fetched} is below the log start")
                continue
            try:
                header, records = next(f.gen)
            except StopIteration:
                f.gen = None
                if not f.seen:  # nothing readable left below the end: gaps, control batches
                    f.fetched = max(f.fetched, f.stop)
                    return False
                continue
            except OffsetOutOfRangeError:
                f.gen = None
                self.reset(f, f"position {f.fetched} is below the log start")
                continue
            except BaseException:
                f.gen = None  # the next fill reads again from f.fetched: nothing is skipped
                raise
            f.seen = True
            f.fetched = max(f.fetched, header.next_offset)
            if not header.is_control:
                f.cols = self.columns(header, records)
                return True

    def _fill_committed(self, f: Fetch, end: int) -> bool:
        """read_committed: the records of ``[f.fetched, end)`` below its last stable offset,
        without those of aborted transactions (:class:`~embedlog.transactions.CommittedFilter`,
        given the ``.txnindex`` ranges where every segment read has one); ``f.fetched`` moves
        to the last stable offset (or past the last batch when every transaction there is
        decided). Nothing at or past the partition's last stable offset is handed out, even
        where the batches read decide it: a transaction whose first batches were deleted holds
        it at the log start."""
        kept: list[Columns] = []
        last = end
        limit = f.p.last_stable_offset()  # the view was refreshed for ``end``
        try:
            committed = CommittedFilter[tuple[fmt.BatchHeader, fmt.DecodedRecords]](
                f.p.aborted_txns(f.fetched, end))
            for header, records in f.p.batches(f.fetched, end, control=True):
                last = header.next_offset
                if header.is_control:
                    done = committed.add(header, marker_type(records), (header, records))
                else:
                    done = committed.add(header, None, (header, records),
                                         int(records.offsets[0]))
                kept += (self.columns(h, r) for h, r in done if len(r) and r.offsets[0] < limit)
        except OffsetOutOfRangeError:
            self.reset(f, f"position {f.fetched} is below the log start")
            return False
        stable = committed.stable
        stable = min(limit, last if stable is None else stable)
        f.fetched = max(f.fetched, stable)
        f.cols, f.i, f.stop = concat(kept), 0, end
        return f.cols.n > 0

    def columns(self, header: fmt.BatchHeader, records: fmt.DecodedRecords) -> Columns:
        """``records`` of the batch ``header``, deserialized."""
        keys: list[Any] = records.keys()
        values: list[Any] = records.values()
        if self._key_deserializer is not None:
            kd = self._key_deserializer
            keys = [None if k is None else kd(k) for k in keys]
        if self._value_deserializer is not None:
            vd = self._value_deserializer
            values = [None if v is None else vd(v) for v in values]
        return Columns(records.offsets.tolist(), records.timestamps.tolist(),
                       [header.timestamp_type] * len(keys), keys, values, records.headers)

    def _end_offset(self, p: ClientPartition) -> int:
        if self.log.read_only:
            p.refresh()
        return p.end_offset

    # ------------------------------------------------------------------ positions

    def init_positions(self, fetches: list[Fetch]) -> None:
        """Start ``fetches`` at their committed offsets, else apply ``auto_offset_reset``."""
        committed = self._committed()
        for f in fetches:
            offset = committed.get(f.tp)
            if offset is None:
                self.reset(f, "no committed offset")
            else:
                f.move_to(offset)

    def reset(self, f: Fetch, why: str) -> None:
        """Apply ``auto_offset_reset`` to ``f``: ``latest`` is the end a poll would read up
        to, under ``read_committed`` the last stable offset (Kafka's ListOffsets LATEST), so
        that the records of a transaction open at the reset are read once it commits."""
        policy = self.auto_offset_reset
        if policy == "none":
            raise OffsetOutOfRangeError(
                f"{f.tp.topic}-{f.tp.partition}: {why} and auto_offset_reset is 'none'"
            )
        if self.log.read_only:
            f.p.refresh()
        if policy == "earliest":
            f.move_to(f.p.start_offset)
        elif self.read_committed:
            f.move_to(f.p.last_stable_offset())
        else:
            f.move_to(f.p.end_offset)


def folder_names(fetches: Iterable[Fetch]) -> list[str]:
    """The names of the folders of ``fetches``' partitions in the log folder."""
    return [partition_dir_name(f.tp.topic, f.tp.partition) for f in fetches]


def wait_for_records(fetches: list[Fetch], limit: float, stop: threading.Event,
                     *, read_only: bool, waker: WakeSource | None = None) -> None:
    """Block until records may have arrived in ``fetches``, at most ``limit`` seconds or until
    ``stop`` is set. On a read-only open (the writer is another process): until ``waker``
    reports a change in their folders (``stop`` is ``waker``'s to end then: ``close``), or
    one timed check interval without a waker or where it fell back to timed checks (returns
    at once when a new watch asks for a second look first). On the writer, until a batch
    appended in this process moves some partition's end past ``f.stop`` (or closes it),
    waiting on each partition in turn for a short slice when there are several."""
    if read_only and waker is not None:
        if waker.arm(folder_names(fetches)) is not Armed.RECHECK:
            waker.wait(limit)
        return
    if read_only or not fetches:
        stop.wait(min(limit, POLL_S))
        return
    end = time.monotonic() + limit
    turn = 0
    while not stop.is_set():
        if any(f.p.end_offset > f.stop or not f.p.segments for f in fetches):
            return
        left = end - time.monotonic()
        if left <= 0:
            return
        f = fetches[turn % len(fetches)]
        turn += 1
        with f.p.appended:
            if f.p.end_offset > f.stop or not f.p.segments:
                return
            f.p.appended.wait(left if len(fetches) == 1 else min(left, _SLICE_S))


class OffsetAndTimestamp(NamedTuple):
    """What :meth:`Consumer.offsets_for_times` finds for a partition."""

    offset: int
    timestamp: int


def offsets_for_times(
    log: ClientLog, timestamps: Mapping[TopicPartition, int],
    end: Callable[[TopicPartition], int] | None = None,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Per partition, the earliest record whose timestamp is >= the given one (ms); with
    ``end`` (a consumer's end offsets: under ``read_committed`` the last stable offset) only one
    below it, else ``None`` (Kafka's ListOffsets answers no offset at or above the isolation
    level's last fetchable one)."""
    if not isinstance(timestamps, Mapping):
        raise InvalidArgumentError(
            f"timestamps must map TopicPartition to ms, not {type(timestamps).__name__}")
    out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    for tp, ts in timestamps.items():
        tp = _validate.topic_partition(tp)
        offset = log.offsets_for_times(tp.topic, tp.partition, ts)
        found = None
        if offset is not None and end is not None and offset >= end(tp):
            offset = None
        if offset is not None:
            for r in log.read(tp.topic, tp.partition, offset, max_records=1):
                found = OffsetAndTimestamp(r.offset, r.timestamp)
        out[tp] = found
    return out
