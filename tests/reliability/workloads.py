"""Workloads for the crash explorer: a small log, a vocabulary of operations, ground truth.

A workload runs against a log that :func:`setup` built and closed (that part is not recorded),
opens it (recorded: recovery on open is part of every trace), runs its operations, and closes
it. While it runs it announces what it promised through ``_io.mark``, so the recorded trace
says, for every crash point, what had been acknowledged by then:

=================  ===================================================================
``ack``            ``topic, partition, offsets``: an append returned (fsync durability)
``ack_start``      ``topic, partition, offset``: delete_records/retention returned; the
                   log start must never go back below ``offset``
``intent_compact`` ``topic``: compaction started; superseded keys may disappear
``ack_commit``     ``group, topic, partition, offset``: a consumer-group commit returned
``ack_topic``      ``topic``: create_topic returned
``attempt``        ``topic, partition, offsets``: an append is about to write these records
``attempt_control`` ``topic, partition, offset``: a transaction marker may take this offset
``intent_start_offset`` (emitted by the core) records below ``offset`` may disappear
=================  ===================================================================

The ``txn`` operation (random workloads) writes one record in a transaction of a transactional
producer and commits it (``ack`` once ``commit_transaction`` returned) or aborts it (never
acknowledged); its marker's offset is announced as ``attempt_control``.

Every record's key, value, headers and timestamp derive from a counter, and every appended
record is kept in :class:`Truth` with the offset it got, so a checker can tell a genuine record
from a corrupt or invented one. Compaction and consumer-group commits join the vocabulary
automatically when ``Log.compact`` / ``Log.consumer`` exist.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import embedlog
from embedlog import _io

__all__ = [
    "BASE_OPS",
    "TOPIC",
    "Rec",
    "Truth",
    "Workload",
    "ace_workloads",
    "available_ops",
    "random_workloads",
    "run",
    "setup",
]

TOPIC = "t"
OTHER = "u"  # a second topic with two partitions, used by the random workloads
GROUP = "g"
NOW = 1_700_000_000_000

CONFIG: dict[str, object] = {
    "segment.bytes": 400,  # two 172-byte batches per segment
    "index.interval.bytes": 100,
    "segment.index.bytes": 120,
    "retention.ms": -1,
    "retention.bytes": 500,
}
BASE_OPS = ("append", "batch", "roll", "retain", "reopen")
EXTRA_OPS = ("trim", "create", "txn")  # delete_records, create_topic, a transaction: random
# workloads only
SETUP_RECORDS = 5


@dataclass(frozen=True, slots=True)
class Rec:
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass
class Truth:
    """Every record appended in the recorded run (setup included), by partition and offset."""

    records: dict[tuple[str, int], dict[int, Rec]] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)

    def add(self, topic: str, partition: int, offset: int, rec: Rec) -> None:
        self.records.setdefault((topic, partition), {})[offset] = rec


def available_ops() -> tuple[str, ...]:
    """The vocabulary: the base operations plus compaction and group commits once they exist."""
    ops = list(BASE_OPS)
    if hasattr(embedlog.Log, "compact"):
        ops.append("compact")
    if hasattr(embedlog.Log, "consumer"):
        ops.append("commit")
    return tuple(ops)


def _config(topic: str) -> dict[str, object]:
    cfg = dict(CONFIG)
    if topic == TOPIC and hasattr(embedlog.Log, "compact"):
        cfg["cleanup.policy"] = "compact,delete"
        cfg["min.cleanable.dirty.ratio"] = 0.0
    return cfg


class Session:
    """A workload's running state: the open log, the record counter and the ground truth."""

    def __init__(self, path: str, truth: Truth, rng: random.Random) -> None:
        self.path = path
        self.truth = truth
        self.rng = rng
        self.counter = sum(len(r) for r in truth.records.values())
        self.log = embedlog.open(path, durability="fsync", upkeep=False)
        self.txp: Any = None

    def record(self, salt: int = 0) -> Rec:
        i = self.counter
        self.counter += 1
        key = b"k%d" % (i % 3)
        value = (b"value-%06d-" % i) * 8 + b"%04d" % salt
        headers: tuple[tuple[str, bytes | None], ...] = (("h", b"%d" % i),) if i % 2 else ()
        return Rec(key, value, NOW + i, headers)

    def _attempt(self, topic: str, partition: int, recs: list[Rec]) -> None:
        """Record what is about to be appended (at the offsets it must get) before the call: a
        failed or interrupted append may still leave it on disk, unacknowledged."""
        end = self.log.end_offset(topic, partition)
        for j, rec in enumerate(recs):
            self.truth.add(topic, partition, end + j, rec)
        _io.mark("attempt", topic=topic, partition=partition,
                 offsets=list(range(end, end + len(recs))))

    def append(self, topic: str = TOPIC, partition: int = 0) -> None:
        rec = self.record()
        self._attempt(topic, partition, [rec])
        meta = self.log.append(topic, rec.value, key=rec.key, headers=rec.headers or None,
                               timestamp=rec.timestamp, partition=partition)
        self.truth.add(topic, partition, meta.offset, rec)
        _io.mark("ack", topic=topic, partition=partition, offsets=[meta.offset])

    def batch(self, topic: str = TOPIC, partition: int = 0, n: int = 3) -> None:
        recs = [self.record() for _ in range(n)]
        self._attempt(topic, partition, recs)
        metas = self.log.append_batch(
            topic,
            [r.value for r in recs],
            keys=[r.key for r in recs],
            headers=[r.headers or None for r in recs],
            timestamps=[r.timestamp for r in recs],
            partition=partition,
        )
        # One RecordMetadata per batch written; a batch's records have consecutive offsets.
        starts = [m.offset for m in metas]
        counts = [b - a for a, b in itertools.pairwise(starts)]
        counts.append(n - sum(counts))
        offsets = [start + j for start, c in zip(starts, counts, strict=True) for j in range(c)]
        for offset, rec in zip(offsets, recs, strict=True):
            self.truth.add(topic, partition, offset, rec)
        _io.mark("ack", topic=topic, partition=partition, offsets=offsets)

    def roll(self, topic: str = TOPIC, partition: int = 0) -> None:
        self.log.roll(topic, partition)

    def retain(self) -> None:
        self.log.enforce_retention(NOW + 10**6)
        for (topic, partition) in self.truth.records:
            _io.mark("ack_start", topic=topic, partition=partition,
                     offset=self.log.start_offset(topic, partition))

    def trim(self, topic: str = TOPIC, partition: int = 0) -> None:
        end = self.log.end_offset(topic, partition)
        start = self.log.start_offset(topic, partition)
        before = max(start, end - 2)
        new_start = self.log.delete_records(topic, partition, before)
        _io.mark("ack_start", topic=topic, partition=partition, offset=new_start)

    def create(self) -> None:
        name = f"n{self.counter}"
        self.counter += 1
        self.log.create_topic(name, 2, config=_config(name))
        self.truth.partitions[name] = 2
        _io.mark("ack_topic", topic=name)

    def reopen(self) -> None:
        self.log.close()
        self.log = embedlog.open(self.path, durability="fsync", upkeep=False)
        self.txp = None

    def txn(self, topic: str = TOPIC, partition: int = 0) -> None:
        """One record in a transaction, committed (acknowledged when the commit returns) or,
        every third time, aborted."""
        if self.txp is None:
            self.txp = self.log.producer(transactional_id="w")
            self.txp.init_transactions()
        rec = self.record()
        commit = self.counter % 3 != 0
        offset = self.log.end_offset(topic, partition)
        self._attempt(topic, partition, [rec])
        _io.mark("attempt_control", topic=topic, partition=partition, offset=offset + 1)
        self.txp.begin_transaction()
        self.txp.send(topic, rec.value, key=rec.key, headers=rec.headers or None,
                      timestamp=rec.timestamp, partition=partition)
        if commit:
            self.txp.commit_transaction()
            _io.mark("ack", topic=topic, partition=partition, offsets=[offset])
        else:
            self.txp.flush()
            self.txp.abort_transaction()

    def compact(self, topic: str = TOPIC) -> None:
        _io.mark("intent_compact", topic=topic)
        self.log.compact(topic)

    def commit(self, topic: str = TOPIC, partition: int = 0) -> None:
        """Commit the log end offset (so successive commits never go down)."""
        tp = embedlog.TopicPartition(topic, partition)
        offset = self.log.end_offset(topic, partition)
        consumer = self.log.consumer(group=GROUP)
        try:
            consumer.assign([tp])
            consumer.commit({tp: offset})
        finally:
            consumer.close()
        _io.mark("ack_commit", group=GROUP, topic=topic, partition=partition, offset=offset)

    def close(self) -> None:
        self.log.close()


def committed_offset(log: embedlog.Log, topic: str, partition: int) -> int | None:
    consumer = log.consumer(group=GROUP)
    try:
        return consumer.committed(embedlog.TopicPartition(topic, partition))
    finally:
        consumer.close()


def setup(path: str, *, topics: Sequence[tuple[str, int]] = ((TOPIC, 1),)) -> Truth:
    """Create the log with ``SETUP_RECORDS`` records per partition and close it cleanly."""
    truth = Truth()
    s = None
    log = embedlog.open(path, durability="fsync", upkeep=False)
    try:
        for name, parts in topics:
            log.create_topic(name, parts, config=_config(name))
            truth.partitions[name] = parts
        log.close()
        s = Session(path, truth, random.Random(0))
        for name, parts in topics:
            for p in range(parts):
                for _ in range(SETUP_RECORDS):
                    s.append(name, p)
    finally:
        if s is not None:
            s.close()
        log.close()
    return truth


@dataclass(frozen=True)
class Workload:
    name: str
    ops: tuple[str, ...]
    topics: tuple[tuple[str, int], ...] = ((TOPIC, 1),)
    seed: int = 0


def run(workload: Workload, path: str, truth: Truth) -> None:
    """Open, run every operation, close (under whatever ``_io`` backend is in force)."""
    s = Session(path, truth, random.Random(workload.seed))
    targets = [(t, p) for t, n in workload.topics for p in range(n)]
    actions: dict[str, Callable[[], None]] = {
        "append": lambda: s.append(*s.rng.choice(targets)),
        "batch": lambda: s.batch(*s.rng.choice(targets)),
        "roll": lambda: s.roll(*s.rng.choice(targets)),
        "retain": s.retain,
        "trim": lambda: s.trim(*s.rng.choice(targets)),
        "reopen": s.reopen,
        "compact": s.compact,
        "commit": lambda: s.commit(TOPIC, 0),
        "create": s.create,
        "txn": lambda: s.txn(*s.rng.choice(targets)),
    }
    try:
        for op in workload.ops:
            actions[op]()
    finally:
        s.close()


def ace_workloads(depth: int = 3, ops: Sequence[str] | None = None) -> list[Workload]:
    """Every sequence of 1..``depth`` operations (ACE-style bounded exhaustive workloads)."""
    vocab = tuple(ops) if ops is not None else available_ops()
    out = []
    for n in range(1, depth + 1):
        for seq in itertools.product(vocab, repeat=n):
            out.append(Workload("+".join(seq), seq))
    return out


def random_workloads(count: int, length: int, seed: int = 1) -> list[Workload]:
    """Longer seeded workloads over two topics (three partitions), appends weighted up."""
    rng = random.Random(seed)
    vocab = (*available_ops(), *EXTRA_OPS)
    weights = [6 if op in ("append", "batch") else 1 for op in vocab]
    topics = ((TOPIC, 1), (OTHER, 2))
    return [
        Workload(f"random-{seed}-{i}", tuple(rng.choices(vocab, weights, k=length)), topics,
                 seed=rng.randrange(2**31))
        for i in range(count)
    ]


def scratch_dir() -> str:
    """A fresh folder on tmpfs when there is one (crash states are many and small), removed
    when the process exits if its user has not removed it already."""
    import atexit
    import shutil
    import tempfile

    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    path = tempfile.mkdtemp(prefix="embedlog-rel-", dir=base)
    atexit.register(shutil.rmtree, path, True)
    return path
