"""Transactions under compaction against a model: two transactional producers and plain
appends, with commits, aborts, rolls, clock ticks and compactions (some with a key map so
small that a compaction takes several passes).

After every step:

* every record read is one that was written, at its offset (offsets never change);
* nothing at or past the last stable offset, or in the active segment, is ever removed;
* a compaction removes every record of an aborted transaction in the segments it cleans;
* a ``read_committed`` consumer sees no record of an aborted or open transaction, and for
  every key the latest committed value below the last stable offset, or -- for a tombstone --
  either that tombstone or nothing, the latter only after a compaction ran at least
  ``delete.retention.ms`` after the first one that could have reached it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from embedlog import TopicPartition
from embedlog.log import Log

T0 = 1_700_000_000_000
RETENTION = 1000
KEYS = [b"a", b"b", b"c"]
TIDS = ["x", "y"]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


Written = tuple[bytes | None, bytes | None, int | None]
"""key, value, and the serial number of its transaction (None: a plain record)."""


class TxnCompactionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="txn-compaction-", dir=shm))
        self.clock = Clock()
        self.log: Log | None = None
        self.written: dict[int, Written] = {}
        self.outcome: dict[int, str] = {}  # transaction serial -> open / commit / abort
        self.producers: dict[str, Any] = {}
        self.current: dict[str, int | None] = {}
        self.serial = 0
        self.end = 0
        self.reachable_at: dict[int, int] = {}  # offset -> first compaction below the active
        self.compactions: list[int] = []

    @initialize()
    def start(self) -> None:
        self.log = Log(self.dir / "log", clock=self.clock, upkeep=False)
        self.log.create_topic("t", config={
            "cleanup.policy": "compact", "segment.bytes": 1 << 30, "segment.ms": 10**12,
            "delete.retention.ms": RETENTION})
        for tid in TIDS:
            p = self.log.producer(transactional_id=tid, transaction_timeout_ms=10**9)
            p.init_transactions()
            self.producers[tid] = p
            self.current[tid] = None

    def _capture(self, serial: int | None) -> None:
        assert self.log is not None
        for r in self.log.read("t", 0, self.end):
            self.written[r.offset] = (r.key, r.value, serial)
        self.end = self.log.end_offset("t", 0)

    @rule(key=st.sampled_from(KEYS), value=st.one_of(st.none(), st.sampled_from([b"1", b"2"])))
    def plain(self, key: bytes, value: bytes | None) -> None:
        assert self.log is not None
        self.log.append("t", value, key=key, timestamp=self.clock.now)
        self._capture(None)

    @rule(tid=st.sampled_from(TIDS), key=st.sampled_from(KEYS),
          value=st.one_of(st.none(), st.sampled_from([b"t1", b"t2"])))
    def send(self, tid: str, key: bytes, value: bytes | None) -> None:
        p = self.producers[tid]
        if self.current[tid] is None:
            p.begin_transaction()
            self.serial += 1
            self.current[tid] = self.serial
            self.outcome[self.serial] = "open"
        p.send("t", value, key=key, partition=0, timestamp=self.clock.now)
        p.flush()
        self._capture(self.current[tid])

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans())
    def end_transaction(self, tid: str, commit: bool) -> None:
        serial = self.current[tid]
        if serial is None:
            return
        p = self.producers[tid]
        (p.commit_transaction if commit else p.abort_transaction)()
        self.outcome[serial] = "commit" if commit else "abort"
        self.current[tid] = None
        assert self.log is not None
        self.end = self.log.end_offset("t", 0)

    @rule()
    def roll(self) -> None:
        assert self.log is not None
        self.log.roll("t", 0)

    @rule(ms=st.integers(0, 1500))
    def tick(self, ms: int) -> None:
        self.clock.now += ms

    @rule(small_map=st.booleans())
    def compact(self, small_map: bool) -> None:
        assert self.log is not None
        bases = [s.base_offset for s in self.log.segments("t", 0)]
        limit = min(bases[-1], self._last_stable())
        cleaned = max(b for b in bases if b <= limit)  # whole segments below it are cleaned
        self.log.compact("t", map_bytes=24 * 64 if small_map else None)
        self.compactions.append(self.clock.now)
        present = {r.offset for r in self.log.read("t", 0)}
        for offset, (_, _, serial) in self.written.items():
            if serial is not None and self.outcome[serial] == "abort" and offset < cleaned:
                assert offset not in present, ("aborted record kept", offset)
        active = self.log.segments("t", 0)[-1].base_offset
        for offset in self.written:
            if offset < active:
                self.reachable_at.setdefault(offset, self.clock.now)

    def _visible(self, serial: int | None) -> bool:
        return serial is None or self.outcome[serial] == "commit"

    def _last_stable(self) -> int:
        return min((o for o, (_, _, s) in self.written.items()
                    if s is not None and self.outcome[s] == "open"), default=self.end)

    def _read_committed(self, lso: int) -> dict[bytes | None, tuple[int, bytes | None]]:
        """The latest record of each key a read_committed consumer reads up to ``lso`` (a
        poll may return nothing before that: a fetch of emptied batches or markers only)."""
        assert self.log is not None
        consumer = self.log.consumer(isolation_level="read_committed")
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        latest: dict[bytes | None, tuple[int, bytes | None]] = {}
        for _ in range(1000):
            if consumer.position(tp) >= lso:
                break
            for r in consumer.poll(0.01):
                assert self._visible(self.written[r.offset][2]), r.offset
                assert r.offset < lso, r.offset
                latest[r.key] = (r.offset, r.value)
        else:
            raise AssertionError(f"read_committed stuck at {consumer.position(tp)} < {lso}")
        consumer.close()
        return latest

    @invariant()
    def offsets_kept_and_nothing_unstable_removed(self) -> None:
        if self.log is None:
            return
        present = set()
        for r in self.log.read("t", 0):
            assert self.written[r.offset][:2] == (r.key, r.value), r
            present.add(r.offset)
        lso = self._last_stable()
        assert self.log.last_stable_offset("t", 0) == lso
        active = self.log.segments("t", 0)[-1].base_offset
        assert {o for o in self.written if o >= min(lso, active)} <= present

    @invariant()
    def read_committed_shows_the_latest_committed_values(self) -> None:
        if self.log is None:
            return
        lso = self._last_stable()
        model: dict[bytes | None, tuple[int, bytes | None]] = {}
        for offset in sorted(o for o in self.written if o < lso):
            key, value, serial = self.written[offset]
            if self._visible(serial):
                model[key] = (offset, value)
        seen = self._read_committed(lso)
        assert set(seen) <= set(model)
        for key, (offset, value) in model.items():
            if value is not None or key in seen:
                assert seen.get(key) == (offset, value), (key, seen.get(key), offset)
            else:  # a tombstone gone: only once delete.retention.ms has passed
                first = self.reachable_at.get(offset)
                assert first is not None, offset
                assert any(t >= first + RETENTION for t in self.compactions), offset

    def teardown(self) -> None:
        for p in self.producers.values():
            p.close()
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TxnCompactionModel.TestCase.settings = settings(
    max_examples=40, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_transactions_under_compaction = TxnCompactionModel.TestCase
