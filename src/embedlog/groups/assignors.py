"""Partition assignors with Kafka's definitions (``RangeAssignor``, ``RoundRobinAssignor``).

Both are pure functions of the members (id -> subscribed topics) and the partition count of each
topic, so every member computes the same assignment from the same membership. Members are
ordered by member id, as Kafka orders them when no ``group.instance.id`` is set.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Final

from ..records import TopicPartition

__all__ = ["ASSIGNORS", "Assignment", "range_assign", "round_robin_assign"]

Assignment = dict[str, list[TopicPartition]]


def range_assign(
    members: Mapping[str, Collection[str]], partitions: Mapping[str, int]
) -> Assignment:
    """Per topic, the consumers subscribed to it (sorted) get consecutive ranges of its
    partitions; the first ``count % consumers`` of them get one extra."""
    out: Assignment = {m: [] for m in members}
    for topic in sorted({t for topics in members.values() for t in topics}):
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        count = partitions.get(topic, 0)
        each, extra = divmod(count, len(subscribed))
        for i, member in enumerate(subscribed):
            start = each * i + min(i, extra)
            length = each + (1 if i < extra else 0)
            out[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
    return out


def round_robin_assign(
    members: Mapping[str, Collection[str]], partitions: Mapping[str, int]
) -> Assignment:
    """All partitions of all subscribed topics, sorted by topic then number, dealt in turn to
    the sorted members, skipping members not subscribed to a partition's topic."""
    out: Assignment = {m: [] for m in members}
    order = sorted(members)
    if not order:
        return out
    turn = 0
    for topic in sorted({t for topics in members.values() for t in topics}):
        for p in range(partitions.get(topic, 0)):
            while topic not in members[order[turn % len(order)]]:
                turn += 1
            out[order[turn % len(order)]].append(TopicPartition(topic, p))
            turn += 1
    return out


ASSIGNORS: Final[dict[str, Callable[[Mapping[str, Collection[str]], Mapping[str, int]],
                                    Assignment]]] = {
    "range": range_assign,
    "roundrobin": round_robin_assign,
}
"""Assignors by ``partition.assignment.strategy`` short name."""
