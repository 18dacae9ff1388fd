"""The one write path: records -> v2 batches -> a partition's tail.

Every writer -- :meth:`Log.append <embedlog.Log.append>` / ``append_batch`` (and through it the
Spark writer) and the :class:`~embedlog.Producer` -- turns records into batches here, so the
topic's write rules live in one place:

* **codec**: the topic's ``compression.type`` wins unless it is ``producer``; then the writer's
  choice (default: none) -- :func:`choose_codec`;
* **timestamps**: ``message.timestamp.type=LogAppendTime`` stamps the batch with the log's
  clock (the batch's max timestamp; records keep theirs);
* **keys**: a compacted topic refuses a record without a key (:func:`check_keys`);
* **size**: a batch larger than ``max.message.bytes`` (compression can make it grow) is halved
  until it fits; a single record that does not fit raises
  :class:`~embedlog.errors.RecordTooLargeError` (:func:`write_records`). A compressed batch
  whose records pass :data:`~embedlog.segment.codecs.MAX_DECOMPRESSED` (what every reader
  decompresses at most; the encoder refuses it) is halved too, and a single such record is
  stored uncompressed: nothing is written that a read would refuse;
* **idempotence**: a :class:`~embedlog.producer_state.ProducerStamp` puts producer id, epoch and
  base sequence into each batch header, advancing the sequence batch by batch.

:class:`OpenBatch` is a batch being gathered at a partition's tail: it reserves the tail
(:meth:`Partition.reserve <embedlog.partition.Partition.reserve>`), so the offsets of its
records are known when they are added, and it is written (:meth:`OpenBatch.write`) when its
owner settles it or anything else touches the partition. It is the pending batch of group
commit: in ``fsync`` mode a writer (the producer, ``Log.append``: :mod:`embedlog.log_append`)
adds its record, then waits in :meth:`OpenBatch.sync_through` until one leader has written the
batch and fsynced it.

Lock order: the partition lock -> ``OpenBatch.lock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from .config import TopicConfig
from .errors import EmbedlogError, RecordTooLargeError, StorageError, UsageError, cut_short
from .partition import Partition
from .partitioner import partitions_for_keys
from .producer_state import ProducerStamp
from .records import Header
from .segment import encode
from .segment import format as fmt
from .segment.codecs import Compression, compression_from_name

__all__ = ["DEFAULT_BATCH_RECORDS", "DEFAULT_BATCH_SIZE", "RECORD_OVERHEAD", "OpenBatch",
           "Ticket", "check_keys", "choose_codec", "headers_size", "key_required", "spread",
           "write_records", "write_unchecked"]

DEFAULT_BATCH_SIZE: Final = 256 * 1024
"""Bytes at which an open batch is written (Kafka's default is 16 KiB; larger batches make a
Python send loop faster)."""
DEFAULT_BATCH_RECORDS: Final = 2000
"""Records at which an open batch is written."""

RECORD_OVERHEAD: Final = 32
"""Upper bound of a record's framing (length, attributes, deltas, key/value lengths, headers
count), so that the estimated size of a batch never falls short of the encoded one."""
Keys = Sequence[bytes | None]
Headers = Sequence[Sequence[Header] | None]


def headers_size(headers: Sequence[Header]) -> int:
    """Bytes ``headers`` (checked by :func:`._validate.headers`) add to a record at most."""
    return sum(10 + len(k.encode()) + (len(v) if v is not None else 0) for k, v in headers)


def choose_codec(config: TopicConfig, requested: str | None) -> Compression:
    """The codec a batch of a topic gets: the topic's ``compression.type``, or ``requested``
    (None: no compression) when that is ``producer``."""
    if config.compression_type != "producer":
        return compression_from_name(config.compression_type)
    return compression_from_name(requested)


def key_required(topic: str, config: TopicConfig) -> UsageError:
    """The error for a keyless record sent to a compacted topic."""
    return UsageError(
        f"topic {topic!r} is compacted (cleanup.policy={config.cleanup_policy}): "
        "every record needs a key"
    )


def check_keys(topic: str, config: TopicConfig, keys: Keys | None) -> None:
    """Refuse keyless records in a compacted topic."""
    if config.compact and (keys is None or any(k is None for k in keys)):
        raise key_required(topic, config)


def write_records(
    p: Partition,
    values: Sequence[bytes | None],
    keys: Keys | None,
    headers: Headers | None,
    timestamps: int | Sequence[int],
    *,
    codec: Compression,
    append_time: int | None = None,
    stamp: ProducerStamp | None = None,
    expect_base: int | None = None,
) -> list[fmt.BatchHeader]:
    """Encode the records as one batch and append it to ``p`` (halved while it is larger than
    ``max.message.bytes``); returns the stored header of each batch written.

    ``append_time``: the LogAppendTime stamp; by default the partition's clock now if the topic
    is LogAppendTime, and -1 for a CreateTime batch (a writer that took the topic's settings
    when its batch opened passes them on). ``expect_base``: the offset the records were
    promised (a reservation); landing elsewhere is a broken invariant."""
    check_keys(p.topic, p.config, keys)
    out: list[fmt.BatchHeader] = []
    _write_all(p, values, keys, headers, timestamps, codec, append_time, stamp, expect_base,
               0, out)
    return out


def write_unchecked(
    p: Partition,
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    timestamps: object,
    *,
    codec: Compression,
) -> list[fmt.BatchHeader] | None:
    """:func:`write_records` for ``append_batch``'s common case, its values, keys and
    timestamps not checked yet (no headers, uncompressed, nothing in a producer's name): the
    compiled encoder checks them as it reads them (:data:`encode.STRICT
    <embedlog.segment.encode.STRICT>`). None, with nothing written, when it does not take them
    as they are, when the topic is compacted and a key is missing, and always without the
    compiled core: the caller then checks its arguments and calls :func:`write_records`, which
    raises what a check finds. ``values`` and ``keys`` have the same length, at least 1."""
    if p.config.compact and (keys is None or any(k is None for k in keys)):
        return None
    out: list[fmt.BatchHeader] = []
    if not _write_all(p, values, keys, None, timestamps, codec, None, None, None,
                      encode.STRICT, out):
        return None
    return out


def _write_all(p: Partition, values: Sequence[bytes | None], keys: Keys | None,
               headers: Headers | None, timestamps: Any, codec: Compression,
               append_time: int | None, stamp: ProducerStamp | None, expect_base: int | None,
               flags: int, out: list[fmt.BatchHeader]) -> bool:
    if append_time is None and p.config.message_timestamp_type == "LogAppendTime":
        append_time = p.clock()
    elif append_time is not None and append_time < 0:
        append_time = None
    return _write(p, values, keys, headers, timestamps, codec, append_time, stamp, expect_base,
                  out, flags)


_PLAIN: dict[tuple[Compression, int], encode.BatchAttributes] = {}
"""The attributes of batches without a producer, by (codec, timestamp type)."""


def _attributes(codec: Compression, append_time: int | None,
                stamp: ProducerStamp | None) -> encode.BatchAttributes:
    """The batch-wide fields of a batch: the codec, LogAppendTime or not, the producer's."""
    ttype = 0 if append_time is None else 1
    if stamp is None:
        attrs = _PLAIN.get((codec, ttype))
        if attrs is None:
            attrs = _PLAIN[codec, ttype] = encode.BatchAttributes(codec, None, ttype)
        return attrs
    return encode.BatchAttributes(codec, None, ttype, stamp.transactional, False,
                                  stamp.producer_id, stamp.epoch, stamp.sequence)


def _write(p: Partition, values: Sequence[bytes | None], keys: Keys | None,
           headers: Headers | None, timestamps: Any, codec: Compression,
           append_time: int | None, stamp: ProducerStamp | None, expect_base: int | None,
           out: list[fmt.BatchHeader], flags: int) -> bool:
    """Encode and append (halving while too large); False, with nothing written, when the
    encoder does not take unchecked arguments as they are (``flags``: :func:`write_unchecked`)."""
    n = len(values)
    try:
        batch = encode.encode_for_append(values, keys, headers, timestamps,
                                         _attributes(codec, append_time, stamp), append_time,
                                         flags)
    except encode.SectionTooLargeError:  # no reader would decompress it
        if n == 1:  # stored as is
            return _write(p, values, keys, headers, timestamps, Compression.NONE, append_time,
                          stamp, expect_base, out, flags)
        batch = None
    else:
        if batch is None:  # the encoder did not take unchecked arguments
            return False
    if batch is None or (len(batch) > p.config.max_message_bytes and n > 1):
        mid = n // 2  # too large (compression can make a batch grow): halve
        for lo, hi in ((0, mid), (mid, n)):
            _write(p, values[lo:hi], _cut(keys, lo, hi), _cut(headers, lo, hi),
                   timestamps if isinstance(timestamps, int) else timestamps[lo:hi], codec,
                   append_time, stamp, None if expect_base is None else expect_base + lo, out,
                   flags)
        return True
    header = p.append_encoded(batch)
    if expect_base is not None and header.base_offset != expect_base:
        raise AssertionError(
            f"{p.topic}-{p.partition}: batch landed at {header.base_offset}, "
            f"offset {expect_base} was promised"
        )
    if stamp is not None:
        stamp.advance(n)
    out.append(header)
    return True


def _cut(seq: Sequence[Any] | None, lo: int, hi: int) -> Any:
    return None if seq is None else seq[lo:hi]


def spread(keys: Keys, count: int, keyless: int) -> list[tuple[int, list[int]]]:
    """``(partition, record indexes)`` for records with ``keys`` over ``count`` partitions:
    Kafka's murmur2 for keyed records, partition ``keyless`` for the others; indexes keep
    their order."""
    targets = np.full(len(keys), keyless, np.int64)
    keyed = [i for i, k in enumerate(keys) if k is not None]
    if keyed:
        targets[keyed] = partitions_for_keys([k for k in keys if k is not None], count)
    order = np.argsort(targets, kind="stable")
    bounds = np.searchsorted(targets[order], np.arange(count + 1))
    return [
        (part, idx)
        for part in range(count)
        if (idx := order[bounds[part] : bounds[part + 1]].tolist())
    ]


class Ticket:
    """The outcome of one opening of an :class:`OpenBatch`: ``error`` once its write failed,
    ``written`` once it was written. A writer that waits for its record to be durable is
    acknowledged only when its own batch's ticket is ``written``: a batch dropped by an
    interrupt that left no error behind has neither, and its offsets may be given to the next
    batch, which a later round then covers."""

    __slots__ = ("error", "written")

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.written = False


class OpenBatch:
    """A writer's open batch for one partition: records whose offsets ``base ..`` are already
    handed out. While ``open`` it holds the partition's tail reservation.

    ``lock`` (a plain lock, cheaper than the partition's) guards the lists and ``open``; the
    owner appends to ``values``/``keys``/``timestamps``/``headers`` under it (the producer's
    send loop, kept lean on purpose). ``on_open`` runs under the partition lock when the batch
    opens; ``on_close(batch, error)`` when it was written (an error is the writer's to report:
    to each writer of the batch, or, when the records were already acknowledged one by one,
    on the writer's next call). ``waited``: every writer of the batch waits for the group
    commit, whose round fsyncs it (:class:`~embedlog.tail_batch.TailBatch`). ``ticket``: this
    opening's :class:`Ticket` (a new one each time the batch opens, before any writer can see
    it open; a writer takes it with its record, under ``lock`` or atomically with it through
    the producer's lane), given the outcome of the write before ``on_close`` runs.
    """

    __slots__ = ("append_time", "base", "batch_size", "codec", "compact", "compression", "headers",
                 "index", "keys", "last", "limit", "lock", "log_append", "max_batch_records",
                 "max_bytes", "max_record", "on_close", "on_open", "open", "opened", "p",
                 "size", "stamp", "ticket", "timestamps", "topic", "values", "waited")

    def __init__(
        self,
        p: Partition,
        *,
        batch_size: int,
        max_batch_records: int,
        compression: str | None,
        stamp: ProducerStamp | None,
        on_open: Callable[[OpenBatch], None],
        on_close: Callable[[OpenBatch, BaseException | None], None],
        waited: bool = False,
    ) -> None:
        self.p = p
        self.waited = waited
        self.topic = p.topic
        self.index = p.partition
        self.batch_size = batch_size
        self.max_batch_records = max_batch_records
        self.compression = compression
        self.stamp = stamp
        self.on_open = on_open
        self.on_close = on_close
        self.lock = threading.Lock()
        self.open = False
        self.base = 0
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Sequence[Header] | None] | None = None
        self.size = 0
        self.opened = 0.0
        self.limit = self.last = 0
        self.codec = Compression.NONE
        self.compact = False
        self.log_append = False
        self.append_time = -1
        self.max_bytes = self.max_record = p.config.max_message_bytes
        self.ticket = Ticket()

    # -------------------------------------------------------------- the partition's side

    def open_at(self, base: int) -> None:
        """Open at ``base`` with the topic's current settings (the partition lock is held)."""
        self.prepare(base)
        cfg = self.p.config
        with self.lock:
            self.base = base
            self.size = fmt.HEADER_SIZE
            self.max_bytes = cfg.max_message_bytes
            self.max_record = self.max_bytes - fmt.HEADER_SIZE
            self.limit = min(self.batch_size, self.max_bytes)
            self.last = self.max_batch_records - 1
            self.codec = choose_codec(cfg, self.compression)
            self.compact = cfg.compact  # (a keyless record must not join the batch then)
            self.log_append = cfg.message_timestamp_type == "LogAppendTime"
            self.append_time = self.p.clock() if self.log_append else -1
            self.opened = time.monotonic()
            self.open = True
        self.on_open(self)

    def prepare(self, base: int) -> None:
        """Before the batch opens at ``base``: a new :class:`Ticket`."""
        self.ticket = Ticket()

    def write(self) -> None:
        """Encode and append the batch (the partition lock is held, the reservation already
        released). Errors go to ``on_close`` rather than into whoever triggered the write; a
        write cut short by anything else (an interrupt) is reported as a
        :class:`~embedlog.errors.StorageError` and raised."""
        error: BaseException | None = None
        try:  # (from the first line: an interrupt anywhere still reports the batch)
            with self.lock:
                values, keys, timestamps = self.values, self.keys, self.timestamps
                headers = self.headers
                self.values, self.keys, self.timestamps, self.headers = [], [], [], None
                self.open = False
            if values:
                write_records(self.p, values, keys, headers, timestamps, codec=self.codec,
                              append_time=self.append_time,
                              stamp=self.stamp, expect_base=self.base)
        except (EmbedlogError, ValueError, TypeError) as exc:
            error = exc
        except BaseException as exc:  # cut short (an interrupt): reported, and raised on
            error = self.ticket.error = cut_short(exc, f"{self.topic}-{self.index}")
            self.on_close(self, error)
            raise
        if error is None:  # (the partition lock is held: the batch has not opened again)
            self.ticket.written = True
        else:
            self.ticket.error = error
        self.on_close(self, error)

    # -------------------------------------------------------------- the owner's side

    def add_headers(self, n: int, headers: Sequence[Header] | None) -> None:
        """Record ``headers`` for record ``n`` (under ``lock``; the column appears with the
        first record that has headers)."""
        if self.headers is None:
            self.headers = [None] * n
        self.headers.append(headers)

    def reserve(self) -> bool:
        """Open the batch at the partition's tail (no-op if open); False if the partition was
        closed (the log closed or the topic deleted)."""
        return self.p.reserve(self)

    def settle(self) -> None:
        """Write the batch now, if it is open."""
        self.p.settle(self)

    def sync_through(self, offset: int, ticket: Ticket) -> None:
        """Group commit: return once the record at ``offset``, added to the opening of this
        batch whose :class:`Ticket` is ``ticket``, is written and on disk. Raises the batch's
        error, or a :class:`~embedlog.errors.StorageError` when it was not written (even when a
        later batch took its offsets since and a round covered them)."""
        try:
            covered = self.p.sync_through(offset)
        except EmbedlogError:  # a later round's: the partition refuses after the batch failed
            if ticket.error is None:
                raise
            covered = False
        if ticket.error is not None:
            raise ticket.error
        if not (covered and ticket.written):  # (a failed round raises in its leader)
            raise StorageError(f"{self.topic}-{self.index}: the record at offset {offset} was "
                               "not written")

    def sync(self) -> None:
        """fsync everything appended to the partition so far."""
        self.p.sync()

    def too_large(self, size: int) -> RecordTooLargeError:
        return RecordTooLargeError(
            f"a record of about {size} bytes exceeds max.message.bytes={self.max_bytes} "
            f"of topic {self.topic!r}"
        )
