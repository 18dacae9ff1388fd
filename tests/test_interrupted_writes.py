"""A write cut short by an exception that is not an I/O error (an interrupt: ``KeyboardInterrupt``
raised by a signal handler lands between any two bytecodes of the thread that writes): the
partition's state may no longer match its files, so it refuses further appends until the log
is reopened, and the reopened log holds every acknowledged record, in order."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

import embedlog
from embedlog import _io, batch_writer, log_append
from embedlog.segment.segment import Segment


class Interrupt(BaseException):
    """What a signal handler raises (not an ``Exception``, like ``KeyboardInterrupt``)."""


def _after_the_write(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Arm: the next batch written to a ``.log`` file is written whole, then interrupted."""
    armed = [False]
    pwrite = _io.pwrite

    def cut(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        pwrite(fd, data, offset)
        if armed[0] and len(data) > 61:  # a batch (an index entry is 8 or 12 bytes)
            armed[0] = False
            raise Interrupt

    monkeypatch.setattr(_io, "pwrite", cut)
    return lambda: armed.__setitem__(0, True)


def _before_the_index(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Arm: the next batch appended is written and counted in the segment's size, then
    interrupted before its index entries and its end offset are recorded."""
    armed = [False]
    index_batch = Segment._index_batch

    def cut(self: Segment, *args: object) -> None:
        if armed[0]:
            armed[0] = False
            raise Interrupt
        index_batch(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Segment, "_index_batch", cut)
    return lambda: armed.__setitem__(0, True)


ARMS = {"after the write": _after_the_write, "before the index": _before_the_index}


@pytest.mark.parametrize("durability", ["none", "fsync"])
@pytest.mark.parametrize("where", list(ARMS))
def test_an_append_cut_short_refuses_later_appends_until_reopened(
        log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch, where: str,
        durability: str) -> None:
    arm = ARMS[where](monkeypatch)
    acked: list[tuple[int, bytes]] = []
    with embedlog.open(log_dir, durability=durability) as log:  # type: ignore[arg-type]
        log.create_topic("t")
        for i in range(3):
            acked.append((log.append("t", b"v%d" % i).offset, b"v%d" % i))
        arm()
        with pytest.raises(Interrupt):
            log.append("t", b"cut")
        with pytest.raises(embedlog.LogPoisonedError):
            log.append("t", b"after")
        with pytest.raises(embedlog.LogPoisonedError):
            log.append_batch("t", [b"a", b"b"])
    with embedlog.open(log_dir) as log:
        stored = [(r.offset, r.value) for r in log.read("t", 0)]
        assert stored[:3] == acked  # every acknowledged record, in order
        assert stored[3:] in ([], [(3, b"cut")])  # the cut record: stored whole or not at all
        assert log.append("t", b"later").offset == len(stored)
        assert [r.value for r in log.read("t", 0, len(stored))] == [b"later"]


def test_an_interrupt_as_a_batch_opens_leaves_it_reserved(log_dir: pathlib.Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt at the end of a durable append's batch opening (the batch is open): the
    batch stays the partition's reservation, so the next append joins it and a round writes
    it, instead of every later append of the partition failing unwritten."""
    opened: list[object] = []

    def interrupt_first_open(batch: object, *error: object) -> None:
        if not error and not opened:  # on_open(batch); on_close(batch, error)
            opened.append(batch)
            raise Interrupt

    monkeypatch.setattr(log_append, "_noop", interrupt_first_open)
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        with pytest.raises(Interrupt):
            log.append("t", b"cut")
        p = log._topic("t").partitions[0]
        assert p._reserved is opened[0]
        assert log.append("t", b"next").offset == 0
        assert log.append("t", b"after").offset == 1
        assert [r.value for r in log.read("t", 0)] == [b"next", b"after"]


def test_an_interrupt_as_a_batch_write_starts_leaves_it_reserved(
        log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt as the write of a durable append's batch starts, before it took the
    batch's records: the batch stays reserved with its record, the next append joins it, and
    one round writes both."""
    write = batch_writer.OpenBatch.write
    calls: list[int] = []

    def interrupted_once(self: batch_writer.OpenBatch) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise Interrupt
        write(self)

    monkeypatch.setattr(batch_writer.OpenBatch, "write", interrupted_once)
    with embedlog.open(log_dir, durability="fsync") as log:
        log.create_topic("t")
        with pytest.raises(Interrupt):
            log.append("t", b"cut")
        p = log._topic("t").partitions[0]
        assert p._reserved is not None and p.end_offset == 0
        assert log.append("t", b"next").offset == 1
        assert [r.value for r in log.read("t", 0)] == [b"cut", b"next"]
        assert p.poisoned is None
