"""Mutation check of the checker (issue 7, item 2; reliability.md G3).

Each test switches one durability step off through ``_io.SAFETY`` and requires the crash
explorer to report at least one violation: a checker that never fails proves nothing.
"""

from __future__ import annotations

import pytest

from embedlog import _io

from .explorer import explore_many
from .workloads import ace_workloads

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
