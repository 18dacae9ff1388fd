"""The consumer's view of topic metadata: which of its partitions are still the log's.

A :class:`~embedlog.fetcher.Fetch` holds the partition object it reads. When its topic is
deleted (and perhaps created again under the same name, with as many partitions or more or
fewer), the log hands out new partition objects: the fetch's one is closed and reads nothing.
Kafka's consumer sees such changes at its next metadata refresh; embedlog's looks at every
``poll`` (a dictionary look-up per assigned partition; on a read-only open, after one ``lstat``
of ``embedlog.json``, whose topic ids tell a re-created topic from the one deleted) and:

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
from .fetcher import Fetch
from .records import TopicPartition

__all__ = ["current", "is_current", "stale", "subscribed"]


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
    """The partitions of ``fetches`` that are gone or were replaced (see the module notes),
    after taking in what the writer changed (a read-only open)."""
    log._refresh_topics()
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
