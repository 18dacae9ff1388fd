"""Interrupts under load: seven threads write durably to one partition while a signal handler
raises into the main thread's own durable writes every 20-2,000 us (as Ctrl-C would, many
times over). Epoch after epoch, the log is closed and reopened. Nothing may hang, no offset
may be acknowledged twice, every acknowledged record must be stored with its value in a dense
run of offsets after each reopen, and the errors an interrupt causes stay in proportion to the
interrupts (an open batch no round writes would fail every later write instead)."""

from __future__ import annotations

import pathlib
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import embedlog

pytestmark = pytest.mark.slow

WRITERS = 7
EPOCHS = 10
EPOCH_SECONDS = 1.5
HANG = 60.0  # a writer still running this long after its epoch ended is hung


class Interrupt(BaseException):
    """What the signal handler raises (not an ``Exception``, like ``KeyboardInterrupt``)."""


@pytest.fixture
def interrupts() -> Iterator[None]:
    def interrupt(signum: int, frame: object) -> None:
        raise Interrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Storm:
    """What the writers of every epoch were told: ``acked`` offset -> value, and the errors."""

    def __init__(self) -> None:
        self.acked: dict[int, bytes] = {}
        self.lock = threading.Lock()
        self.interrupted = 0
        self.failed = 0  # writes that raised something other than a refusal of a poisoned log

    def ack(self, offset: int, value: bytes) -> None:
        with self.lock:
            assert offset not in self.acked, f"offset {offset} acknowledged twice"
            self.acked[offset] = value

    def fail(self) -> None:
        with self.lock:
            self.failed += 1


Writer = Callable[[bytes], embedlog.RecordMetadata]


def _writer(log: embedlog.Log, how: str) -> tuple[Writer, Any]:
    if how == "append":
        return (lambda v: log.append("t", v, partition=0)), None
    producer = log.producer(durability="fsync")
    return (lambda v: producer.send("t", v, key=b"k", partition=0)), producer


def _work(write: Writer, storm: Storm, stop: threading.Event, name: str) -> None:
    i = 0
    while not stop.is_set():
        value = b"%s-%d" % (name.encode(), i)
        i += 1
        try:
            meta = write(value)
        except embedlog.LogPoisonedError:
            return
        except embedlog.EmbedlogError:
            storm.fail()
            continue
        storm.ack(meta.offset, value)


def _main_writes(write: Writer, storm: Storm, rng: random.Random, epoch: int) -> None:
    """The main thread's writes, each with a timer that interrupts it within 20-2,000 us."""
    end, i = time.monotonic() + EPOCH_SECONDS, 0
    while time.monotonic() < end:
        value = b"e%d-main-%d" % (epoch, i)
        i += 1
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00002, 0.002))
                meta = write(value)
            finally:  # (a signal pending here is handled inside the outer try)
                signal.setitimer(signal.ITIMER_REAL, 0)
            storm.ack(meta.offset, value)
        except Interrupt:
            storm.interrupted += 1
        except embedlog.LogPoisonedError:
            return
        except embedlog.EmbedlogError:
            storm.fail()


def _epoch(log_dir: pathlib.Path, how: str, storm: Storm, rng: random.Random, epoch: int
           ) -> None:
    """One epoch: open, write under the storm until the log is poisoned or the time is up,
    close. A hung writer fails the test with the log left open (closing would wait for it;
    the writers are daemon threads, so the run still ends)."""
    stop = threading.Event()
    log = embedlog.open(log_dir, durability="fsync")
    if "t" not in log.topics():
        log.create_topic("t")
    write, producer = _writer(log, how)
    threads = [threading.Thread(target=_work, args=(write, storm, stop, f"e{epoch}-w{k}"),
                                daemon=True) for k in range(WRITERS)]
    for t in threads:
        t.start()
    try:
        _main_writes(write, storm, rng, epoch)
    finally:
        stop.set()
        for t in threads:
            t.join(HANG)
    assert not any(t.is_alive() for t in threads), "a durable writer hung"
    if producer is not None:
        producer.close()
    log.close()


@pytest.mark.parametrize("how", ["append", "send"])
def test_durable_writes_under_an_interrupt_storm(tmp_path: pathlib.Path, interrupts: None,
                                                 how: str) -> None:
    log_dir = tmp_path / "log"
    storm = Storm()
    rng = random.Random(how)
    for epoch in range(EPOCHS):
        _epoch(log_dir, how, storm, rng, epoch)
        with embedlog.open(log_dir, read_only=True) as log:
            stored = {r.offset: r.value for r in log.read("t", 0)}
        assert sorted(stored) == list(range(len(stored)))
        lost = [o for o, v in storm.acked.items() if stored.get(o) != v]
        assert lost == [], f"acknowledged records lost or changed at offsets {lost[:5]}"
    assert storm.interrupted > 0 and storm.acked
    # An interrupt fails at most the batch it cuts short (one record per writer).
    assert storm.failed <= 2 * (WRITERS + 1) * (storm.interrupted + EPOCHS), (
        storm.failed, storm.interrupted)
