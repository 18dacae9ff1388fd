"""Model-based test: random appends, batches, rolls, retention, delete-records and reopens
against an in-memory list of what was appended; in both durabilities (``fsync``: appends go
through the partition's open batch and the group commit, :mod:`embedlog.log_append`)."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import embedlog

values = st.one_of(st.none(), st.binary(max_size=120))
keys = st.one_of(st.none(), st.binary(min_size=1, max_size=16))
headers = st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
)


class LogModel(RuleBasedStateMachine):
    durability: embedlog.Durability = "none"

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="embedlog-model-")
        self.log = embedlog.open(self.dir, durability=self.durability)
        self.log.create_topic(
            "t",
            partitions=2,
            config={"segment.bytes": 1500, "index.interval.bytes": 100, "retention.ms": 10_000},
        )
        # model[p] = list of (offset, key, value, headers, timestamp); start[p] = log start
        self.model: list[list[tuple[int, bytes | None, bytes | None, tuple, int]]] = [[], []]
        self.start = [0, 0]
        self.now = 1_000_000

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _end(self, p: int) -> int:
        return self.model[p][-1][0] + 1 if self.model[p] else self.start[p]

    @rule(p=st.integers(0, 1), key=keys, value=values, hdrs=headers)
    def append(self, p: int, key: bytes | None, value: bytes | None, hdrs: list) -> None:
        self.now += 7
        meta = self.log.append("t", value, key=key, headers=hdrs, timestamp=self.now, partition=p)
        assert meta.offset == self._end(p)
        self.model[p].append((meta.offset, key, value, tuple(hdrs), self.now))

    @rule(p=st.integers(0, 1), batch=st.lists(st.tuples(keys, values), min_size=1, max_size=30),
          codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]))
    def append_batch(self, p: int, batch: list, codec: str) -> None:
        self.now += 11
        metas = self.log.append_batch(
            "t", [v for _, v in batch], keys=[k for k, _ in batch], timestamps=self.now,
            partition=p, compression=codec,
        )
        offset = metas[0].offset
        assert offset == self._end(p)
        for i, (k, v) in enumerate(batch):
            self.model[p].append((offset + i, k, v, (), self.now))

    @rule(p=st.integers(0, 1))
    def roll(self, p: int) -> None:
        self.log.roll("t", p)

    @rule(p=st.integers(0, 1), frac=st.floats(0, 1))
    def delete_records(self, p: int, frac: float) -> None:
        lo, hi = self.start[p], self._end(p)
        before = lo + int((hi - lo) * frac)
        assert self.log.delete_records("t", p, before) == max(before, self.start[p])
        self.start[p] = max(self.start[p], before)
        self.model[p] = [r for r in self.model[p] if r[0] >= self.start[p]]

    @rule(advance=st.integers(0, 30_000))
    def retention(self, advance: int) -> None:
        now = self.now + advance
        self.log.enforce_retention(now_ms=now)
        for p in (0, 1):
            new_start = self.log.start_offset("t", p)
            assert new_start >= self.start[p]
            # Only records older than retention.ms may go, and only whole closed segments.
            for r in self.model[p]:
                if r[0] < new_start:
                    assert now - r[4] > 10_000 or r[0] < self.start[p]
            self.start[p] = new_start
            self.model[p] = [r for r in self.model[p] if r[0] >= new_start]

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = embedlog.open(self.dir, durability=self.durability)

    @precondition(lambda self: any(self.model))
    @rule(p=st.integers(0, 1), data=st.data())
    def read_from(self, p: int, data: st.DataObject) -> None:
        if not self.model[p]:
            return
        i = data.draw(st.integers(0, len(self.model[p]) - 1))
        offset = self.model[p][i][0]
        got = [(r.offset, r.key, r.value, r.headers, r.timestamp)
               for r in self.log.read("t", p, offset)]
        assert got == self.model[p][i:]

    @invariant()
    def offsets_agree(self) -> None:
        for p in (0, 1):
            assert self.log.start_offset("t", p) == self.start[p]
            assert self.log.end_offset("t", p) == self._end(p)


class DurableLogModel(LogModel):
    durability = "fsync"


LogModel.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
DurableLogModel.TestCase.settings = LogModel.TestCase.settings
TestLogModel = LogModel.TestCase
TestDurableLogModel = DurableLogModel.TestCase
