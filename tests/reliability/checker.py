"""Reopen embedlog on a crash state and check the promises made before the crash.

Invariants (issue 7):

1. open succeeds (a crash image that cannot be opened is a failure, whatever the error);
   reading raises nothing;
2. every record returned is byte-identical (key, value, headers, timestamp) to the record
   appended at that offset -- nothing corrupt or invented;
3. offsets strictly increase, lie in ``[log start, log end)``, and no offset is missing in that
   range unless an intended compaction superseded its key or a transaction marker may hold it;
   no transaction stays open (the last stable offset is the log end);
4. every acknowledged record is present unless an intended retention/deletion covered it;
5. the log start never falls below an acknowledged start, nor a committed group offset below an
   acknowledged commit;
6. the recovered log accepts an append, and a clean close and another reopen keep every record.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import embedlog

from .workloads import Rec, Truth, committed_offset

__all__ = ["Promises", "check_state"]

TP = tuple[str, int]


@dataclass
class Promises:
    """What had been promised at a crash point (folded from the trace's marks)."""

    acked: dict[TP, set[int]] = field(default_factory=dict)
    acked_start: dict[TP, int] = field(default_factory=dict)
    intent_start: dict[TP, int] = field(default_factory=dict)
    compacting: set[str] = field(default_factory=set)
    commits: dict[TP, int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)
    attempted: dict[TP, set[int]] = field(default_factory=dict)
    controls: dict[TP, set[int]] = field(default_factory=dict)
    """Offsets a transaction marker may hold (no record is read there)."""

    @classmethod
    def from_truth(cls, truth: Truth) -> Promises:
        """Everything written before recording began is acknowledged."""
        return cls(acked={tp: set(recs) for tp, recs in truth.records.items()},
                   topics=set(truth.partitions),
                   attempted={tp: set(recs) for tp, recs in truth.records.items()})

    def copy(self) -> Promises:
        return Promises(
            {tp: set(s) for tp, s in self.acked.items()},
            dict(self.acked_start),
            dict(self.intent_start),
            set(self.compacting),
            dict(self.commits),
            set(self.topics),
            {tp: set(s) for tp, s in self.attempted.items()},
            {tp: set(s) for tp, s in self.controls.items()},
        )

    def key(self, truth: Truth) -> str:
        """A canonical text of every promise and of the records attempted so far (equal keys:
        the checker's verdict on one image is the same)."""
        records = [(tp, o, truth.records[tp][o]) for tp, s in sorted(self.attempted.items())
                   for o in sorted(s)]
        return repr((sorted((tp, sorted(s)) for tp, s in self.acked.items()),
                     sorted(self.acked_start.items()), sorted(self.intent_start.items()),
                     sorted(self.compacting), sorted(self.commits.items()), sorted(self.topics),
                     records, sorted((tp, sorted(s)) for tp, s in self.controls.items())))

    def fold(self, info: dict[str, Any]) -> None:
        kind = info["kind"]
        if kind == "intent_compact":
            self.compacting.add(info["topic"])
            return
        if kind == "ack_topic":
            self.topics.add(info["topic"])
            return
        tp: TP = (info.get("topic", ""), info.get("partition", -1))
        if kind == "attempt":
            self.attempted.setdefault(tp, set()).update(info["offsets"])
        elif kind == "attempt_control":
            self.controls.setdefault(tp, set()).add(info["offset"])
        elif kind == "ack":
            self.acked.setdefault(tp, set()).update(info["offsets"])
        elif kind == "ack_start":
            self.acked_start[tp] = max(self.acked_start.get(tp, 0), info["offset"])
        elif kind == "intent_start_offset":
            self.intent_start[tp] = max(self.intent_start.get(tp, 0), info["offset"])
        elif kind == "ack_commit":
            self.commits[tp] = max(self.commits.get(tp, -1), info["offset"])


def _describe(exc: BaseException) -> str:
    own = "embedlog error" if isinstance(exc, embedlog.EmbedlogError) else "FOREIGN exception"
    return f"{own} {type(exc).__name__}: {exc}"


def _same(rec: embedlog.Record, want: Rec) -> bool:
    return (
        rec.key == want.key
        and rec.value == want.value
        and rec.timestamp == want.timestamp
        and tuple(rec.headers) == want.headers
    )


def _check_partition(
    log: embedlog.Log, topic: str, partition: int, truth: Truth, promises: Promises
) -> tuple[list[str], list[embedlog.Record]]:
    tp = (topic, partition)
    problems: list[str] = []
    expected = truth.records.get(tp, {})
    got = list(log.read(topic, partition))
    start, end = log.start_offset(topic, partition), log.end_offset(topic, partition)
    where = f"{topic}-{partition}"
    offsets = [r.offset for r in got]
    if any(b <= a for a, b in itertools.pairwise(offsets)):
        problems.append(f"{where}: offsets do not strictly increase: {offsets}")
    for r in got:
        want = expected.get(r.offset)
        if want is None or r.offset not in promises.attempted.get(tp, ()):
            problems.append(f"{where}: invented record at offset {r.offset}")
        elif not _same(r, want):
            problems.append(f"{where}: corrupt record at offset {r.offset}")
        if not start <= r.offset < end:
            problems.append(f"{where}: offset {r.offset} outside [{start}, {end})")
    present = set(offsets)
    allowed_gone = promises.intent_start.get(tp, 0)
    for o in sorted(promises.acked.get(tp, ())):
        if o >= allowed_gone and o not in present and not _compacted(o, tp, truth, promises,
                                                                   present):
            problems.append(f"{where}: acknowledged record {o} lost (log holds [{start}, {end}))")
            break
    controls = promises.controls.get(tp, set())
    if end - start > len(expected) + len(controls) + 1:
        problems.append(f"{where}: [{start}, {end}) is larger than everything ever appended")
    else:
        for o in range(start, end):
            if o not in present and o not in controls and not (
                    o in expected and _compacted(o, tp, truth, promises, present)):
                problems.append(f"{where}: hole at offset {o} inside [{start}, {end})")
                break
    if start < promises.acked_start.get(tp, 0):
        problems.append(f"{where}: log start {start} went back below the acknowledged "
                        f"{promises.acked_start[tp]}")
    if start > allowed_gone and topic not in promises.compacting:
        problems.append(f"{where}: log start moved to {start}, only {allowed_gone} was intended")
    return problems, got


def _compacted(o: int, tp: TP, truth: Truth, promises: Promises, present: set[int]) -> bool:
    """Offset ``o`` may be gone because an intended compaction kept a later record of its key."""
    if tp[0] not in promises.compacting:
        return False
    recs = truth.records[tp]
    key = recs[o].key
    return any(p > o and recs[p].key == key for p in present)


def check_state(path: str, truth: Truth, promises: Promises) -> list[str]:
    """Open the log at ``path`` and return every broken invariant (empty: the state is fine)."""
    try:
        log = embedlog.open(path, durability="fsync", upkeep=False)
    except BaseException as exc:
        return [f"open failed: {_describe(exc)}"]
    problems: list[str] = []
    seen: dict[TP, list[embedlog.Record]] = {}
    try:
        topics = set(log.topics())
        for topic, count in truth.partitions.items():
            if topic not in topics:
                if topic in promises.topics:
                    problems.append(f"topic {topic} vanished")
                continue
            for p in range(count):
                found, got = _check_partition(log, topic, p, truth, promises)
                problems += found
                if log.last_stable_offset(topic, p) != log.end_offset(topic, p):
                    problems.append(f"{topic}-{p}: a transaction stays open")
                seen[(topic, p)] = got
        problems += _check_commits(log, promises)
        if problems:
            return problems
        probes = {tp: log.append(tp[0], b"probe", key=b"probe", partition=tp[1]).offset
                  for tp in seen}
    except BaseException as exc:
        return [*problems, f"after recovery: {_describe(exc)}"]
    finally:
        try:
            log.close()
        except BaseException as exc:
            problems.append(f"close failed: {_describe(exc)}")
    if problems:
        return problems
    return _check_reopen(path, seen, probes)


def _check_commits(log: embedlog.Log, promises: Promises) -> list[str]:
    out = []
    for (topic, partition), offset in promises.commits.items():
        got = committed_offset(log, topic, partition)
        if got is None or got < offset:
            out.append(f"committed offset of {topic}-{partition} is {got}, acknowledged {offset}")
    return out


def _check_reopen(path: str, seen: dict[TP, list[embedlog.Record]], probes: dict[TP, int]
                  ) -> list[str]:
    """The clean reopen keeps the log start, the records (the end offset) and the probe."""
    try:
        with embedlog.open(path, durability="fsync", upkeep=False) as log:
            out = []
            for (topic, p), before in seen.items():
                probe = probes[(topic, p)]
                start = before[0].offset if before else probe
                if log.end_offset(topic, p) != probe + 1 or log.start_offset(topic, p) > start:
                    out.append(f"{topic}-{p}: offsets changed across a clean reopen")
                last = list(log.read(topic, p, probe))
                if [(r.offset, r.value) for r in last] != [(probe, b"probe")]:
                    out.append(f"{topic}-{p}: the record appended after recovery was lost")
            return out
    except BaseException as exc:
        return [f"reopen after recovery failed: {_describe(exc)}"]


def fold_all(promises: Promises, infos: Iterable[dict[str, Any]]) -> Promises:
    out = promises.copy()
    for info in infos:
        out.fold(info)
    return out
