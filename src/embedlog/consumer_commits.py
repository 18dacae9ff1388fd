"""A consumer's committed offsets: :class:`Commits`, what :class:`~embedlog.Consumer` extends.

Committed offsets are the group's ``offsets`` file (:class:`~embedlog.groups.OffsetStore`),
written under the group lock; a group member's commit is checked there
(:meth:`~embedlog.groups.Membership.check_commit`: still in the group, holding the lease of
every partition committed), so a member evicted meanwhile never overwrites what the
partitions' new owners commit.

Three kinds of commit, one rule for failures:

* an explicit :meth:`Commits.commit` raises what refused it (:class:`~embedlog.GroupError`,
  :class:`~embedlog.StorageError`, ...);
* the auto-commit of ``enable_auto_commit`` inside ``poll`` and before a revoke raises too
  (the consumer is in use: the caller sees it);
* the final auto-commit of ``close`` (:meth:`Commits._final_commit`) commits "if possible",
  as Kafka's consumer does: a refusal from embedlog's exception tree is logged (this module's
  logger, ``WARNING``, with the exception) and the close goes on to release the partitions and
  leave the group, so an exception that ended a ``with consumer:`` body is never replaced by
  the close's. The partitions' records after the last successful commit are read again by
  their next owner (at-least-once). Anything else (a bug, ``KeyboardInterrupt``) propagates.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from . import _validate, consumer_topics
from ._client_api import ClientLog
from .errors import EmbedlogError, GroupError, InvalidArgumentError, LogClosedError
from .fetcher import Fetch, Iteration
from .groups import Membership, OffsetStore
from .records import TopicPartition

__all__ = ["Commits"]

logger = logging.getLogger(__name__)


class Commits:
    """The commit calls of a consumer, over the state :class:`~embedlog.Consumer` keeps
    (declared here, set by its ``__init__``)."""

    log: ClientLog
    _closed: bool
    _fetches: dict[TopicPartition, Fetch]
    _iteration: Iteration
    _store: OffsetStore | None
    _membership: Membership | None
    _auto_commit_s: float
    _next_auto_commit: float
    group: str | None

    def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        """Store committed offsets (default: the current positions of all assigned
        partitions). Values are next-offsets-to-read, as ints or objects with ``.offset``
        (kafka-python's ``OffsetAndMetadata``). A group member may commit only the partitions
        it owns (:class:`~embedlog.GroupError` otherwise). Works while ``close`` revokes
        partitions, and after the log was closed (offsets live in their own files)."""
        if self._closed:
            raise LogClosedError("the consumer is closed")
        if offsets is None:
            self._commit_positions(list(self._fetches))
            return
        if not isinstance(offsets, Mapping):
            raise InvalidArgumentError(f"offsets must be a mapping, not {type(offsets).__name__}")
        clean: dict[TopicPartition, int] = {}
        for tp, value in offsets.items():
            tp = _validate.topic_partition(tp)
            clean[tp] = _validate.offset(getattr(value, "offset", value),
                                         f"committed offset of {tp.topic}-{tp.partition}")
        self._commit(clean)

    def _commit_positions(self, tps: list[TopicPartition]) -> None:
        self._iteration.settle(self._fetches)
        self._commit(self._positions(tps))

    def _positions(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The known positions of ``tps``, but for partitions of a topic deleted since they
        were assigned (:mod:`embedlog.consumer_topics`): never committed, they would be taken
        for offsets of the topic created under the name since."""
        fetches = [self._fetches[tp] for tp in tps]
        if not self.log.closed:
            self.log._refresh_topics()  # a read-only open: what the writer changed since
        return {f.tp: f.position for f in fetches if f.position is not None
                and (self.log.closed or consumer_topics.is_current(self.log, f))}

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self._store is None:
            raise GroupError("commit needs a consumer group: create the consumer with group=...")
        if not offsets:
            return
        m = self._membership
        check = None
        if m is not None:
            def check() -> None:
                m.check_commit(offsets)
        self._store.commit(offsets, check)

    def _auto_commit(self) -> None:
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        if self._store is not None and self._fetches:
            self._commit_positions(list(self._fetches))

    def _final_commit(self, handed: Mapping[TopicPartition, int] | None = None) -> None:
        """``close``'s auto-commit of every assigned partition's position, if possible: a
        refusal is logged, not raised (see the module notes). ``handed`` replaces the
        positions of the partitions it names (the asyncio consumer's: the first record it
        fetched but did not hand out yet)."""
        if self._store is None or not self._fetches:
            return
        try:
            self._iteration.settle(self._fetches)
            offsets = self._positions(list(self._fetches))
            offsets.update((tp, p) for tp, p in (handed or {}).items() if tp in offsets)
            self._commit(offsets)
        except EmbedlogError as exc:
            logger.warning("consumer group %r: the final auto-commit on close failed, the "
                           "positions of %s were not committed: %s", self.group,
                           ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(self._fetches)),
                           exc, exc_info=exc)

    def _committed_offsets(self) -> dict[TopicPartition, int]:
        return self._store.read() if self._store is not None else {}

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for ``tp`` (``None`` if none, or without a group)."""
        tp = _validate.topic_partition(tp)
        return self._store.committed(tp) if self._store is not None else None
