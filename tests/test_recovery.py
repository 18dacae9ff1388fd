"""Crash recovery on open: torn tails, garbage tails, damaged indexes, sealed-segment damage."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

import embedlog
from helpers import descriptors_under, small_segments, writer_open


def build(log_dir: pathlib.Path, n: int = 300, **cfg: object) -> list[bytes]:
    vals = [b"value-%05d" % i * 3 for i in range(n)]
    with embedlog.open(log_dir) as log:
        log.create_topic("t", config=small_segments(**cfg))
        for v in vals:
            log.append("t", v, key=v[:8], timestamp=1_000 + len(v))
    return vals


def unclean(log_dir: pathlib.Path) -> None:
    """Make the next open treat the last close as a crash."""
    (log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)


def active_log(log_dir: pathlib.Path) -> pathlib.Path:
    return sorted((log_dir / "t-0").glob("*.log"))[-1]


def read_all(log_dir: pathlib.Path) -> list[bytes | None]:
    with embedlog.open(log_dir) as log:
        return [r.value for r in log.read("t", 0)]


def test_clean_reopen_needs_no_recovery(log_dir: pathlib.Path) -> None:
    vals = build(log_dir)
    assert read_all(log_dir) == vals


@pytest.mark.parametrize("tail", [b"\x00" * 100, b"\xff" * 7, b"garbage" * 50])
def test_garbage_tail_is_cut(log_dir: pathlib.Path, tail: bytes) -> None:
    vals = build(log_dir)
    unclean(log_dir)
    seg = active_log(log_dir)
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(tail)
    assert read_all(log_dir) == vals
    assert seg.stat().st_size == size
    with embedlog.open(log_dir) as log:
        assert log.append("t", b"after").offset == len(vals)
    assert read_all(log_dir) == [*vals, b"after"]


def test_torn_last_batch_is_cut(log_dir: pathlib.Path) -> None:
    vals = build(log_dir)
    unclean(log_dir)
    seg = active_log(log_dir)
    data = seg.read_bytes()
    assert len(data) > 40
    seg.write_bytes(data[:-5])
    got = read_all(log_dir)
    assert got == vals[: len(got)] and len(got) == len(vals) - 1


def test_corrupt_crc_in_unflushed_tail_is_cut(log_dir: pathlib.Path) -> None:
    vals = build(log_dir)
    unclean(log_dir)
    seg = active_log(log_dir)
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0x40
    seg.write_bytes(bytes(data))
    got = read_all(log_dir)
    assert got == vals[: len(got)] and len(got) == len(vals) - 1


def test_missing_and_corrupt_indexes_are_rebuilt(log_dir: pathlib.Path) -> None:
    vals = build(log_dir, 600)
    segs = sorted((log_dir / "t-0").glob("*.index"))
    assert len(segs) > 3
    segs[1].unlink()
    segs[2].write_bytes(b"\x7f" * 16)
    (log_dir / "t-0" / segs[-1].name.replace(".index", ".timeindex")).unlink()
    unclean(log_dir)
    with embedlog.open(log_dir) as log:
        assert [r.value for r in log.read("t", 0)] == vals
        for start in (0, 77, 301, 599):
            assert next(log.read("t", 0, start)).value == vals[start]
        assert log.offsets_for_times("t", 0, 0) == 0


def test_sealed_segment_damage_is_an_error_not_a_truncation(log_dir: pathlib.Path) -> None:
    vals = build(log_dir, 400)
    sealed = sorted((log_dir / "t-0").glob("*.log"))[1]
    data = sealed.read_bytes()
    # Cut at a batch boundary: CRCs cannot see this, the manifest of sealed sizes can.
    first_len = 12 + int.from_bytes(data[8:12], "big")
    sealed.write_bytes(data[:first_len])
    with pytest.raises(embedlog.CorruptionError):
        writer_open(log_dir)
    sealed.write_bytes(data)
    assert read_all(log_dir) == vals


def _cut_at_a_batch_boundary(sealed: pathlib.Path) -> bytes:
    data = sealed.read_bytes()
    sealed.write_bytes(data[:12 + int.from_bytes(data[8:12], "big")])  # its first batch only
    return data


@pytest.mark.parametrize(("start", "end"), [(None, None), (20, None), (399, None), (0, 400)])
def test_a_read_only_view_reports_a_sealed_segment_cut_at_a_batch_boundary(
        log_dir: pathlib.Path, start: int | None, end: int | None) -> None:
    """The cut would read like a compaction gap; the manifest of sealed sizes tells them apart,
    for a reader as for the writer's open. The view opens (its other partitions stay readable),
    reads hand out what precedes the cut, and a read reaching it raises."""
    vals = build(log_dir, 400)
    sealed = sorted((log_dir / "t-0").glob("*.log"))[1]
    data = _cut_at_a_batch_boundary(sealed)
    with embedlog.open(log_dir, read_only=True) as view:
        got: list[bytes | None] = []
        with pytest.raises(embedlog.CorruptionError, match="sealed segment is 109 bytes") as info:
            for r in view.read("t", 0, start, end_offset=end):
                got.append(r.value)
        assert info.value.path == str(sealed)
        first = start or 0
        assert got == vals[first:first + len(got)]
        assert got == [] if first > 100 else first + len(got) < 100  # nothing past the cut
    sealed.write_bytes(data)
    with embedlog.open(log_dir, read_only=True) as view:
        assert [r.value for r in view.read("t", 0)] == vals


def test_reads_that_keep_meeting_a_cut_leave_no_descriptor_open(log_dir: pathlib.Path) -> None:
    """Every read reaching the cut refreshes the view, opens the segments listed after it and
    raises: those segments are closed again, so the reads hold no more descriptors than the
    first did, and the view's close leaves none open."""
    build(log_dir, 400)
    _cut_at_a_batch_boundary(sorted((log_dir / "t-0").glob("*.log"))[1])
    with embedlog.open(log_dir, read_only=True) as view:
        held = []
        for _ in range(4):
            with pytest.raises(embedlog.CorruptionError, match="sealed segment is 109 bytes"):
                list(view.read("t", 0))
            held.append(len(descriptors_under(log_dir)))
        assert held[1:] == held[:1] * 3
    assert descriptors_under(log_dir) == []


def test_a_view_reports_a_cut_in_the_segment_it_saw_active(log_dir: pathlib.Path) -> None:
    """The view opened the segment while it was being written; the writer sealed it, then it was
    cut: the view's next refresh compares it with the manifest."""
    vals = build(log_dir, 30)
    with embedlog.open(log_dir, read_only=True) as view:
        assert [r.value for r in view.read("t", 0)] == vals
        active = sorted((log_dir / "t-0").glob("*.log"))[-1]
        with embedlog.open(log_dir) as log:
            for v in vals:
                log.append("t", v, key=v[:8])
        assert active in sorted((log_dir / "t-0").glob("*.log"))[:-1]  # sealed now
        _cut_at_a_batch_boundary(active)
        with pytest.raises(embedlog.CorruptionError, match="sealed segment") as info:
            list(view.read("t", 0))
        assert info.value.path == str(active)


def test_a_view_does_not_report_a_segment_the_writer_replaced_meanwhile(
        log_dir: pathlib.Path) -> None:
    """A compaction swap renames a new file over a sealed segment's name and writes the manifest
    of its size: a view holding the old file sees sizes that differ, and nothing is damaged."""
    from embedlog import loader, manifest
    from embedlog.manifest import read_manifest, write_manifest

    build(log_dir, 400)
    folder = str(log_dir / "t-0")
    with embedlog.open(log_dir, read_only=True) as view:
        p = view._partition_of("t", 0)
        names = os.listdir(folder)
        old = p.segments[1]
        data = pathlib.Path(old.log_path).read_bytes()
        first = 12 + int.from_bytes(data[8:12], "big")
        replacement = old.log_path + ".new"
        pathlib.Path(replacement).write_bytes(data[:first])
        os.replace(replacement, old.log_path)  # the same name, another file
        sealed = read_manifest(folder)
        sealed[old.base_offset] = first
        write_manifest(folder, sealed)
        assert manifest.view_damage(folder, names, p.segments) is None  # it holds the old file
        sealed[old.base_offset] = len(data)
        write_manifest(folder, sealed)  # the new file against the old size: damage
        fresh = loader.Segment(folder, old.base_offset, old.settings, writable=False)
        damage = manifest.view_damage(folder, names, [*p.segments[:1], fresh, *p.segments[2:]])
        assert damage is not None and damage[0] == 1
        assert damage[1].path == old.log_path


def test_bit_flip_in_sealed_segment_raises_on_read(log_dir: pathlib.Path) -> None:
    build(log_dir, 400)
    sealed = sorted((log_dir / "t-0").glob("*.log"))[1]
    data = bytearray(sealed.read_bytes())
    data[len(data) // 2] ^= 0x01
    sealed.write_bytes(bytes(data))
    with embedlog.open(log_dir) as log, pytest.raises(embedlog.CorruptionError):
        list(log.read("t", 0))


CHILD = textwrap.dedent(
    """
    import sys, embedlog
    path = sys.argv[1]
    with embedlog.open(path, durability="fsync") as log:
        if "t" not in log.topics():
            log.create_topic("t", config={"segment.bytes": 8192})
        i = log.end_offset("t", 0)
        print("READY", flush=True)
        while True:
            meta = log.append("t", b"payload-%d" % i * 4, key=b"k%d" % i)
            print("ACK", meta.offset, flush=True)
            i += 1
    """
)


def test_kill_minus_9_loses_nothing_acknowledged(log_dir: pathlib.Path) -> None:
    """A child appends with fsync and prints acknowledgements; SIGKILL it, reopen, check."""
    acked: set[int] = set()
    for round_ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(log_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        for _ in range(20 + round_ * 15):
            line = proc.stdout.readline().split()
            acked.add(int(line[1]))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:
            if line.startswith("ACK"):
                acked.add(int(line.split()[1]))
        with embedlog.open(log_dir) as log:
            present = {r.offset: r.value for r in log.read("t", 0)}
        assert acked <= present.keys()
        for offset, value in present.items():
            assert value == b"payload-%d" % offset * 4
        assert sorted(present) == list(range(len(present)))


THREADS_CHILD = textwrap.dedent(
    """
    import sys, threading, embedlog
    path = sys.argv[1]
    out = threading.Lock()
    with embedlog.open(path, durability="fsync") as log:
        if "t" not in log.topics():
            log.create_topic("t", config={"segment.bytes": 8192})
        start = log.end_offset("t", 0)

        def work(n):
            for i in range(10**9):
                value = b"w%d-%d-%d" % (start, n, i)
                meta = log.append("t", value, key=b"k%d" % n)
                with out:
                    print("ACK", meta.offset, value.decode(), flush=True)

        out.acquire()  # READY first
        for n in range(4):
            threading.Thread(target=work, args=(n,), daemon=True).start()
        print("READY", flush=True)
        out.release()
        threading.Event().wait()
    """
)


def test_kill_minus_9_loses_no_acknowledged_record_of_concurrent_appenders(
        log_dir: pathlib.Path) -> None:
    """Four threads append with fsync (their one-record appends share rounds and batches):
    after SIGKILL every acknowledged record is at the offset it was acknowledged at."""
    acked: dict[int, bytes] = {}
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", THREADS_CHILD, str(log_dir)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        for _ in range(100 + round_ * 50):
            _, offset, value = proc.stdout.readline().split()
            acked[int(offset)] = value.encode()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:
            if line.startswith("ACK") and len(line.split()) == 3:
                acked[int(line.split()[1])] = line.split()[2].encode()
        with embedlog.open(log_dir) as log:
            present = {r.offset: r.value for r in log.read("t", 0)}
            shared = [h.records_count for h, _ in log._topic("t").partitions[0].batches(0)]
        assert {o: present.get(o) for o in acked} == acked
        assert sorted(present) == list(range(len(present)))
    assert max(shared) > 1  # rounds did merge


def test_damage_in_sealed_segment_is_never_truncated_by_recovery(log_dir: pathlib.Path) -> None:
    """Even when recovery must re-validate sealed segments (recovery point lost), a bad batch
    inside one is reported, not cut off together with every later segment."""
    build(log_dir, 400)
    unclean(log_dir)
    (log_dir / "recovery-point-offset-checkpoint").unlink()
    sealed = sorted((log_dir / "t-0").glob("*.log"))[1]
    data = bytearray(sealed.read_bytes())
    data[len(data) // 2] ^= 0x01
    sealed.write_bytes(bytes(data))
    with pytest.raises(embedlog.CorruptionError):
        writer_open(log_dir)
    assert sealed.read_bytes() == bytes(data)
