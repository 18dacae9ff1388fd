"""Model-based test of transactions: random begin/send/flush/send-offsets/commit/abort, fencing
by a new producer of the same id, timeouts and crash/reopen, across two partitions, two
transactional ids and two groups, against a simple model of what read_committed must show.

The model: each partition is the list of records written so far, each tagged with its
transaction; a transaction is open, committed or aborted. read_committed shows, in offset order,
the committed records before the first record of a still-open transaction (the last stable
offset). A group's committed offsets change exactly when a transaction that sent them commits.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import embedlog
from embedlog import TopicPartition
from embedlog.errors import ProducerFencedError

TIDS = ("a", "b")
GROUPS = ("g1", "g2")
PARTS = 2
TIMEOUT_MS = 10_000


class _Txn:
    def __init__(self) -> None:
        self.buffered: list[tuple[int, bytes]] = []
        self.registered = False  # the coordinator knows it (something written or sent)
        self.offsets: dict[str, dict[TopicPartition, int]] = {}
        self.state = "open"


class TxnModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="embedlog-txn-")
        self.now = 1_000_000
        self.log = self._open()
        self.log.create_topic("out", partitions=PARTS)
        self.written: list[list[tuple[bytes, _Txn]]] = [[] for _ in range(PARTS)]
        self.producers: dict[str, Any] = {}
        self.txns: dict[str, _Txn | None] = {}
        self.zombies: list[Any] = []
        self.groups: dict[str, dict[TopicPartition, int]] = {g: {} for g in GROUPS}
        self.counter = 0

    def _open(self) -> embedlog.Log:
        return embedlog.Log(self.dir, durability="fsync", clock=lambda: self.now)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ model helpers

    def _abort_open(self, tid: str) -> None:
        txn = self.txns.get(tid)
        if txn is not None and txn.state == "open":
            txn.state = "aborted"
        self.txns[tid] = None

    def _fence(self, tid: str) -> None:
        self._abort_open(tid)
        if tid in self.producers:
            self.zombies.append(self.producers.pop(tid))

    # ------------------------------------------------------------------ rules

    @rule(tid=st.sampled_from(TIDS))
    def init(self, tid: str) -> None:
        self._fence(tid)
        p = self.log.producer(transactional_id=tid, transaction_timeout_ms=TIMEOUT_MS)
        p.init_transactions()
        self.producers[tid] = p

    @rule(tid=st.sampled_from(TIDS))
    def begin(self, tid: str) -> None:
        if tid not in self.producers or self.txns.get(tid) is not None:
            return
        self.producers[tid].begin_transaction()
        self.txns[tid] = _Txn()

    @rule(tid=st.sampled_from(TIDS), part=st.integers(0, PARTS - 1), n=st.integers(1, 3))
    def send(self, tid: str, part: int, n: int) -> None:
        txn = self.txns.get(tid)
        if txn is None:
            return
        for _ in range(n):
            self.counter += 1
            value = b"%d" % self.counter
            self.producers[tid].send("out", value, partition=part)
            txn.buffered.append((part, value))

    @rule(tid=st.sampled_from(TIDS))
    def flush(self, tid: str) -> None:
        txn = self.txns.get(tid)
        if txn is None:
            return
        self.producers[tid].flush()
        self._written(txn)

    def _written(self, txn: _Txn) -> None:
        # flush writes one batch per partition, in the order partitions were first buffered
        order: dict[int, list[bytes]] = {}
        for part, value in txn.buffered:
            order.setdefault(part, []).append(value)
        for part, values in order.items():
            self.written[part] += [(v, txn) for v in values]
            txn.registered = True
        txn.buffered = []

    @rule(tid=st.sampled_from(TIDS), group=st.sampled_from(GROUPS),
          part=st.integers(0, PARTS - 1), offset=st.integers(0, 1000))
    def send_offsets(self, tid: str, group: str, part: int, offset: int) -> None:
        txn = self.txns.get(tid)
        if txn is None:
            return
        tp = TopicPartition("in", part)
        self.producers[tid].send_offsets_to_transaction({tp: offset}, group)
        txn.offsets.setdefault(group, {})[tp] = offset
        txn.registered = True

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans())
    def end(self, tid: str, commit: bool) -> None:
        txn = self.txns.get(tid)
        if txn is None:
            return
        p = self.producers[tid]
        if commit:
            p.commit_transaction()
            self._written(txn)
            txn.state = "committed"
            for group, offsets in txn.offsets.items():
                self.groups[group].update(offsets)
        else:
            p.abort_transaction()
            txn.buffered = []
            txn.state = "aborted"
        self.txns[tid] = None

    @precondition(lambda self: self.zombies)
    @rule(data=st.data())
    def zombie(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(self.zombies))
        with pytest.raises(ProducerFencedError):
            if not p._in_txn:
                p.begin_transaction()
            p.send("out", b"zombie", partition=0)
            p.commit_transaction()

    @rule()
    def time_out(self) -> None:
        """The clock passes every timeout; the next coordinator call (another id's
        init_transactions) aborts the registered transactions and fences their producers."""
        self.now += TIMEOUT_MS + 1
        for tid in TIDS:
            txn = self.txns.get(tid)
            if txn is not None and txn.registered:
                self._fence(tid)
        self.log.producer(transactional_id="other").init_transactions()

    @rule()
    def crash_reopen(self) -> None:
        """The process dies: nothing is closed or aborted; the next open settles the rest."""
        self.log.close()
        for tid in TIDS:
            self._fence(tid)
        self.zombies = []
        self.log = self._open()

    # ------------------------------------------------------------------ checks

    def _expected(self, part: int) -> list[bytes]:
        out = []
        for value, txn in self.written[part]:
            if txn.state == "open":
                break
            if txn.state == "committed":
                out.append(value)
        return out

    @invariant()
    def read_committed_matches(self) -> None:
        for part in range(PARTS):
            c = self.log.consumer(isolation_level="read_committed")
            c.assign([TopicPartition("out", part)])
            got: list[bytes] = []
            while batch := c.poll():
                got += [r.value for r in batch]
            c.close()
            assert got == self._expected(part), part
            lso = self.log.last_stable_offset("out", part)
            assert lso <= self.log.end_offset("out", part)
            if all(txn.state != "open" for _, txn in self.written[part]):
                assert lso == self.log.end_offset("out", part)

    @invariant()
    def group_offsets_match(self) -> None:
        for group in GROUPS:
            c = self.log.consumer(group=group)
            got = {tp: c.committed(tp) for tp in
                   (TopicPartition("in", i) for i in range(PARTS))}
            c.close()
            assert {tp: o for tp, o in got.items() if o is not None} == self.groups[group]


TxnModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_transactions_model = TxnModel.TestCase
