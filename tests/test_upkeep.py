"""Retention and the cleaner on their own (embedlog.upkeep), explicit topic config values, and
the "is this folder a log" check at open."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

import embedlog
from embedlog.config import TopicConfig, UpkeepConfig
from helpers import small_segments

OLD = 1_000_000  # a timestamp far past any retention.ms used here
FAST = {"log.initial.delay.ms": 0, "log.retention.check.interval.ms": 20,
        "log.cleaner.backoff.ms": 20}


def _fill_old(log: embedlog.Log, topic: str, count: int = 30) -> None:
    for i in range(count):
        log.append(topic, b"x" * 100, timestamp=OLD + i)
    log.roll(topic, 0)


def _wait(log: embedlog.Log, kind: str, count: int) -> None:
    assert log.upkeep.wait_runs(kind, count, timeout=60), log.upkeep.history


def test_retention_runs_on_its_own(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, upkeep=FAST) as log:
        log.create_topic("t", config=small_segments(**{"retention.ms": 1000}))
        _fill_old(log, "t")
        runs = len([r for r in list(log.upkeep.history) if r.kind == "retention"])
        _wait(log, "retention", runs + 2)   # a run that started after the appends
        assert log.start_offset("t", 0) == 30
        assert len(log.segments("t", 0)) == 1
        deleted = sum(r.deleted_segments.get("t-0", 0) for r in list(log.upkeep.history))
        assert deleted >= 2                             # small segments, several went
        assert all(r.error is None and r.finished_ms >= r.started_ms
                   for r in list(log.upkeep.history))


def test_cleaner_compacts_on_its_own(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, upkeep=FAST) as log:
        log.create_topic("p", config={"cleanup.policy": "compact", "segment.bytes": 1024})
        for i in range(200):
            log.append("p", b"v%d" % i, key=b"k%d" % (i % 5))
        log.roll("p", 0)
        runs = len([r for r in list(log.upkeep.history) if r.kind == "cleaner"])
        _wait(log, "cleaner", runs + 2)
        cleaned = [r for r in list(log.upkeep.history) if r.kind == "cleaner" and r.cleaned]
        assert cleaned and cleaned[0].records_removed > 0
        latest = {r.key: r.value for r in log.read("p", 0)}
        assert latest[b"k0"] == b"v195"
        assert sum(1 for _ in log.read("p", 0)) < 200


def test_upkeep_off_stop_and_one_off_runs(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, upkeep=False) as log:
        assert not log.upkeep.is_alive()
        log.create_topic("t", config=small_segments(**{"retention.ms": 1000}))
        _fill_old(log, "t")
        preview = log.upkeep.preview()
        segments, new_start = preview[("t", 0)]
        assert (segments, new_start) == (len(log.segments("t", 0)) - 1, 30)
        assert log.start_offset("t", 0) == 0            # a preview deletes nothing
        with embedlog.open(log_dir, read_only=True) as reader:
            assert reader.upkeep.preview()[("t", 0)] == preview[("t", 0)]
        run = log.upkeep.run_once("retention")
        assert run.deleted_segments == {"t-0": segments}
        assert log.start_offset("t", 0) == 30
        with pytest.raises(embedlog.UsageError):
            log.upkeep.run_once("vacuum")
        with embedlog.open(log_dir, read_only=True) as reader, \
                pytest.raises(embedlog.ReadOnlyError):
            reader.upkeep.run_once("retention")
    with embedlog.open(log_dir) as log:                   # the default: a running thread
        upkeep = log.upkeep
        assert upkeep.is_alive()
        upkeep.stop()
        assert not upkeep.is_alive()
    assert not upkeep.is_alive()


def test_default_upkeep_waits_before_its_first_run(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", config=small_segments(**{"retention.ms": 1000}))
        _fill_old(log, "t")
        assert log.start_offset("t", 0) == 0            # log.initial.delay.ms = 30 s
        assert list(log.upkeep.history) == []


def test_upkeep_config_names_and_checks() -> None:
    cfg = UpkeepConfig.from_kafka({"log.retention.check.interval.ms": "1000",
                                   "log.cleaner.enable": "false", "log.initial.delay.ms": 0})
    assert (cfg.retention_check_interval_ms, cfg.cleaner_enable, cfg.initial_delay_ms) == (
        1000, False, 0)
    assert UpkeepConfig() == UpkeepConfig(30_000, 300_000, True, 15_000)
    for bad in ({"log.cleaner.enable": "maybe"}, {"log.retention.check.interval.ms": 0},
                {"log.retention.hours": 1}, {"log.cleaner.backoff.ms": "soon"}):
        with pytest.raises(embedlog.InvalidConfigError):
            UpkeepConfig.from_kafka(bad)


def test_explicit_config_values_are_kept(log_dir: pathlib.Path) -> None:
    week = 7 * 24 * 3600 * 1000
    with embedlog.open(log_dir, upkeep=False) as log:
        log.create_topic("orders", config={"retention.ms": week})
        assert log.topic_config("orders").overrides() == {"retention.ms": week}
        log.alter_topic("orders", {"segment.bytes": 1024**3})
    with embedlog.open(log_dir, upkeep=False) as log:
        config = log.topic_config("orders")
        assert config.overrides() == {"retention.ms": week, "segment.bytes": 1024**3}
        assert config == TopicConfig()                  # the same values as the defaults
        assert log.alter_topic("orders", {"retention.ms": None}).overrides() == {
            "segment.bytes": 1024**3}


# ------------------------------------------------------------------ folders that are not logs


def test_a_file_or_a_foreign_folder_is_not_a_log(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    for read_only in (False, True):
        with pytest.raises(embedlog.NotALogError, match="is a file"):
            embedlog.open(path, read_only=read_only)
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    (folder / "holiday-2").mkdir()                      # looks like <topic>-<partition>
    for read_only in (False, True):
        with pytest.raises(embedlog.NotALogError, match="not a log"):
            embedlog.open(folder, read_only=read_only)
    assert sorted(os.listdir(folder)) == ["cat.jpg", "holiday-2"]   # nothing was added
    partition = tmp_path / "log"
    with embedlog.open(partition) as log:
        log.create_topic("t")
        log.append("t", b"x")
    with pytest.raises(embedlog.NotALogError, match="partition folder"):
        embedlog.open(partition / "t-0", read_only=True)


def test_new_and_empty_folders_become_logs(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for path in (empty, tmp_path / "new"):
        with embedlog.open(path) as log:
            log.create_topic("t")
        with embedlog.open(path) as log:                # and reopen as logs
            assert log.topics() == ["t"]
    with embedlog.open(tmp_path / "bare") as log:      # a log without topics reopens too
        pass
    embedlog.open(tmp_path / "bare").close()


def test_writing_into_a_kafka_folder_needs_adopt(
    kafka_fixtures: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    copy = tmp_path / "kafka"
    shutil.copytree(kafka_fixtures / "kafka30-multipartition", copy)
    before = sorted(os.listdir(copy))
    with pytest.raises(embedlog.NotALogError, match="adopt=True"):
        embedlog.open(copy)
    assert sorted(os.listdir(copy)) == before
    with embedlog.open(copy, read_only=True) as reader:
        assert "my-first-topic" in reader.topics()
    with embedlog.open(copy, adopt=True, upkeep=False) as log:
        log.append("my-first-topic", b"adopted", partition=0)
    with pytest.raises(embedlog.NotALogError):          # still a broker's folder
        embedlog.open(copy)
    with embedlog.open(copy, read_only=True) as reader:
        assert [r.value for r in reader.read("my-first-topic", 0)][-1] == b"adopted"


def test_a_scan_from_the_log_start_follows_retention(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir, upkeep=False) as log:
        log.create_topic("t", config=small_segments(**{"retention.ms": 1000}))
        _fill_old(log, "t")
        log.append("t", b"new")
        with embedlog.open(log_dir, read_only=True) as reader:
            assert reader.start_offset("t", 0) == 0
            scan = log.read("t", 0)
            first = next(scan)                          # a writer's scan under way
            log.upkeep.run_once("retention")            # moves the start to 30
            assert first.offset == 0 and sum(1 for _ in scan) == 30
            assert [r.value for r in reader.read("t", 0)] == [b"new"]   # from the new start
            assert [b.base_offset for b in reader.read_batches("t", 0)] == [30]
            with pytest.raises(embedlog.OffsetOutOfRangeError):       # an explicit offset
                list(reader.read("t", 0, 5))
