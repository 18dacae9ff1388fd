"""Tiered storage as a user sees it over a topic's life: a deleted topic leaves nothing on
the remote that a topic recreated under its name would inherit."""

from __future__ import annotations

from pathlib import Path

import pytest

import embedlog
from tiering_helpers import (
    SMALL_SEGMENTS,
    TOPIC,
    check_published_complete,
    file_uri,
    fill,
    local_bases,
    manifest,
    open_tiered,
    remote_objects,
)

pytest.importorskip("pyarrow.fs", reason="tiered storage needs pyarrow")

CONFIG = {**SMALL_SEGMENTS, "local.retention.bytes": 1024}


def test_a_topic_recreated_after_deletion_tiers_from_its_first_segment(tmp_path: Path) -> None:
    """Deleting a tiered topic removes its remote segments and its remote manifest (Kafka
    deletes a topic's remote data and metadata): a topic created again under the name
    uploads its own segments from offset 0 and its local retention frees them, whatever log
    start the deleted one had reached."""
    remote = file_uri(tmp_path / "remote")
    local = tmp_path / "log"
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


