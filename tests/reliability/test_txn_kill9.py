"""Exactly-once under kill -9: a consume-transform-produce worker (read_committed consumer of
``in``, transactional producer to ``out``, input offsets sent with each transaction) is forked
and SIGKILLed at random moments, over and over, then left to finish. Every input record must
have exactly one output in the read_committed view of ``out``, and the group's committed offset
must be the end of ``in``.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

import embedlog
from embedlog import TopicPartition

INPUTS = 2000
KILLS = int(os.environ.get("EMBEDLOG_TXN_KILLS", "100"))
TP = TopicPartition("in", 0)


def _worker(path: str) -> None:
    """The child: process the input until the group's offset reaches its end."""
    with embedlog.Log(path, durability="fsync") as log:
        producer = log.producer(transactional_id="worker")
        producer.init_transactions()
        consumer = log.consumer(group="g", isolation_level="read_committed",
                                enable_auto_commit=False, max_poll_records=7)
        consumer.assign([TP])
        end = log.end_offset(*TP)
        while (consumer.committed(TP) or 0) < end:
            records = consumer.poll()
            if not records:
                continue
            producer.begin_transaction()
            for r in records:
                producer.send("out", b"out-" + r.value, partition=r.offset % 2)
            producer.send_offsets_to_transaction({TP: records[-1].offset + 1}, "g")
            producer.commit_transaction()


def _run(path: str, kill_after: float | None) -> bool:
    """Fork a worker; SIGKILL it after ``kill_after`` seconds. True if it finished."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            _worker(path)
            code = 0
        finally:
            os._exit(code)
    if kill_after is not None:
        deadline = time.monotonic() + kill_after
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status) == 0
            time.sleep(0.005)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


@pytest.mark.slow
def test_consume_transform_produce_survives_kill9(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(os.fspath(tmp_path), "log")
    with embedlog.Log(path, durability="fsync") as log:
        log.create_topic("in", partitions=1)
        log.create_topic("out", partitions=2)
        log.append_batch("in", [b"%d" % i for i in range(INPUTS)], partition=0)
    rng = random.Random(7)
    kills, total = 0, INPUTS
    while kills < KILLS:
        if _run(path, rng.uniform(0.0, 0.25)):
            # It got through the input between two kills: give it more (the count of kills,
            # not the speed of the machine, is what the test is about).
            with embedlog.Log(path, durability="fsync") as log:
                log.append_batch("in", [b"%d" % i for i in range(total, total + INPUTS)],
                                 partition=0)
            total += INPUTS
            continue
        kills += 1
    assert _run(path, None)
    with embedlog.Log(path) as log:
        outputs: list[bytes] = []
        for part in range(2):
            c = log.consumer(isolation_level="read_committed")
            c.assign([TopicPartition("out", part)])
            while batch := c.poll():
                outputs += [r.value for r in batch]
            c.close()
        assert sorted(outputs) == sorted(b"out-%d" % i for i in range(total))
        assert log.consumer(group="g").committed(TP) == total
    assert kills == KILLS
