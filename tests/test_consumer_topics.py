"""Consumers and topic changes: a topic deleted and created again under a consumer (Kafka's
metadata refresh, KIP-516's new topic), and when the first ``on_assign`` runs."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

import embedlog
from embedlog import TopicPartition, UnknownTopicError
from embedlog.aio import AsyncConsumer
from embedlog.errors import CorruptCheckpointError
from embedlog.metadata import parse_metadata

TP0 = TopicPartition("t", 0)


def tps(*partitions: int) -> list[TopicPartition]:
    return [TopicPartition("t", p) for p in partitions]


def recreate(log: embedlog.Log, partitions: int, per_partition: int) -> set[tuple[int, bytes]]:
    """Delete "t", create it again with ``partitions`` partitions and fresh records."""
    log.delete_topic("t")
    log.create_topic("t", partitions=partitions)
    made = set()
    for p in range(partitions):
        values = [b"new-%d-%d" % (p, i) for i in range(per_partition)]
        log.append_batch("t", values, partition=p)
        made.update((p, v) for v in values)
    return made


def poll_until(consumer: embedlog.Consumer, n: int) -> list[embedlog.Record]:
    out: list[embedlog.Record] = []
    for _ in range(50):
        out += consumer.poll(0.1)
        if len(out) >= n:
            break
    return out


class Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[TopicPartition]]] = []

    def on_assign(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("assign", parts))

    def on_revoke(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("revoke", parts))


@pytest.mark.parametrize("group", [None, "g"])
def test_subscribed_consumer_follows_a_recreated_topic(log: embedlog.Log, group: str | None
                                                        ) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    calls = Calls()
    consumer = log.consumer("t", group=group, on_assign=calls.on_assign,
                            on_revoke=calls.on_revoke, heartbeat_interval_ms=0)
    assert [r.value for r in poll_until(consumer, 5)] == [b"old-%d" % i for i in range(5)]
    if group is not None:
        consumer.commit()
        assert consumer.committed(TP0) == 5
    made = recreate(log, partitions=3, per_partition=2)  # fewer records than the old position
    got = poll_until(consumer, 6)
    assert {(r.partition, r.value) for r in got} == made and len(got) == 6
    assert consumer.assignment() == set(tps(0, 1, 2))
    # t-0 is read as a new partition (its position reset), t-1 and t-2 are assigned
    assert calls.calls == [("assign", tps(0)), ("assign", tps(1, 2))]
    assert consumer.position(TP0) == 2
    if group is not None:
        consumer.commit()
        assert {tp: consumer.committed(tp) for tp in tps(0, 1, 2)} == {
            tp: 2 for tp in tps(0, 1, 2)}
    consumer.close()


def test_group_members_share_a_recreated_topic_with_more_partitions(log: embedlog.Log
                                                                    ) -> None:
    log.create_topic("t", partitions=2)
    members = [log.consumer("t", group="g", heartbeat_interval_ms=0) for _ in range(2)]
    for _ in range(2):
        for c in members:
            c.poll()
    assert [len(c.assignment()) for c in members] == [1, 1]
    made = recreate(log, partitions=4, per_partition=3)
    seen: list[tuple[int, bytes]] = []
    for _ in range(50):
        for c in members:
            seen += [(r.partition, r.value) for r in c.poll(0.01)]
        if len(seen) >= len(made):
            break
    assert sorted(seen) == sorted(made)  # each record once
    mine = [c.assignment() for c in members]
    assert mine[0].isdisjoint(mine[1]) and mine[0] | mine[1] == set(tps(0, 1, 2, 3))
    for c in members:
        c.close()


def test_a_recreated_topic_has_no_committed_offsets(log: embedlog.Log) -> None:
    """The deleted topic's committed offsets are dropped (as Kafka's coordinator does): a
    consumer of the new topic starts by auto_offset_reset, not at an old topic's offset that
    happens to lie inside the new log."""
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    with log.consumer("t", group="g") as consumer:
        consumer.commit({TP0: 3})
    with log.consumer("t", group="other") as consumer:
        consumer.commit({TP0: 4})
    made = recreate(log, partitions=1, per_partition=10)
    with log.consumer("t", group="g") as consumer:
        assert consumer.committed(TP0) is None
        got = poll_until(consumer, 10)
        assert {(r.partition, r.value) for r in got} == made
    with log.consumer("t", group="other", auto_offset_reset="latest") as consumer:
        assert consumer.committed(TP0) is None and consumer.position(TP0) == 10


def test_a_damaged_offsets_file_neither_blocks_nor_loses_to_a_topic_deletion(
        log: embedlog.Log, log_dir: pathlib.Path) -> None:
    log.create_topic("t", partitions=1)
    for group in ("bad", "good"):
        with log.consumer("t", group=group) as consumer:
            consumer.commit({TP0: 1})
    damaged = log_dir / "__groups" / "bad" / "offsets"
    damaged.write_bytes(b"0\n1\nt 0 not-a-number\n")
    log.delete_topic("t")
    log.create_topic("t", partitions=1)
    assert damaged.read_bytes() == b"0\n1\nt 0 not-a-number\n"
    assert log.consumer("t", group="good").committed(TP0) is None


def test_a_stale_position_is_never_committed_to_the_new_topic(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    consumer = log.consumer("t", group="g", enable_auto_commit=True)
    assert len(poll_until(consumer, 5)) == 5
    recreate(log, partitions=1, per_partition=10)
    consumer.commit()  # before any poll saw the change: position 5 belongs to the old topic
    assert consumer.committed(TP0) is None
    consumer.close()  # the final auto-commit neither
    assert log.consumer("t", group="g").committed(TP0) is None


def test_deleted_topic_is_revoked_and_its_return_is_picked_up(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    log.create_topic("u", partitions=1)
    log.append_batch("u", [b"u"], partition=0)
    calls = Calls()
    consumer = log.consumer("t", "u", on_assign=calls.on_assign, on_revoke=calls.on_revoke)
    assert [r.value for r in poll_until(consumer, 1)] == [b"u"]
    log.delete_topic("t")
    assert consumer.poll(0.05) == []
    assert consumer.assignment() == {TopicPartition("u", 0)}
    assert calls.calls[-1] == ("revoke", tps(0, 1))
    made = recreate_from_nothing(log)
    got = poll_until(consumer, 1)
    assert {(r.partition, r.value) for r in got} == made
    assert calls.calls[-1] == ("assign", tps(0))


def recreate_from_nothing(log: embedlog.Log) -> set[tuple[int, bytes]]:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"back"], partition=0)
    return {(0, b"back")}


def test_assigned_consumer_of_a_deleted_partition_gets_an_error(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=1)
    consumer = log.consumer()
    consumer.assign(tps(1))
    assert len(poll_until(consumer, 5)) == 5
    log.delete_topic("t")
    with pytest.raises(UnknownTopicError, match="t-1"):
        consumer.poll()
    log.create_topic("t", partitions=1)  # t-1 still missing
    with pytest.raises(UnknownTopicError, match="t-1"):
        consumer.poll(0.05)
    made = recreate(log, partitions=2, per_partition=3)
    got = poll_until(consumer, 3)  # a new partition: auto_offset_reset, not old position 5
    assert {(r.partition, r.value) for r in got} == {m for m in made if m[0] == 1}
    assert consumer.assignment() == set(tps(1))


def test_latest_reset_applies_to_a_recreated_partition(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(3)], partition=0)
    consumer = log.consumer("t", auto_offset_reset="latest")
    assert consumer.position(TP0) == 3
    recreate(log, partitions=1, per_partition=8)
    assert consumer.poll() == []
    assert consumer.position(TP0) == 8
    log.append("t", b"after", partition=0)
    assert [r.value for r in poll_until(consumer, 1)] == [b"after"]


@pytest.mark.parametrize("group", [None, "g"])
def test_read_only_consumer_follows_a_topic_recreated_between_two_polls(
        log: embedlog.Log, log_dir: pathlib.Path, group: str | None) -> None:
    # the writer deletes and re-creates with as many partitions, more records than the old
    # position: only the topic id tells the new topic from the old one
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    with embedlog.open(log_dir, read_only=True) as ro:
        consumer = ro.consumer("t", group=group)
        assert len(poll_until(consumer, 5)) == 5
        if group is not None:
            consumer.commit()
        made = recreate(log, partitions=1, per_partition=10)
        got = poll_until(consumer, 10)
        assert [(r.partition, r.value) for r in got] == sorted(made, key=lambda m: m[1])
        log.delete_topic("t")
        log.create_topic("t", partitions=3)  # and again, grown
        for p in range(3):
            log.append("t", b"third-%d" % p, partition=p)
        got = poll_until(consumer, 3)
        assert sorted(r.value for r in got) == [b"third-0", b"third-1", b"third-2"]
        assert consumer.assignment() == set(tps(0, 1, 2))
        assert ro.partition_count("t") == 3 and ro.end_offset("t", 2) == 1
        consumer.close()


def test_a_read_only_consumer_never_commits_a_stale_position(
        log: embedlog.Log, log_dir: pathlib.Path) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    with embedlog.open(log_dir, read_only=True) as ro:
        consumer = ro.consumer("t", group="g")
        assert len(poll_until(consumer, 5)) == 5
        recreate(log, partitions=1, per_partition=10)
        consumer.commit()  # no poll since: position 5 is the old topic's
        assert consumer.committed(TP0) is None
        assert [r.offset for r in poll_until(consumer, 10)] == list(range(10))
        consumer.commit()
        assert consumer.committed(TP0) == 10
        consumer.close()


def test_read_only_view_forgets_a_deleted_topic(log: embedlog.Log, log_dir: pathlib.Path
                                                 ) -> None:
    log.create_topic("t", partitions=1)
    with embedlog.open(log_dir, read_only=True) as ro:
        consumer = ro.consumer()
        consumer.assign([TP0])
        assert consumer.poll() == []
        log.delete_topic("t")
        with pytest.raises(UnknownTopicError, match="t-0"):
            consumer.poll()
        assert ro.topics() == []
        with pytest.raises(UnknownTopicError):
            ro.end_offset("t", 0)


def test_topic_ids_in_embedlog_json(log: embedlog.Log, log_dir: pathlib.Path) -> None:
    log.create_topic("t", partitions=1)
    first = json.loads((log_dir / "embedlog.json").read_bytes())["topics"]["t"]["id"]
    log.delete_topic("t")
    log.create_topic("t", partitions=1)
    doc = json.loads((log_dir / "embedlog.json").read_bytes())
    second = doc["topics"]["t"]["id"]
    assert len(first) == len(second) == 32 and first != second
    ids: dict[str, str] = {}
    parse_metadata(json.dumps(doc).encode(), ids=ids)
    assert ids == {"t": second}
    del doc["topics"]["t"]["id"]  # an older embedlog's file
    assert parse_metadata(json.dumps(doc).encode(), ids=ids) and ids == {"t": second}
    for bad in ["", "X" * 32, 7, second.upper(), second + "0"]:
        doc["topics"]["t"]["id"] = bad
        with pytest.raises(CorruptCheckpointError, match="id"):
            parse_metadata(json.dumps(doc).encode())


# --------------------------------------------------------------------------- first on_assign


@pytest.mark.parametrize("group", [None, "g"])
def test_first_on_assign_runs_at_the_first_poll_and_may_use_the_consumer(
        log: embedlog.Log, group: str | None) -> None:
    # Kafka's listener pattern: the callback refers to the consumer being constructed.
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"%d" % i for i in range(10)], partition=0)
    assigned: list[list[TopicPartition]] = []

    def on_assign(parts: list[TopicPartition]) -> None:
        assigned.append(parts)
        for tp in parts:
            consumer.seek(tp, 7)

    consumer = log.consumer("t", group=group, on_assign=on_assign)
    assert assigned == []  # not inside the constructor
    assert consumer.assignment() == {TP0}  # the partitions are taken already
    assert [r.offset for r in poll_until(consumer, 3)] == [7, 8, 9]
    assert assigned == [[TP0]]
    consumer.close()


def test_position_and_seek_before_the_first_poll_run_on_assign_first(log: embedlog.Log
                                                                     ) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"%d" % i for i in range(10)], partition=0)
    consumer = log.consumer("t", on_assign=lambda parts: consumer.seek(parts[0], 4))
    assert consumer.position(TP0) == 4  # what the first poll would read from
    consumer.seek(TP0, 8)  # the application's own seek comes after the callback's
    assert [r.offset for r in consumer.poll()] == [8, 9]


def test_partitions_revoked_before_on_assign_ran_are_not_revoked_to_the_application(
        log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    calls = Calls()
    consumer = log.consumer("t", on_assign=calls.on_assign, on_revoke=calls.on_revoke)
    consumer.close()
    assert calls.calls == []


def test_a_member_is_told_only_of_partitions_it_keeps_past_its_first_poll(
        log: embedlog.Log) -> None:
    log.create_topic("t", partitions=4)
    r1, r2 = Calls(), Calls()
    c1 = log.consumer("t", group="g", on_assign=r1.on_assign, on_revoke=r1.on_revoke,
                      heartbeat_interval_ms=0)
    assert c1.assignment() == set(tps(0, 1, 2, 3))  # taken at construction, not announced
    c2 = log.consumer("t", group="g", on_assign=r2.on_assign, on_revoke=r2.on_revoke,
                      heartbeat_interval_ms=0)
    c1.poll()
    c2.poll()
    # c1 gave up half before its first poll: it is told only of the half it keeps
    assert r1.calls == [("assign", sorted(c1.assignment()))] and len(c1.assignment()) == 2
    assert r2.calls == [("assign", sorted(c2.assignment()))] and len(c2.assignment()) == 2
    c1.close()
    c2.close()


# --------------------------------------------------------------------------- asyncio


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_async_consumer_follows_a_recreated_topic(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    async with AsyncConsumer(log, "t", group="g") as consumer:
        got = await consumer.getmany(timeout_ms=1000)
        assert len(got[TP0]) == 5
        await consumer.commit()
        made = recreate(log, partitions=3, per_partition=2)
        seen: set[tuple[int, bytes]] = set()
        for _ in range(50):
            for records in (await consumer.getmany(timeout_ms=100)).values():
                seen.update((r.partition, r.value) for r in records)
            if len(seen) >= 6:
                break
        assert seen == made
        assert consumer.assignment() == set(tps(0, 1, 2))
        assert await consumer.position(TP0) == 2


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_async_assigned_consumer_of_a_deleted_partition_gets_an_error(
        log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    async with AsyncConsumer(log) as consumer:
        await consumer.assign([TP0])
        log.delete_topic("t")
        with pytest.raises(UnknownTopicError):
            await consumer.getmany(timeout_ms=100)
        log.create_topic("t", partitions=1)
        log.append_batch("t", [b"new-0-0", b"new-0-1"], partition=0)
        got = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 10)
        assert [r.value for r in got[TP0]] == [b"new-0-0", b"new-0-1"]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_async_consumer_drops_records_it_stashed_from_a_deleted_topic(
        log: embedlog.Log) -> None:
    log.create_topic("t", partitions=1)
    log.append_batch("t", [b"old-%d" % i for i in range(5)], partition=0)
    async with AsyncConsumer(log, "t", group="g", enable_auto_commit=True) as consumer:
        got = await consumer.getmany(timeout_ms=1000, max_records=2)  # 3 more stay stashed
        assert [r.value for r in got[TP0]] == [b"old-0", b"old-1"]
        made = recreate(log, partitions=1, per_partition=10)
        await consumer.commit()  # the new partition's position, not the stash's old offset 2
        assert await consumer.committed(TP0) == 0
        seen: list[bytes] = []
        for _ in range(50):
            for records in (await consumer.getmany(timeout_ms=100)).values():
                seen += [r.value for r in records]
            if len(seen) >= 10:
                break
        assert {(0, v) for v in seen} == made and len(seen) == 10
    with log.consumer("t", group="g") as sync:
        assert sync.committed(TP0) == 10  # stop's final commit
