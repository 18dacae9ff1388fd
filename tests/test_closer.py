"""Descriptors of deleted segments are closed off the caller's thread, and closed for sure."""

from __future__ import annotations

import gc
import os
import time

import embedlog
from embedlog import _closer


def _open_fds_to_deleted() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)") and ".log" in target:
            out.append(target)
    return out


def _wait_closed(fd: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.fstat(fd)
        except OSError:
            return True
        time.sleep(0.005)
    return False


def test_a_handed_over_descriptor_is_closed(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "f")
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    os.unlink(path)
    _closer.close_later(fd)
    assert _wait_closed(fd)


def test_a_forked_child_closes_what_its_parent_had_queued(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "f")
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    pid = os.fork()
    if pid == 0:  # the child queues its copy: its own closing thread must close it
        code = 1
        try:
            _closer.close_later(fd)
            code = 0 if _wait_closed(fd) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    os.fstat(fd)  # the parent's own descriptor is untouched
    os.close(fd)


def test_compacted_away_segments_leave_no_open_descriptor(tmp_path: os.PathLike[str]) -> None:
    with embedlog.open(str(tmp_path), upkeep=False) as log:
        log.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 4096})
        for i in range(60):
            log.append_batch("t", [b"v" * 100] * 10, keys=[b"k%d" % (i % 3)] * 10, partition=0)
        log.roll("t", 0)
        assert log.compact("t").records_read > 0
        assert [r.offset for r in log.read("t", 0)][-1] == 599
    gc.collect()
    deadline = time.monotonic() + 10
    while _open_fds_to_deleted() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _open_fds_to_deleted() == []



def test_a_view_keeps_no_descriptor_of_segments_the_writer_deleted(
        tmp_path: os.PathLike[str]) -> None:
    """A read-only view whose consumer had a segment's files open, when the writer deletes
    it under the read (``delete_records``), drops the segment at its next listing and
    releases its descriptors (unless in use right then): none is left once the view is
    closed, though the segment is referenced nowhere the view can reach."""
    mine = str(tmp_path)
    with embedlog.open(mine, upkeep=False) as log:
        log.create_topic("t", config={"segment.bytes": 1024})
        for _ in range(300):
            log.append("t", b"v" * 100, partition=0)
        view = embedlog.open(mine, read_only=True)
        consumer = view.consumer(auto_offset_reset="earliest", max_poll_records=3)
        consumer.assign([embedlog.TopicPartition("t", 0)])
        consumer.seek(embedlog.TopicPartition("t", 0), 0)
        assert [r.offset for r in consumer.poll()] == [0, 1, 2]
        start = log.delete_records("t", 0, log.segments("t", 0)[5].base_offset + 1)
        offsets = [r.offset for r in consumer.poll(max_records=1000)]
        while offsets[-1] < 299:
            offsets += [r.offset for r in consumer.poll(max_records=1000)]
        assert offsets[-1] == 299 and start in offsets
        consumer.close()
        view.close()
        gc.collect()
        assert [t for t in _open_fds_to_deleted() if t.startswith(mine)] == []
