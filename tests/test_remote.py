"""Reading a log from object storage: ``embedlog.open("s3://...", read_only=True)``.

A real S3 endpoint (moto's server on 127.0.0.1) and ``file://`` URIs serve a log written by
embedlog (several topics, a compacted topic, transactions with an abort) and a real Kafka
folder; every record read through the URI must equal the local read. Hostile remotes (a name
that climbs out, an oversized index, a listing that lies about a size) must be refused with
nothing written outside the cache.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import embedlog
from embedlog import CorruptionError, ReadOnlyError, TopicPartition, UsageError
from helpers import descriptors_under
from s3_endpoint import BUCKET, moto_s3, s3fs, upload

pafs = pytest.importorskip("pyarrow.fs", reason="reading a remote log needs pyarrow")

KAFKA_FOLDER = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "kafka-real"
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 4096, "index.interval.bytes": 256}


# ------------------------------------------------------------------ the logs served


def _write_log(path: Path) -> Path:
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("events", partitions=3, config={"segment.bytes": 2048})
        log.create_topic("state", config=COMPACT)
        log.create_topic("out", partitions=2)
        for i in range(300):
            log.append("events", b"value-%d" % i, key=b"k%d" % (i % 7),
                       headers=[("h", b"%d" % i)], timestamp=1_700_000_000_000 + i)
        for i in range(400):
            log.append("state", b"s-%d" % i, key=b"key-%d" % (i % 13))
        log.compact("state")
        p = log.producer(transactional_id="t")
        p.init_transactions()
        for commit in (True, False, True):
            p.begin_transaction()
            for j in range(5):
                p.send("out", b"txn-%d" % j, partition=j % 2)
            (p.commit_transaction if commit else p.abort_transaction)()
        p.close()
    return path


def _small_log(path: Path) -> Path:
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("events")
        for i in range(10):
            log.append("events", b"value-%d" % i)
    return path


def _kafka_folder(name: str) -> Path:
    folder = KAFKA_FOLDER / name
    if not folder.is_dir():
        pytest.skip(f"the real Kafka fixture folder {folder} is not present")
    return folder


def _everything(log: embedlog.Log) -> dict[str, Any]:
    """Everything a read-only log serves, for comparing a local and a remote open."""
    out: dict[str, Any] = {}
    for topic in log.topics():
        for part in range(log.partition_count(topic)):
            start, end = log.start_offset(topic, part), log.end_offset(topic, part)
            records = list(log.read(topic, part, start))
            times = [log.offsets_for_times(topic, part, r.timestamp) for r in records[::17]]
            out[f"{topic}-{part}"] = (start, end, records, times,
                                      log.last_stable_offset(topic, part))
    tps = [TopicPartition(t, p) for t in log.topics() for p in range(log.partition_count(t))]
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = log.consumer(isolation_level=isolation)
        consumer.assign(tps)
        polled = []
        while batch := consumer.poll(max_records=1000):
            polled.extend(batch)
        consumer.close()
        out[isolation] = sorted(polled, key=lambda r: (r.topic, r.partition, r.offset))
    out["table"] = log.read_table().to_pylist() if log.topics() else None
    return out


# ------------------------------------------------------------------ the S3 endpoint


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    with moto_s3() as endpoint:
        yield {"endpoint": endpoint}


def _s3fs(endpoint: str) -> Any:
    return s3fs(endpoint)


def _upload(s3: dict[str, str], local: Path, prefix: str) -> str:
    return upload(s3["endpoint"], local, prefix)


def _put(s3: dict[str, str], key: str, data: bytes) -> None:
    boto3 = pytest.importorskip("boto3")
    client = boto3.client("s3", endpoint_url=f"http://{s3['endpoint']}", region_name="us-east-1")
    client.put_object(Bucket=BUCKET, Key=key, Body=data)


def _file_uri(path: Path) -> str:
    return path.resolve().as_uri()


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _small_log(tmp_path_factory.mktemp("remote") / "small")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_log(tmp_path_factory.mktemp("remote") / "log")


# ------------------------------------------------------------------ reads equal local reads


def _check_same(local: Path, uri: str, cache_dir: Path) -> None:
    with embedlog.open(local, read_only=True) as log:
        expected = _everything(log)
    remote = embedlog.open(uri, read_only=True, cache_dir=cache_dir)
    try:
        cache = remote.cache_path  # type: ignore[attr-defined]
        assert os.path.dirname(cache) == str(cache_dir)
        assert _everything(remote) == expected
        assert repr(remote).startswith(f"<embedlog.Log {uri!r} read-only")
    finally:
        remote.close()
    assert not os.path.exists(cache)
    assert os.listdir(cache_dir) == []


def test_s3_log_reads_like_the_local_log(s3: dict[str, str], written: Path,
                                         tmp_path: Path) -> None:
    _check_same(written, _upload(s3, written, "embedlog-log"), tmp_path)


def test_s3_kafka_folder_reads_like_the_local_folder(s3: dict[str, str], tmp_path: Path) -> None:
    folder = _kafka_folder("kafka27-compacted-multiseg")  # root checkpoints, several segments
    _check_same(folder, _upload(s3, folder, "kafka27"), tmp_path)


def test_file_uri_reads_like_the_local_log(written: Path, tmp_path: Path) -> None:
    _check_same(written, _file_uri(written), tmp_path)


def test_file_uri_kafka_folder(tmp_path: Path) -> None:
    folder = _kafka_folder("kafka30-multipartition")
    _check_same(folder, _file_uri(folder), tmp_path)


def test_the_expected_content_is_there(written: Path) -> None:
    with embedlog.open(_file_uri(written), read_only=True) as log:
        assert log.topics() == ["events", "out", "state"]
        committed = log.consumer(isolation_level="read_committed")
        committed.assign([TopicPartition("out", 0), TopicPartition("out", 1)])
        values = sorted(r.value for r in committed.poll(max_records=100))
        assert values == sorted([b"txn-%d" % j for j in range(5)] * 2)
        state = {r.key: r.value for r in log.read("state", 0, log.start_offset("state", 0))}
        assert state[b"key-0"] == b"s-390"
        assert log.start_offset("state", 0) == 0 and len(list(log.read("state", 0, 0))) < 400


def test_the_remote_is_never_written_and_the_default_cache_goes(small: Path) -> None:
    def state() -> list[tuple[str, int, int]]:
        return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in small.rglob("*"))

    before = state()
    log = embedlog.open(_file_uri(small), read_only=True)
    cache = log.cache_path  # type: ignore[attr-defined]
    assert os.path.isdir(cache) and not cache.startswith(str(small))
    consumer = log.consumer("events", group="g")  # group state lives in the cache only
    assert len(consumer.poll(max_records=100)) == 10
    consumer.commit()
    consumer.close()
    log.close()
    assert not os.path.exists(cache)
    assert state() == before


# ------------------------------------------------------------------ writes are refused


def test_writing_to_a_uri_is_a_usage_error(written: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="read_only=True"):
        embedlog.open(_file_uri(written))
    with pytest.raises(UsageError, match="read-only"):
        embedlog.open(_file_uri(written), read_only=True, adopt=True)
    with embedlog.open(_file_uri(written), read_only=True, cache_dir=tmp_path) as log:
        with pytest.raises(ReadOnlyError):
            log.append("events", b"x")
        with pytest.raises(ReadOnlyError):
            log.create_topic("new")
    assert os.listdir(tmp_path) == []


def test_bad_uri_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        embedlog.open("nosuchscheme://x/y", read_only=True, cache_dir=tmp_path)
    with pytest.raises(UsageError):
        embedlog.open(_file_uri(tmp_path / "missing"), read_only=True, cache_dir=tmp_path)
    with pytest.raises(UsageError, match="cache_dir"):
        embedlog.open(tmp_path / "local", cache_dir=tmp_path)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ hostile remotes


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_name_that_climbs_out_is_refused(s3: dict[str, str], small: Path,
                                           tmp_path: Path) -> None:
    uri = _upload(s3, small, "climb")
    _put(s3, "climb/events-0/../../escaped/00000000000000000000.log", b"x" * 10)
    cache, outside = tmp_path / "cache", tmp_path
    cache.mkdir()
    before = _tree(outside)
    with pytest.raises(CorruptionError, match=r"'\.\.'"):
        embedlog.open(uri, read_only=True, cache_dir=cache)
    assert _tree(outside) == before and os.listdir(cache) == []


def test_an_oversized_index_is_refused_before_it_is_fetched(
        s3: dict[str, str], small: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from embedlog.remote import listing

    uri = _upload(s3, small, "oversized")
    _put(s3, "oversized/events-0/00000000000000000000.timeindex", b"\0" * 4096)
    monkeypatch.setattr(listing, "INDEX_MAX", 1024)
    with pytest.raises(CorruptionError, match="limit for it is 1024"):
        embedlog.open(uri, read_only=True, cache_dir=tmp_path)
    assert os.listdir(tmp_path) == []


class _LyingSizes(pafs.FileSystemHandler):  # type: ignore[misc]
    """A local folder whose listing reports ``delta`` bytes more or less for the ``.log`` files
    of ``events-0``."""

    def __init__(self, delta: int) -> None:
        self.fs, self.delta = pafs.LocalFileSystem(), delta

    def get_type_name(self) -> str:
        return "lying"

    def get_file_info_selector(self, selector: Any) -> list[Any]:
        infos = self.fs.get_file_info(selector)
        return [pafs.FileInfo(i.path, i.type, size=i.size + self.delta)
                if "/events-0/" in i.path and i.path.endswith(".log") and i.size > 16 else i
                for i in infos]

    def open_input_stream(self, path: str) -> Any:
        return self.fs.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.fs.open_input_file(path)

    def normalize_path(self, path: str) -> str:
        return path

    def _unused(self, *args: Any) -> Any:  # a remote open only lists and reads
        raise NotImplementedError

    get_file_info = open_output_stream = open_append_stream = _unused
    copy_file = move = create_dir = delete_dir = delete_dir_contents = _unused
    delete_root_dir_contents = delete_file = _unused


@pytest.mark.parametrize("delta", [-5, 7])
def test_a_listing_that_lies_about_a_size_is_refused(written: Path, tmp_path: Path,
                                                     delta: int) -> None:
    from embedlog.remote.log import RemoteLog

    remote = tmp_path / "remote"
    shutil.copytree(written, remote)
    cache = tmp_path / "cache"
    cache.mkdir()
    before = _tree(tmp_path)
    fs = pafs.PyFileSystem(_LyingSizes(delta))
    log = RemoteLog(fs, str(remote), "lying://", cache_dir=cache)
    try:
        for _ in range(2):  # every read reaching a lied-about file fails alike (its size is
            # not the listed one, or, for a sealed segment, not the manifest's)
            with pytest.raises(CorruptionError, match=r"bytes, not the|sealed segment is"):
                list(log.read("events", 0, 0))
        listed = {i.base_name: i.size for i in fs.get_file_info(
            pafs.FileSelector(str(remote / "events-0")))}
        cached = {p.name: p.stat() for p in (Path(log.path) / "events-0").iterdir()}
        assert {n: st.st_size for n, st in cached.items()} == {n: listed[n] for n in cached}
        assert all(st.st_blocks == 0 for n, st in cached.items()
                   if n.endswith(".log"))  # nothing written: still wholly sparse
        assert len(list(log.read("out", 0, 0))) > 0  # the other partitions still read
    finally:
        log.close()
    assert _tree(tmp_path) == before and os.listdir(cache) == []
    assert descriptors_under(cache) == []  # (the failed reads' segments were closed)


def test_segments_are_fetched_on_a_partition_s_first_use(written: Path) -> None:
    with embedlog.open(_file_uri(written), read_only=True) as log:
        cache = Path(log.path)
        folders = {p.name for p in cache.iterdir() if p.is_dir()}
        assert folders == {"events-0", "events-1", "events-2", "state-0", "out-0", "out-1"}
        assert (cache / "embedlog.json").read_bytes() == (written / "embedlog.json").read_bytes()
        assert all(not any(d.iterdir()) for d in cache.iterdir() if d.is_dir())
        assert log.end_offset("events", 1) > 0
        fetched = sorted(p.name for p in (cache / "events-1").iterdir())
        assert fetched == sorted(p.name for p in (written / "events-1").iterdir()
                                 if p.suffix in (".log", ".index", ".timeindex", ".txnindex")
                                 or p.name == "embedlog.segments")
        assert not any((cache / "events-0").iterdir())


def test_without_pyarrow_a_uri_is_a_clear_usage_error(small: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pyarrow.fs", None)
    with pytest.raises(UsageError, match="needs pyarrow"):
        embedlog.open(_file_uri(small), read_only=True, cache_dir=tmp_path)
    assert os.listdir(tmp_path) == []


def test_a_remote_that_cannot_be_listed_is_a_storage_error() -> None:
    """The store's own failure (network, credentials, service: pyarrow raises ``OSError``)
    while a read-only open lists the remote is embedlog's ``StorageError``, naming the root; a
    missing folder stays ``NotALogError``."""
    from embedlog.remote.listing import plan

    class Unreachable:
        def __init__(self, exc: OSError) -> None:
            self.exc = exc

        def get_file_info(self, selector: Any) -> Any:
            raise self.exc

    refused = OSError("AWS Error NETWORK_CONNECTION during ListObjectsV2: Could not connect")
    with pytest.raises(embedlog.StorageError, match="remote listing failed") as caught:
        plan(Unreachable(refused), "bucket/logs")  # type: ignore[arg-type]
    assert caught.value.__cause__ is refused and "bucket/logs" in str(caught.value)
    with pytest.raises(embedlog.NotALogError):
        plan(Unreachable(FileNotFoundError("gone")), "bucket/logs")  # type: ignore[arg-type]
