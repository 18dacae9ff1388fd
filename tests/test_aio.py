"""asyncio clients: AsyncProducer / AsyncConsumer against the sync API's guarantees --
order, durability, wake-ups in and across processes, cancellation, groups in one loop."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import embedlog
from doubles import ScriptedFS
from embedlog import LogClosedError, StorageError, TopicPartition, UnknownTopicError, UsageError
from embedlog.aio import AsyncConsumer, AsyncProducer

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
TP0 = TopicPartition("t", 0)


async def drain(consumer: AsyncConsumer, n: int) -> list[Any]:
    out: list[Any] = []
    while len(out) < n:
        got = await consumer.getmany(timeout_ms=2000)
        assert got, f"only {len(out)} of {n} records arrived"
        out += [r for records in got.values() for r in records]
    return out


async def test_producer_futures_order_and_errors(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    async with AsyncProducer(log, linger_ms=1) as producer:
        futures = [await producer.send("t", f"{i}".encode(), partition=i % 2)
                   for i in range(500)]
        metas = await asyncio.gather(*futures)
        assert [m.offset for m in metas if m.partition == 0] == list(range(250))
        meta = await producer.send_and_wait("t", b"k-rec", key=b"k", timestamp_ms=7)
        assert (meta.offset, meta.timestamp) == (log.end_offset("t", meta.partition) - 1, 7)
        with pytest.raises(UnknownTopicError):
            await producer.send_and_wait("nope", b"x")
        await producer.send("t", b"last", partition=1)
        await producer.flush()
        assert log.end_offset("t", 1) == 251
        assert producer.partitions_for("t") == {0, 1}
    assert [r.value for r in log.read("t", 0)][:3] == [b"0", b"2", b"4"]
    with pytest.raises(LogClosedError):
        await producer.send("t", b"after stop")
    with pytest.raises(UsageError):
        await AsyncProducer(log).send("t", b"not started")


async def test_producer_fsync_durability(tmp_path: pathlib.Path) -> None:
    with embedlog.open(tmp_path / "log", durability="fsync") as log:
        log.create_topic("t")
        async with AsyncProducer(log) as producer:
            assert producer.durability == "fsync"
            metas = await asyncio.gather(*[producer.send_and_wait("t", b"v") for _ in range(50)])
            assert sorted(m.offset for m in metas) == list(range(50))


async def test_consumer_shapes_and_commits_count_only_handed_out(log: embedlog.Log) -> None:
    log.create_topic("t")
    log.append_batch("t", [f"{i}".encode() for i in range(30)], partition=0)
    async with AsyncConsumer(log, "t", group="g", max_poll_records=20) as consumer:
        first = await consumer.getmany(timeout_ms=1000, max_records=5)
        assert [r.offset for r in first[TP0]] == [0, 1, 2, 3, 4]
        assert await consumer.position(TP0) == 5          # 15 more were fetched, not handed out
        await consumer.commit()
        assert await consumer.committed(TP0) == 5
        assert (await consumer.getone()).offset == 5
        seen = []
        async for record in consumer:
            seen.append(record.offset)
            if record.offset == 29:
                break
        assert seen == list(range(6, 30))
        consumer.seek(TP0, 3)
        assert (await consumer.getone()).offset == 3
        await consumer.seek_to_end()
        assert await consumer.getmany(timeout_ms=50) == {}
        await consumer.commit({TP0: 12})
        assert await consumer.committed(TP0) == 12
        assert await consumer.end_offsets([TP0]) == {TP0: 30}
    with pytest.raises(LogClosedError):
        await consumer.getmany()


async def test_blocked_getmany_wakes_and_leaves_the_loop_free(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=3)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    async def later() -> None:
        await asyncio.sleep(0.3)
        log.append("t", b"late", partition=2)

    async with AsyncConsumer(log, "t") as consumer:
        beat = asyncio.create_task(ticker())
        writer = asyncio.create_task(later())
        got = await consumer.getmany(timeout_ms=20_000)
        assert ticks >= 1  # the loop ran other tasks while getmany waited
        assert [r.value for rs in got.values() for r in rs] == [b"late"]
        beat.cancel()
        await writer


async def test_wakes_on_records_from_another_process(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
    script = textwrap.dedent(f"""
        import time, embedlog
        with embedlog.open({str(log_dir)!r}) as log:
            time.sleep(0.3)
            log.append_batch("t", [b"from", b"afar"], partition=0)
    """)
    with embedlog.open(log_dir, read_only=True) as reader:
        async with AsyncConsumer(reader, "t") as consumer:
            assert await consumer.getmany(timeout_ms=0) == {}
            proc = subprocess.Popen([sys.executable, "-c", script])
            try:
                got = await consumer.getmany(timeout_ms=30_000)
            finally:
                proc.wait()
            assert [r.value for r in got.get(TP0, [])] == [b"from", b"afar"]


async def test_cancelled_getmany_loses_nothing_and_commits_nothing(log: embedlog.Log) -> None:
    log.create_topic("t")
    async with AsyncConsumer(log, "t", group="g") as consumer:
        for round_ in range(3):
            waiting = asyncio.create_task(consumer.getmany(timeout_ms=20_000))
            await asyncio.sleep(0.05)
            log.append_batch("t", [b"%d" % round_] * 10, partition=0)
            waiting.cancel()  # the fetch may or may not have returned: nothing may be lost
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await consumer.commit()
            assert await consumer.committed(TP0) == 10 * round_  # nothing handed out yet
            records = await drain(consumer, 10)
            assert [r.offset for r in records] == list(range(10 * round_, 10 * round_ + 10))
            await consumer.commit()
        assert await consumer.committed(TP0) == 30


async def test_many_members_of_one_group_in_one_loop(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=6)
    for p in range(6):
        log.append_batch("t", [f"{p}-{i}".encode() for i in range(100)], partition=p)
    seen: list[tuple[int, int]] = []
    assigned: dict[int, set[int]] = {}

    def member(k: int) -> AsyncConsumer:
        consumer: AsyncConsumer

        async def on_assign(tps: list[TopicPartition]) -> None:
            assigned.setdefault(k, set()).update(tp.partition for tp in tps)

        async def on_revoke(tps: list[TopicPartition]) -> None:
            await consumer.commit()  # records handed out so far are done
            assigned[k].difference_update(tp.partition for tp in tps)

        consumer = AsyncConsumer(log, "t", group="g", on_assign=on_assign, on_revoke=on_revoke,
                                 max_poll_records=7, heartbeat_interval_ms=50,
                                 session_timeout_ms=5000)
        return consumer

    members = [member(k) for k in range(3)]

    async def run(consumer: AsyncConsumer) -> None:
        while len(seen) < 600:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                seen.extend((r.partition, r.offset) for r in records)
            await consumer.commit()
            await asyncio.sleep(0.01)  # let the others join before all is read

    await members[0].start()
    await asyncio.gather(*(m.start() for m in members[1:]))
    await asyncio.wait_for(asyncio.gather(*(run(m) for m in members)), 45)
    assert sorted(seen) == [(p, i) for p in range(6) for i in range(100)]  # once each
    owned = [assigned.get(k, set()) for k in range(3)]
    assert sum(len(s) for s in owned) == 6 and set().union(*owned) == set(range(6))
    for m in members:
        await m.stop()


BAD_PARTITIONS = [-1, 1.5, None, "t", b"t", [1], ("t",), ["t"], [("t", "0")], [("t", -1)]]


@pytest.mark.parametrize("bad", BAD_PARTITIONS, ids=repr)
async def test_consumer_refuses_malformed_partitions_with_embedlog_errors(
        log: embedlog.Log, bad: Any) -> None:
    """Every call taking partitions checks them (as the sync consumer does) before doing
    anything: an embedlog error, never a bare TypeError, and the consumer still works."""
    log.create_topic("t", partitions=2)
    log.append_batch("t", [b"a", b"b"], partition=0)
    async with AsyncConsumer(log, "t") as consumer:
        calls = [consumer.assign(bad), consumer.beginning_offsets(bad),
                 consumer.end_offsets(bad)]
        if isinstance(bad, list):  # the seeks take partitions one argument each
            calls += [consumer.seek_to_beginning(*bad), consumer.seek_to_end(*bad)]
        else:
            calls += [consumer.seek_to_beginning(bad), consumer.seek_to_end(bad)]
        for call in calls:
            with pytest.raises(UsageError):
                await call
        got = await consumer.getmany(timeout_ms=1000)
        assert [r.value for r in got[TopicPartition("t", 0)]] == [b"a", b"b"]


@pytest.mark.parametrize("bad", [None, "5000", -1, float("nan"), True, [5000]], ids=repr)
async def test_consumer_refuses_a_malformed_auto_commit_interval(log: embedlog.Log, bad: Any
                                                                  ) -> None:
    with pytest.raises(UsageError, match="auto_commit_interval_ms"):
        AsyncConsumer(log, group="g", enable_auto_commit=True, auto_commit_interval_ms=bad)


@pytest.mark.parametrize("bad", [5, None, [("t", 0)], "t"], ids=repr)
async def test_consumer_offsets_for_times_refuses_what_is_not_a_mapping(
        log: embedlog.Log, bad: Any) -> None:
    log.create_topic("t")
    async with AsyncConsumer(log, "t") as consumer:
        with pytest.raises(UsageError, match="timestamps"):
            await consumer.offsets_for_times(bad)
        assert await consumer.offsets_for_times({TopicPartition("t", 0): 0}) == {
            TopicPartition("t", 0): None}


async def test_subscribe_takes_one_topic_name_or_an_iterable_and_refuses_others(
        log: embedlog.Log) -> None:
    log.create_topic("events")
    async with AsyncConsumer(log) as consumer:
        for bad in (5, None, [b"events"]):
            with pytest.raises(UsageError):
                await consumer.subscribe(bad)
        await consumer.subscribe("events")  # a name, not its letters
        assert consumer.assignment() == {TopicPartition("events", 0)}


async def test_a_send_waiting_for_buffer_space_when_stop_comes_raises(log: embedlog.Log) -> None:
    """stop() flushes what was queued when it began; a send still waiting for space then is
    refused (LogClosedError) rather than handed a future that never resolves."""
    log.create_topic("t")
    producer = AsyncProducer(log, max_buffer_records=1, linger_ms=20)
    await producer.start()
    first = await producer.send("t", b"1")
    waiting = asyncio.create_task(producer.send("t", b"2"))
    await asyncio.sleep(0)  # the second send now waits for buffer space
    await producer.stop()
    assert (await first).offset == 0
    with pytest.raises(LogClosedError):
        await waiting
    assert [r.value for r in log.read("t", 0)] == [b"1"]


async def test_a_cancelled_stop_is_finished_by_the_next_one(log: embedlog.Log) -> None:
    """stop() cancelled while it waits for a getmany in flight (here: the fetch lock held)
    used to leave the consumer open for good -- the next stop() returned at once -- so its
    group's partitions stayed leased and no other member could ever read them."""
    log.create_topic("t", partitions=2)
    consumer = AsyncConsumer(log, "t", group="g")
    await consumer.start()
    async with consumer._lock:  # as a getmany waiting for records holds it
        stopping = asyncio.create_task(consumer.stop())
        await asyncio.sleep(0)
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
    await consumer.stop()
    other = log.consumer("t", group="g", heartbeat_interval_ms=0)
    other.poll(0.1)
    assert other.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    other.close()
    with pytest.raises(LogClosedError):
        await consumer.getmany()


async def test_a_cancelled_producer_stop_still_writes_what_was_sent(log: embedlog.Log) -> None:
    """Cancelling stop() while it waited for the last round used to cancel the sender too:
    a record send() had accepted was never written and its future never resolved."""
    log.create_topic("t")
    producer = AsyncProducer(log, linger_ms=200)  # the round lingers while stop is cancelled
    await producer.start()
    sent = await producer.send("t", b"accepted")
    stopping = asyncio.create_task(producer.stop())
    await asyncio.sleep(0)
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)
    assert not sent.done()
    await producer.stop()  # waits for the same shutdown
    assert (await sent).offset == 0
    assert [r.value for r in log.read("t", 0)] == [b"accepted"]


async def test_a_stop_cancelled_while_closing_is_finished_by_the_next_one(log: embedlog.Log
                                                                          ) -> None:
    """stop() cancelled while the sync consumer closes (here: in an async on_revoke) used to
    make the next stop() commit again on the closed consumer: LogClosedError."""
    log.create_topic("t", partitions=2)
    log.append("t", b"x", partition=0)
    revoking = asyncio.Event()

    async def on_revoke(tps: list[TopicPartition]) -> None:
        revoking.set()
        await asyncio.sleep(0.05)

    consumer = AsyncConsumer(log, "t", group="g", enable_auto_commit=True,
                             on_revoke=on_revoke)
    await consumer.start()
    assert len(await drain(consumer, 1)) == 1
    stopping = asyncio.create_task(consumer.stop())
    await revoking.wait()
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)
    await consumer.stop()
    with log.consumer(group="g") as check:
        assert check.committed(TP0) == 1


async def test_stop_of_an_evicted_member_logs_its_failed_auto_commit(
        log: embedlog.Log, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """As the sync consumer's close: stop() commits if possible; a member evicted meanwhile
    has its final auto-commit (and the auto-commit of close's revoke) refused and logged, and
    the exception of an ``async with`` body is the one that propagates."""
    from embedlog.errors import GroupError
    from embedlog.groups import membership
    log.create_topic("t", partitions=2)
    consumer = AsyncConsumer(log, "t", group="g", enable_auto_commit=True,
                             session_timeout_ms=1000, heartbeat_interval_ms=0)
    await consumer.start()
    other = log.consumer("t", group="g", session_timeout_ms=1000, heartbeat_interval_ms=0)
    for _ in range(400):  # the group settles on one partition each
        await consumer.getmany(timeout_ms=5)
        other.poll(0.005)
        if len(consumer.assignment()) == len(other.assignment()) == 1:
            break
    assert len(consumer.assignment()) == len(other.assignment()) == 1
    (owned,) = consumer.assignment()
    log.append_batch("t", [b"a", b"b", b"c"], partition=owned.partition)
    got = await consumer.getmany(timeout_ms=2000, max_records=1)
    assert [r.offset for r in got[owned]] == [0]  # two records stay stashed
    real = membership.monotonic_ms
    monkeypatch.setattr(membership, "monotonic_ms", lambda: real() + 5000)
    other.poll()  # evicts the asyncio consumer's member
    with pytest.raises(GroupError, match="no longer a member"):
        await consumer.commit()  # an explicit commit still raises
    with caplog.at_level("WARNING", logger="embedlog"), \
            pytest.raises(KeyError, match="the body's own"):
        async with consumer:
            raise KeyError("the body's own error")
    warnings = [r for r in caplog.records if r.name.startswith("embedlog")]
    assert [r.levelname for r in warnings] == ["WARNING"]
    assert "auto-commit" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None
    assert isinstance(warnings[0].exc_info[1], GroupError)
    with pytest.raises(LogClosedError):
        await consumer.getmany()
    assert other.committed(owned) != 1  # the refused commit wrote nothing
    for _ in range(400):  # stop released its lease
        if other.assignment() == {TP0, TopicPartition("t", 1)}:
            break
        other.poll(0.005)
    assert other.assignment() == {TP0, TopicPartition("t", 1)}


async def test_an_evicted_member_with_auto_commit_rejoins_as_the_sync_consumer_does(
        log: embedlog.Log, monkeypatch: pytest.MonkeyPatch) -> None:
    # Partitions lost by an evicted member are not auto-committed (they may be another
    # member's by now): the sync consumer skips that commit and rejoins; so must getmany.
    from embedlog.groups import membership
    log.create_topic("t", partitions=2)
    for p in range(2):
        log.append_batch("t", [b"x"] * 5, partition=p)
    revoked: list[list[TopicPartition]] = []
    evicted = AsyncConsumer(log, "t", group="g", enable_auto_commit=True, heartbeat_interval_ms=0,
                            session_timeout_ms=1000, on_revoke=revoked.append)
    await evicted.start()
    other = log.consumer("t", group="g", session_timeout_ms=1000, heartbeat_interval_ms=0)
    while len(evicted.assignment()) != 1 or len(other.assignment()) != 1:
        await evicted.getmany(timeout_ms=10)
        other.poll(0.01)
    lost = sorted(evicted.assignment())
    while await evicted.position(lost[0]) < 5:
        await evicted.getmany(timeout_ms=10)
    await evicted.commit({lost[0]: 1})
    real = membership.monotonic_ms
    monkeypatch.setattr(membership, "monotonic_ms", lambda: real() + 5000)
    other.poll()  # evicts the silent member
    revoked.clear()
    await evicted.getmany(timeout_ms=100)  # notices, lets go without committing, rejoins
    assert revoked[0] == lost
    assert other.committed(lost[0]) == 1  # not 5, the position it had handed out
    monkeypatch.setattr(membership, "monotonic_ms", real)
    await evicted.stop()
    other.close()


async def test_a_batch_that_fails_to_be_written_fails_its_records_futures(log: embedlog.Log
                                                                          ) -> None:
    # aiokafka fails the futures of a batch the broker did not take; here the futures resolve
    # after the round's batches were written, so none of them may report an offset that was
    # never written, nor hand the batch's error to a record that was not in it.
    log.create_topic("t", partitions=2)
    async with AsyncProducer(log, linger_ms=50, max_batch_records=2) as producer:
        fs = ScriptedFS()
        fs.fail("pwrite", match=lambda call: (call.path or "").endswith(".log")
                and "/t-0/" in (call.path or ""))
        with embedlog._io.use_backend(fs):
            futures = [await producer.send("t", b"r%d" % i, partition=0) for i in range(3)]
            futures.append(await producer.send("t", b"other", partition=1))
            results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, StorageError) for r in results[:3]), results
    assert list(log.read("t", 0)) == []
    meta = results[3]
    assert isinstance(meta, embedlog.RecordMetadata), meta  # another partition: written
    assert [r.value for r in log.read("t", 1)] == [b"other"]


async def test_the_first_on_assign_of_start_may_use_the_consumer(log: embedlog.Log) -> None:
    # aiokafka's listener pattern: on_partitions_assigned seeks to offsets kept elsewhere.
    # The first assignment comes from start() itself, so the consumer must be usable there.
    log.create_topic("t", partitions=2)
    for p in range(2):
        log.append_batch("t", [b"%d-%d" % (p, i) for i in range(10)], partition=p)
    seen: dict[TopicPartition, int] = {}

    class Listener:
        async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            for tp in assigned:
                seen[tp] = await consumer.position(tp)
                consumer.seek(tp, 7)
            await consumer.commit({tp: 3 for tp in assigned})

        def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            pass

    consumer = AsyncConsumer(log, "t", group="g", listener=Listener())
    async with consumer:
        assert seen == {TopicPartition("t", 0): 0, TopicPartition("t", 1): 0}
        assert consumer.assignment() == set(seen)
        got = await drain(consumer, 6)
        assert sorted((r.partition, r.offset) for r in got) == [
            (p, o) for p in range(2) for o in (7, 8, 9)]
        assert await consumer.committed(TopicPartition("t", 1)) == 3
    with pytest.raises(UnknownTopicError):  # a failed start leaves nothing running
        await AsyncConsumer(log, "missing", group="g2").start()
