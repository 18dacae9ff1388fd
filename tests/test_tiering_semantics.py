"""Tiered storage as a user sees it over a topic's life: a deleted topic leaves nothing on
the remote that a topic recreated under its name would inherit, and Kafka's rules for
changing ``remote.storage.enable``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import embedlog
from embedlog import InvalidConfigError
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
    remote_objects,
    s3_uri,
)

pytest.importorskip("pyarrow.fs", reason="tiered storage needs pyarrow")

CONFIG = {**SMALL_SEGMENTS, "local.retention.bytes": 1024}


@contextlib.contextmanager
def _remote(tmp_path: Path, kind: str) -> Iterator[str]:
    """A fresh remote: a ``file://`` folder, or a prefix on moto's S3 server."""
    if kind == "file":
        yield file_uri(tmp_path / "remote")
        return
    from s3_endpoint import moto_s3

    with moto_s3() as endpoint:
        yield s3_uri(endpoint)


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_topic_recreated_after_deletion_tiers_from_its_first_segment(tmp_path: Path,
                                                                       kind: str) -> None:
    """Deleting a tiered topic removes its remote segments and its remote manifest (Kafka
    deletes a topic's remote data and metadata): a topic created again under the name
    uploads its own segments from offset 0 and its local retention frees them, whatever log
    start the deleted one had reached."""
    with _remote(tmp_path, kind) as remote:
        _recreate(tmp_path / "log", remote)


def _recreate(local: Path, remote: str) -> None:
    log = open_tiered(local, remote, CONFIG)
    fill(log, 150)
    log.upkeep.run_once("tiering")
    assert log.delete_records(TOPIC, 0, 100) == 100
    log.delete_topic(TOPIC)
    assert [n for n in remote_objects(remote) if n.startswith(f"{TOPIC}-0/")] == []

    log.create_topic(TOPIC, partitions=1, config=CONFIG)
    values = fill(log, 150)
    run = log.upkeep.run_once("tiering")
    published = check_published_complete(remote)
    assert published[0] == 0 and run.uploaded == len(published)
    assert manifest(remote)["log_start"] == 0
    assert local_bases(local)[0] > 0  # the local retention freed the published copies
    assert log.start_offset(TOPIC, 0) == 0
    assert [r.value for r in log.read(TOPIC, 0, 0)] == values
    log.close()
    with embedlog.open(local, remote_uri=remote, upkeep=False) as again:
        assert again.start_offset(TOPIC, 0) == 0
        assert [r.value for r in again.read(TOPIC, 0, 0)] == values



def test_remote_storage_cannot_be_turned_off_once_on(tmp_path: Path) -> None:
    """As in Kafka, ``remote.storage.enable`` stays on once set (turning it off would leave
    remote segments that a compacted topic's cleaner never touches); turning it on is fine,
    and so is every other change of a tiered topic."""
    remote = file_uri(tmp_path / "remote")
    log = open_tiered(tmp_path / "log", remote, CONFIG)
    fill(log, 80)
    log.upkeep.run_once("tiering")
    for change in ({"remote.storage.enable": False}, {"remote.storage.enable": None},
                   {"remote.storage.enable": False, "cleanup.policy": "compact"}):
        with pytest.raises(InvalidConfigError, match=r"remote\.storage\.enable"):
            log.alter_topic(TOPIC, change)
        assert log.topic_config(TOPIC).remote_storage_enable
    assert log.alter_topic(TOPIC, {"retention.ms": 10**9}).remote_storage_enable
    log.create_topic("plain", config={"segment.bytes": 1024})
    assert log.alter_topic("plain", {"remote.storage.enable": True}).remote_storage_enable
    log.close()
    with embedlog.open(tmp_path / "log", remote_uri=remote, upkeep=False) as again:
        with pytest.raises(InvalidConfigError):
            again.alter_topic(TOPIC, {"remote.storage.enable": False})
        assert again.upkeep.run_once("tiering").error is None


def test_a_remote_that_fails_a_topic_deletion_leaves_the_topic_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiered topic's remote data is deleted before the topic leaves the topic table: a
    remote that refuses leaves the topic listed and readable, and deleting it again finishes
    the work (the topic was no longer listed, its folder and remote data left behind)."""
    from embedlog.tiering import store

    remote = file_uri(tmp_path / "remote")
    log = open_tiered(tmp_path / "log", remote, CONFIG)
    values = fill(log, 80)
    log.upkeep.run_once("tiering")

    def refuse(self: object, names: tuple[str, ...], *args: object) -> None:
        raise embedlog.StorageError(5, "remote put failed: unreachable", "/".join(names))

    monkeypatch.setattr(store.RemoteStore, "_put", refuse)
    with pytest.raises(embedlog.StorageError, match="unreachable"):
        log.delete_topic(TOPIC)
    assert log.topics() == [TOPIC]
    assert [r.value for r in log.read(TOPIC, 0, 0)] == values
    monkeypatch.undo()
    log.delete_records(TOPIC, 0, 10)
    listed = [log._partition_of(TOPIC, 0)]  # what a round that listed before the deletion has
    log.delete_topic(TOPIC)
    assert log.topics() == [] and not (tmp_path / "log" / f"{TOPIC}-0").exists()
    assert log.upkeep.tier_round is not None
    assert log.upkeep.tier_round(listed, T0) == (0, {})  # it uploads nothing again
    assert [n for n in remote_objects(remote) if n.startswith(f"{TOPIC}-0/")] == []
    log.create_topic(TOPIC, partitions=1, config=CONFIG)
    assert log.end_offset(TOPIC, 0) == 0
    log.close()
