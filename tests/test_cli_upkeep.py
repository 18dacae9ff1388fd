"""The command line for upkeep and for what a new user trips over: ``cleanup``, explicit
config values in ``topics describe``, folders that are not logs, ``--adopt``, exit code 5 for
Kafka's v0/v1 format, one-line usage errors, ``consume --help``."""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

import pytest
from click.testing import CliRunner, Result

import embedlog
from embedlog.cli import cli
from helpers import small_segments

OLD = 1_000_000


def _run(log_dir: pathlib.Path, *args: str, code: int = 0) -> Result:
    runner = CliRunner(env={"EMBEDLOG_DIR": str(log_dir)})
    result = runner.invoke(cli, list(args), prog_name="embedlog")
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def _one_line_error(result: Result, fragment: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert fragment in lines[0], lines[0]


def _js(result: Result) -> Any:
    return json.loads(result.stdout)


def test_cleanup_dry_run_then_run(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, upkeep=False) as log:
        log.create_topic("old", config=small_segments(**{"retention.ms": 1000}))
        for i in range(30):
            log.append("old", b"x" * 100, timestamp=OLD + i)
        log.roll("old", 0)
        doomed = len(log.segments("old", 0)) - 1
    [row] = _js(_run(log_dir, "cleanup", "--dry-run", "--json"))
    assert row["topic"] == "old" and row["segments_to_delete"] == doomed
    assert (row["start_offset"], row["new_start_offset"]) == (0, 30)
    text = _run(log_dir, "cleanup", "--dry-run").stdout
    assert text.splitlines()[0].split()[:3] == ["TOPIC", "PARTITION", "POLICY"]
    report = _js(_run(log_dir, "cleanup", "--json"))
    assert report["deleted_segments"] == {"old-0": doomed}
    with embedlog.open(log_dir, read_only=True) as log:
        assert log.start_offset("old", 0) == 30
    again = _run(log_dir, "cleanup").stdout
    assert "Retention deleted 0 segments" in again


def test_describe_keeps_explicit_values(log_dir: pathlib.Path) -> None:
    _run(log_dir, "topics", "create", "orders", "--partitions", "3",
         "--config", "retention.ms=604800000")
    [orders] = _js(_run(log_dir, "topics", "describe", "orders", "--json"))
    assert orders["config"] == {"retention.ms": 604800000}
    _run(log_dir, "topics", "alter", "orders", "--delete-config", "retention.ms")
    [orders] = _js(_run(log_dir, "topics", "describe", "orders", "--json"))
    assert orders["config"] == {}


def test_folders_that_are_not_logs(tmp_path: pathlib.Path) -> None:
    foreign = tmp_path / "etc"
    (foreign / "dbus-1").mkdir(parents=True)
    (foreign / "hosts").write_text("127.0.0.1 localhost\n")
    result = _run(foreign, "verify", str(foreign), code=1)
    _one_line_error(result, "is not a log")
    _one_line_error(_run(foreign, "topics", "create", "t", code=1), "is not a log")
    _one_line_error(_run(foreign, "topics", "list", code=1), "is not a log")
    assert sorted(p.name for p in foreign.iterdir()) == ["dbus-1", "hosts"]


def test_kafka_folder_needs_adopt_to_write(kafka_fixtures: pathlib.Path,
                                           tmp_path: pathlib.Path) -> None:
    copy = tmp_path / "kafka"
    shutil.copytree(kafka_fixtures / "kafka30-multipartition", copy)
    _one_line_error(_run(copy, "topics", "create", "new", code=1), "--adopt")
    assert "my-first-topic" in _js(_run(copy, "topics", "list", "--json"))
    _run(copy, "--adopt", "topics", "create", "new")
    assert "new" in _js(_run(copy, "topics", "list", "--json"))


def test_unsupported_format_has_its_own_exit_code(kafka_fixtures: pathlib.Path,
                                                  tmp_path: pathlib.Path) -> None:
    legacy = str(kafka_fixtures / "kafka08-legacy-magic0")
    assert "v0/v1" in _run(tmp_path, "verify", legacy, code=5).stdout
    assert "v0/v1" in _run(tmp_path, "dump-log", legacy, code=5).stdout


def test_usage_errors_are_one_line(log_dir: pathlib.Path) -> None:
    result = _run(log_dir, "topics", "create", code=2)
    _one_line_error(result, "Missing argument 'NAME'")
    assert "embedlog topics create --help" in result.stderr
    _one_line_error(_run(log_dir, "consume", "t", "--nope", code=2), "--nope")
    _one_line_error(_run(log_dir, "nosuchcommand", code=2), "nosuchcommand")


def test_consume_help_says_when_from_beginning_matters(log_dir: pathlib.Path) -> None:
    text = " ".join(_run(log_dir, "consume", "--help").stdout.split())
    assert "With --follow: start at the log start" in text
    assert "with --follow or a group without offsets" not in text


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_still_exit_zero(log_dir: pathlib.Path, args: list[str]) -> None:
    assert _run(log_dir, *args).stdout


def test_an_empty_group_offsets_file_is_damage(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, upkeep=False) as log:
        log.create_topic("t")
        log.append_batch("t", [b"a", b"b", b"c"])
        with log.consumer("t", group="g") as consumer:
            while consumer.poll(timeout=0.2):
                consumer.commit()
    assert "3" in _run(log_dir, "groups", "describe", "g").stdout
    offsets = log_dir / "__groups" / "g" / "offsets"
    offsets.write_bytes(b"")
    _one_line_error(_run(log_dir, "groups", "describe", "g", code=3), "offsets file is empty")
    _one_line_error(_run(log_dir, "consume", "t", "--group", "g", code=3), "is empty")


def test_cleanup_fails_when_its_retention_run_fails(
    log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retention run that failed is reported as the failure it is (exit code 1), not as
    "Retention deleted 0 segments"."""
    with embedlog.open(log_dir, upkeep=False) as log:
        log.create_topic("old", config=small_segments(**{"retention.ms": 1000}))
        log.append("old", b"x", timestamp=OLD)
        log.roll("old", 0)

    def broken(*_: Any) -> int:
        raise embedlog.StorageError("disk gone")

    monkeypatch.setattr("embedlog.upkeep.tiered_retention", broken)
    _one_line_error(_run(log_dir, "cleanup", code=1), "retention round failed: disk gone")
    monkeypatch.undo()
    assert _js(_run(log_dir, "cleanup", "--json"))["deleted_segments"] == {"old-0": 1}
