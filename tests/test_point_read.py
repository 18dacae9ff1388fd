"""A point read takes its batch with one exact pread (and the next batch's header) instead of
the chunked walk: for any damage, it must hand out exactly what the walk hands out, and raise
exactly what the walk raises."""

from __future__ import annotations

import pathlib
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from itertools import islice, pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.errors import EmbedlogError
from embedlog.segment.segment import Segment

N_BATCHES = 30

@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One small log: a topic of two segments of small batches, keys, nulls and headers."""
    folder = tmp_path_factory.mktemp("point") / "log"
    with embedlog.open(folder) as log:
        log.create_topic("t", config={"segment.bytes": 4096, "index.interval.bytes": 256})
        for b in range(N_BATCHES):
            log.append_batch(
                "t", [b"v%02d-%03d" % (b, i) * (1 + i % 3) for i in range(7)],
                keys=[None if i % 4 == 0 else b"k%d" % i for i in range(7)],
                headers=[[("h", b"x")] if i % 2 else [] for i in range(7)],
            )  # fmt: skip
    return folder


def _outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", run()
    except EmbedlogError as exc:
        return type(exc).__name__, str(exc)


def _first(items: Iterator[Any]) -> list[Any]:
    return list(islice(items, 1))


def _damage(folder: pathlib.Path, draw: Any) -> None:
    """Flip a byte, or move one batch's base offset (outside the CRC), in one segment."""
    logs = sorted((folder / "t-0").glob("*.log"))
    path = logs[draw(st.integers(0, len(logs) - 1))]
    data = bytearray(path.read_bytes())
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= 1 << draw(st.integers(0, 7))
    else:
        starts, p = [], 0
        while p + 12 <= len(data):
            starts.append(p)
            p += 12 + struct.unpack_from(">i", data, p + 8)[0]
        at = starts[draw(st.integers(0, len(starts) - 1))]
        base = struct.unpack_from(">q", data, at)[0]
        struct.pack_into(">q", data, at, base + draw(st.sampled_from([-8, -3, -1, 1, 2, 7, 50])))
    path.write_bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_point_read_sees_what_the_walk_sees(template: pathlib.Path,
                                              data: st.DataObject) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-point-case-"))
    try:
        folder = work / "log"
        shutil.copytree(template, folder)
        _damage(folder, data.draw)
        with embedlog.open(folder, read_only=True) as log:
            segments: list[Segment] = log._partition_of("t", 0).segments
            for seg in segments:
                for offset in range(seg.base_offset, seg.base_offset + 120, 3):
                    found = _outcome(lambda: seg.find_batch(offset))  # noqa: B023
                    if found[0] != "ok" or found[1] is None:
                        continue
                    position, head = found[1]

                    def walk(exact: bool) -> list[tuple[bytes, Any]]:
                        return [(bytes(buf[p:p + h.size]), h) for buf, p, h in _first(
                            seg.batches(position, exact_first=exact, head=head))]  # noqa: B023

                    assert _outcome(lambda: walk(True)) == _outcome(lambda: walk(False))
            for offset in range(N_BATCHES * 7):
                point = _outcome(lambda: _first(log.read("t", 0, offset, max_records=1)))  # noqa: B023
                scan = _outcome(lambda: _first(log.read("t", 0, offset)))  # noqa: B023
                assert point == scan, offset
    finally:
        shutil.rmtree(work)


def test_undamaged_point_reads_return_every_record(template: pathlib.Path) -> None:
    with embedlog.open(template, read_only=True) as log:
        every = list(log.read("t", 0))
        assert len(every) == N_BATCHES * 7
        for rec in every:
            assert _first(log.read("t", 0, rec.offset, max_records=1)) == [rec]
        segs = log._partition_of("t", 0).segments
        assert len(segs) >= 2


def test_point_reads_inside_a_compacted_batch(tmp_path: pathlib.Path) -> None:
    # A cleaned batch keeps its base offset but loses records: the first records decoded are
    # below the wanted offset, which must still be found in the same batch.
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("c", config={"cleanup.policy": "compact", "segment.bytes": 1024})
        for r in range(6):
            log.append_batch("c", [b"v%d-%d" % (r, i) for i in range(20)],
                             keys=[b"k%d" % (i % 5) for i in range(20)])
        for i in range(30):
            log.append("c", b"tail%d" % i, key=b"t%d" % i)
        assert log.compact("c").records_retained < 146
        every = list(log.read("c", 0))
        gaps = [b.offset - a.offset for a, b in pairwise(every)]
        assert max(gaps) == 1 and every[0].offset > 0  # compacted, then dense records
        batches = list(log.read_batches("c", 0))
        assert any(len(b.values()) < b.last_offset - b.base_offset + 1 for b in batches)
        for rec in every:
            for n in (1, 2, 7):
                got = list(log.read("c", 0, rec.offset, max_records=n))
                assert got == every[every.index(rec):every.index(rec) + n]
