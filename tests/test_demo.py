"""``embedlog demo``: the whole job with a small ``--records`` (Spark in a child process), its
report checked against the log itself, and its promise to write only into a new folder."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner

import embedlog
from embedlog.cli import cli
from embedlog.cli.demo import _fresh_dir, _print_report

RECORDS = 20_000


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, Any]]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    path = tmp_path_factory.mktemp("demo") / "log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-m", "embedlog", "demo", "--records", str(RECORDS), "--dir",
         str(path), "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    if done.returncode == 1 and "needs Java" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr[-3000:]
    return path, json.loads(done.stdout)


def _clicks(path: pathlib.Path) -> list[embedlog.Record]:
    with embedlog.open(path, read_only=True) as log:
        return [r for p in range(log.partition_count("clicks")) for r in log.read("clicks", p)]


@pytest.mark.spark
def test_demo_writes_consumes_compacts_and_reads_back(
    demo_run: tuple[pathlib.Path, dict[str, Any]],
) -> None:
    path, report = demo_run
    assert report["dir"] == str(path) and report["records"] == RECORDS
    clicks = _clicks(path)
    assert len(clicks) == RECORDS
    assert all(r.key is not None and json.loads(r.value or b"")["user"] == r.key.decode()
               for r in clicks)

    # Spark saw exactly what the log holds, partition by partition.
    parts = report["partitions"]
    assert len(parts) == 8 and report["spark"]["scan_rows"] == RECORDS
    for p in parts:
        held = [r.offset for r in clicks if r.partition == p["partition"]]
        assert p["spark_rows"] == len(held) == p["end_offset"] - p["start_offset"]
        assert (p["spark_first"], p["spark_last"]) == (min(held), max(held))

    # Its aggregates agree with a count over the Python API.
    pages = collections.Counter(json.loads(r.value or b"")["page"] for r in clicks)
    assert [tuple(x) for x in report["top_pages"]] == sorted(
        pages.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    minutes = report["events_per_minute"]
    assert sum(n for _, n in minutes) == RECORDS and len(minutes) == 60

    # The group committed half way: lag is the other half.
    assert report["consumer"]["records"] == RECORDS // 2
    assert sum(p["committed"] for p in parts) == RECORDS // 2
    assert report["total_lag"] == RECORDS - RECORDS // 2

    # Compaction kept one record per key (the latest), and shrank the topic.
    k = report["compaction"]
    assert k["after_records"] < k["before_records"]
    assert k["after_bytes"] < k["before_bytes"]
    with embedlog.open(path, read_only=True) as log:
        profiles = list(log.read("profiles", 0))
    latest = {r.key: r.value for r in profiles}
    assert len(profiles) == k["after_records"] == report["profiles"]["rows"]
    assert sum(v is not None for v in latest.values()) == report["profiles"]["live_users"]

    assert report["write"]["records_per_sec"] > 0 and report["spark"]["rows_per_sec"] > 0


@pytest.mark.spark
def test_demo_leaves_a_healthy_log_and_a_readable_report(
    demo_run: tuple[pathlib.Path, dict[str, Any]], capsys: pytest.CaptureFixture[str],
) -> None:
    path, report = demo_run
    verify = CliRunner().invoke(cli, ["verify", str(path), "--json"])
    assert verify.exit_code == 0 and json.loads(verify.stdout)["healthy"]
    _print_report(report)
    text = capsys.readouterr().out
    assert f"{RECORDS:,} click events in {path}" in text
    assert f"total lag: {RECORDS - RECORDS // 2:,}" in text
    assert f"embedlog groups describe analytics --dir {path}" in text


def test_demo_refuses_a_folder_that_holds_anything(tmp_path: pathlib.Path) -> None:
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    result = CliRunner().invoke(cli, ["demo", "--dir", str(keep), "--records", "1000"],
                                prog_name="embedlog")
    assert result.exit_code == 1
    assert "already exists and is not empty" in result.stderr
    assert [p.name for p in keep.iterdir()] == ["notes.txt"]


def test_demo_default_folder_is_new(tmp_path: pathlib.Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = _fresh_dir(None), _fresh_dir(None)
    assert first != second
    for made in (first, second):
        assert os.path.dirname(made) == str(tmp_path)
        assert os.path.basename(made).startswith("embedlog-demo-")
        assert os.listdir(made) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _fresh_dir(str(empty)) == str(empty)


def test_demo_without_java_fails_before_writing(tmp_path: pathlib.Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr("embedlog.spark.session.shutil.which", lambda name: None)
    target = tmp_path / "demo"
    result = CliRunner().invoke(cli, ["demo", "--dir", str(target)], prog_name="embedlog")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: the demo reads the log back with Spark")
    assert not target.exists()
