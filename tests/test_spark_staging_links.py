"""The Spark writer's staging folder is created and read without following symbolic links."""

from __future__ import annotations

import os
import time

import pytest

pa = pytest.importorskip("pyarrow")

from embedlog.errors import CorruptionError  # noqa: E402
from embedlog.naming import ABORTED_SUFFIX, SPARK_STAGING_DIR  # noqa: E402
from embedlog.spark import staging  # noqa: E402

JOB = "0123456789abcdef0123456789abcdef"


def _rows() -> list[pa.RecordBatch]:
    return [pa.record_batch({"topic": ["t"], "partition": [0]})]


def test_a_staged_file_round_trips(tmp_path: os.PathLike[str]) -> None:
    job = os.path.join(str(tmp_path), SPARK_STAGING_DIR, JOB)
    path, rows = staging.stage(job, 3, iter(_rows()))
    assert rows == 1 and os.path.dirname(path) == job
    assert staging.read_staged(job, path).to_pylist() == [{"topic": "t", "partition": 0}]


@pytest.mark.parametrize("linked", [SPARK_STAGING_DIR, f"{SPARK_STAGING_DIR}/{JOB}"])
def test_staging_never_writes_through_a_link(tmp_path: os.PathLike[str], linked: str) -> None:
    log, outside = os.path.join(str(tmp_path), "log"), os.path.join(str(tmp_path), "outside")
    os.makedirs(os.path.dirname(os.path.join(log, linked)))
    os.makedirs(outside)
    os.symlink(outside, os.path.join(log, linked))
    job = os.path.join(log, SPARK_STAGING_DIR, JOB)
    with pytest.raises(CorruptionError):
        staging.stage(job, 0, iter(_rows()))
    staging.mark_aborted(job)
    assert os.listdir(outside) == []


def test_a_staged_path_outside_the_job_folder_is_refused(tmp_path: os.PathLike[str]) -> None:
    job = os.path.join(str(tmp_path), SPARK_STAGING_DIR, JOB)
    path, _ = staging.stage(job, 0, iter(_rows()))
    for bad in ("/etc/passwd", os.path.join(str(tmp_path), "part-1.arrow"),
                os.path.join(job, "other.arrow")):
        with pytest.raises(CorruptionError):
            staging.read_staged(job, bad)
    for bad_job in ("job1", "../" + JOB, JOB.upper()):
        other = os.path.join(str(tmp_path), SPARK_STAGING_DIR, bad_job, os.path.basename(path))
        with pytest.raises(CorruptionError):
            staging.read_staged(job, other)
    link = os.path.join(job, "part-00009-link.arrow")
    os.symlink(path, link)
    with pytest.raises(CorruptionError):
        staging.read_staged(job, link)


def test_a_part_file_of_another_job_folder_reads(tmp_path: os.PathLike[str]) -> None:
    # A streaming query's tasks stage under the job folder of their own copy of the writer.
    ours = os.path.join(str(tmp_path), SPARK_STAGING_DIR, JOB)
    theirs = os.path.join(str(tmp_path), SPARK_STAGING_DIR, "f" * 32)
    path, _ = staging.stage(theirs, 1, iter(_rows()))
    assert staging.job_of(ours, path) == theirs
    assert staging.read_staged(ours, path).num_rows == 1


@pytest.mark.parametrize("linked", [SPARK_STAGING_DIR, f"{SPARK_STAGING_DIR}/{JOB}"])
def test_cleanup_never_removes_anything_through_a_link(tmp_path: os.PathLike[str],
                                                      linked: str) -> None:
    """The writer cleans up after a job (also after a failed one): a symbolic link where the
    staging root or the job folder belongs is neither listed nor emptied."""
    log, outside = os.path.join(str(tmp_path), "log"), os.path.join(str(tmp_path), "outside")
    os.makedirs(os.path.dirname(os.path.join(log, linked)))
    victims = [os.path.join(outside, "old-job" + ABORTED_SUFFIX), os.path.join(outside, "victim")]
    if linked == SPARK_STAGING_DIR:  # the job folder is then a real folder behind the link
        victims.append(os.path.join(outside, JOB, "victim"))
    os.makedirs(os.path.dirname(victims[-1]))
    for victim in victims:
        with open(victim, "w") as f:
            f.write("keep")
    old = time.time() - 2 * staging.MARKER_TTL_S
    os.utime(victims[0], (old, old))
    os.symlink(outside, os.path.join(log, linked))
    staging.cleanup(os.path.join(log, SPARK_STAGING_DIR, JOB))
    assert all(os.path.exists(v) for v in victims)
    assert os.path.islink(os.path.join(log, linked))


def test_cleanup_removes_the_job_and_stale_markers(tmp_path: os.PathLike[str]) -> None:
    job = os.path.join(str(tmp_path), SPARK_STAGING_DIR, JOB)
    staging.stage(job, 0, iter(_rows()))
    marker = os.path.join(os.path.dirname(job), "f" * 32 + ABORTED_SUFFIX)
    open(marker, "w").close()
    old = time.time() - 2 * staging.MARKER_TTL_S
    os.utime(marker, (old, old))
    staging.cleanup(job)
    assert not os.path.lexists(os.path.dirname(job))


@pytest.mark.parametrize("damage", ["empty", "garbage", "half", "tail", "body"])
@pytest.mark.parametrize("columns", [None, ["topic"]], ids=["all", "projected"])
def test_a_damaged_staged_file_is_a_corruption_error(tmp_path: os.PathLike[str], damage: str,
                                                    columns: list[str] | None) -> None:
    job = os.path.join(str(tmp_path), SPARK_STAGING_DIR, JOB)
    path, _ = staging.stage(job, 0, iter(_rows()))
    with open(path, "rb") as f:
        data = f.read()
    bad = {"empty": b"", "garbage": b"garbage", "half": data[:len(data) // 2],
           "tail": data[:-10], "body": data[:8] + b"\xff" * (len(data) - 16) + data[-8:]}[damage]
    with open(path, "wb") as f:
        f.write(bad)
    with pytest.raises(CorruptionError, match="not a readable Arrow file"):
        staging.read_staged(job, path, columns)
