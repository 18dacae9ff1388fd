"""Tiered storage (KIP-405's write side): a log with ``remote_uri`` copies sealed segments to
the remote, publishes them after their files, deletes local copies after the local retention,
and reads old offsets back from the remote; retention and ``delete_records`` delete remote
segments too. The same tests run against a ``file://`` folder and moto's S3 server on
127.0.0.1."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import InvalidConfigError, OffsetOutOfRangeError
from embedlog.tiering import remote_manifest
from tiering_helpers import (
    SMALL_SEGMENTS,
    T0,
    TOPIC,
    check_published_complete,
    file_uri,
    fill,
    local_bases,
    manifest,
    open_tiered,
    put_remote,
    remote_objects,
    s3_uri,
)

pytest.importorskip("pyarrow.fs", reason="tiered storage needs pyarrow")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from s3_endpoint import moto_s3

    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture(params=["file", "s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return file_uri(tmp_path / "remote")
    return s3_uri(request.getfixturevalue("s3_endpoint"))


def _values(log: embedlog.Log, start: int | None = 0) -> list[bytes | None]:
    return [r.value for r in log.read(TOPIC, 0, start)]


def test_sealed_segments_go_remote_and_old_offsets_read_back(tmp_path: Path,
                                                             remote: str) -> None:
    local = tmp_path / "log"
    log = open_tiered(local, remote, {**SMALL_SEGMENTS, "local.retention.bytes": 2048})
    values = fill(log, 150)
    run = log.upkeep.run_once("tiering")
    assert run.error is None and run.uploaded >= 5
    published = check_published_complete(remote)
    assert published == sorted(published) and published[0] == 0
    kept = local_bases(local)
    assert kept[0] > 0 and kept[0] in published  # older local copies are gone
    assert run.deleted_segments == {f"{TOPIC}-0": published.index(kept[0])}
    assert log.start_offset(TOPIC, 0) == 0
    assert _values(log) == values
    assert _values(log, 3) == values[3:]
    assert [r.offset for r in log.read(TOPIC, 0, 1, max_records=2)] == [1, 2]
    assert log.offsets_for_times(TOPIC, 0, T0 + 7) == 7
    log.close()

    again = embedlog.open(local, remote_uri=remote, upkeep=False)
    assert again.start_offset(TOPIC, 0) == 0 and _values(again) == values
    with again.consumer(TOPIC, isolation_level="read_committed") as consumer:
        got = []
        while len(got) < len(values):
            batch = consumer.poll(timeout=2.0, max_records=7)
            assert batch, "the consumer stopped short"
            got += [r.value for r in batch]
    assert got == values
    view = embedlog.open(local, read_only=True)
    assert _values(view) == values
    view.close()
    again.close()


def test_a_writer_never_follows_a_remote_named_only_by_the_folder(tmp_path: Path) -> None:
    """``embedlog.tiering`` is a file in the (untrusted) folder: a writer open that is not
    given the remote refuses, before anything is uploaded to or deleted from the place the
    file names, and the folder is left as it was; a reader still finds the remote."""
    remote = file_uri(tmp_path / "remote")
    local = tmp_path / "log"
    log = open_tiered(local, remote, {**SMALL_SEGMENTS, "local.retention.bytes": 1024})
    values = fill(log, 60)
    log.close()  # sealed segments not uploaded yet
    planted = tmp_path / "elsewhere"
    (local / "embedlog.tiering").write_text(
        json.dumps({"version": 1, "remote_uri": file_uri(planted)}))
    before = sorted(p.name for p in local.rglob("*"))
    with pytest.raises(embedlog.UsageError, match="remote_uri="):
        embedlog.open(local, upkeep=False)
    assert remote_objects(file_uri(planted)) == {} and remote_objects(remote) == {}
    assert sorted(p.name for p in local.rglob("*")) == before
    with embedlog.open(local, read_only=True) as view:  # the local segments are all there
        assert _values(view) == values
    with embedlog.open(local, remote_uri=remote, upkeep=False) as again:  # named: it moves
        assert again.upkeep.run_once("tiering").error is None
        assert _values(again) == values
    assert json.loads((local / "embedlog.tiering").read_text())["remote_uri"] == remote
    assert remote_objects(file_uri(planted)) == {} and check_published_complete(remote)


def test_the_remote_read_only_open_sees_published_segments_only(tmp_path: Path,
                                                                remote: str) -> None:
    log = open_tiered(tmp_path / "log", remote)
    values = fill(log, 100)
    log.upkeep.run_once("tiering")
    published = manifest(remote)["segments"]
    end = published[-1]["next"]
    # a segment uploaded but never published (a crash before the manifest) stays invisible
    put_remote(remote, f"{TOPIC}-0/{end:020d}.log", b"\0" * 100)
    log.close()
    with embedlog.open(remote, read_only=True) as ro:
        assert ro.end_offset(TOPIC, 0) == end
        assert [r.value for r in ro.read(TOPIC, 0, 0)] == values[:end]


def test_retention_and_delete_records_delete_remote_segments(tmp_path: Path,
                                                             remote: str) -> None:
    local = tmp_path / "log"
    log = open_tiered(local, remote, {**SMALL_SEGMENTS, "local.retention.bytes": 1024})
    values = fill(log, 150)
    log.upkeep.run_once("tiering")
    first = manifest(remote)["segments"]
    cut = first[2]["base"]
    assert log.delete_records(TOPIC, 0, cut + 1) == cut + 1
    after = manifest(remote)
    assert after["log_start"] == cut + 1 and after["segments"][0]["base"] == cut
    assert not any(name.startswith(f"{TOPIC}-0/{first[0]['base']:020d}")
                   for name in remote_objects(remote))
    assert _values(log, None) == values[cut + 1:]
    with pytest.raises(OffsetOutOfRangeError):
        list(log.read(TOPIC, 0, cut))

    total = sum(s.size for s in log.segments(TOPIC, 0))
    log.alter_topic(TOPIC, {"retention.bytes": total + 1500, "local.retention.bytes": 1024})
    deleted = log.enforce_retention()
    assert deleted >= 1
    start = log.start_offset(TOPIC, 0)
    assert start > cut + 1
    assert manifest(remote)["segments"][0]["next"] > start
    check_published_complete(remote)
    assert _values(log, None) == values[start:]
    log.close()
    with embedlog.open(local, remote_uri=remote, upkeep=False) as again:
        assert again.start_offset(TOPIC, 0) == start and _values(again, None) == values[start:]


def test_uploads_resume_where_they_stopped_and_are_idempotent(tmp_path: Path) -> None:
    remote = file_uri(tmp_path / "remote")
    log = open_tiered(tmp_path / "log", remote)
    fill(log, 60)
    assert log.upkeep.run_once("tiering").uploaded >= 2
    before = manifest(remote)
    assert log.upkeep.run_once("tiering").uploaded == 0  # nothing new: nothing sent
    assert manifest(remote) == before
    fill(log, 60, start=60)
    log.upkeep.run_once("tiering")
    bases = check_published_complete(remote)
    assert bases[: len(before["segments"])] == [s["base"] for s in before["segments"]]
    log.close()


def test_topics_without_remote_storage_stay_local(tmp_path: Path) -> None:
    remote = file_uri(tmp_path / "remote")
    log = open_tiered(tmp_path / "log", remote, {"segment.bytes": 1024})
    fill(log, 80)
    assert log.upkeep.run_once("tiering").uploaded == 0
    assert not any(name.startswith(f"{TOPIC}-0/") for name in remote_objects(remote))
    log.close()
    with embedlog.open(remote, read_only=True) as ro:  # listed in the topic table, no data
        assert ro.topics() == [TOPIC] and ro.end_offset(TOPIC, 0) == 0
        assert list(ro.read(TOPIC, 0, 0)) == []


@pytest.mark.parametrize("config", [
    {"remote.storage.enable": True, "cleanup.policy": "compact"},
    {"remote.storage.enable": "maybe"},
    {"local.retention.ms": -3},
    {"retention.ms": 1000, "local.retention.ms": 2000},
])
def test_tiering_settings_are_checked(tmp_path: Path, config: dict[str, object]) -> None:
    with embedlog.open(tmp_path / "log", upkeep=False) as log, \
            pytest.raises(InvalidConfigError):
        log.create_topic("t", config=config)


def test_a_damaged_remote_manifest_is_refused(tmp_path: Path) -> None:
    remote = file_uri(tmp_path / "remote")
    local = tmp_path / "log"
    log = open_tiered(local, remote, {**SMALL_SEGMENTS, "local.retention.bytes": 1024})
    fill(log, 100)
    log.upkeep.run_once("tiering")
    log.close()
    put_remote(remote, f"{TOPIC}-0/embedlog.remote-manifest",
               b'{"format": "embedlog-remote-manifest", "version": 1, "log_start": 0, '
               b'"segments": [{"base": 5, "next": 2}]}')
    with pytest.raises(embedlog.CorruptionError):
        embedlog.open(remote, read_only=True).read(TOPIC, 0, 0)
    again = embedlog.open(local, remote_uri=remote, upkeep=False)
    run = again.upkeep.run_once("tiering")  # the writer takes the remote's word: refused
    assert run.error is not None and "remote manifest" in run.error
    again.close()


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=120),
       segment_bytes=st.integers(300, 3000),
       local_bytes=st.sampled_from([-2, 0, 500, 2000]),
       cut=st.floats(0, 1),
       reads=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 50)), max_size=6))
def test_reads_across_the_boundary_equal_a_log_never_tiered(
        tmp_path: Path, sizes: list[int], segment_bytes: int, local_bytes: int, cut: float,
        reads: list[tuple[float, int]]) -> None:
    config = {"segment.bytes": segment_bytes, "index.interval.bytes": 64}
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        root = Path(scratch)
        plain = open_tiered(root / "plain", None, config)
        tiered = open_tiered(root / "tiered", file_uri(root / "remote"),
                             {**config, "remote.storage.enable": True,
                              "local.retention.bytes": local_bytes})
        for log in (plain, tiered):
            for i, size in enumerate(sizes):
                log.append(TOPIC, bytes([i % 251]) * size, key=b"%d" % i, partition=0,
                           timestamp=T0 + i)
        tiered.upkeep.run_once("tiering")
        before = int(cut * len(sizes))
        assert plain.delete_records(TOPIC, 0, before) == tiered.delete_records(TOPIC, 0, before)
        for log in (plain, tiered):
            log.upkeep.run_once("tiering")
        start, end = plain.start_offset(TOPIC, 0), plain.end_offset(TOPIC, 0)
        assert (tiered.start_offset(TOPIC, 0), tiered.end_offset(TOPIC, 0)) == (start, end)
        assert list(tiered.read(TOPIC, 0)) == list(plain.read(TOPIC, 0))
        for where, count in reads:
            offset = start + int(where * (end - start))
            assert (list(tiered.read(TOPIC, 0, offset, max_records=count))
                    == list(plain.read(TOPIC, 0, offset, max_records=count)))
            stamp = T0 + offset
            assert (tiered.offsets_for_times(TOPIC, 0, stamp)
                    == plain.offsets_for_times(TOPIC, 0, stamp))
        plain.close()
        tiered.close()


def test_the_command_line_reads_tiered_offsets(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from embedlog.cli import cli

    remote = file_uri(tmp_path / "remote")
    local = tmp_path / "log"
    log = open_tiered(local, remote, {**SMALL_SEGMENTS, "local.retention.bytes": 1024})
    values = fill(log, 80)
    log.upkeep.run_once("tiering")
    published = manifest(remote)["segments"]
    log.close()
    assert local_bases(local)[0] > 0
    runner = CliRunner(env={"EMBEDLOG_DIR": str(local)})
    out = runner.invoke(cli, ["consume", TOPIC, "--from-beginning", "--print-offset"],
                        prog_name="embedlog")
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("Offset:")]
    assert lines == [f"Offset:{i}\t{v.decode()}" for i, v in enumerate(values)]
    out = runner.invoke(cli, ["dump-log", "--json", remote], prog_name="embedlog")
    assert out.exit_code == 0, out.output
    files = json.loads(out.output)["files"]
    assert [f["baseOffset"] for f in files] == [s["base"] for s in published]
    assert files[0]["path"] == f"{remote}/{TOPIC}-0/{0:020d}.log"
    assert sum(b["count"] for f in files for b in f["batches"]) == published[-1]["next"]


def test_unpublished_remote_files_are_collected_by_the_next_writer(tmp_path: Path,
                                                                   remote: str) -> None:
    local = tmp_path / "log"
    log = open_tiered(local, remote)
    fill(log, 60)
    log.upkeep.run_once("tiering")
    end = manifest(remote)["segments"][-1]["next"]
    log.close()
    garbage = [f"{TOPIC}-0/{end:020d}.index", f"{TOPIC}-0/{99_999:020d}.log"]
    for name in garbage:  # an upload cut short, a deletion cut short
        put_remote(remote, name, b"\0" * 16)
    again = embedlog.open(local, remote_uri=remote, upkeep=False)
    assert again.upkeep.run_once("tiering").error is None
    left = remote_objects(remote)
    assert not any(name in left for name in garbage)
    assert check_published_complete(remote)[-1] >= manifest(remote)["segments"][0]["base"]
    assert _values(again) == [b"%06d-" % i + b"x" * 40 for i in range(60)]
    again.close()


def test_deleting_a_tiered_topic_deletes_its_remote_segments(tmp_path: Path) -> None:
    remote = file_uri(tmp_path / "remote")
    log = open_tiered(tmp_path / "log", remote)
    fill(log, 60)
    log.upkeep.run_once("tiering")
    assert any(name.endswith(".log") for name in remote_objects(remote))
    log.delete_topic(TOPIC)
    assert not any(name.startswith(f"{TOPIC}-0/") for name in remote_objects(remote))
    log.close()


def test_rounds_reads_and_appends_run_concurrently(tmp_path: Path) -> None:
    """Appends, tiering rounds (uploads, local deletions), delete_records and readers from
    the log start, in parallel: every read is a run of the records written, from the start."""
    import threading

    remote = file_uri(tmp_path / "remote")
    log = open_tiered(tmp_path / "log", remote, {**SMALL_SEGMENTS, "local.retention.bytes": 0})
    expected = [b"%06d-" % i + b"x" * 40 for i in range(400)]
    done = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
        return run

    def rounds() -> None:
        while not done.is_set():
            run = log.upkeep.run_once("tiering")
            assert run.error is None, run.error
            if log.end_offset(TOPIC, 0) > 200:
                log.delete_records(TOPIC, 0, 50)

    def reads() -> None:
        while not done.is_set():
            start = log.start_offset(TOPIC, 0)
            try:
                got = [r.value for r in log.read(TOPIC, 0, start)]
            except OffsetOutOfRangeError:  # delete_records moved the start meanwhile
                assert log.start_offset(TOPIC, 0) > start
                continue
            assert got == expected[start:start + len(got)]

    threads = [threading.Thread(target=guarded(f)) for f in (rounds, reads)]
    for t in threads:
        t.start()
    fill(log, 400)
    done.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    log.upkeep.run_once("tiering")
    assert _values(log, 50) == expected[50:]
    check_published_complete(remote)
    log.close()


def test_cleanup_runs_a_tiering_round_and_its_dry_run_counts_remote_segments(
        tmp_path: Path) -> None:
    from click.testing import CliRunner

    from embedlog.cli import cli

    remote = file_uri(tmp_path / "remote")
    local = tmp_path / "log"
    log = open_tiered(local, remote, {**SMALL_SEGMENTS, "local.retention.bytes": 1024})
    fill(log, 80)
    log.close()
    runner = CliRunner(env={"EMBEDLOG_DIR": str(local)})
    out = runner.invoke(cli, ["--remote-uri", remote, "cleanup", "--json"],
                        prog_name="embedlog")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    bases = [s["base"] for s in manifest(remote)["segments"]]
    assert report["uploaded_segments"] == len(bases) > 2
    assert report["local_deleted_segments"] == {f"{TOPIC}-0": bases.index(local_bases(local)[0])}
    with embedlog.open(local, remote_uri=remote, upkeep=False) as again:
        again.alter_topic(TOPIC, {"retention.bytes": 2048, "local.retention.bytes": 1024})
    out = runner.invoke(cli, ["cleanup", "--dry-run", "--json"], prog_name="embedlog")
    [row] = json.loads(out.output)
    assert row["segments_to_delete"] > len(local_bases(local)) - 1  # remote ones count too
    # the run does what the dry run said
    with embedlog.open(local, remote_uri=remote, upkeep=False) as again:
        assert again.enforce_retention() == row["segments_to_delete"]
        assert again.start_offset(TOPIC, 0) == row["new_start_offset"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400) | st.builds(
    lambda d: json.dumps(d).encode(),
    st.recursive(st.none() | st.booleans() | st.integers(-2, 2**64) | st.text(max_size=12),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.sampled_from(
                     ["format", "version", "log_start", "segments", "base", "next",
                      "max_timestamp", "files", "log", "index", "timeindex", "txnindex"]),
                     inner, max_size=6), max_leaves=20)))
def test_a_hostile_remote_manifest_raises_only_corrupt_checkpoint(raw: bytes) -> None:
    try:
        parsed = remote_manifest.parse(raw, path="m")
    except embedlog.CorruptCheckpointError:
        return
    assert remote_manifest.parse(remote_manifest.encode(parsed), path="m") == parsed


def test_remote_manifest_checks() -> None:
    good = remote_manifest.Manifest(3, (
        remote_manifest.Published(0, 10, 5, dict.fromkeys(remote_manifest.FILES, (1, 2))),
        remote_manifest.Published(10, 20, -1, dict.fromkeys(remote_manifest.FILES, (0, 0)))))
    raw = remote_manifest.encode(good)
    assert remote_manifest.parse(raw, path="m") == good
    doc = json.loads(raw)
    for change in (
        lambda d: d["segments"][1].update(base=11),             # a hole in the chain
        lambda d: d["segments"][0].update(next=0),              # ends before its base
        lambda d: d["segments"][0]["files"].pop("index"),       # a file missing
        lambda d: d["segments"][0]["files"].update(log=[2**31, 0]),  # a .log too large
        lambda d: d["segments"][0]["files"].update(index=[1, 2**32]),  # not a CRC-32
        lambda d: d["segments"][0].update(base=True),           # not an integer
        lambda d: d.update(log_start=-1),
        lambda d: d.update(version=2),
    ):
        bad = json.loads(raw)
        change(bad)
        with pytest.raises(embedlog.CorruptCheckpointError):
            remote_manifest.parse(json.dumps(bad).encode(), path="m")
    assert doc["segments"][0]["base"] == 0
    with pytest.raises(embedlog.CorruptCheckpointError):
        remote_manifest.parse(b" " * (remote_manifest.MAX_BYTES + 1), path="m")


def test_a_failing_remote_deletes_nothing_local(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from embedlog.tiering import store

    local = tmp_path / "log"
    log = open_tiered(local, file_uri(tmp_path / "remote"),
                      {**SMALL_SEGMENTS, "local.retention.bytes": 0})
    values = fill(log, 60)
    before = local_bases(local)

    def refuse(self: object, names: tuple[str, ...], *args: object) -> None:
        if names[-1].endswith(".log"):
            raise embedlog.StorageError(5, "remote put failed: unreachable", "/".join(names))
        return real(self, names, *args)

    real = store.RemoteStore._put
    monkeypatch.setattr(store.RemoteStore, "_put", refuse)
    run = log.upkeep.run_once("tiering")
    assert run.error is not None and "unreachable" in run.error
    assert local_bases(local) == before and _values(log) == values
    monkeypatch.undo()
    assert log.upkeep.run_once("tiering").error is None  # the next round does it all
    assert local_bases(local) == before[-1:] and _values(log) == values
    log.close()


def test_a_read_only_view_follows_the_writer_across_local_deletions(tmp_path: Path) -> None:
    local = tmp_path / "log"
    log = open_tiered(local, file_uri(tmp_path / "remote"),
                      {**SMALL_SEGMENTS, "local.retention.bytes": 0})
    values = fill(log, 40)
    log.flush()
    view = embedlog.open(local, read_only=True)
    assert _values(view) == values
    values += fill(log, 40, start=40)
    log.upkeep.run_once("tiering")
    log.flush()
    assert local_bases(local)[0] > 40
    assert view.start_offset(TOPIC, 0) == 0
    assert _values(view, None) == values
    view.close()
    log.close()


def test_a_bounded_read_fetches_only_the_segments_it_reaches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read fetches a segment only when its scan reaches it, and of the first one only the
    part from the index floor of its start; a later read from further back fetches the part
    in front (and the whole file is then checked against its CRC-32)."""
    from embedlog.tiering import read_cache

    local = tmp_path / "log"
    log = open_tiered(local, file_uri(tmp_path / "remote"),
                      {**SMALL_SEGMENTS, "local.retention.bytes": 0})
    values = fill(log, 120)
    log.upkeep.run_once("tiering")
    assert local_bases(local)[0] >= 100
    sizes = {s["base"]: s["files"]["log"][0] for s in manifest(file_uri(tmp_path / "remote"))[
        "segments"]}
    fills: list[tuple[int, int, int]] = []
    real = read_cache.ReadCache._fill

    def counting(self: Any, entry: Any, seg: Any, start: int, end: int) -> None:
        fills.append((entry.base, start, end))
        real(self, entry, seg, start, end)

    monkeypatch.setattr(read_cache.ReadCache, "_fill", counting)
    assert [r.value for r in log.read(TOPIC, 0, 5, max_records=2)] == values[5:7]
    [(base, start, end)] = fills
    assert (base, end) == (0, sizes[0]) and 0 < start < end  # from the index floor of 5
    assert [r.value for r in log.read(TOPIC, 0, 12, end_offset=20)] == values[12:20]
    assert [f[0] for f in fills] == [0, 8, 16] and fills[2][1] == 0
    assert [r.value for r in log.read(TOPIC, 0, 0, max_records=3)] == values[:3]
    assert fills[-1] == (0, 0, start)  # only the part in front
    assert log.offsets_for_times(TOPIC, 0, T0 + 9) == 9
    log.close()


def test_the_upkeep_thread_tiers_in_the_background(tmp_path: Path) -> None:
    remote = file_uri(tmp_path / "remote")
    local = tmp_path / "log"
    with embedlog.open(local, remote_uri=remote, upkeep={
            "log.initial.delay.ms": 0, "remote.log.manager.task.interval.ms": 100,
            "log.retention.check.interval.ms": 60_000}) as log:
        log.create_topic(TOPIC, config={**SMALL_SEGMENTS, "local.retention.bytes": 0})
        values = fill(log, 60)
        before = sum(1 for r in log.upkeep.history if r.kind == "tiering")
        assert log.upkeep.wait_runs("tiering", before + 2, timeout=30)  # one began after fill
        runs = [r for r in log.upkeep.history if r.kind == "tiering"]
        assert all(r.error is None for r in runs) and sum(r.uploaded for r in runs) >= 6
        assert check_published_complete(remote)[0] == 0
        assert local_bases(local)[0] > 0 and _values(log) == values


def test_read_committed_across_the_boundary_skips_aborted_records(tmp_path: Path) -> None:
    """Aborted transactions in segments that now live only on the remote stay invisible to
    read_committed (their .txnindex files travel with them)."""
    local = tmp_path / "log"
    log = open_tiered(local, file_uri(tmp_path / "remote"),
                      {**SMALL_SEGMENTS, "local.retention.bytes": 0})
    producer = log.producer(transactional_id="tx")
    producer.init_transactions()
    committed: list[bytes] = []
    for i in range(12):
        producer.begin_transaction()
        batch = [b"t%02d-%d" % (i, j) + b"x" * 60 for j in range(4)]
        for value in batch:
            producer.send(TOPIC, value, partition=0)
        if i % 3 == 1:
            producer.flush()
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            committed += batch
    producer.close()
    log.roll(TOPIC, 0)
    assert log.upkeep.run_once("tiering").uploaded >= 3
    assert local_bases(local) == [log.end_offset(TOPIC, 0)]  # only the empty active one
    with log.consumer(TOPIC, isolation_level="read_committed") as consumer:
        got: list[bytes | None] = []
        while batch_ := consumer.poll(timeout=1.0):
            got += [r.value for r in batch_]
    assert got == committed
    log.close()


def test_topics_create_and_describe_take_kafka_s_tiering_settings(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from embedlog.cli import cli

    runner = CliRunner(env={"EMBEDLOG_DIR": str(tmp_path / "log")})
    out = runner.invoke(cli, ["topics", "create", "t", "--config", "remote.storage.enable=true",
                              "--config", "local.retention.ms=60000"], prog_name="embedlog")
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["topics", "describe", "t"], prog_name="embedlog")
    assert "remote.storage.enable=true" in out.output and "local.retention.ms=60000" in out.output
    with embedlog.open(tmp_path / "log", read_only=True) as log:
        assert log.topic_config("t").remote_storage_enable is True


def test_a_segment_with_an_open_transaction_waits_for_its_marker(tmp_path: Path) -> None:
    local = tmp_path / "log"
    log = open_tiered(local, file_uri(tmp_path / "remote"),
                      {**SMALL_SEGMENTS, "local.retention.bytes": 0})
    fill(log, 20)
    producer = log.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"open" + b"x" * 60, partition=0)
    producer.flush()
    first_open = log.end_offset(TOPIC, 0) - 1
    fill(log, 40, start=20)
    log.upkeep.run_once("tiering")
    assert log.last_stable_offset(TOPIC, 0) == first_open
    assert local_bases(local)[0] <= first_open  # its segment is still local
    assert all(s["next"] <= first_open for s in manifest(file_uri(tmp_path / "remote"))[
        "segments"])
    producer.commit_transaction()
    producer.close()
    log.roll(TOPIC, 0)
    log.upkeep.run_once("tiering")
    assert local_bases(local) == [log.end_offset(TOPIC, 0)]
    with log.consumer(TOPIC, isolation_level="read_committed") as consumer:
        got = []
        while batch := consumer.poll(timeout=1.0):
            got += [r.value for r in batch]
    assert len(got) == 61 and b"open" + b"x" * 60 in got
    log.close()
