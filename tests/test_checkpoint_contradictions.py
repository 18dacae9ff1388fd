"""Checkpoints that contradict the segments: every writer open either reports the damage
(the partition opens quarantined, a CorruptCheckpointError naming the file and line) or serves
every acknowledged record at or above the log start; the next open is never poisoned."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.checkpoint import format_offsets
from embedlog.records import TopicPartition

N = 40


@pytest.fixture(scope="module")
def template() -> pathlib.Path:
    root = pathlib.Path(tempfile.mkdtemp()) / "log"
    with embedlog.open(root, durability="fsync") as log:
        log.create_topic("t", config={"segment.bytes": 600})
        log.create_topic("u")
        for i in range(N):
            log.append("t", b"t-%03d" % i * 4)
            log.append("u", b"u-%03d" % i)
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


offsets = st.one_of(st.none(), st.integers(0, N + 20))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start_t=offsets, start_u=offsets, point_t=offsets, point_u=offsets, clean=st.booleans())
def test_every_open_reports_damage_or_keeps_all_acknowledged_records(
        template: pathlib.Path, start_t: int | None, start_u: int | None, point_t: int | None,
        point_u: int | None, clean: bool) -> None:
    work = pathlib.Path(tempfile.mkdtemp())
    try:
        path = work / "log"
        shutil.copytree(template, path)
        starts = {TopicPartition(t, 0): s for t, s in (("t", start_t), ("u", start_u)) if s}
        points = {TopicPartition(t, 0): s for t, s in (("t", point_t), ("u", point_u))
                  if s is not None}
        (path / "log-start-offset-checkpoint").write_text(format_offsets(starts))
        (path / "recovery-point-offset-checkpoint").write_text(format_offsets(points))
        if not clean:
            (path / ".kafka_cleanshutdown").unlink()
        with embedlog.open(path, durability="fsync") as log:
            damaged = log.quarantined()
            for topic in ("t", "u"):
                tp = TopicPartition(topic, 0)
                start = starts.get(tp, 0)
                if tp in damaged:
                    with pytest.raises(embedlog.PartitionQuarantinedError):
                        log.append(topic, b"x")
                    continue
                assert start <= N, f"log start {start} past the end was accepted"
                got = [(r.offset, r.value) for r in log.read(topic, 0, start)]
                assert got == [(o, (b"%s-%03d" % (topic.encode(), o)) * (4 if topic == "t"
                                                                          else 1))
                               for o in range(start, N)]
                assert log.append(topic, b"new").offset == N
            assert all(isinstance(d, embedlog.CorruptionError) for d in damaged.values())
        with embedlog.open(path) as log:  # the next open is not poisoned
            again = log.quarantined()
            assert set(again) <= set(damaged)  # a damage report is never undone silently...
            for tp in set(damaged) - set(again):  # ...unless a full re-validation found all
                start = starts.get(tp, 0)
                assert [r.offset for r in log.read(tp.topic, 0, start)] == list(range(start, N))
            for tp in {TopicPartition("t", 0), TopicPartition("u", 0)} - set(damaged):
                assert [r.value for r in log.read(tp.topic, 0, N)] == [b"new"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_oversized_checkpoint_is_refused_before_it_is_parsed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
    lines = "".join(f"x{i} 0 5\n" for i in range(200_000))
    (path / "recovery-point-offset-checkpoint").write_text(f"0\n200000\n{lines}")
    with pytest.raises(embedlog.CorruptCheckpointError, match="bytes this log can justify"):
        embedlog.open(path)
    (path / "recovery-point-offset-checkpoint").write_text("0\n5000000\nt 0 1\n")
    with pytest.raises(embedlog.CorruptCheckpointError, match="more than the 1"):
        embedlog.open(path)
    (path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 " + "9" * 25 + "\n")
    with pytest.raises(embedlog.CorruptCheckpointError, match="beyond 64 bits"):
        embedlog.open(path)


def test_delete_records_flushes_before_it_checkpoints_the_log_start(tmp_path: pathlib.Path
                                                                     ) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:  # durability "none": appends are not synced
        log.create_topic("t")
        for i in range(10):
            log.append("t", b"%d" % i)
        synced = []
        seg = log._topics.by_name["t"].partitions[0].active
        original = seg.flush

        def flush() -> None:
            synced.append(True)
            original()
        seg.flush = flush  # type: ignore[method-assign]
        log.delete_records("t", 0, 10)
        assert synced, "the log start was checkpointed before the records below it were synced"
    assert os.path.exists(path / "log-start-offset-checkpoint")


def test_log_start_past_the_end_names_the_checkpoint_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("a")
        log.create_topic("b")
        log.append("b", b"only")
    starts = {TopicPartition("a", 0): 0, TopicPartition("b", 0): 7}
    (path / "log-start-offset-checkpoint").write_text(format_offsets(starts))
    with embedlog.open(path) as log:
        damage = log.quarantined()[TopicPartition("b", 0)]
        assert isinstance(damage, embedlog.CorruptCheckpointError)
        assert damage.path == str(path / "log-start-offset-checkpoint")
        assert "line 4" in str(damage) and "beyond its log end offset 1" in str(damage)
        assert log.append("a", b"fine").offset == 0
    assert "log start offset 7 was beyond" in __import__("subprocess").run(
        [__import__("sys").executable, "-m", "embedlog", "recover", str(path),
         "--truncate-damaged"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(__import__("sys").path)}).stdout
    with embedlog.open(path) as log:
        assert log.quarantined() == {}
        assert [r.value for r in log.read("b", 0)] == [b"only"]
