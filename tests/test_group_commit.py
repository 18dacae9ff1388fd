"""Group commit of ``append()`` in ``fsync`` mode: appends that join the partition's open batch
while an fsync runs are written by one leader and share the next fsync, and appenders an fsync
covers return without waiting for the next one."""

from __future__ import annotations

import itertools
import pathlib
import signal
import threading
from collections.abc import Callable, Iterator

import pytest
from kafka.record.memory_records import MemoryRecords

import embedlog
from doubles import Call, ScriptedFS
from embedlog import _io, batch_writer, group_commit
from embedlog.group_commit import GroupCommit, Queued
from embedlog.partition import Partition

WAIT = 30.0  # generous bound for a thread to reach a point it must reach (a hang guard only)


def _waiting(gc: GroupCommit, n: int) -> bool:
    """Whether ``n`` threads are parked in ``sync`` behind the fsync in flight."""
    with gc._mutex:
        return len(gc._sync_parked) >= n


def _until(check: Callable[[], bool]) -> None:
    gate = threading.Event()
    for _ in range(int(WAIT / 0.005)):
        if check():
            return
        gate.wait(0.005)
    raise AssertionError("a thread never reached the expected point")


def test_covered_follower_returns_while_the_next_fsync_runs() -> None:
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    flushes: list[int] = []

    def flush() -> None:
        n = len(flushes)
        flushes.append(n)
        started[n].set()
        assert release[n].wait(WAIT)

    gc = GroupCommit(flush, lambda: (0, gc.written))
    gc.written = 2  # appends 1 and 2 written: the first fsync covers both
    leader = threading.Thread(target=gc.sync, args=(1,))
    leader.start()
    assert started[0].wait(WAIT)
    covered = threading.Thread(target=gc.sync, args=(2,))
    covered.start()
    gc.written = 3  # append 3 written after the fsync started: it needs the next one
    late = threading.Thread(target=gc.sync, args=(3,))
    late.start()
    _until(lambda: _waiting(gc, 2))
    release[0].set()
    assert started[1].wait(WAIT)  # the late appender leads the second fsync ...
    covered.join(WAIT)
    assert not covered.is_alive()  # ... and the covered one returned while it is held
    assert gc.synced == 2
    release[1].set()
    for t in (leader, late):
        t.join(WAIT)
        assert not t.is_alive()
    assert flushes == [0, 1]
    assert gc.synced == 3


def test_append_threads_share_one_fsync(log_dir: pathlib.Path) -> None:
    threads = 8
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        p = log._topic("t").partitions[0]
        errors: list[BaseException] = []
        results: list[int] = []

        def append(i: int) -> None:
            try:
                results.append(log.append("t", b"v%d" % i).offset)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def queued() -> None:
            # Every other append joins the open batch while the first fsync is held (none writes
            # while an fsync runs); the next leader appends all seven, then fsyncs once.
            assert p._commit.written == 1

        fs = _round_behind_held_fsync(log, append, threads, queued)
        assert errors == []
        assert sorted(results) == list(range(threads))
        # One fsync for the first append, one for the seven written while it ran.
        assert fs.count("fsync", suffix=".log") == 2
        values = sorted(r.value or b"" for r in log.read("t", 0))
        assert values == sorted(b"v%d" % i for i in range(threads))


def _round_behind_held_fsync(log: embedlog.Log, append: Callable[[int], None], threads: int,
                             queued: Callable[[], None] = lambda: None) -> ScriptedFS:
    """Run ``append(0)``, hold its fsync while ``append(1..threads-1)`` queue behind it (so the
    next leader writes all of them in one round; ``queued()`` runs then), then let everything
    finish. Returns the file system the round ran on."""
    p = log._topic("t").partitions[0]
    fs = ScriptedFS()
    held, release = threading.Event(), threading.Event()

    def hold(call: Call) -> None:
        if not held.is_set():
            held.set()
            assert release.wait(WAIT)

    fs.before("fsync", hold, match=lambda c: (c.path or "").endswith(".log"))
    with _io.use_backend(fs):
        first = threading.Thread(target=append, args=(0,))
        first.start()
        assert held.wait(WAIT)
        rest = [threading.Thread(target=append, args=(i,)) for i in range(1, threads)]
        for t in rest:
            t.start()
        _until(lambda: p._commit.parked >= threads - 1)
        queued()
        release.set()
        for t in [first, *rest]:
            t.join(WAIT)
            assert not t.is_alive()
    return fs


def test_the_appends_of_a_round_share_one_batch(log_dir: pathlib.Path) -> None:
    """The seven appends that arrive behind a held fsync are written as one batch; each
    caller's metadata names its own record there (offset, timestamp), with its key, headers
    and timestamp (one earlier than the batch's first: a negative delta) as given."""
    threads = 8
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        p = log._topic("t").partitions[0]
        given: dict[bytes, tuple[bytes | None, list[tuple[str, bytes | None]] | None, int]] = {}
        got: dict[bytes, embedlog.RecordMetadata] = {}

        def append(i: int) -> None:
            value = b"v%d" % i
            given[value] = (b"k%d" % i if i % 3 else None,
                            [("h", b"%d" % i), ("n", None)] if i % 2 else None, 5_000 - i * 7)
            key, headers, ts = given[value]
            got[value] = log.append("t", value, key=key, headers=headers, timestamp=ts)

        _round_behind_held_fsync(log, append, threads)
        assert len(got) == threads
        assert [h.records_count for h, _ in p.batches(0)] == [1, threads - 1]
        for r in log.read("t", 0):
            assert r.value is not None
            meta = got[r.value]
            key, headers, ts = given[r.value]
            assert (meta.offset, meta.timestamp) == (r.offset, r.timestamp) == (meta.offset, ts)
            assert (r.key, list(r.headers) or None) == (key, headers)
    with embedlog.open(log_dir) as log:  # as stored
        assert sorted(r.value or b"" for r in log.read("t", 0)) == sorted(given)


def test_a_shared_batch_reads_the_same_in_kafka_python(log_dir: pathlib.Path) -> None:
    """kafka-python's independent v2 reader validates the shared batch's CRC and reads every
    record as embedlog does (timestamps before the batch's first: negative deltas)."""
    threads = 6
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")

        def append(i: int) -> None:
            log.append("t", b"v%d" % i, key=b"k%d" % i, timestamp=9_000 - i * 11,
                       headers=[("h", b"%d" % i)] if i % 2 else None)

        _round_behind_held_fsync(log, append, threads)
        ours = [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                for r in log.read("t", 0)]
    (segment,) = (log_dir / "t-0").glob("*.log")
    records = MemoryRecords(segment.read_bytes())
    theirs, counts = [], []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        rows = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        counts.append(len(rows))
        theirs += rows
    assert counts == [1, threads - 1]
    assert theirs == ours


def test_appends_that_cannot_share_a_batch_are_written_batch_by_batch(
        log_dir: pathlib.Path) -> None:
    """Appends whose shared batch would pass ``max.message.bytes`` are written each in its
    own batch."""
    threads = 4
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t", config={"max.message.bytes": "400"})
        p = log._topic("t").partitions[0]
        landed: dict[int, bytes] = {}

        def append(i: int) -> None:
            landed[log.append("t", bytes([i]) * 200).offset] = bytes([i]) * 200

        _round_behind_held_fsync(log, append, threads)
        assert [h.records_count for h, _ in p.batches(0)] == [1] * threads
        assert {r.offset: r.value for r in log.read("t", 0)} == landed


def test_a_failed_fsync_fails_every_append_of_its_round(log_dir: pathlib.Path) -> None:
    """No append of the round returns as durable when its fsync failed; the log is poisoned
    and the records written before stay readable after a reopen."""
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        log.append("t", b"before")
        fs = ScriptedFS()
        fs.fail("fsync", persistent=True)
        outcomes: list[str] = []

        def append(i: int) -> None:
            try:
                log.append("t", b"v%d" % i)
                outcomes.append("acknowledged")
            except embedlog.EmbedlogError as exc:
                outcomes.append(type(exc).__name__)

        with _io.use_backend(fs):
            ts = [threading.Thread(target=append, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(WAIT)
                assert not t.is_alive()
        assert len(outcomes) == 4 and "acknowledged" not in outcomes
    with embedlog.open(log_dir, durability="fsync") as log:
        assert [r.value for r in log.read("t", 0)][:1] == [b"before"]


class _Rounds:
    """A :class:`GroupCommit` over an in-memory log: ``add`` puts a record in the reserved
    batch (``pending``), ``write_round`` appends it; ``flush`` records what it covers and can
    be held."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.pending: list[bytes] = []
        self.fsyncs: list[int] = []
        self.leaders: list[str] = []  # the thread that wrote each round
        self.hold = threading.Event()
        self.held = threading.Event()
        self.hold.set()
        self.lock = threading.Lock()
        self.gc = GroupCommit(self._flush, self._write_round)

    def _write_round(self) -> tuple[int, int]:
        with self.lock:
            self.leaders.append(threading.current_thread().name)
            if self.pending:
                self.log += self.pending
                self.pending = []
                self.gc.written += 1
            return len(self.log), self.gc.written

    def _flush(self) -> None:
        self.fsyncs.append(len(self.log))
        self.held.set()
        assert self.hold.wait(WAIT)

    def add(self, value: bytes) -> int:
        """Put ``value`` in the reserved batch; its offset."""
        with self.lock:
            self.pending.append(value)
            return len(self.log) + len(self.pending) - 1

    def append(self, value: bytes, out: list[int]) -> threading.Thread:
        """A writer of ``value``: ``out`` gets its offset once a round covered it."""
        offset = self.add(value)

        def run() -> None:
            assert self.gc.sync_through(offset)
            out.append(offset)

        t = threading.Thread(target=run)
        t.start()
        return t


def test_a_covered_writer_whose_caller_left_passes_its_turn_on() -> None:
    """Covered writers wake one after another; one whose caller was interrupted (``gone``)
    is skipped, and every other writer of the round still returns."""
    r = _Rounds()
    r.hold.clear()
    out: list[int] = []
    first = r.append(b"first", out)
    assert r.held.wait(WAIT)
    r.held.clear()
    rest = [r.append(b"v%d" % i, out) for i in range(4)]
    _until(lambda: r.gc.parked >= 4)
    left = Queued(r.add(b"left"))  # parked, taken by the next round, then interrupted
    left.wake, left.gone = threading.Lock(), True
    with r.gc._mutex:
        r.gc._parked.insert(2, left)
    r.hold.set()
    for t in [first, *rest]:
        t.join(WAIT)
        assert not t.is_alive()
    assert sorted(out) == [0, 1, 2, 3, 4]  # the left writer's record was written at 5
    assert r.log[5] == b"left" and r.fsyncs == [1, 6]
    assert r.gc.parked == 0 and r.gc._chain == [] and not r.gc._leading


class _Interrupted(Exception):
    pass


def _interrupt_while(call: Callable[[], object], after: float = 0.2) -> None:
    """Run ``call`` in the main thread until a signal handler interrupts it: ``after`` seconds,
    or (0) once another thread sends it SIGALRM."""
    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, after)
        with pytest.raises(_Interrupted):
            call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupted_parked_writer_leaves_the_queue() -> None:
    """A writer interrupted while parked (a signal handler raising in the main thread) leaves
    the queue, and the writers behind it are served (its record, already in the reserved
    batch, is written with theirs)."""
    r = _Rounds()
    r.hold.clear()
    out: list[int] = []
    first = r.append(b"first", out)
    assert r.held.wait(WAIT)
    _interrupt_while(lambda: r.gc.sync_through(r.add(b"interrupted")))
    assert r.gc.parked == 0
    later = r.append(b"later", out)
    _until(lambda: r.gc.parked >= 1)
    r.hold.set()
    for t in (first, later):
        t.join(WAIT)
        assert not t.is_alive()
    assert r.log == [b"first", b"interrupted", b"later"] and sorted(out) == [0, 2]


def test_a_new_leader_waits_for_the_last_rounds_writers_only_so_long() -> None:
    """After a round of five, a lone writer leads once the bounded wait for the others ends,
    and the next round expects only as many writers as came."""
    r = _Rounds()
    r.hold.clear()
    out: list[int] = []
    first = r.append(b"first", out)
    assert r.held.wait(WAIT)
    rest = [r.append(b"v%d" % i, out) for i in range(5)]
    _until(lambda: r.gc.parked >= 5)
    r.hold.set()
    for t in [first, *rest]:
        t.join(WAIT)
    assert r.gc._expected == 5  # the second round: its leader and four parked writers
    assert r.gc.sync_through(r.add(b"alone")) and r.gc.durable_end == 7
    assert r.gc._expected == 1 and r.fsyncs == [1, 6, 7]


Write = Callable[[embedlog.Log, bytes], embedlog.RecordMetadata]


@pytest.fixture(params=["append", "send"])
def durable_write(request: pytest.FixtureRequest) -> Iterator[Write]:
    """A durable writer of one record to partition 0 of topic ``t``: ``Log.append``, or a
    producer's ``send`` (keyed, so that a sender joining an open batch takes the lane)."""
    producers: dict[int, embedlog.Producer] = {}

    def send(log: embedlog.Log, value: bytes) -> embedlog.RecordMetadata:
        producer = producers.get(id(log))
        if producer is None:
            producer = producers[id(log)] = log.producer(durability="fsync")
        return producer.send("t", value, key=b"k", partition=0)

    def append(log: embedlog.Log, value: bytes) -> embedlog.RecordMetadata:
        return log.append("t", value, partition=0)

    yield append if request.param == "append" else send
    for producer in producers.values():
        producer.close()


def _outcomes_of_a_round(log: embedlog.Log, threads: int,
                         queued: Callable[[], None] = lambda: None,
                         catch: type[BaseException] = embedlog.EmbedlogError,
                         write: Write | None = None,
                         ) -> dict[int, BaseException | int]:
    """:func:`_round_behind_held_fsync` of ``write(log, b"v<i>")`` (default: ``append``): each
    call's offset or error (of type ``catch``)."""
    outcomes: dict[int, BaseException | int] = {}

    def append(i: int) -> None:
        try:
            value = b"v%d" % i
            outcomes[i] = (log.append("t", value) if write is None else write(log, value)).offset
        except catch as exc:
            outcomes[i] = exc

    _round_behind_held_fsync(log, append, threads, queued)
    return outcomes


def test_every_append_of_a_failed_batch_gets_the_batch_error(log_dir: pathlib.Path,
                                                            durable_write: Write) -> None:
    """A shared batch whose write fails: each of its appends (or durable sends) raises the
    write's own error (not a later refusal of the poisoned partition), and none is stored."""
    threads = 4

    def fail_next_write() -> None:
        fs = _io.backend()
        assert isinstance(fs, ScriptedFS)
        fs.fail(("write", "pwrite"), match=lambda c: (c.path or "").endswith(".log"))

    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        outcomes = _outcomes_of_a_round(log, threads, fail_next_write, write=durable_write)
    assert outcomes[0] == 0
    errors = [outcomes[i] for i in range(1, threads)]
    assert all(type(e).__name__ == "Injected" for e in errors), errors
    with embedlog.open(log_dir) as log:
        assert [r.value for r in log.read("t", 0)] == [b"v0"]


def test_a_failed_batch_fails_its_appends_when_its_offsets_are_taken_again(
        log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch, durable_write: Write) -> None:
    """A batch refused without harm to the partition (its offsets are given to the next
    batch): each of its appends (or durable sends) raises the refusal, not the next write;
    the next append lands on its offsets."""
    threads = 4
    refusal = embedlog.RecordTooLargeError("refused (injected)")
    write = batch_writer.write_records

    def refuse_shared(p: object, values: list[bytes], *args: object, **kw: object) -> object:
        if len(values) == threads - 1:
            raise refusal
        return write(p, values, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(batch_writer, "write_records", refuse_shared)
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        outcomes = _outcomes_of_a_round(log, threads, write=durable_write)
        assert outcomes[0] == 0
        assert [outcomes[i] for i in range(1, threads)] == [refusal] * (threads - 1)
        assert durable_write(log, b"after").offset == 1
        assert [r.value for r in log.read("t", 0)] == [b"v0", b"after"]


def test_the_largest_record_is_the_same_in_every_durability(tmp_path: pathlib.Path) -> None:
    """``append`` in ``fsync`` mode (the open batch, whose size is an estimate) takes exactly
    the records a write of their own takes: up to the largest that fits, not one byte more."""
    limits = {}
    for durability in ("none", "fsync"):
        with embedlog.open(tmp_path / durability, durability=durability) as log:  # type: ignore[arg-type]
            log.create_topic("t", config={"max.message.bytes": "1000"})
            sizes = []
            for n in range(900, 1000):
                try:
                    log.append("t", b"x" * n, key=b"k")
                except embedlog.RecordTooLargeError:
                    continue
                sizes.append(n)
            limits[durability] = sizes
            assert [len(r.value or b"") for r in log.read("t", 0)] == sizes
    assert limits["none"] == limits["fsync"] and limits["none"]
    assert limits["none"] == list(range(900, limits["none"][-1] + 1))


def test_a_keyless_record_for_a_compacted_topic_is_refused_alone(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("c", config={"cleanup.policy": "compact"})
        log.append("c", b"kept", key=b"k")
        with pytest.raises(embedlog.UsageError, match="needs a key"):
            log.append("c", b"keyless")
        assert log.append("c", b"next", key=b"k").offset == 1


def test_appends_and_a_producer_share_a_partition(log_dir: pathlib.Path) -> None:
    """Threads appending and threads sending to one partition in ``fsync`` mode: every call's
    metadata names its own record, and every record is stored once."""
    per_thread = 40
    landed: dict[int, bytes] = {}
    errors: list[BaseException] = []
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        producer = log.producer()

        def run(i: int) -> None:
            try:
                for j in range(per_thread):
                    value = b"%d-%d" % (i, j)
                    if i % 2:
                        meta = producer.send("t", value, key=b"k", partition=0)
                    else:
                        meta = log.append("t", value, partition=0)
                    landed[meta.offset] = value
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        ts = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(WAIT * 4)
            assert not t.is_alive()
        producer.close()
        assert errors == []
        assert {r.offset: r.value for r in log.read("t", 0)} == landed
        assert len(landed) == 6 * per_thread


def test_a_shared_batch_of_a_log_append_time_topic_tells_each_append_its_stamp(
        log_dir: pathlib.Path) -> None:
    """LogAppendTime: the appends that share a batch each get the batch's stamp, as stored
    (the log's clock, not the timestamps given)."""
    threads = 4
    clock = iter(range(50_000, 60_000, 10))
    got: dict[int, int] = {}
    with embedlog.Log(log_dir, durability="fsync", clock=lambda: next(clock)) as log:
        log.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})

        def append(i: int) -> None:
            meta = log.append("t", b"v%d" % i, timestamp=1_000 + i)
            got[meta.offset] = meta.timestamp

        _round_behind_held_fsync(log, append, threads)
        stored = {r.offset: r.timestamp for r in log.read("t", 0)}
        assert got == stored and len(got) == threads
        assert all(t >= 50_000 for t in stored.values())
        assert len(set(got.values())) == 2  # the first append's batch, and the shared one


def test_a_batch_write_cut_short_fails_every_append_of_it(
        log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch, durable_write: Write) -> None:
    """A shared batch whose write is cut short by an exception the batch does not report (an
    interrupt): the round's leader raises it, every other append of the batch fails with the
    batch's error (its offsets may be given to the next batch), and nothing of it is stored."""
    threads = 4
    write = batch_writer.write_records

    class Cut(Exception):
        pass

    def cut_shared(p: object, values: list[bytes], *args: object, **kw: object) -> object:
        if len(values) == threads - 1:
            raise Cut("injected")
        return write(p, values, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(batch_writer, "write_records", cut_shared)
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        outcomes = _outcomes_of_a_round(log, threads, catch=Exception, write=durable_write)
        assert outcomes[0] == 0
        errors = [outcomes[i] for i in range(1, threads)]
        assert sum(isinstance(e, Cut) for e in errors) == 1  # the leader's
        others = [e for e in errors if not isinstance(e, Cut)]
        assert len(others) == threads - 2
        assert all(isinstance(e, embedlog.StorageError)
                   and "a write was cut short (Cut('injected'))" in str(e)
                   for e in others), others
        assert log.append("t", b"after").offset == 1
        assert [r.value for r in log.read("t", 0)] == [b"v0", b"after"]


def test_a_batch_open_when_its_topic_is_altered_is_written_under_its_settings(
        log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends waiting in an open batch while ``max.message.bytes`` is lowered below one of
    their records: the batch is written as it was opened, and every append succeeds."""
    names = ("w0", "w1", "w2")
    arrived = {n: threading.Event() for n in names}
    go = threading.Event()
    sync_through = Partition.sync_through

    def gated(self: Partition, offset: int) -> bool:
        name = threading.current_thread().name
        if name in arrived:
            arrived[name].set()
            assert go.wait(WAIT)
        return sync_through(self, offset)

    monkeypatch.setattr(Partition, "sync_through", gated)
    landed: dict[str, int] = {}
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        threads = []
        for name, value in zip(names, (b"s0", b"s1", b"B" * 3000), strict=True):
            t = threading.Thread(target=lambda n=name, v=value: landed.setdefault(
                n, log.append("t", v).offset), name=name)
            t.start()
            assert arrived[name].wait(WAIT)
            threads.append(t)
        log.alter_topic("t", {"max.message.bytes": 1500})
        go.set()
        for t in threads:
            t.join(WAIT)
            assert not t.is_alive()
        assert landed == {"w0": 0, "w1": 1, "w2": 2}
        assert [len(r.value or b"") for r in log.read("t", 0)] == [2, 2, 3000]
        with pytest.raises(embedlog.RecordTooLargeError):
            log.append("t", b"B" * 3000)


def test_a_producer_refuses_a_keyless_record_once_its_topic_is_compacted(
        log_dir: pathlib.Path) -> None:
    """The producer looked at the topic before it became compacted: a keyless record is
    refused at ``send`` (alone), not written into a batch that the topic then refuses."""
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        with log.producer() as producer:
            producer.send("t", b"before", partition=0)
            log.alter_topic("t", {"cleanup.policy": "compact"})
            with pytest.raises(embedlog.UsageError, match="needs a key"):
                producer.send("t", b"keyless", partition=0)
            producer.send("t", b"keyed", key=b"k", partition=0)
        assert [r.value for r in log.read("t", 0)] == [b"before", b"keyed"]


def _round_of(r: _Rounds, n: int, out: list[int]) -> None:
    """A round of ``n`` writers behind a held fsync (the next leader then expects ``n``)."""
    r.hold.clear()
    r.held.clear()
    first = r.append(b"first", out)
    assert r.held.wait(WAIT)
    rest = [r.append(b"v%d" % i, out) for i in range(n)]
    _until(lambda: r.gc.parked >= n)
    r.hold.set()
    for t in [first, *rest]:
        t.join(WAIT)
        assert not t.is_alive()
    assert r.gc._expected == n


def test_the_writer_that_completes_a_gathering_round_leads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leader waits for as many writers as the last round had; the one that completes
    the count leads the round (the waiting leader is not woken first), and the waiting
    leader returns covered by it."""
    r = _Rounds()
    out: list[int] = []
    _round_of(r, 3, out)
    monkeypatch.setattr(group_commit, "GATHER_WAIT", WAIT)
    gatherer = r.append(b"gatherer", out)
    _until(lambda: r.gc._gatherer is not None)
    second = r.append(b"second", out)
    _until(lambda: r.gc.parked >= 1)
    third = r.append(b"third", out)
    for t in (gatherer, second, third):
        t.join(WAIT)
        assert not t.is_alive()
    assert r.leaders[-1] == third.name and gatherer.name not in r.leaders
    assert r.log[-3:] == [b"gatherer", b"second", b"third"] and r.fsyncs[-1] == len(r.log)
    assert sorted(out)[-3:] == [len(r.log) - 3, len(r.log) - 2, len(r.log) - 1]
    assert r.gc._expected == 3 and r.gc.parked == 0 and not r.gc._leading


def test_a_leader_interrupted_while_it_gathers_hands_the_lead_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leader interrupted while it waits for the last round's writers gives up the
    lead: the writers after it are served (its record, in the reserved batch, with theirs)."""
    r = _Rounds()
    out: list[int] = []
    _round_of(r, 3, out)
    monkeypatch.setattr(group_commit, "GATHER_WAIT", WAIT)
    _interrupt_while(lambda: r.gc.sync_through(r.add(b"interrupted")))
    monkeypatch.setattr(group_commit, "GATHER_WAIT", 0.001)
    later = r.append(b"later", out)
    later.join(WAIT)
    assert not later.is_alive()
    assert r.log[-2:] == [b"interrupted", b"later"] and r.gc.durable_end == len(r.log)
    assert r.gc.parked == 0 and not r.gc._leading and r.gc._gatherer is None


def test_a_writer_interrupted_in_a_round_that_fails_is_not_given_the_lead() -> None:
    """A writer interrupted while the round that took it is in flight, a round that then
    fails: the writer is gone, so the lead goes to the next writer that is still there."""
    r = _Rounds()
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def flush() -> None:
        n = len(r.fsyncs)
        r.fsyncs.append(len(r.log))
        if n < 2:
            started[n].set()
            assert release[n].wait(WAIT)
            if n == 1:
                raise OSError("the round's fsync failed (injected)")

    r.gc._flush = flush
    out: list[int] = []
    first = r.append(b"first", out)
    assert started[0].wait(WAIT)
    failed: list[BaseException] = []

    def second_leader() -> None:
        try:
            r.gc.sync_through(r.add(b"second"))
        except OSError as exc:
            failed.append(exc)

    leader = threading.Thread(target=second_leader)
    leader.start()
    _until(lambda: r.gc.parked >= 1)
    main = threading.main_thread().ident
    assert main is not None

    def interrupt_in_round() -> None:
        _until(lambda: r.gc.parked >= 2)
        release[0].set()  # the first round ends; the second (both writers) starts, held
        assert started[1].wait(WAIT)
        signal.pthread_kill(main, signal.SIGALRM)

    helper = threading.Thread(target=interrupt_in_round)
    helper.start()
    _interrupt_while(lambda: r.gc.sync_through(r.add(b"interrupted")), after=0)
    release[1].set()
    later = r.append(b"later", out)
    for t in (first, leader, helper, later):
        t.join(WAIT)
        assert not t.is_alive()
    assert len(failed) == 1 and r.gc.durable_end == len(r.log)
    assert r.gc.parked == 0 and not r.gc._leading


def test_an_append_whose_batch_vanished_unreported_is_not_acknowledged(
        log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch, durable_write: Write) -> None:
    """A batch dropped without an error reaching its writers (an interrupt landing between
    the release of its reservation and its write): once a later batch took its offsets and a
    round covered them, its writer (an append, or a durable send) still fails rather than
    being acknowledged at an offset that holds another record."""
    write = batch_writer.OpenBatch.write

    def vanish(self: batch_writer.OpenBatch) -> None:
        if self.values == [b"vanishes"]:
            with self.lock:
                self.values, self.keys, self.timestamps, self.open = [], [], [], False
            return
        write(self)

    monkeypatch.setattr(batch_writer.OpenBatch, "write", vanish)
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        covered = Partition.sync_through

        def taken_again(self: Partition, offset: int) -> bool:
            covered(self, offset)
            if self.end_offset <= offset:  # the next batch takes the offset, and is synced
                log.append("t", b"took its offset", partition=0)
            return covered(self, offset)

        monkeypatch.setattr(Partition, "sync_through", taken_again)
        with pytest.raises(embedlog.StorageError, match="offset 0 was not written"):
            durable_write(log, b"vanishes")
        assert [r.value for r in log.read("t", 0)] == [b"took its offset"]


class _LossyWake:
    """``group_commit._parked``'s lock whose ``lost``-th release of a test is dropped: the
    wake-up an interrupt stops between handing a turn on (under the mutex) and releasing the
    lock of the writer it was handed to."""

    releases = itertools.count()
    lost = -1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        if next(self.releases) != self.lost:
            self._lock.release()


@pytest.fixture
def lossy_wake(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_LossyWake, "releases", itertools.count())
    monkeypatch.setattr(_LossyWake, "lost", request.param)
    monkeypatch.setattr(group_commit, "_parked", _LossyWake)


@pytest.mark.parametrize("lossy_wake", [0, 1, 2], indirect=True,
                         ids=["next-leader", "first-covered", "chain"])
def test_a_wake_up_lost_to_an_interrupt_only_delays_its_writer(lossy_wake: None) -> None:
    """A round's hand-off whose wake-up of the next leader, of the first writer it covered or
    of the next one in the chain is lost: that writer finds its turn at its next recheck, and
    every writer returns, covered."""
    r = _Rounds()
    out: list[int] = []
    _round_of(r, 3, out)
    assert sorted(out) == [0, 1, 2, 3] and r.gc.durable_end == 4
    assert next(_LossyWake.releases) > _LossyWake.lost  # the lost release happened
    assert r.gc.parked == 0 and r.gc._chain == [] and not r.gc._leading


@pytest.mark.parametrize("lossy_wake", [0, 1], indirect=True, ids=["covered", "next-to-fsync"])
def test_a_sync_wake_up_lost_to_an_interrupt_only_delays_its_caller(lossy_wake: None) -> None:
    """``sync`` callers parked behind an fsync: one covered by it and one it does not cover
    (the next to fsync); either one's lost wake-up delays it to its next recheck, and both
    return with their appends synced."""
    r = _Rounds()
    r.hold.clear()
    done: list[int] = []

    def sync(target: int) -> threading.Thread:
        t = threading.Thread(target=lambda: (r.gc.sync(target), done.append(target)))
        t.start()
        return t

    r.gc.written = 1
    first = sync(1)
    assert r.held.wait(WAIT)
    covered = sync(1)  # (first the covered one, then the one the fsync in flight misses)
    _until(lambda: _waiting(r.gc, 1))
    r.gc.written = 2
    later = sync(2)
    _until(lambda: _waiting(r.gc, 2))
    r.hold.set()
    for t in (first, covered, later):
        t.join(WAIT)
        assert not t.is_alive()
    assert sorted(done) == [1, 1, 2] and r.gc.synced == 2 and r.fsyncs == [0, 0]
    assert next(_LossyWake.releases) > _LossyWake.lost
