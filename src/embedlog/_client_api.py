"""What the clients (consumer, producer) may use of a log, as Protocols.

The clients sit above :class:`~embedlog.Log` but must not import it (``log.py`` creates them,
so an import back would be a loop). They are typed against these Protocols instead;
:class:`~embedlog.Log` and :class:`~embedlog.partition.Partition` satisfy them structurally,
which mypy checks where ``log.py`` hands itself to a client. Each member listed here is a
promise of the storage side to the clients: widen it deliberately.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Literal, Protocol

from .config import TopicConfig
from .partition import Partition
from .records import Record
from .segment import format as fmt
from .transactions import AbortedRanges

__all__ = ["ClientLog", "ClientPartition", "Durability", "ProducerLog"]

Durability = Literal["none", "fsync"]
"""``"none"``: appends reach the page cache; ``"fsync"``: they are on disk when acknowledged."""


class ClientPartition(Protocol):
    """One partition as a reader sees it."""

    @property
    def start_offset(self) -> int:
        """The log start offset (records below it are gone)."""

    @property
    def end_offset(self) -> int:
        """The offset the next appended record will get."""

    @property
    def appended(self) -> threading.Condition:
        """Notified (under its lock) after each batch a writer in this process appends."""

    @property
    def segments(self) -> Sized:
        """The open segments; empty once the partition was closed (its log closed or its
        topic deleted)."""

    def refresh(self) -> None:
        """Read-only view: pick up what the writer (another process) changed; a no-op on the
        writer's own partitions."""

    def batches(
        self, start: int, end: int | None = None, *, control: bool = False
    ) -> Iterator[tuple[fmt.BatchHeader, fmt.DecodedRecords]]:
        """Batches with records in ``[start, end)``, restricted to it; control batches only
        with ``control``. :class:`~embedlog.errors.OffsetOutOfRangeError` when ``start`` lies
        outside the log."""


    def last_stable_offset(self) -> int:
        """Where ``read_committed`` readers stop, as last refreshed (no refresh here)."""

    def aborted_txns(self, start: int, end: int) -> AbortedRanges | None:
        """The aborted transactions overlapping ``[start, end)`` from the ``.txnindex`` files;
        ``None`` when a segment there has none (the reader decides by the markers)."""


class ClientLog(Protocol):
    """The log as the clients use it."""

    @property
    def path(self) -> str:
        """The log's folder."""

    @property
    def read_only(self) -> bool:
        """True for a read-only open (another process may be the writer)."""

    @property
    def closed(self) -> bool: ...

    def partition_count(self, topic: str) -> int: ...

    def _partition_of(self, topic: str, partition: int) -> ClientPartition:
        """The partition (embedlog's clients only: it is not public API);
        :class:`~embedlog.errors.UnknownTopicError` if there is none."""

    def _refresh_topics(self) -> int:
        """Take in the topics another process (the writer) created, deleted or created again
        since the last call: afterwards ``_partition_of`` gives the partitions of the topics
        that exist now (nothing to take in on the writer). A count that changes whenever the
        topics may have (created, deleted, re-read)."""

    def start_offset(self, topic: str, partition: int) -> int: ...

    def end_offset(self, topic: str, partition: int) -> int: ...

    def last_stable_offset(self, topic: str, partition: int) -> int: ...

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None: ...

    def read(
        self,
        topic: str,
        partition: int,
        offset: int | None = None,
        *,
        max_records: int | None = None,
        end_offset: int | None = None,
    ) -> Iterable[Record]: ...


class ProducerLog(ClientLog, Protocol):
    """The log as the producer uses it: a writer's settings, the topics, and each partition's
    tail contract (reserve, settle, sync), which the producer drives only through
    :class:`~embedlog.batch_writer.OpenBatch`."""

    @property
    def durability(self) -> Durability:
        """The log's durability, a floor for its producers'."""

    @property
    def clock(self) -> Callable[[], int]:
        """Epoch milliseconds now (record timestamps, LogAppendTime)."""

    def topics(self) -> list[str]: ...

    def topic_config(self, topic: str) -> TopicConfig: ...

    def _partition_of(self, topic: str, partition: int) -> Partition:
        """The partition, with its tail contract."""
