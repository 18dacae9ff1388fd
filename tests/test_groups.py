"""Consumer groups: assignors, membership, rebalances, fencing, and members in processes."""

from __future__ import annotations

import contextlib
import gc
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition
from embedlog.errors import GroupError, InvalidConfigError
from embedlog.groups import GroupState, membership, range_assign, round_robin_assign

TESTS = str(pathlib.Path(__file__).resolve().parent)
SRC = str(pathlib.Path(TESTS).parent / "src")


def tps(topic: str, *parts: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in parts]


def fill(log: embedlog.Log, topic: str, partitions: int, per_partition: int,
         start: int = 0) -> None:
    for p in range(partitions):
        log.append_batch(topic, [b"%d-%d" % (p, i) for i in range(start, start + per_partition)],
                         partition=p)


# --------------------------------------------------------------------------- assignors


def test_assignors_match_kafkas_documented_examples() -> None:
    # Kafka's RangeAssignor / RoundRobinAssignor javadoc: C0, C1 both subscribed to t0 and t1,
    # three partitions each.
    members = {"C0": ["t0", "t1"], "C1": ["t0", "t1"]}
    counts = {"t0": 3, "t1": 3}
    assert range_assign(members, counts) == {
        "C0": tps("t0", 0, 1) + tps("t1", 0, 1),
        "C1": tps("t0", 2) + tps("t1", 2),
    }
    assert round_robin_assign(members, counts) == {
        "C0": [TopicPartition("t0", 0), TopicPartition("t0", 2), TopicPartition("t1", 1)],
        "C1": [TopicPartition("t0", 1), TopicPartition("t1", 0), TopicPartition("t1", 2)],
    }
    # Unequal subscriptions (RoundRobinAssignor javadoc): C0 t0; C1 t0, t1; C2 t0, t1, t2
    # with 1, 2 and 3 partitions.
    members = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    assert round_robin_assign(members, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": tps("t0", 0),
        "C1": tps("t1", 0),
        "C2": tps("t1", 1) + tps("t2", 0, 1, 2),
    }


@given(
    st.dictionaries(st.text("abcdef", min_size=1, max_size=4),
                    st.sets(st.sampled_from(["x", "y", "z"]), min_size=1), min_size=1,
                    max_size=6),
    st.fixed_dictionaries({"x": st.integers(0, 20), "y": st.integers(0, 20),
                           "z": st.integers(0, 20)}),
)
@settings(max_examples=200, deadline=None)
def test_assignors_give_each_partition_to_one_subscriber(members: dict[str, set[str]],
                                                         counts: dict[str, int]) -> None:
    for assign in (range_assign, round_robin_assign):
        result = assign(members, counts)
        owners: dict[TopicPartition, list[str]] = defaultdict(list)
        for member, parts in result.items():
            for tp in parts:
                assert tp.topic in members[member]
                owners[tp].append(member)
        subscribed = {t for ts in members.values() for t in ts}
        assert set(owners) == {TopicPartition(t, p) for t in subscribed for p in range(counts[t])}
        assert all(len(o) == 1 for o in owners.values())
    # range: per topic, shares differ by at most one
    result = range_assign(members, counts)
    for topic in {t for ts in members.values() for t in ts}:
        shares = [sum(tp.topic == topic for tp in result[m]) for m in members
                  if topic in members[m]]
        assert max(shares) - min(shares) <= 1


# --------------------------------------------------------------------------- members in one process


def settle(a: embedlog.Consumer, b: embedlog.Consumer, everything: set[TopicPartition]) -> None:
    """Poll both until they own every partition between them (leases move within a poll or
    two; a member retries a lease still held by the previous owner every 50 ms)."""
    deadline = time.monotonic() + 10
    while a.assignment() | b.assignment() != everything:
        assert time.monotonic() < deadline, "the group did not settle"
        a.poll(timeout=0.01)
        b.poll(timeout=0.01)
    assert a.assignment().isdisjoint(b.assignment())


class Recorder:
    def __init__(self) -> None:
        self.assigned: list[list[TopicPartition]] = []
        self.revoked: list[list[TopicPartition]] = []

    def on_assign(self, parts: list[TopicPartition]) -> None:
        self.assigned.append(parts)

    def on_revoke(self, parts: list[TopicPartition]) -> None:
        self.revoked.append(parts)


def member(log: embedlog.Log, rec: Recorder | None = None, **kwargs: object
           ) -> embedlog.Consumer:
    rec = rec or Recorder()
    return log.consumer("t", group="g", on_assign=rec.on_assign, on_revoke=rec.on_revoke,
                        heartbeat_interval_ms=0, **kwargs)  # type: ignore[arg-type]


def test_members_share_partitions_and_rebalance(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=6)
    fill(log, "t", 6, 5)
    everything = set(tps("t", *range(6)))
    r1, r2 = Recorder(), Recorder()
    c1 = member(log, r1)
    assert c1.assignment() == everything and r1.assigned == []  # on_assign: at the first poll
    c1.poll()
    assert r1.assigned == [sorted(everything)]
    c2 = member(log, r2)
    assert c2.assignment() == set()  # c1 still holds every lease
    c1.poll()
    mine = set(range_assign({c1.member_id: ["t"], c2.member_id: ["t"]},  # type: ignore[dict-item]
                            {"t": 6})[c1.member_id])  # type: ignore[index]
    assert c1.assignment() == mine and len(mine) == 3
    assert r1.revoked == [sorted(everything - mine)]
    c2.poll()
    assert c2.assignment() == everything - mine
    assert r2.assigned == [sorted(everything - mine)]
    assert c1.generation == c2.generation == 2
    c2.close()
    assert r2.revoked == [sorted(everything - mine)]
    c1.poll()
    assert c1.assignment() == everything and r1.assigned[-1] == sorted(everything - mine)
    c1.close()


def test_members_on_writer_and_read_only_opens_cooperate(log: embedlog.Log,
                                                         log_dir: pathlib.Path) -> None:
    log.create_topic("t", partitions=4)
    fill(log, "t", 4, 10)
    with embedlog.open(log_dir, read_only=True) as ro:
        writer_member, reader_member = member(log), member(ro)
        for _ in range(2):
            writer_member.poll(), reader_member.poll()
        got: dict[TopicPartition, list[int]] = defaultdict(list)
        for c in (writer_member, reader_member):
            c.seek_to_beginning()
            while batch := c.poll():
                for r in batch:
                    got[TopicPartition(r.topic, r.partition)].append(r.offset)
        assert writer_member.assignment().isdisjoint(reader_member.assignment())
        assert len(writer_member.assignment()) == len(reader_member.assignment()) == 2
        assert got == {tp: list(range(10)) for tp in tps("t", *range(4))}
        writer_member.close()
        reader_member.close()


def test_handover_continues_at_the_committed_offset(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    fill(log, "t", 2, 20)
    holder: list[embedlog.Consumer] = []
    c1 = log.consumer("t", group="g", max_poll_records=7, heartbeat_interval_ms=0,
                      on_revoke=lambda parts: holder[0].commit())
    holder.append(c1)
    first = c1.poll()  # 7 records of one partition
    tp = TopicPartition(first[0].topic, first[0].partition)
    c2 = member(log)
    c1.poll()  # rebalance: c1 hands one partition over, committing in on_revoke
    lost = (set(tps("t", 0, 1)) - c1.assignment()).pop()
    assert c2.committed(lost) == (7 if lost == tp else None)
    batch = [r for r in c2.poll() if r.partition == lost.partition]
    assert c2.assignment() == {lost}
    assert batch[0].offset == (7 if lost == tp else 0)  # nothing skipped, nothing repeated
    c1.close()
    c2.close()


def test_a_member_that_lost_a_partition_cannot_commit_it(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    fill(log, "t", 2, 5)
    c1 = member(log)
    c1.poll()
    c2 = member(log)
    c1.commit()  # still the owner of both until its next poll hands one over
    c1.poll()
    lost = (set(tps("t", 0, 1)) - c1.assignment()).pop()
    with pytest.raises(GroupError, match="not assigned"):
        c1.commit({lost: 5})
    kept = c1.assignment().pop()
    c1.commit({kept: 5})
    assert c1.committed(kept) == 5
    c2.close()
    c1.close()


def test_a_silent_member_is_evicted_and_fenced(log: embedlog.Log,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    log.create_topic("t", partitions=2)
    fill(log, "t", 2, 5)
    c1 = member(log, session_timeout_ms=1000)
    c2 = member(log, session_timeout_ms=1000)
    c1.poll(), c2.poll()
    assert len(c1.assignment()) == len(c2.assignment()) == 1
    real = membership.monotonic_ms
    monkeypatch.setattr(membership, "monotonic_ms", lambda: real() + 5000)  # c1 falls silent
    c2.poll()  # c2 heartbeats, finds c1's heartbeat too old and evicts it
    assert c1.member_id not in GroupState.read(
        str(pathlib.Path(log.path) / "__groups" / "g" / "state.json")).members
    with pytest.raises(GroupError, match="no longer a member"):
        c1.commit()
    assert len(c2.assignment()) == 1  # c1 still holds its lease: nobody reads it twice
    old_id = c1.member_id
    c1.poll()  # c1 notices, lets go and joins again as a new member
    assert c1.member_id != old_id
    settle(c1, c2, set(tps("t", 0, 1)))
    c1.close()
    c2.close()


def test_close_of_an_evicted_member_logs_its_failed_auto_commit(
        log: embedlog.Log, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    # Kafka's close commits "if possible": a member evicted meanwhile gets its final
    # auto-commit refused, which close() logs; the body's own exception is what propagates.
    log.create_topic("t", partitions=2)
    fill(log, "t", 2, 5)
    c1 = member(log, session_timeout_ms=1000, enable_auto_commit=True)
    c2 = member(log, session_timeout_ms=1000)
    assert len(c1.poll()) == 5 and len(c2.poll()) == 5
    (owned,) = c1.assignment()
    real = membership.monotonic_ms
    monkeypatch.setattr(membership, "monotonic_ms", lambda: real() + 5000)  # c1 falls silent
    c2.poll()  # evicts c1
    with pytest.raises(GroupError, match="no longer a member"):
        c1.commit()  # an explicit commit still raises
    with caplog.at_level("WARNING", logger="embedlog"), \
            pytest.raises(KeyError, match="the body's own"), c1:
        raise KeyError("the body's own error")
    assert c1.closed and c1.assignment() == set()
    assert c1.committed(owned) is None  # nothing was committed for it
    (warning,) = [r for r in caplog.records if r.name.startswith("embedlog")]
    assert warning.levelname == "WARNING" and "auto-commit" in warning.getMessage()
    assert f"t-{owned.partition}" in warning.getMessage()
    assert warning.exc_info is not None and isinstance(warning.exc_info[1], GroupError)
    deadline = time.monotonic() + 10
    while c2.assignment() != set(tps("t", 0, 1)):  # close released c1's lease
        assert time.monotonic() < deadline, "c1's partition never moved to c2"
        c2.poll(timeout=0.01)
    c2.close()


def test_each_member_is_evicted_after_its_own_session_timeout(
        log: embedlog.Log, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's coordinator measures each member's silence against that member's own
    # session.timeout.ms, not against whichever other member happens to probe it.
    log.create_topic("t", partitions=2)
    patient = member(log, session_timeout_ms=60_000)
    hasty = member(log, session_timeout_ms=1000)
    settle(patient, hasty, set(tps("t", 0, 1)))
    state_path = str(pathlib.Path(log.path) / "__groups" / "g" / "state.json")
    real = membership.monotonic_ms
    monkeypatch.setattr(membership, "monotonic_ms", lambda: real() + 5000)  # patient is silent
    hasty.poll()  # 5 s are within the patient member's 60 s: it stays
    assert patient.member_id in GroupState.read(state_path).members
    owned = {tp: 0 for tp in patient.assignment()}
    patient.commit(owned)
    monkeypatch.setattr(membership, "monotonic_ms", lambda: real() + 61_000)
    hasty.poll()  # past its own timeout: evicted
    assert patient.member_id not in GroupState.read(state_path).members
    with pytest.raises(GroupError, match="no longer a member"):
        patient.commit(owned)
    monkeypatch.setattr(membership, "monotonic_ms", real)
    patient.close()
    hasty.close()


def test_an_abandoned_member_is_replaced(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=3)
    c1, c2 = member(log), member(log)
    c1.poll(), c2.poll()
    del c1  # dropped without close: its locks go with it, as with a dead process
    gc.collect()
    c2.poll()
    assert c2.assignment() == set(tps("t", 0, 1, 2))
    c2.close()


def test_group_configuration_errors(log: embedlog.Log) -> None:
    log.create_topic("t")
    with pytest.raises(InvalidConfigError):
        log.consumer("t", group="../escape")
    c1 = member(log)
    with pytest.raises(GroupError, match="assignor"):
        member(log, assignor="roundrobin")
    with pytest.raises(GroupError, match="unknown assignor"):
        log.consumer("t", group="other", assignor="sticky")
    c1.close()
    c2 = member(log, assignor="roundrobin")  # the group is empty again: any assignor
    c2.close()


def test_a_heartbeat_interval_not_below_the_session_timeout_is_refused(log: embedlog.Log
                                                                       ) -> None:
    # kafka-python refuses it (KafkaConfigurationError): a member heartbeats only that often,
    # so the others would evict it while it polls without pause, over and over.
    log.create_topic("t", partitions=2)
    for heartbeat in (1000, 5000):
        with pytest.raises(InvalidConfigError, match="heartbeat_interval_ms"):
            log.consumer("t", group="g", session_timeout_ms=1000, heartbeat_interval_ms=heartbeat)
    assert not (pathlib.Path(log.path) / "__groups" / "g").exists()  # refused before joining
    with log.consumer("t", session_timeout_ms=1000, heartbeat_interval_ms=5000) as alone:
        assert alone.assignment() == set(tps("t", 0, 1))  # no group: nothing to heartbeat
    with log.consumer("t", group="g", session_timeout_ms=1000, heartbeat_interval_ms=999) as ok:
        assert ok.assignment() == set(tps("t", 0, 1))


# --------------------------------------------------------------------------- members in processes


def group_worker(path: str, out: str, stop: str) -> None:
    """A member in its own process: logs ``pid partition offset start end`` per record it
    processes (times from the system-wide monotonic clock) and commits after each batch."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with embedlog.open(path, read_only=True) as log:
        consumer = log.consumer("t", group="workers", max_poll_records=20,
                                heartbeat_interval_ms=50, session_timeout_ms=10_000)
        while not os.path.exists(stop):
            for r in consumer.poll(timeout=0.05):
                t0 = time.monotonic()
                time.sleep(0.002)  # the "work": wide enough to catch two members at once
                os.write(fd, b"%d %d %d %.6f %.6f\n" % (os.getpid(), r.partition, r.offset, t0,
                                                       time.monotonic()))
            consumer.commit()
        consumer.close()
    os.close(fd)


def _start_worker(path: pathlib.Path, out: pathlib.Path, stop: pathlib.Path
                  ) -> subprocess.Popen[bytes]:
    code = (f"import sys; sys.path[:0] = [{TESTS!r}, {SRC!r}]; import test_groups; "
            f"test_groups.group_worker({str(path)!r}, {str(out)!r}, {str(stop)!r})")
    return subprocess.Popen([sys.executable, "-c", code])


def _lines(path: pathlib.Path) -> list[tuple[int, int, int, float, float]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, part, off, t0, t1 = line.split()
        out.append((int(pid), int(part), int(off), float(t0), float(t1)))
    return out


def _wait_for(condition: object, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.slow
def test_three_processes_share_twelve_partitions_and_survive_a_kill(tmp_path: pathlib.Path
                                                                    ) -> None:
    path, stop = tmp_path / "log", tmp_path / "stop"
    outs = [tmp_path / f"worker-{i}.txt" for i in range(3)]
    log = embedlog.open(path)
    log.create_topic("t", partitions=12)
    fill(log, "t", 12, 60)
    workers = [_start_worker(path, out, stop) for out in outs[:2]]
    try:
        _wait_for(lambda: all(len(_lines(o)) >= 10 for o in outs[:2]), "two busy workers")
        workers.append(_start_worker(path, outs[2], stop))  # joins while the others work
        total = 60
        # More records while they run, until the newcomer has had its share: the two others
        # may drain one round before the rebalance hands the newcomer any partition.
        for _ in range(20):
            fill(log, "t", 12, 60, start=total)
            total += 60
            with contextlib.suppress(AssertionError):
                _wait_for(lambda: len(_lines(outs[2])) >= 10, "the third worker", timeout=15)
                break
        _wait_for(lambda: len(_lines(outs[2])) >= 10, "the third worker to process", 1)
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        fill(log, "t", 12, 60, start=total)
        total += 60
        ends = {tp: log.end_offset(*tp) for tp in tps("t", *range(12))}
        with log.consumer(group="workers") as observer:
            _wait_for(lambda: all(observer.committed(tp) == end for tp, end in ends.items()),
                      "the survivors to commit everything")
        stop.touch()
        for w in workers[1:]:
            assert w.wait(timeout=30) == 0
    finally:
        stop.touch()
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        log.close()

    records = [rec for out in outs for rec in _lines(out)]
    killed = victim.pid
    assert {pid for pid, *_ in records} == {w.pid for w in workers}
    by_partition: dict[int, list[tuple[int, int, int, float, float]]] = defaultdict(list)
    for rec in records:
        by_partition[rec[1]].append(rec)
    for part, recs in by_partition.items():
        offsets = [off for _, _, off, _, _ in recs]
        assert set(offsets) == set(range(total)), f"partition {part}: records skipped"
        seen: set[int] = set()
        for _, _, off, _, _ in recs:  # repeats only of what the killed member had done
            if off in seen:
                assert any(p == killed and o == off for p, _, o, _, _ in recs), (part, off)
            seen.add(off)
        last_end: dict[int, float] = {}
        for pid, _, _, t0, t1 in sorted(recs, key=lambda r: r[3]):
            for other, end in last_end.items():
                assert other == pid or end <= t0, f"partition {part}: two members at once"
            last_end[pid] = t1
    assert len(by_partition) == 12
    victim_parts = {part for pid, part, *_ in records if pid == killed}
    assert victim_parts, "the victim was killed before it processed anything"
    for part in victim_parts:  # survivors took over where the victim was
        last_by_victim = max(off for pid, p, off, *_ in records if pid == killed and p == part)
        assert any(pid != killed and off >= last_by_victim
                   for pid, p, off, *_ in records if p == part)
