"""Power-loss crash exploration of tiered storage's upload protocol (issue 15).

The workload -- open (recovery), a tiering round (sealed segments uploaded and published,
local copies past ``local.retention.bytes`` deleted), more acknowledged appends, a second
round, ``delete_records``, total retention reaching remote segments, close -- is recorded
through :class:`RecordingFS`. The remote store sits behind the same seam: every remote put
and delete announces itself with ``_io.mark`` before it runs, and the remote folder
(``file://``; puts are atomic) is snapshotted after each one. A crash after local op ``k``
leaves every local state :mod:`.crash_states` builds for ``k`` *and* the remote as it was
after the last remote operation announced before ``k``. Each such pair is rebuilt, reopened
and checked:

1. the open succeeds (tiered to the rebuilt remote);
2. no published segment is incomplete: every file the remote manifest lists is there at its
   size and CRC-32;
3. nothing acknowledged is lost: reading from the log start gives exactly the records written,
   from there on, at least up to the last acknowledged one; the log start never passes an
   offset no ``delete_records`` or retention asked for;
4. a tiering round after recovery succeeds (re-uploading what was left unpublished) and
   everything above still holds; the remote read-only open reads the published records.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import embedlog
from embedlog import _io
from embedlog.tiering import store as tier_store
from embedlog.tiering import upload as upload_mod
from embedlog.tiering.remote_manifest import Manifest, Published, encode
from tiering_helpers import TOPIC, check_published_complete, fill

from .crash_states import crash_states, read_tree, write_image, write_tree
from .parallel import first_failure, pmap, workers
from .recording import RecordingFS
from .workloads import scratch_dir

pytest.importorskip("pyarrow.fs", reason="tiered storage needs pyarrow")

CONFIG = {"remote.storage.enable": True, "segment.bytes": 1024, "index.interval.bytes": 128,
          "local.retention.bytes": 1024, "retention.bytes": 4096}
FIRST, MORE = 40, 20
"""Records written before the recording, and acknowledged during it."""
CUTS = (12, 30)
"""The ``delete_records`` targets of the workload (retention may move the start further)."""


def _open(path: str, remote: str) -> embedlog.Log:
    return embedlog.open(path, remote_uri=f"file://{remote}", durability="fsync",
                         upkeep=False)


def _workload(path: str, remote: str) -> None:
    with _open(path, remote) as log:
        log.upkeep.run_once("tiering")
        for i in range(FIRST, FIRST + MORE):
            fill(log, 1, start=i)
            _io.mark("tier_ack", count=i + 1)
        assert log.upkeep.run_once("tiering").error is None
        for cut in CUTS:
            _io.mark("tier_cut", offset=cut)
            log.delete_records(TOPIC, 0, cut)
        _io.mark("tier_cut", offset=FIRST + MORE)  # retention may go anywhere below the end
        log.enforce_retention()


@dataclass
class _Trace:
    root: str
    fs: RecordingFS
    remotes: list[tuple[int, dict[str, bytes]]]
    """(index of the op's mark in the trace, the remote after that op), in trace order."""
    values: list[bytes]


def _record(monkeypatch: pytest.MonkeyPatch) -> _Trace:
    root, remote = scratch_dir(), scratch_dir()
    path = os.path.join(root, "log")
    with _open(path, remote) as log:
        log.create_topic(TOPIC, config=CONFIG)
        values = fill(log, FIRST)
    values += [b"%06d-" % i + b"x" * 40 for i in range(FIRST, FIRST + MORE)]
    remotes = [(-1, read_tree(remote))]
    fs = RecordingFS(root)

    def after(real: Any) -> Any:
        def op(self: tier_store.RemoteStore, *args: Any) -> Any:
            result = real(self, *args)
            marks = [i for i, o in enumerate(fs.ops) if o.kind == "mark"]
            remotes.append((marks[-1], read_tree(remote)))
            return result
        return op

    monkeypatch.setattr(tier_store.RemoteStore, "_put", after(tier_store.RemoteStore._put))
    monkeypatch.setattr(tier_store.RemoteStore, "delete", after(tier_store.RemoteStore.delete))
    with _io.use_backend(fs):
        _workload(path, remote)
    monkeypatch.undo()
    return _Trace(root, fs, remotes, values)


def _check(path: str, remote: str, values: list[bytes], acked: int, cut: int) -> list[str]:
    try:
        log = _open(path, remote)
    except BaseException as exc:
        return [f"open failed: {type(exc).__name__}: {exc}"]
    problems: list[str] = []
    try:
        problems += _check_log(log, remote, values, acked, cut, "after the open")
        run = log.upkeep.run_once("tiering")
        if run.error is not None:
            problems.append(f"tiering round after recovery: {run.error}")
        problems += _check_log(log, remote, values, acked, cut, "after a tiering round")
    except BaseException as exc:
        problems.append(f"after recovery: {type(exc).__name__}: {exc}")
    finally:
        log.close()
    if not problems:
        with embedlog.open(f"file://{remote}", read_only=True) as ro:
            if TOPIC in ro.topics():
                start = ro.start_offset(TOPIC, 0)
                got = [r.value for r in ro.read(TOPIC, 0, start)]
                if got != values[start:start + len(got)]:
                    problems.append("the remote read-only open reads other records")
    return problems


def _check_log(log: embedlog.Log, remote: str, values: list[bytes], acked: int, cut: int,
               when: str) -> list[str]:
    check_published_complete(f"file://{remote}")
    start = log.start_offset(TOPIC, 0)
    got = [r.value for r in log.read(TOPIC, 0, start)]
    problems = []
    if start > cut:
        problems.append(f"{when}: log start {start} past {cut}")
    if got != values[start:start + len(got)] or start + len(got) < acked:
        problems.append(f"{when}: read {len(got)} records from {start}, {acked} acknowledged")
    return problems


_TRACE: list[tuple[_Trace, int, set[int] | None]] = []


def _states(job: tuple[int, int]) -> Iterator[tuple[str, list[str]]]:
    index, count = job
    trace, max_per_point, points = _TRACE[0]
    ops = trace.fs.ops
    acked, cut, folded = FIRST, 0, 0
    states = crash_states(trace.fs.base, ops, max_per_point=max_per_point,
                          points=points)  # type: ignore[arg-type]  # any container works
    for i, state in enumerate(states):
        while folded <= state.point:
            info = ops[folded].info
            if info.get("kind") == "tier_ack":
                acked = int(info["count"])
            elif info.get("kind") == "tier_cut":
                cut = max(cut, int(info["offset"]))
            folded += 1
        if i % count != index:
            continue
        for remote_files in _remotes_at(trace, state.point):
            yield _where(ops, state), _check_pair(trace, state, remote_files, index, acked, cut)


def _remotes_at(trace: _Trace, point: int) -> list[dict[str, bytes]]:
    """The remote states a crash with the local state of ``point`` may meet: the one after
    the last remote operation before it, and each one after a remote operation between it
    and the next local operation (remote operations run back to back)."""
    ops = trace.fs.ops
    nxt = next((i for i in range(point + 1, len(ops)) if ops[i].kind != "mark"), len(ops))
    before = [files for at, files in trace.remotes if at < point][-1:]
    return before + [files for at, files in trace.remotes if point < at < nxt]


def _where(ops: list[Any], state: Any) -> str:
    return f"crash after op {state.point} ({ops[state.point]}); {state.choice}"


def _check_pair(trace: _Trace, state: Any, remote_files: dict[str, bytes], index: int,
                acked: int, cut: int) -> list[str]:
    target = f"{trace.root}-state-{index}"
    os.mkdir(target)
    try:
        write_image(state, os.path.join(target, "local"))
        remote = os.path.join(target, "remote")
        write_tree(remote_files, {os.path.dirname(p) for p in remote_files} | {""}, remote)
        return _check(os.path.join(target, "local", "log"), remote, trace.values, acked, cut)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _shard(job: tuple[int, int]) -> tuple[int, list[str]]:
    return first_failure(_states(job))


def _near_remote(ops: list[Any]) -> set[int]:
    """The crash points right before and right after each remote put or delete."""
    local = [i for i, op in enumerate(ops) if op.kind != "mark"]
    points = set()
    for m, op in enumerate(ops):
        if op.kind == "mark" and str(op.info["kind"]).startswith("remote_"):
            before = [i for i in local if i < m]
            after = [i for i in local if i > m]
            points.update(before[-1:] + after[:1])
    return points


def _run(monkeypatch: pytest.MonkeyPatch, max_per_point: int, *, near_remote: bool = False
         ) -> tuple[_Trace, int]:
    trace = _record(monkeypatch)
    _TRACE[:] = [(trace, max_per_point, _near_remote(trace.fs.ops) if near_remote else None)]
    n, states = workers(), 0
    for count, failures in pmap(_shard, [(i, n) for i in range(n)],
                                stop=lambda r: bool(r[1])):
        assert not failures, failures[0]
        states += count
    return trace, states


def test_a_crash_at_every_remote_step_of_the_protocol(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """The local states right before and right after every remote put and delete."""
    trace, states = _run(monkeypatch, 3, near_remote=True)
    kinds = [op.info.get("kind") for op in trace.fs.ops if op.kind == "mark"]
    assert kinds.count("remote_put") >= 10 and kinds.count("remote_delete") >= 4
    assert states > 30


@pytest.mark.slow
def test_every_crash_point_of_the_upload_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, 1)[1] > 100


def test_explorer_finds_a_manifest_published_before_its_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: with the manifest put before the segment's files, a crash between
    leaves a published segment whose files are missing, and the explorer says so."""
    real = upload_mod._publish

    def broken(p: Any, tier: Any, seg: Any, nxt: int) -> bool:
        files = {k: (0, 0) for k in ("txnindex", "index", "timeindex", "log")}
        m = tier.manifest
        early = Manifest(m.log_start, (*m.segments, Published(seg.base_offset, nxt,
                                                               seg.max_timestamp, files)))
        tier.store.put_bytes((tier.name, "embedlog.remote-manifest"), encode(early))
        return bool(real(p, tier, seg, nxt))

    monkeypatch.setattr(upload_mod, "_publish", broken)
    trace = _record(monkeypatch)
    _TRACE[:] = [(trace, 1, _near_remote(trace.fs.ops))]
    found = [f for _, f in _states((0, 1)) if f]
    assert found and any("published" in p for f in found for p in f), found[:2]
