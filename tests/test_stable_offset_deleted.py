"""An open transaction whose first batch was deleted (``delete_records``, retention) still holds
the last stable offset back, at the log start (Kafka keeps the transaction in its producer
state and bounds the first unstable offset by the log start): ``read_committed`` readers -- the
writer's and a read-only view's consumers, the Arrow reader -- see nothing past the log start
until the transaction's marker."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from typing import Any

from hypothesis import given, settings

import embedlog
from embedlog import TopicPartition
from embedlog.arrow import read_arrow
from helpers import open_transaction, run_txn_ops, txn_ops

TP = TopicPartition("t", 0)

_OPS = txn_ops(max_size=25, records=6, compact=False)


def _consumed(reader: Any, end: int) -> list[int]:
    """Offsets a ``read_committed`` consumer of ``reader`` reads from the log start."""
    c = reader.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    c.assign([TP])
    assert c.end_offsets([TP]) == {TP: end}
    out: list[int] = []
    for _ in range(100):  # polls past the end too: nothing more may come
        got = [r.offset for r in c.poll(0)]
        out += got
        if not got and c.position(TP) >= end:
            break
    c.close()
    return out


def _arrow(reader: Any) -> list[int]:
    table = read_arrow(reader, "t", isolation_level="read_committed").read_all()
    return sorted(table.column("offset").to_pylist())


def test_open_transaction_with_its_first_batch_deleted(tmp_path: pathlib.Path) -> None:
    with embedlog.open(tmp_path / "log", upkeep=False) as log:
        log.create_topic("t")
        log.append("t", b"p0", partition=0)
        p = open_transaction(log, "t", b"t1")  # offset 1
        log.roll("t", 0)
        log.append("t", b"p2", partition=0)
        p.send("t", b"t3", partition=0)  # offset 3, same open transaction
        p.flush()
        log.append("t", b"p4", partition=0)
        assert log.delete_records("t", 0, 2) == 2  # the segment of offsets 0-1 goes
        assert not (tmp_path / "log" / "t-0" / f"{0:020d}.log").exists()
        view = embedlog.open(tmp_path / "log", read_only=True)
        for reader in (log, view):
            assert reader.last_stable_offset("t", 0) == 2
            assert _consumed(reader, 2) == [] and _arrow(reader) == []
        p.commit_transaction()
        for reader in (log, view):
            assert reader.last_stable_offset("t", 0) == 6
            assert _consumed(reader, 6) == [2, 3, 4] and _arrow(reader) == [2, 3, 4]
        view.close()
        p.close()


class _Model:
    """What Kafka shows ``read_committed``: records in ``[log start, LSO)`` not aborted, the
    LSO being the first offset of the oldest open transaction (deleted or not) bounded below
    by the log start, else the log end."""

    def __init__(self) -> None:
        self.end = 0
        self.start = 0
        self.txn_of: dict[int, int] = {}  # offset -> transaction number (plain: absent)
        self.state: list[str] = []  # transaction number -> open / commit / abort
        self.open: dict[str, int] = {}  # producer -> its open transaction's number
        self.first: dict[int, int] = {}  # transaction number -> first offset
        self.records: list[int] = []

    def play(self, op: tuple[Any, ...], start: int, end: int) -> None:
        kind, *args = op
        new = list(range(self.end, end))
        self.end, self.start = end, start
        if kind == "send":
            n = self.open.get(args[0])
            if n is None:
                n = self.open[args[0]] = len(self.state)
                self.state.append("open")
                self.first[n] = new[0]
            self.txn_of.update((o, n) for o in new)
            self.records += new
        elif kind in ("commit", "abort") and args[0] in self.open:
            self.state[self.open.pop(args[0])] = kind
        elif kind == "plain":
            self.records += new

    @property
    def lso(self) -> int:
        firsts = [self.first[n] for n in self.open.values()]
        return max(self.start, min(firsts)) if firsts else self.end

    def unseen(self) -> bool:
        """Whether an open transaction has no batch left (a read-only view cannot know it)."""
        left = {self.txn_of[o] for o in self.records if o >= self.start and o in self.txn_of}
        return any(n not in left for n in self.open.values())

    def visible(self, below: int) -> list[int]:
        return [o for o in self.records if self.start <= o < below
                and (o not in self.txn_of or self.state[self.txn_of[o]] != "abort")]


def _check(log: embedlog.Log, view: embedlog.Log, model: _Model) -> None:
    lso = model.lso
    assert log.last_stable_offset("t", 0) == lso
    expected = model.visible(lso)
    assert _consumed(log, lso) == expected and _arrow(log) == expected
    # a view knows the open transactions from the batches it reads: one whose producer left
    # no marker in the remaining segments may have begun before them, so it may stop at the
    # log start instead (never further than the writer); one with no batch left is unknown
    if model.unseen():
        return
    seen = view.last_stable_offset("t", 0)
    assert seen in (lso, model.start)
    shown = model.visible(seen)
    assert _consumed(view, seen) == shown and _arrow(view) == shown


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_read_committed_matches_a_model_under_deletes(ops: list[tuple[Any, ...]]) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-lso-del-"))
    try:
        with embedlog.open(work / "log", upkeep=False) as log:
            log.create_topic("t", config={"segment.bytes": 600})
            view = embedlog.open(work / "log", read_only=True)
            producers = {n: log.producer(transactional_id=n) for n in "ab"}
            for p in producers.values():
                p.init_transactions()
            model = _Model()

            def after(op: tuple[Any, ...]) -> None:
                model.play(op, log.start_offset("t", 0), log.end_offset("t", 0))
                _check(log, view, model)

            run_txn_ops(log, ops, producers, after)
            for p in producers.values():
                p.close()
            view.close()
    finally:
        shutil.rmtree(work)


def test_the_cleaner_stops_at_the_log_start_of_such_a_transaction(tmp_path: pathlib.Path
                                                                  ) -> None:
    """The cleaner cleans nothing past the last stable offset: not the duplicates behind the
    log start while the transaction whose first batch was deleted is open, as Kafka's
    ``cleanableOffsets`` bounds it. (``compact,delete``: records of a compact-only topic
    cannot be deleted, as in Kafka.)"""
    with embedlog.open(tmp_path / "log", upkeep=False) as log:
        log.create_topic("t", config={"cleanup.policy": "compact,delete"})
        p = log.producer(transactional_id="x")
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"t0", key=b"c", partition=0)  # offset 0
        p.flush()
        log.roll("t", 0)
        log.append_batch("t", [b"a1", b"a2"], keys=[b"a", b"a"], partition=0)  # offsets 1-2
        log.roll("t", 0)
        p.send("t", b"t3", key=b"b", partition=0)  # offset 3, the same transaction
        p.flush()
        log.roll("t", 0)
        log.append("t", b"a4", key=b"a", partition=0)
        assert log.delete_records("t", 0, 1) == 1  # the first segment goes
        assert log.last_stable_offset("t", 0) == 1
        log.compact("t")
        assert [r.offset for r in log.read("t", 0, 1)] == [1, 2, 3, 4]  # nothing cleaned
        p.commit_transaction()
        log.compact("t")
        assert [r.offset for r in log.read("t", 0, 1)] == [2, 3, 4]
        p.close()
