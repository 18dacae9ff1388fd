"""Ranged, lazy reads of a remote log (``embedlog.open(uri, read_only=True)``).

A partition's index files are fetched whole on its first use; its ``.log`` files only as reads
reach them, and only the byte ranges read (:mod:`embedlog.tiering.ranged_file`). Against
moto's S3 server and ``file://``: a point read near the end of a multi-segment partition
fetches a small fraction of its bytes, every read equals the local log's, a remote object of
another size than listed is a :class:`CorruptionError`, and a batch damaged on the remote is a
:class:`CorruptBatchError` when a read reaches it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import CorruptBatchError, CorruptionError, TopicPartition
from s3_endpoint import BUCKET, moto_s3

pafs = pytest.importorskip("pyarrow.fs", reason="reading a remote log needs pyarrow")

TOPIC = "big"
T0 = 1_700_000_000_000
PER_BATCH = 20
BATCHES = 1200  # about 12 MB in segments of 1 MiB
CONFIG = {"segment.bytes": 1 << 20}


def _value(i: int) -> bytes:
    return b"%08d" % i * 60


def _write(path: Path, batches: int, config: dict[str, int]) -> Path:
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic(TOPIC, config=config)
        for b in range(batches):
            first = b * PER_BATCH
            log.append_batch(TOPIC, [_value(first + i) for i in range(PER_BATCH)],
                             keys=[b"k%d" % (first + i) for i in range(PER_BATCH)],
                             timestamps=[T0 + first + i for i in range(PER_BATCH)])
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("ranges") / "log", BATCHES, CONFIG)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("ranges") / "small", 60, {"segment.bytes": 64 << 10})


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with moto_s3() as endpoint:
        yield endpoint


def _log_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in (folder / f"{TOPIC}-0").glob("*.log"))


class Fetched:
    """Bytes the fetch layer (:class:`~embedlog.tiering.store.RemoteStore`) brought in:
    ``ranges`` by ranged reads (``.log`` files), ``whole`` by whole copies (index and root
    files)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from embedlog.tiering.store import RemoteStore

        self.ranges = self.whole = 0
        real_range, real_file = RemoteStore.get_range, RemoteStore.get_file

        def get_range(store: Any, *args: Any) -> Iterator[tuple[int, bytes]]:
            for position, chunk in real_range(store, *args):
                self.ranges += len(chunk)
                yield position, chunk

        def get_file(store: Any, names: Any, local: str, size: int) -> int:
            crc = real_file(store, names, local, size)
            self.whole += size
            return crc

        monkeypatch.setattr(RemoteStore, "get_range", get_range)
        monkeypatch.setattr(RemoteStore, "get_file", get_file)


def _uri(kind: str, folder: Path, request: pytest.FixtureRequest, prefix: str) -> str:
    """``folder`` served as ``kind``: itself by ``file://``, or copied to moto's S3 (one PUT a
    file: quicker there than multipart uploads)."""
    if kind == "file":
        return folder.resolve().as_uri()
    boto3 = pytest.importorskip("boto3")
    endpoint = request.getfixturevalue("s3")
    client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(folder)}",
                              Body=path.read_bytes())
    return (f"s3://{BUCKET}/{prefix}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1")


def _replace(kind: str, folder: Path, uri: str, name: str, data: bytes) -> None:
    """Make the remote object ``<topic>-0/<name>`` hold ``data``."""
    if kind == "file":
        (folder / f"{TOPIC}-0" / name).write_bytes(data)
        return
    boto3 = pytest.importorskip("boto3")
    endpoint = uri.split("endpoint_override=")[1].split("&")[0]
    prefix = uri.split(f"s3://{BUCKET}/")[1].split("?")[0]
    client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{TOPIC}-0/{name}", Body=data)


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_point_read_near_the_end_fetches_a_small_fraction(
        kind: str, written: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _uri(kind, written, request, "point")
    total = _log_bytes(written)
    assert len(list((written / f"{TOPIC}-0").glob("*.log"))) >= 10
    fetched = Fetched(monkeypatch)
    with embedlog.open(written, read_only=True) as local, \
            embedlog.open(uri, read_only=True) as remote:
        end = local.end_offset(TOPIC, 0)
        assert remote.end_offset(TOPIC, 0) == end
        assert list(remote.read(TOPIC, 0, end - 7, max_records=3)) == list(
            local.read(TOPIC, 0, end - 7, max_records=3))
        point = fetched.ranges
        assert 0 < point < total // 20
        consumer = remote.consumer()  # a consumer starting near the end
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), end - 500)
        polled = consumer.poll(max_records=1000)
        consumer.close()
        assert [r.value for r in polled] == [_value(i) for i in range(end - 500, end)]
        assert fetched.ranges < total // 10
        assert remote.offsets_for_times(TOPIC, 0, T0 + end - 100) == end - 100
        assert fetched.ranges < total // 5  # a lookup by time reads near its entry only
        assert fetched.whole < total // 10  # the index files are small
        assert list(remote.read(TOPIC, 0, 0)) == list(local.read(TOPIC, 0, 0))
        assert fetched.ranges == total  # a full scan fetches each byte once


@pytest.fixture(scope="module")
def remote_log(written: Path) -> Iterator[tuple[embedlog.Log, embedlog.Log]]:
    with embedlog.open(written, read_only=True) as local, \
            embedlog.open(written.resolve().as_uri(), read_only=True) as remote:
        yield local, remote


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.integers(0, BATCHES * PER_BATCH), count=st.integers(1, 3000),
       bounded=st.booleans())
def test_reads_equal_the_local_log(remote_log: tuple[embedlog.Log, embedlog.Log], start: int,
                                   count: int, bounded: bool) -> None:
    local, remote = remote_log
    end = start + count if bounded else None
    assert list(remote.read(TOPIC, 0, start, max_records=count)) == list(
        local.read(TOPIC, 0, start, max_records=count))
    assert list(remote.read(TOPIC, 0, start, end_offset=end)) == list(
        local.read(TOPIC, 0, start, end_offset=end))


def _copy(written: Path, tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "remote"
    shutil.copytree(written, folder)
    last = sorted((folder / f"{TOPIC}-0").glob("*.log"))[-3]
    return folder, last.name


@pytest.mark.parametrize("kind", ["file", "s3"])
@pytest.mark.parametrize("delta", [-100, 100])
def test_an_object_of_another_size_than_listed_is_refused(
        kind: str, delta: int, small: Path, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    folder, name = _copy(small, tmp_path)
    uri = _uri(kind, folder, request, f"size{delta}")
    data = (folder / f"{TOPIC}-0" / name).read_bytes()
    base = int(name.split(".")[0])
    with embedlog.open(uri, read_only=True, cache_dir=tmp_path) as remote:
        end = remote.end_offset(TOPIC, 0)  # listed now: the objects change after the listing
        _replace(kind, folder, uri, name, data[:delta] if delta < 0 else data + b"\0" * delta)
        cached = Path(remote.path) / f"{TOPIC}-0" / name
        with pytest.raises(CorruptionError, match="bytes, not the"):
            list(remote.read(TOPIC, 0, base + 5, max_records=1))
        assert cached.stat().st_size == len(data)  # the cache never grows past the listing
        assert len(list(remote.read(TOPIC, 0, end - 10))) == 10  # other segments still read


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_batch_damaged_on_the_remote_is_a_corrupt_batch(
        kind: str, small: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    folder, name = _copy(small, tmp_path)
    path = folder / f"{TOPIC}-0" / name
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0xFF  # inside a batch's records: only its CRC tells
    path.write_bytes(bytes(data))
    uri = _uri(kind, folder, request, "damaged")
    base = int(name.split(".")[0])
    with embedlog.open(uri, read_only=True, cache_dir=tmp_path) as remote:
        assert len(list(remote.read(TOPIC, 0, base, max_records=5))) == 5  # before the damage
        with pytest.raises(CorruptBatchError):
            list(remote.read(TOPIC, 0, base))
        consumer = remote.consumer()
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), base)
        with pytest.raises(CorruptBatchError):
            while consumer.poll(max_records=1000):
                pass
        consumer.close()


def test_a_tiered_remote_is_checked_against_its_manifest_crcs(tmp_path: Path) -> None:
    """Through a tiered log's remote, the manifest's CRC-32s are checked too: an index file's
    when it is fetched, a ``.log``'s once it is all there -- so damage outside every batch CRC
    (a partition leader epoch) is caught as well."""
    from tiering_helpers import SMALL_SEGMENTS, file_uri, manifest, put_remote, read_remote

    uri = file_uri(tmp_path / "remote")
    with embedlog.open(tmp_path / "log", upkeep=False, remote_uri=uri) as log:
        log.create_topic("events", config={**SMALL_SEGMENTS, "local.retention.bytes": 0})
        for i in range(60):
            log.append("events", _value(i)[:40])
        log.upkeep.run_once("tiering")
    first = manifest(uri)["segments"][0]["base"]
    name = f"events-0/{first:020d}.log"
    data = bytearray(read_remote(uri, name) or b"")
    with embedlog.open(uri, read_only=True) as remote:
        expected = [r.value for r in remote.read("events", 0, first)]
    data[12] ^= 0xFF  # the first batch's partition leader epoch: outside its CRC
    put_remote(uri, name, bytes(data))
    with embedlog.open(uri, read_only=True) as remote:
        assert len(expected) > 1
        for _ in range(2):  # a small segment is fetched whole at once, then checked; refused
            with pytest.raises(CorruptionError, match="CRC-32"):  # for good
                list(remote.read("events", 0, first, max_records=1))
    index = f"events-0/{first:020d}.timeindex"
    put_remote(uri, index, bytes(len(read_remote(uri, index) or b"")))  # zeros, same size
    with embedlog.open(uri, read_only=True) as remote, \
            pytest.raises(CorruptionError, match="CRC-32"):
        remote.end_offset("events", 0)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 2 << 20), reads=st.lists(
    st.tuples(st.floats(0, 1), st.integers(1, 600 << 10)), max_size=10))
def test_a_ranged_file_fetches_each_byte_once_and_only_the_remote_s(
        tmp_path: Path, size: int, reads: list[tuple[float, int]]) -> None:
    """:class:`RangedFile`: after ``ensure`` the range holds the remote's bytes; nothing is
    fetched twice or outside the file; once whole, the file equals the object."""
    from embedlog.tiering.ranged_file import RangedFile
    from embedlog.tiering.store import RemoteStore

    folder = Path(tmp_path) / f"r{size}-{len(reads)}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    data = (bytes(range(251)) * (size // 251 + 1))[:size]
    (folder / "obj").write_bytes(data)
    store = RemoteStore(pafs.LocalFileSystem(), str(folder), folder.as_uri())
    fetched: list[tuple[int, int]] = []
    real = store.get_range

    def spy(*args: Any) -> Iterator[tuple[int, bytes]]:
        for position, chunk in real(*args):
            fetched.append((position, position + len(chunk)))
            yield position, chunk

    store.get_range = spy  # type: ignore[method-assign]
    ranged = RangedFile(store, ("obj",), str(folder / "local"), size)
    try:
        for share, length in reads:
            position = int(share * size)
            ranged.ensure(position, length)
            got = (folder / "local").read_bytes()
            assert got[position:position + length] == data[position:position + length]
        spans = sorted(fetched)
        assert all(a < b <= size for a, b in spans)
        assert all(b <= c for (_, b), (c, _) in pairwise(spans))  # never twice
        ranged.fill(0, size)
        assert (folder / "local").read_bytes() == data and ranged.complete
    finally:
        ranged.close()


def test_threads_reading_one_remote_partition_agree_with_the_local_log(written: Path) -> None:
    """Reads in several threads fill the same ranged files at once (each file's fills are
    serialised) and every one returns the local log's records."""
    from concurrent.futures import ThreadPoolExecutor

    starts = [(i * 7919) % (BATCHES * PER_BATCH) for i in range(24)]
    with embedlog.open(written, read_only=True) as local, \
            embedlog.open(written.resolve().as_uri(), read_only=True) as remote:
        expected = [list(local.read(TOPIC, 0, s, max_records=700)) for s in starts]
        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(lambda s: list(remote.read(TOPIC, 0, s, max_records=700)),
                                starts))
    assert got == expected


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_a_fork_child_neither_reads_the_remote_nor_removes_the_cache(written: Path) -> None:
    import os

    from embedlog import InheritedLogError

    with embedlog.open(written, read_only=True) as local:
        expected = list(local.read(TOPIC, 0, 0))
    remote = embedlog.open(written.resolve().as_uri(), read_only=True)
    cache = remote.path
    it = remote.read(TOPIC, 0, 0)
    first = next(it)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            for call in (lambda: remote.read(TOPIC, 0, 0), lambda: list(it)):
                try:
                    call()
                    code = 2
                    break
                except InheritedLogError:
                    code = 0
            remote.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.isdir(cache)  # the child's close left the parent's cache alone
    assert [first, *it] == expected
    remote.close()
    assert not os.path.exists(cache)


def test_a_closed_or_replaced_ranged_file_is_never_written(tmp_path: Path) -> None:
    """Bytes already there read on; a hole reached after :meth:`RangedFile.close`, or after its
    name came to hold another file, is ``StorageError(ESTALE)`` and the other file is left
    alone."""
    import errno

    from embedlog import StorageError
    from embedlog.tiering.ranged_file import RangedFile
    from embedlog.tiering.store import RemoteStore

    (tmp_path / "obj").write_bytes(bytes(range(256)) * 1024)
    store = RemoteStore(pafs.LocalFileSystem(), str(tmp_path), tmp_path.as_uri())
    for replaced in (False, True):
        local = tmp_path / f"local-{replaced}"
        ranged = RangedFile(store, ("obj",), str(local), 256 * 1024)
        ranged.fill(0, 1024)
        if replaced:
            local.unlink()
            local.write_bytes(b"other")
        else:
            ranged.close()
        ranged.ensure(0, 1024)  # there: no fetch
        with pytest.raises(StorageError) as caught:
            ranged.ensure(4096, 10)
        assert caught.value.errno == errno.ESTALE
        assert replaced is False or local.read_bytes() == b"other"
        ranged.close()
