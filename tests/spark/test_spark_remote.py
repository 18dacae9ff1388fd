"""The Spark source reads a log from a URI (S3 on moto's server, ``file://``) in a local
session; the executor-side view lists the remote again only for a range planned past it."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

import embedlog
from s3_endpoint import moto_s3, upload

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_s3() as ep:
        yield ep


def _log(path: pathlib.Path, n: int) -> None:
    with embedlog.open(path) as log:
        if "t" not in log.topics():
            log.create_topic("t", partitions=2, config={"segment.bytes": 4096})
        for p in range(2):
            end = log.end_offset("t", p)
            log.append_batch("t", [b"%d:%d" % (p, end + i) for i in range(n)], partition=p)


def _rows(df: Any) -> list[tuple[int, int, bytes]]:
    return sorted((r["partition"], r["offset"], r["value"])
                  for r in df.select("partition", "offset", "value").toArrow().to_pylist())


def test_batch_reads_of_an_s3_and_a_file_uri(spark: Any, endpoint: str,
                                            tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    _log(path, 300)
    want = [(p, o, b"%d:%d" % (p, o)) for p in range(2) for o in range(300)]
    for uri in (upload(endpoint, path, "batch/log"), path.resolve().as_uri()):
        df = spark.read.format("embedlog").option("subscribe", "t").load(uri)
        assert _rows(df) == want, uri
        one = (spark.read.format("embedlog").option("assign", '{"t": [1]}')
               .option("startingOffsets", '{"t": {"1": 100}}')
               .option("endingOffsets", '{"t": {"1": 150}}').load(uri))
        assert _rows(one) == [r for r in want if r[0] == 1 and 100 <= r[1] < 150]


def test_an_executor_view_lists_again_for_a_range_past_its_listing(
        endpoint: str, tmp_path: pathlib.Path) -> None:
    from embedlog.spark.remote_view import RemoteView

    path = tmp_path / "log"
    _log(path, 50)
    uri = upload(endpoint, path, "grow/log")
    view = RemoteView(uri)
    try:
        assert view.reader("t", 0).end_offset == 50
        _log(path, 25)
        upload(endpoint, path, "grow/log")
        assert view.reader("t", 0).end_offset == 50  # its listing is a snapshot
        assert view.reader("t", 0, end=75).end_offset == 75  # a range planned past it
    finally:
        view.close()


def test_a_tiered_folder_reads_its_remote_part(spark: Any, tmp_path: pathlib.Path) -> None:
    """A local folder whose old segments live only on its remote (embedlog.tiering): Spark
    reads every record, the remote ones included, as the Log does."""
    remote = tmp_path / "remote"
    remote.mkdir()
    path = tmp_path / "log"
    with embedlog.open(path, remote_uri=remote.as_uri(), upkeep=False) as log:
        log.create_topic("t", config={"segment.bytes": 4096, "remote.storage.enable": True,
                                      "local.retention.bytes": 0})
        log.append_batch("t", [b"%d" % i for i in range(300)], partition=0)
        log.roll("t", 0)
        log.append_batch("t", [b"%d" % i for i in range(300, 400)], partition=0)
        log.upkeep.run_once("tiering")
        assert min(int(f.name[:20]) for f in (path / "t-0").glob("*.log")) == 300
    df = spark.read.format("embedlog").option("subscribe", "t").load(str(path))
    assert _rows(df) == [(0, i, b"%d" % i) for i in range(400)]
