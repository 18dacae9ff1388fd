"""The producer's fast lane: one call that puts a plain record into a partition's open batch.

:class:`LaneBatch` is the producer's open batch (:class:`~embedlog.batch_writer.OpenBatch`)
with a *lane*: an object attached to the batch's three column lists (values, keys, timestamps
-- the lists the batch writer encodes), its base offset and its estimated size in bytes.

**Contract of a lane** (``Lane`` below: the compiled ``embedlog._clane.Lane`` when it is built,
else :class:`PyLane`; ``EMBEDLOG_PURE=1`` picks the pure one; both behave the same):

* ``attach(values, keys, timestamps, base, size, ticket=None)`` -- the batch's columns (before
  the batch opens, so a sender that sees it open appends to these lists) and the opening's
  :class:`~embedlog.batch_writer.Ticket`; disarms.
* ``arm(limit, last, max_record, log_append, append_time)`` -- the batch opened with these
  limits (bytes at which it is full, index of its last record, largest record, the topic's
  LogAppendTime stamp): ``add`` may append.
* ``disarm()`` -- ``add`` appends nothing (the batch is being written, or has headers); the
  slow path may call it holding the batch's lock.
* ``add(topic, value, key, timestamp)`` -- while armed, for bytes ``value`` and ``key`` (exact
  types) and an int ``timestamp`` in ``[0, 2**63)``, a record whose estimated size
  (``overhead + len(value) + len(key)``) is at most ``max_record`` and leaves the batch below
  ``limit`` bytes with at most ``last`` records before it: appends it and returns its
  :class:`~embedlog.RecordMetadata` ``(topic, partition, base + index, timestamp)`` (the
  append time for a LogAppendTime topic). Anything else: returns ``None``, appends nothing
  (the producer's slow path then checks, raises, or writes the batch).
* ``join(topic, value, key, timestamp)`` -- ``add``, returning ``(metadata, ticket)``: the
  ticket of the batch the record joined, taken atomically with it (a durable sender waits
  for that batch's outcome: by the time ``add`` returned, the batch may have been written
  and opened again with another ticket); ``None`` when ``add`` would return ``None``.
* ``push(value, key, timestamp, size) -> index`` -- append unconditionally (the slow path,
  holding the batch's lock, after its checks); ``size`` bytes join the estimate.
* ``size`` -- the estimated bytes of the batch (header included).

Every method is atomic for the other threads (the compiled one runs without releasing the
interpreter lock and calls no Python code; the pure one takes the batch's lock, which the
caller of ``push`` already holds), so the three columns always have the same length, and an
``add`` either lands before the writer takes the columns (and is written with the batch) or
returns ``None``.
"""

from __future__ import annotations

import threading
from typing import Any, Final, Protocol, cast

from .batch_writer import OpenBatch
from .partition import Partition
from .records import RecordMetadata
from .segment import format as fmt
from .segment._native import load_compiled

__all__ = ["LANE_IMPLEMENTATION", "Lane", "LaneBatch", "PyLane", "new_lane"]

_INT64_LIMIT: Final = 1 << 63
_new = tuple.__new__


class Lane(Protocol):
    """What the producer uses of a lane (see the module notes)."""

    @property
    def size(self) -> int: ...

    @property
    def armed(self) -> bool: ...

    def attach(self, values: list[bytes | None], keys: list[bytes | None],
               timestamps: list[int], base: int, size: int, ticket: object = None, /
               ) -> None: ...

    def arm(self, limit: int, last: int, max_record: int, log_append: bool,
            append_time: int, /) -> None: ...

    def disarm(self) -> None: ...

    def add(self, topic: str, value: object, key: object, timestamp: object, /
            ) -> RecordMetadata | None: ...

    def join(self, topic: str, value: object, key: object, timestamp: object, /
             ) -> tuple[RecordMetadata, Any] | None: ...

    def push(self, value: bytes | None, key: bytes | None, timestamp: int, size: int, /
             ) -> int: ...


class PyLane:
    """The pure-Python lane: the reference for the compiled one (see the module notes)."""

    __slots__ = ("_append_time", "_armed", "_base", "_keys", "_last", "_limit", "_lock",
                 "_log_append", "_max_record", "_meta", "_overhead", "_size", "_ticket",
                 "_timestamps", "_values", "index")

    def __init__(self, meta: type[tuple[Any, ...]], index: int, overhead: int,
                 lock: threading.Lock | None = None) -> None:
        """``lock``: the batch's lock (``push`` is called holding it); default: a new one."""
        if not (isinstance(meta, type) and issubclass(meta, tuple)):
            raise TypeError("meta must be a tuple subclass")
        if index.__class__ is not int:
            raise TypeError("index must be an int")
        if overhead.__class__ is not int:
            raise TypeError("overhead must be an int")
        if overhead < 0:
            raise ValueError("overhead must be >= 0")
        self._meta = meta
        self.index = index
        self._overhead = overhead
        self._lock = threading.Lock() if lock is None else lock
        self._values: list[bytes | None] | None = None
        self._keys: list[bytes | None] = []
        self._timestamps: list[int] = []
        self._armed = self._log_append = False
        self._base = self._size = self._limit = self._last = self._max_record = 0
        self._append_time = -1
        self._ticket: object = None

    @property
    def size(self) -> int:
        return self._size

    @property
    def armed(self) -> bool:
        return self._armed

    def attach(self, values: list[bytes | None], keys: list[bytes | None],
               timestamps: list[int], base: int, size: int, ticket: object = None, /
               ) -> None:
        if not all(c.__class__ is list for c in (values, keys, timestamps)):
            raise TypeError("attach: the columns must be lists")
        _int64(base, "base")
        _int64(size, "size")
        if base < 0 or size < 0:
            raise ValueError("attach: base and size must be >= 0")
        with self._lock:
            self._armed = False
            self._values, self._keys, self._timestamps = values, keys, timestamps
            self._base, self._size = base, size
            self._ticket = ticket

    def arm(self, limit: int, last: int, max_record: int, log_append: bool,
            append_time: int, /) -> None:
        if self._values is None:
            raise ValueError("arm: the lane is not attached")
        for v, name in ((limit, "limit"), (last, "last"), (max_record, "max_record"),
                        (append_time, "append_time")):
            _int64(v, name)
        with self._lock:
            self._limit, self._last, self._max_record = limit, last, max_record
            self._log_append, self._append_time = bool(log_append), append_time
            self._armed = True

    def disarm(self) -> None:
        # No lock: called with it held (a record with headers) and without (the writer). One
        # store is atomic; an add past its check holds the lock, so it ends before the writer
        # takes the columns, which needs the lock too.
        self._armed = False

    def add(self, topic: str, value: object, key: object, timestamp: object, /
            ) -> RecordMetadata | None:
        got = self._take(topic, value, key, timestamp)
        return None if got is None else got[0]

    def join(self, topic: str, value: object, key: object, timestamp: object, /
             ) -> tuple[RecordMetadata, Any] | None:
        return self._take(topic, value, key, timestamp)

    def _take(self, topic: str, value: object, key: object, timestamp: object
              ) -> tuple[RecordMetadata, Any] | None:
        """``join`` (see the module notes)."""
        if (not self._armed or value.__class__ is not bytes or key.__class__ is not bytes
                or timestamp.__class__ is not int
                or not 0 <= timestamp < _INT64_LIMIT):  # type: ignore[operator]
            return None
        record = self._overhead + len(value) + len(key)  # type: ignore[arg-type]
        with self._lock:  # (not acquire/try: an interrupt could land between the two)
            values = self._values
            if not self._armed or values is None:
                return None
            n = len(values)
            if (record > self._max_record or self._size + record >= self._limit
                    or n >= self._last or self._base + n >= _INT64_LIMIT):
                return None  # too large, or the batch would be full: the slow path writes it
            keys, timestamps = self._keys, self._timestamps
            if len(keys) != n or len(timestamps) != n:
                self._even(n)  # raises
            values.append(value)  # type: ignore[arg-type]
            keys.append(key)  # type: ignore[arg-type]
            timestamps.append(timestamp)  # type: ignore[arg-type]
            self._size += record
            stamp = self._append_time if self._log_append else timestamp
            return _new(self._meta, (topic, self.index, self._base + n, stamp)), self._ticket  # type: ignore[return-value]

    def push(self, value: bytes | None, key: bytes | None, timestamp: int, size: int, /
             ) -> int:
        values = self._values
        if values is None:
            raise ValueError("push: the lane is not attached")
        _int64(size, "size")
        n = len(values)  # the caller holds the lock
        self._even(n)
        if not 0 <= size < _INT64_LIMIT - self._size:
            raise ValueError("push: size out of range")
        values.append(value)
        self._keys.append(key)
        self._timestamps.append(timestamp)
        self._size += size
        return n

    def _even(self, n: int) -> None:
        if len(self._keys) != n or len(self._timestamps) != n:
            raise ValueError("the lane's columns have different lengths")


def _int64(value: object, name: str) -> None:
    if value.__class__ is not int:
        raise TypeError(f"{name} must be an int")
    if not -_INT64_LIMIT <= value < _INT64_LIMIT:  # type: ignore[operator]
        raise OverflowError(f"{name} out of range")


_COMPILED: Any = load_compiled("embedlog._clane")
LANE_IMPLEMENTATION: Final = "python" if _COMPILED is None else "c"
"""``"c"`` when the compiled lane is in use, ``"python"`` for the pure one."""


def new_lane(index: int, overhead: int, lock: threading.Lock) -> Lane:
    """A lane for partition ``index`` whose batch has ``lock`` (the compiled lane unless it is
    not built or ``EMBEDLOG_PURE`` asks for the pure one)."""
    if _COMPILED is None:
        return PyLane(RecordMetadata, index, overhead, lock)
    return cast("Lane", _COMPILED.Lane(RecordMetadata, index, overhead))


class LaneBatch(OpenBatch):
    """The producer's open batch, with its :class:`Lane` in ``lane`` (see the module notes).

    The lane is attached to the fresh column lists before the batch opens and armed once it
    is open (the partition lock is held throughout: no write can come between); it is
    disarmed before the batch is written, so every record ``add`` appended is in the batch.
    """

    __slots__ = ("lane",)

    def __init__(self, p: Partition, *, overhead: int, **options: Any) -> None:
        """``options``: those of :class:`~embedlog.batch_writer.OpenBatch`."""
        super().__init__(p, **options)
        self.lane = new_lane(self.index, overhead, self.lock)

    def prepare(self, base: int) -> None:
        super().prepare(base)
        self.lane.attach(self.values, self.keys, self.timestamps, base, fmt.HEADER_SIZE,
                         self.ticket)

    def open_at(self, base: int) -> None:
        super().open_at(base)
        t = self.append_time
        if t.__class__ is int and -_INT64_LIMIT <= t < _INT64_LIMIT:  # else: the slow path
            self.lane.arm(self.limit, self.last, self.max_record, self.log_append, t)

    def write(self) -> None:
        self.lane.disarm()
        super().write()
