"""FolderView, what planning reads of a log folder: the same bounds and segments as the log's
own read-only view, while opening no segment but a large last one."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import embedlog
from embedlog.errors import CorruptionError
from embedlog.spark import catalog, layout
from embedlog.spark.catalog import SMALL_TAIL_BYTES, FolderView


@pytest.fixture
def path(tmp_path: Any) -> str:
    """``t-0``: one small segment; ``t-1``: an active segment larger than
    :data:`SMALL_TAIL_BYTES`; ``t-2``: several segments, records deleted below offset 33."""
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("t", partitions=3, config={"segment.bytes": 8192})
        log.append_batch("t", [b"x" * 100] * 10, partition=0)
        log.append_batch("t", [b"y" * 100] * 4, partition=1)
        log.append_batch("t", [b"y" * 1000] * 100, partition=1)  # a last segment of ~100 KB
        for _ in range(40):
            log.append_batch("t", [b"z" * 300] * 3, partition=2)
        log.delete_records("t", 2, 33)
    return path


def log_bounds(path: str) -> dict[int, tuple[int, int, list[tuple[int, int]]]]:
    with embedlog.open(path, read_only=True) as log:
        return {p: (log.start_offset("t", p), log.end_offset("t", p),
                    [(s.base_offset, s.size) for s in log.segments("t", p)])
                for p in range(3)}


def view_bounds(view: FolderView) -> dict[int, tuple[int, int, list[tuple[int, int]]]]:
    out = {}
    for p in range(3):
        b = view.bounds("t", p)
        out[p] = (b.start, b.end, [(s.base_offset, s.size) for s in b.segments])
    return out


def last_segment(path: str, partition: int) -> str:
    folder = os.path.join(path, f"t-{partition}")
    return os.path.join(folder, max(n for n in os.listdir(folder) if n.endswith(".log")))


def test_bounds_equal_the_logs_own_and_only_a_large_tail_is_opened(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    class CountingSegment(catalog.Segment):
        def __init__(self, directory: str, *args: Any, **kwargs: Any) -> None:
            opened.append(os.path.basename(directory))
            super().__init__(directory, *args, **kwargs)

    monkeypatch.setattr(catalog, "Segment", CountingSegment)
    expected = log_bounds(path)
    assert len(expected[2][2]) > 3 and expected[2][0] == 33
    assert os.path.getsize(last_segment(path, 1)) > SMALL_TAIL_BYTES
    assert os.path.getsize(last_segment(path, 0)) <= SMALL_TAIL_BYTES
    assert view_bounds(FolderView(path)) == expected
    assert opened == ["t-1"]  # the small tails were read with one pread each


def test_an_incomplete_last_batch_is_not_counted(path: str) -> None:
    expected = log_bounds(path)
    tail = last_segment(path, 0)
    with open(tail, "rb") as f:
        head = f.read(40)  # the start of a batch: a writer in the middle of an append
    with open(tail, "ab") as f:
        f.write(head)
    got = view_bounds(FolderView(path))
    assert got[0][:2] == expected[0][:2]
    assert got[0][2] == [(0, expected[0][2][0][1] + 40)]


def test_a_damaged_tail_raises_as_the_log_does(path: str) -> None:
    with open(last_segment(path, 0), "ab") as f:
        f.write(bytes(100))  # a zero-filled tail: batch length 0
    with pytest.raises(CorruptionError) as raised:
        FolderView(path).bounds("t", 0)
    assert raised.value.path == last_segment(path, 0)


def test_the_tail_is_read_again_only_when_it_changed(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    walk = layout.end_offset

    def counting(buf: bytes, base: int, max_batch: int, max_batches: int | None = None
                 ) -> int | None:
        reads.append(base)
        return walk(buf, base, max_batch, max_batches)

    monkeypatch.setattr(layout, "end_offset", counting)
    view = FolderView(path)
    assert view.end_offset("t", 0) == 10 and len(reads) == 1
    view.refresh()
    assert view.end_offset("t", 0) == 10 and len(reads) == 1
    with embedlog.open(path) as log:
        log.append_batch("t", [b"more"] * 5, partition=0)
    assert view.end_offset("t", 0) == 10  # one query, one snapshot
    view.refresh()
    assert view.end_offset("t", 0) == 15 and len(reads) == 2


def test_a_segment_gone_after_the_listing_falls_back_to_the_partition(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = log_bounds(path)
    listing = layout.log_names

    def stale(directory: str) -> list[str] | None:
        names = listing(directory)
        # a segment retention deleted between the listing and the stat
        return None if names is None else ["0" * 19 + "1.log", *names[1:]]

    monkeypatch.setattr(layout, "manifest_chain", lambda directory, sealed, max_batch: None)
    monkeypatch.setattr(layout, "log_names", stale)
    assert view_bounds(FolderView(path)) == expected


def test_the_log_start_checkpoint_is_read_again_only_when_replaced(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor reads many ranges with one view: the root checkpoint (one line per partition
    whose log start moved) is parsed once, and again once the writer replaced it."""
    reads: list[str] = []
    read_offsets = catalog.checkpoint.read_offsets

    def counting(name: str, **kwargs: Any) -> Any:
        reads.append(name)
        return read_offsets(name, **kwargs)

    monkeypatch.setattr(catalog.checkpoint, "read_offsets", counting)
    view = FolderView(path)
    try:
        for _ in range(3):
            assert view.reader("t", 2).start_offset == 33
            assert view.reader("t", 0).start_offset == 0
            view.refresh()  # as every task and stream trigger does
        assert len(reads) == 1
        with embedlog.open(path) as log:
            log.delete_records("t", 2, 35)
        assert view.reader("t", 2).start_offset == 35
        assert view.reader("t", 0).start_offset == 0
        assert len(reads) == 2
    finally:
        view.close()
