"""The tools on hostile log folders: ``embedlog.inspect``, ``embedlog verify``, ``dump-log``,
``groups`` and ``recover`` treat the folder as untrusted input, as the library does.

* an index is read only as far as its log (or a writer's pre-allocation) justifies;
* a FIFO, a directory or a symbolic link where a file belongs is reported as damage, never
  followed, never a hang; a symbolic link where a folder belongs (a partition folder, a group
  folder, ``lost+found``) is never followed;
* a salvage holds a bounded amount of a damaged segment in memory and keeps a sparse damaged
  tail sparse;
* nothing outside the log folder is read through a link, created, written or deleted.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import embedlog
from embedlog.cli import cli
from embedlog.cli.verify import verify_path
from embedlog.inspect import offset_index_entries, time_index_entries
from embedlog.segment import format as fmt

from .test_hostile_files import EXPECTED, NOT_FILES, N, _clear, fresh, peak_rss_mib, segs, snapshot

pytestmark = pytest.mark.timeout(120)


def cli_run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="embedlog")


# ---------------------------------------------------------------------- inspect: sizes


def test_verify_and_dump_log_read_a_sparse_index_only_as_far_as_it_is_justified() -> None:
    path, _ = fresh()
    index = segs(path, ".index")[0]
    with open(index, "r+b") as f:
        f.truncate(2**30)
    before = peak_rss_mib()
    report = verify_path(str(path))
    assert not report.healthy
    [problem] = report.problems
    assert problem.path == str(index) and "justify" in problem.message and problem.fixable
    result = cli_run("dump-log", "--verify-index", str(index.parent))
    assert result.exit_code == 3 and "justify" in result.output
    assert peak_rss_mib() - before < 256
    assert verify_path(str(path), fix=True).problems[0].fixed
    assert verify_path(str(path)).healthy and index.stat().st_size < 2**20


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_index_entries_are_bounded_by_the_log(suffix: str) -> None:
    path, _ = fresh()
    log = segs(path)[0]
    index = log.with_suffix(suffix)
    n = 20_000  # valid, increasing entries: far more than a log of a few hundred bytes holds
    if suffix == ".index":
        index.write_bytes(b"".join(struct.pack(">ii", i + 1, i + 1) for i in range(n)))
        entries = offset_index_entries(str(index), 0)
    else:
        index.write_bytes(b"".join(struct.pack(">qi", 1000 + i, i + 1) for i in range(n)))
        entries = time_index_entries(str(index), 0)
    assert 0 < len(entries) <= log.stat().st_size // fmt.HEADER_SIZE
    result = cli_run("dump-log", "--verify-index", "--json", str(index))
    assert result.exit_code == 3
    [doc] = json.loads(result.stdout)["files"]
    assert len(doc["entries"]) == len(entries) and doc["indexProblems"]
    log.unlink()  # no log: nothing justifies an entry
    assert (offset_index_entries if suffix == ".index" else time_index_entries)(
        str(index), 0) == []


# ---------------------------------------------------------------------- inspect: file types


@pytest.mark.parametrize("kind", sorted(NOT_FILES))
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_verify_reports_something_else_where_an_index_belongs(kind: str, suffix: str) -> None:
    path, outside = fresh()
    target = segs(path, suffix)[1]
    _clear(target)
    NOT_FILES[kind](target, outside)
    before = snapshot(outside)
    report = verify_path(str(path))  # a report, not an aborted run
    assert not report.healthy
    [problem] = report.problems
    assert problem.path == str(target) and "expected a regular file" in problem.message
    result = cli_run("dump-log", "--verify-index", str(path))
    assert result.exit_code == 3 and "Index mismatch" in result.output
    if kind != "directory":  # --fix replaces a FIFO or a link (the link, never its target)
        assert verify_path(str(path), fix=True).problems[0].fixed
        assert verify_path(str(path)).healthy and target.is_file() and not target.is_symlink()
    assert snapshot(outside) == before


def _link_partition_folder(path: Path, outside: Path) -> Path:
    """Move ``t-0`` outside the log and leave a symbolic link to it in its place."""
    moved = outside / "t-0"
    shutil.move(str(path / "t-0"), moved)
    (path / "t-0").symlink_to(moved, target_is_directory=True)
    return moved


def test_a_linked_partition_folder_is_reported_and_never_followed() -> None:
    path, outside = fresh()
    _link_partition_folder(path, outside)
    report = verify_path(str(path))
    assert not report.healthy and report.segments == 0 and report.records == 0
    assert any(p.path == str(path / "t-0") and "symbolic link" in p.message
               for p in report.problems)
    result = cli_run("dump-log", str(path))
    assert result.exit_code == 3 and "Dumping" not in result.output
    assert "symbolic link" in result.output


@pytest.mark.parametrize("kind", ["directory"])  # a FIFO's or a link's open already fails
def test_dump_log_of_something_else_named_as_a_segment_is_an_error(kind: str) -> None:
    path, outside = fresh()
    target = segs(path)[1]
    _clear(target)
    NOT_FILES[kind](target, outside)
    result = cli_run("dump-log", str(target))
    assert result.exit_code == 3 and "expected a regular file" in result.output


# ---------------------------------------------------------------------- groups


def _group(path: Path) -> None:
    with embedlog.open(path, adopt=True) as log, log.consumer("t", group="g") as consumer:
        assert consumer.poll(timeout=5.0, max_records=5)
        consumer.commit()


def test_groups_commands_never_follow_a_linked_group_folder() -> None:
    path, outside = fresh()
    _group(path)
    moved = outside / "g"
    shutil.move(str(path / "__groups" / "g"), moved)
    (path / "__groups" / "g").symlink_to(moved, target_is_directory=True)
    before = snapshot(outside)
    listed = cli_run("groups", "list", "--json", "--dir", str(path))
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []
    described = cli_run("groups", "describe", "g", "--dir", str(path))
    assert described.exit_code == 3 and "symbolic link" in described.output
    reset = cli_run("groups", "reset-offsets", "g", "--all-topics", "--to-earliest",
                    "--execute", "--dir", str(path))
    assert reset.exit_code == 3 and "symbolic link" in reset.output
    assert snapshot(outside) == before


def test_a_linked_groups_folder_is_damage() -> None:
    path, outside = fresh()
    _group(path)
    shutil.move(str(path / "__groups"), outside / "__groups")
    (path / "__groups").symlink_to(outside / "__groups", target_is_directory=True)
    before = snapshot(outside)
    for args in (["list"], ["describe"], ["describe", "g"]):
        result = cli_run("groups", *args, "--dir", str(path))
        assert result.exit_code == 3 and "symbolic link" in result.output, args
    assert snapshot(outside) == before


# ---------------------------------------------------------------------- recover


@pytest.mark.parametrize("kind", ["directory", "fifo"])  # a link's walk already fails
def test_recover_refuses_something_else_where_a_sealed_segment_belongs(kind: str) -> None:
    path, outside = fresh()
    target = segs(path)[1]
    _clear(target)
    NOT_FILES[kind](target, outside)
    before = snapshot(outside)
    for args in ([], ["--truncate-damaged"]):
        result = cli_run("recover", str(path), *args)
        assert result.exit_code == 3 and "expected a regular file" in result.output
    assert snapshot(outside) == before


def _damaged_sparse_tail(path: Path, size: int) -> Path:
    """A sealed segment followed by ``size`` bytes of holes (a framing error: length 0)."""
    seg = segs(path)[1]
    with open(seg, "r+b") as f:
        f.truncate(size)
    return seg


def test_recover_never_writes_through_a_linked_lost_and_found() -> None:
    path, outside = fresh()
    _damaged_sparse_tail(path, 2**20)
    (path / "lost+found").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    result = cli_run("recover", "--truncate-damaged", str(path))
    assert result.exit_code == 3 and "symbolic link" in result.output
    assert snapshot(outside) == before


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


def test_recover_of_a_huge_sparse_damaged_segment_is_bounded_in_memory_and_disk() -> None:
    path, _ = fresh()
    seg = _damaged_sparse_tail(path, 2**31)
    count = len(segs(path))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "EMBEDLOG_PURE": "1"}
    done = subprocess.run([sys.executable, "-m", "embedlog", "recover", "--truncate-damaged",
                           str(path)], env=env, capture_output=True, text=True, timeout=100,
                          preexec_fn=_limit_address_space, check=False)
    assert done.returncode == 0, done.stderr
    [moved] = (path / "lost+found" / "t-0").iterdir()
    st = moved.stat()
    assert st.st_size == 2**31 - len(seg.read_bytes())  # the bytes, unchanged in length
    assert st.st_blocks * 512 < 2**24  # and the holes still holes
    with moved.open("rb") as f:
        assert not any(f.read(2**20))
    assert len(segs(path)) == count and verify_path(str(path)).healthy
    with embedlog.open(path, read_only=True) as log:
        assert [(r.offset, r.value) for r in log.read("t", 0)] == EXPECTED
        assert log.end_offset("t", 0) == N


# ---------------------------------------------------------------------- transaction state


@pytest.mark.parametrize("kind", sorted(NOT_FILES))
def test_something_else_where_the_transaction_state_belongs_is_damage(kind: str) -> None:
    path, outside = fresh()
    NOT_FILES[kind](path / "embedlog.transactions", outside)
    before = snapshot(outside)
    with pytest.raises(embedlog.CorruptionError, match="expected a regular file"):
        embedlog.open(path, adopt=True)
    assert snapshot(outside) == before

