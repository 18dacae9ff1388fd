"""A fork server for the kill -9 test: imports embedlog once, then forks one appender per round.

Protocol on stdin/stdout, one line each::

    go <seed>   ->  <pid>          fork a child that opens the log and appends until killed
    reap        ->  <status>       wait for the last child (the parent has SIGKILLed it)
    quit

The child opens ``<log dir>`` with ``durability="fsync"`` (recovery runs here, so some kills
land in it), then loops over appends, batches, rolls, retention, deletions, group commits and
compactions. It reports to ``<log dir>.events``, one ``os.write`` per line (a line survives
SIGKILL as soon as it is written)::

    READY
    ACK <topic> <partition> <offset>:<key> ...   the append returned: durable
    INTENT <topic> <partition> <offset>    (from _io.mark) records below may be deleted
    START <topic> <partition> <offset>     delete_records/retention returned
    COMMIT <topic> <partition> <offset>    a group commit returned
    COMPACT <topic>                        compaction is about to run

Keys and values are derived from each other (:func:`value_for`), so the parent can tell a
genuine record from a damaged one without knowing which offsets the child got.
"""

from __future__ import annotations

import os
import random
import sys

import embedlog
from embedlog import _io

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from doubles import Call, ScriptedFS

TOPIC = "k"
PARTITIONS = 2
GROUP = "g"
CONFIG: dict[str, object] = {
    "segment.bytes": 1500,
    "index.interval.bytes": 200,
    "segment.index.bytes": 400,
    "retention.ms": -1,
    "retention.bytes": 9000,
    "cleanup.policy": "compact,delete",
    "min.cleanable.dirty.ratio": 0.0,
}


def value_for(key: bytes) -> bytes:
    """The one value a key may carry: ``key`` repeated, then a length-dependent filler."""
    return key * 3 + b"|" + b"x" * (sum(key) % 41)


def events(fd: int) -> ScriptedFS:
    """The production backend, printing the core's intent marks to the events file."""

    def intent(call: Call) -> None:
        info = call.info
        emit(fd, f"INTENT {info['topic']} {info['partition']} {info['offset']}")

    fs = ScriptedFS(keep_calls=False)
    fs.before("mark", intent, match=lambda call: call.info["kind"] == "intent_start_offset")
    return fs


def emit(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())


def child(path: str, seed: int) -> None:
    rng = random.Random(seed)
    fd = os.open(path + ".events", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with _io.use_backend(events(fd)):
        log = embedlog.open(path, durability="fsync", upkeep=False)
        if TOPIC not in log.topics():
            log.create_topic(TOPIC, PARTITIONS, config=CONFIG)
        emit(fd, "READY")
        i = 0
        can_compact = hasattr(log, "compact")
        while True:
            i += 1
            p = rng.randrange(PARTITIONS)
            roll = rng.random()
            if roll < 0.55:
                key = b"s%d-%d-k%d" % (seed, i, rng.randrange(40))
                meta = log.append(TOPIC, value_for(key), key=key, partition=p)
                emit(fd, f"ACK {TOPIC} {p} {meta.offset}:{key.decode()}")
            elif roll < 0.80:
                keys = [b"s%d-%d-%d-k%d" % (seed, i, j, rng.randrange(40)) for j in range(3)]
                metas = log.append_batch(TOPIC, [value_for(k) for k in keys], keys=keys,
                                         partition=p, compression=rng.choice([None, "lz4"]))
                acks = [f"{metas[0].offset + j}:{k.decode()}" for j, k in enumerate(keys)]
                emit(fd, f"ACK {TOPIC} {p} " + " ".join(acks))
            elif roll < 0.86:
                log.roll(TOPIC, p)
            elif roll < 0.89:
                log.enforce_retention()
                for q in range(PARTITIONS):
                    emit(fd, f"START {TOPIC} {q} {log.start_offset(TOPIC, q)}")
            elif roll < 0.91:
                end = log.end_offset(TOPIC, p)
                start = log.delete_records(TOPIC, p, max(log.start_offset(TOPIC, p), end - 5))
                emit(fd, f"START {TOPIC} {p} {start}")
            elif roll < 0.96:
                tp = embedlog.TopicPartition(TOPIC, p)
                offset = log.end_offset(TOPIC, p)
                consumer = log.consumer(group=GROUP)
                consumer.assign([tp])
                consumer.commit({tp: offset})
                consumer.close()
                emit(fd, f"COMMIT {TOPIC} {p} {offset}")
            elif can_compact:
                emit(fd, f"COMPACT {TOPIC}")
                log.compact(TOPIC)


def main() -> None:
    path = sys.argv[1]
    pid = 0
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "go":
            pid = os.fork()
            if pid == 0:
                try:
                    child(path, int(cmd[1]))
                finally:
                    os._exit(3)  # only reached if the child failed: the parent sees status 3
            print(pid, flush=True)
        elif cmd[0] == "reap":
            _, status = os.waitpid(pid, 0)
            print(status, flush=True)
        else:
            return


if __name__ == "__main__":
    main()
