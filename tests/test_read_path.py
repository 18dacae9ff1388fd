"""The lean read path: remembered CRC checks of sealed batches and point reads of a read-only
view without a directory refresh."""

from __future__ import annotations

import os
import pathlib

import pytest

import embedlog
from embedlog import partition as partition_module
from helpers import small_segments


def _remembered(log: embedlog.Log) -> int:
    return sum(len(s.crc_memo) for s in log._topic("t").partitions[0].segments)


def _fill(log_dir: pathlib.Path, n: int = 300) -> list[pathlib.Path]:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", config=small_segments())
        log.append_batch("t", [b"v%03d" % i for i in range(n)])
        for i in range(n, n + 100):
            log.append("t", b"v%03d" % i)
    return sorted((log_dir / "t-0").glob("*.log"))


def _flip_value_byte(path: pathlib.Path) -> None:
    """Change one byte inside the first batch's records (covered by its CRC) in place, then set
    the modification time to a distinct value so the file's identity changes."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    at = data.index(b"v0", 61)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_sealed_batch_crc_is_checked_once_and_remembered(log_dir: pathlib.Path) -> None:
    _fill(log_dir)
    with embedlog.open(log_dir, read_only=True) as ro:
        assert len(list(ro.read("t", 0))) == 400
        first = _remembered(ro)
        assert first > 0  # every batch, the view's live tail included (no writer runs)
        assert ro._topic("t").partitions[0].segments[-1].crc_memo
        assert len(list(ro.read("t", 0))) == 400
        assert _remembered(ro) == first


def test_rewritten_sealed_segment_is_checked_again(log_dir: pathlib.Path) -> None:
    # The memo is keyed by (device, inode, size, mtime_ns, position): a sealed file changed
    # after its first read gets a new identity, so its batches are checked again.
    sealed = _fill(log_dir)[0]
    with embedlog.open(log_dir, read_only=True) as ro:
        assert len(list(ro.read("t", 0))) == 400
        _flip_value_byte(sealed)
        with pytest.raises(embedlog.CorruptBatchError):
            list(ro.read("t", 0))


def test_same_identity_trusts_the_remembered_check(log_dir: pathlib.Path) -> None:
    # The documented limit: a byte changed in place that keeps size and mtime is not re-checked
    # while the segment stays open; opening it again checks it again.
    sealed = _fill(log_dir)[0]
    with embedlog.open(log_dir, read_only=True) as ro:
        assert len(list(ro.read("t", 0))) == 400
        st = sealed.stat()
        _flip_value_byte(sealed)
        os.utime(sealed, ns=(st.st_atime_ns, st.st_mtime_ns))
        values = [r.value for r in ro.read("t", 0)]
        assert values[0] is not None and b"X" in values[0]
    with embedlog.open(log_dir, read_only=True) as ro, pytest.raises(embedlog.CorruptBatchError):
        list(ro.read("t", 0))


def test_active_segment_crc_is_never_remembered(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        log.append_batch("t", [b"a", b"b"])
        assert [r.value for r in log.read("t", 0)] == [b"a", b"b"]
        assert _remembered(log) == 0


def test_point_read_below_known_end_does_not_refresh(
    log_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(log_dir)
    with embedlog.open(log_dir) as writer, embedlog.open(log_dir, read_only=True) as ro:
        assert ro.end_offset("t", 0) == 400
        calls: list[str] = []
        real = partition_module.Partition.refresh

        def counting(self: partition_module.Partition) -> None:
            calls.append(self.directory)
            real(self)

        monkeypatch.setattr(partition_module.Partition, "refresh", counting)
        assert [r.value for r in ro.read("t", 0, 123, max_records=1)] == [b"v123"]
        assert calls == []
        # A bounded read that runs past the known end refreshes and reads on.
        writer.append("t", b"new")
        assert [r.value for r in ro.read("t", 0, 399, max_records=2)] == [b"v399", b"new"]
        assert len(calls) >= 1
        # A read at the known end refreshes too.
        writer.append("t", b"newer")
        calls.clear()
        assert [r.value for r in ro.read("t", 0, 401, max_records=5)] == [b"newer"]
        assert len(calls) >= 1


def test_a_views_live_segment_remembers_checks_until_its_file_changes(
        log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        log.append_batch("t", [b"v%03d" % i for i in range(50)])
        log.append_batch("t", [b"w%03d" % i for i in range(50)])
    with embedlog.open(log_dir, read_only=True) as ro:
        assert len(list(ro.read("t", 0))) == 100
        assert _remembered(ro) == 2  # one live segment, both batches checked once
        path = sorted((log_dir / "t-0").glob("*.log"))[0]
        _flip_value_byte(path)  # in place, with a new modification time: a new identity
        with pytest.raises(embedlog.CorruptBatchError):
            list(ro.read("t", 0))
