"""The consumer's view of topic metadata: which of its partitions are still the log's.

A :class:`~embedlog.fetcher.Fetch` holds the partition object it reads. When its topic is
deleted (and perhaps created again under the same name, with as many partitions or more or
fewer), the log hands out new partition objects: the fetch's one is closed and reads nothing.
Kafka's consumer sees such changes at its next metadata refresh; embedlog's looks at every
``poll`` (:class:`TopicWatch`: on a read-only open one ``lstat`` of ``embedlog.json``, whose
topic ids tell a re-created topic from the one deleted; a dictionary look-up per assigned
partition only after the log's topics changed) and:

* a partition that exists again (its topic re-created) is read as a new one: its position
  starts from the committed offset, else ``auto_offset_reset`` -- a re-created topic is a new
  topic, as with Kafka's topic ids (KIP-516), whose consumer resets such a partition without a
  rebalance. The committed offsets of a deleted topic are dropped by the deletion
  (:func:`embedlog.groups.forget_topic`, as Kafka's group coordinator drops the offsets of
  deleted partitions), and a position read in the old topic is never committed;
* a subscribed consumer (with or without a group) lets go of the partitions that no longer
  exist (``on_revoke``) and takes those a topic gained, or a topic created again, has now
  (``on_assign``), as Kafka's rebalance after a metadata change;
* an ``assign()``-ed consumer gets :class:`~embedlog.errors.UnknownTopicError` from ``poll``
  while one of its partitions does not exist.

Imports ``fetcher`` and the client Protocols only; used by ``consumer_commits`` and
``consumer``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._client_api import ClientLog, ClientPartition
from .errors import UnknownTopicError
from .fetcher import Fetch, Iteration
from .records import TopicPartition

__all__ = ["TopicWatch", "current", "is_current", "rebind", "stale", "subscribed"]


class TopicWatch:
    """A consumer's metadata refresh: what changed for its partitions since the log's topics
    last changed (``ClientLog._refresh_topics``' change count: nothing is looked up per
    partition while it stays the same)."""

    def __init__(self, log: ClientLog) -> None:
        self.log = log
        self.seen: int | None = None
        """The change count the last :meth:`follow` saw through (``None``: look now)."""
        self.rebound: list[TopicPartition] = []
        """The partitions the last :meth:`follow` read anew."""

    def follow(self, fetches: dict[TopicPartition, Fetch], iteration: Iteration,
               topics: tuple[str, ...] | None, *, group: bool
               ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Rebind the partitions of ``fetches`` that exist again under their names (read as
        new ones: positions start over); return those that no longer exist, and those
        ``topics`` (a subscription without a ``group``) have that ``fetches`` lack. An
        assignment (``topics`` is ``None``) with a partition missing raises
        :class:`~embedlog.errors.UnknownTopicError` (again at every call until it exists)."""
        changes = self.log._refresh_topics()
        self.rebound = []
        if changes == self.seen:
            return [], []
        missing, self.rebound = rebind(self.log, fetches, iteration)
        if missing and topics is None:
            raise UnknownTopicError(
                f"assigned partitions {', '.join(f'{t.topic}-{t.partition}' for t in missing)}"
                f" no longer exist in {self.log.path} (their topic was deleted or shrunk)")
        self.seen = changes
        if topics is None or group:
            return missing, []
        return missing, sorted(subscribed(self.log, topics) - fetches.keys())


def rebind(log: ClientLog, fetches: dict[TopicPartition, Fetch], iteration: Iteration
           ) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """Read the partitions of ``fetches`` that exist again under their names as new ones
    (positions start over); those that no longer exist, and those read anew."""
    gone = stale(log, fetches)
    if gone:
        iteration.abandon(fetches)
    missing, rebound = [], []
    for tp in gone:
        p = current(log, tp)
        if p is None:
            missing.append(tp)
        else:
            fetches[tp] = Fetch(tp, p)
            rebound.append(tp)
    return missing, rebound


def current(log: ClientLog, tp: TopicPartition) -> ClientPartition | None:
    """The log's partition ``tp`` now, ``None`` if its topic or the partition does not exist."""
    try:
        return log._partition_of(tp.topic, tp.partition)
    except UnknownTopicError:
        return None


def is_current(log: ClientLog, f: Fetch) -> bool:
    """Whether ``f`` reads the partition the log has now under its name (not one of a topic
    deleted since, nor closed with the log)."""
    return current(log, f.tp) is f.p


def stale(log: ClientLog, fetches: Mapping[TopicPartition, Fetch]) -> list[TopicPartition]:
    """The partitions of ``fetches`` that are gone or were replaced (see the module notes)."""
    return [tp for tp, f in fetches.items() if current(log, tp) is not f.p]


def subscribed(log: ClientLog, topics: Iterable[str]) -> set[TopicPartition]:
    """Every partition ``topics`` have now (a topic that does not exist has none)."""
    out: set[TopicPartition] = set()
    for topic in topics:
        try:
            count = log.partition_count(topic)
        except UnknownTopicError:
            continue
        out.update(TopicPartition(topic, i) for i in range(count))
    return out
