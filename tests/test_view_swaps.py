"""A read-only view that meets a compaction swap half way (the cleaned segment renamed in while
the segments it replaces are still listed) lists the folder again instead of failing; an overlap
that stays is damage."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

import embedlog
from embedlog import partition_read
from embedlog.errors import CorruptBatchError


def _write(path: pathlib.Path, records: int) -> None:
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t")
        for i in range(0, records, 10):
            log.append_batch("t", [b"v%d" % (i + j) for j in range(10)], partition=0)
        log.roll("t", 0)


def _half_swapped(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """A view's folder as a compaction swap leaves it half way: ``0.log`` holds offsets 0-119
    (the cleaned segment, renamed in) while ``60.log`` (the rolled, empty segment that the
    writer then filled, rolled and cleaned) is still listed."""
    many, one = tmp_path / "many", tmp_path / "one"
    _write(many, 60)
    _write(one, 120)
    folder = many / "t-0"
    later = sorted(n for n in os.listdir(folder) if n.endswith(".log"))[1:]
    assert later == [str(60).zfill(20) + ".log"]
    return folder, later


def _swap_in(tmp_path: pathlib.Path, folder: pathlib.Path) -> None:
    """Rename the cleaned segment and its manifest in (the old ones stay listed)."""
    source = tmp_path / "one" / "t-0"
    first = str(0).zfill(20)
    for name in (first + ".log", first + ".index", first + ".timeindex", "embedlog.segments"):
        shutil.copyfile(source / name, folder / (name + ".new"))
        os.replace(folder / (name + ".new"), folder / name)


def test_a_view_lists_again_when_it_meets_a_swap_half_way(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, later = _half_swapped(tmp_path)
    with embedlog.open(tmp_path / "many", read_only=True) as view:
        _swap_in(tmp_path, folder)
        pauses: list[int] = []

        def sleep(_: float) -> None:  # the writer finishes its swap while the view waits
            pauses.append(1)
            for name in later:
                for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                    (folder / name.replace(".log", suffix)).unlink(missing_ok=True)

        monkeypatch.setattr(partition_read.time, "sleep", sleep)
        values = [r.value for r in view.read("t", 0)]
    assert values == [b"v%d" % i for i in range(120)]
    assert pauses  # the overlap was met and the view listed the folder again


def test_an_overlap_that_stays_is_damage(tmp_path: pathlib.Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = _half_swapped(tmp_path)
    with embedlog.open(tmp_path / "many", read_only=True) as view:
        _swap_in(tmp_path, folder)
        monkeypatch.setattr(partition_read.time, "sleep", lambda _: None)
        with pytest.raises(CorruptBatchError, match="next segment"):
            list(view.read("t", 0))


def test_a_segment_deleted_between_listing_and_opening_makes_the_view_list_again(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from embedlog import view_loader
    from embedlog.errors import StorageError

    _write(tmp_path / "log", 60)
    with embedlog.open(tmp_path / "log", read_only=True) as view:
        p = view._partition_of("t", 0)
        real = view_loader.adopt
        calls: list[int] = []

        def flaky(*args: object, **kwargs: object) -> object:
            calls.append(1)
            if len(calls) <= 2:  # retention deleted a listed segment before it was opened
                raise StorageError(errno.ESTALE, "the segment was deleted or replaced")
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(view_loader, "adopt", flaky)
        partition_read.refresh_view(p)
        assert len(calls) == 3
        assert [r.value for r in view.read("t", 0, 55)] == [b"v%d" % i for i in range(55, 60)]

        def gone(*args: object, **kwargs: object) -> object:
            raise StorageError(errno.EIO, "an I/O error is not retried")

        monkeypatch.setattr(view_loader, "adopt", gone)
        with pytest.raises(StorageError):
            partition_read.refresh_view(p)


def _compacted_tail(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """A compacted topic whose view listed the folder while ``0.log`` was the active segment
    (the listing returned), then the writer rolled and compacted it (gaps where keys repeat)."""
    path = tmp_path / "log"
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", config={"cleanup.policy": "compact",
                                      "min.cleanable.dirty.ratio": 0.0})
        for i in range(0, 200, 10):
            keys = [b"k%d" % ((i + j) % 7) if i % 50 else b"once%d" % (i + j) for j in range(10)]
            log.append_batch("t", [b"v%d" % (i + j) for j in range(10)], keys=keys, partition=0)
        folder = path / "t-0"
        listed = os.listdir(folder)
        log.roll("t", 0)
        log.compact("t")
    return folder, listed


def test_a_view_that_listed_a_tail_before_it_was_rolled_and_compacted_reads_it(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from embedlog import view_loader
    from embedlog.segment.scan import SegmentSettings

    folder, listed = _compacted_tail(tmp_path)
    with embedlog.open(tmp_path / "log", read_only=True) as view:
        kept = [(r.offset, r.key) for r in view.read("t", 0)]
    offsets = [o for o, _ in kept]
    assert len(kept) == 47 and offsets != list(range(offsets[0], offsets[0] + 47))  # gaps

    # the listing before the roll
    monkeypatch.setattr(view_loader, "check_folder", lambda _: listed)
    segments, _ = view_loader.open_view(str(folder), SegmentSettings(dense_tail=True))
    assert [s.base_offset for s in segments] == [0] and segments[0].bounds.dense
    headers = [h for _, _, h in segments[0].batches()]
    assert headers[0].base_offset <= offsets[0]
    assert headers[-1].last_offset >= offsets[-1]
    assert not segments[0].bounds.dense  # the rule went with the roll past it


def test_a_gap_in_a_tail_nothing_was_rolled_past_is_damage(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from embedlog import view_loader
    from embedlog.segment.rules import GapError
    from embedlog.segment.scan import SegmentSettings

    folder, _ = _compacted_tail(tmp_path)
    for name in os.listdir(folder):  # the rolled segment gone: 0.log is the tail again
        if not name.startswith("0" * 20) and name.endswith((".log", ".index", ".timeindex")):
            (folder / name).unlink()
    segments, _ = view_loader.open_view(str(folder), SegmentSettings(dense_tail=True))
    with pytest.raises(GapError, match="without gaps"):
        list(segments[-1].batches())
