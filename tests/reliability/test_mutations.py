"""Mutation check of the checker (issue 7, item 2; reliability.md G3).

Each test switches one durability step off through ``_io.SAFETY`` and requires the crash
explorer to report at least one violation: a checker that never fails proves nothing.
"""

from __future__ import annotations

import os

import pytest

from embedlog import _io

from .explorer import explore_many
from .workloads import Workload, ace_workloads

SWITCHES = [
    "dir_fsync",
    "fsync_before_rename",
    "fsync_before_ack",
    "verify_crc",
    "truncate_torn_tail",
    "atomic_checkpoint",
]


def test_every_safety_switch_is_covered() -> None:
    assert sorted(SWITCHES) == sorted(vars(_io.Safety()))


@pytest.mark.parametrize("switch", SWITCHES)
def test_explorer_catches_a_missing_safety_step(switch: str) -> None:
    result = explore_many(ace_workloads(2), safety=switch, stop_at_first=True)
    assert result.violations, f"removing {switch} went unnoticed over {result.states} states"
    assert all(getattr(_io.SAFETY, name) for name in SWITCHES)


def _atomic_with_fsync(path: str, data: bytes) -> None:
    """``write_atomic`` with its own fsync kept, whatever ``SAFETY`` says."""
    tmp = path + ".tmp"
    fd = _io.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        _io.write(fd, data)
        _io.fsync(fd)
    finally:
        _io.close(fd)
    _io.rename(tmp, path)
    _io.fsync_dir(os.path.dirname(path))


def test_explorer_catches_compaction_renaming_an_unsynced_segment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``fsync_before_rename`` also guards compaction's ``.cleaned`` -> ``.swap`` rename; with
    checkpoints still synced, only that barrier is missing."""
    monkeypatch.setattr(_io, "write_atomic", _atomic_with_fsync)
    workloads = [Workload("+".join(ops), ops) for ops in
                 [("roll", "compact"), ("append", "roll", "compact")]]
    result = explore_many(workloads, safety="fsync_before_rename", stop_at_first=True)
    assert any(".cleaned" in v for v in result.violations), result.violations[:3]
