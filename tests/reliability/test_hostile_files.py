"""Hostile log folders: what is on disk is untrusted, whatever its type, size or name.

* sizes are bounded by what the segment can justify: a sparse 10 GiB ``.index`` costs nothing;
* only regular files are opened: a FIFO, a directory or a symlink where a segment, an index or
  a checkpoint belongs is a ``CorruptionError`` naming the path, never a hang or a foreign error;
* empty segment files do not advance the end offset (Kafka's rules: only the active segment's
  base offset is a log end offset);
* offsets may jump forward between batches in every segment (Kafka followers of compacted
  topics write such active segments); reads, end offsets, recovery, index rebuilds and
  ``embedlog verify`` agree about it, and about offsets that go backwards being damage;
* a random folder of valid and invalid pieces, opened read-only and for writing, reads
  correctly or raises an embedlog error -- and never changes a file outside the log folder.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.cli.verify import verify_path
from embedlog.inspect import rebuild_indexes
from embedlog.segment import format as fmt
from helpers import writer_open

from .workloads import scratch_dir

pytestmark = pytest.mark.timeout(300)

CFG = {"segment.bytes": 700, "index.interval.bytes": 100}
N = 40
VALUES = [b"value-%03d" % i * 3 for i in range(N)]


def _template() -> Path:
    path = Path(scratch_dir()) / "log"
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t", config=CFG)
        for i, v in enumerate(VALUES):
            log.append("t", v, key=b"k%d" % (i % 5), timestamp=1000 + i)
    return path


TEMPLATE = _template()


def fresh() -> tuple[Path, Path]:
    """A copy of the template log next to a sibling folder ``outside`` holding a victim file."""
    root = Path(scratch_dir())
    path = root / "log"
    shutil.copytree(TEMPLATE, path, symlinks=True)
    outside = root / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"victim data that must never change\n")
    return path, outside


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Names, modes, sizes and content digests of everything under ``folder``."""
    seen = {}
    for d, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(d, name)
            st_ = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st_.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            seen[os.path.relpath(p, folder)] = (st_.st_mode, st_.st_size, digest)
    return seen


def segs(path: Path, suffix: str = ".log") -> list[Path]:
    return sorted((path / "t-0").glob("*" + suffix))


def read(path: Path, *, read_only: bool) -> tuple[int, list[tuple[int, bytes | None]]]:
    with embedlog.open(path, read_only=read_only, adopt=not read_only) as log:
        return log.end_offset("t", 0), [(r.offset, r.value) for r in log.read("t", 0)]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


EXPECTED = list(enumerate(VALUES))

# ---------------------------------------------------------------------- class 5: sizes


@pytest.mark.parametrize("which", [0, -1])  # a sealed segment's index, the active one's
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_a_sparse_10_gib_index_is_never_read_whole(which: int, suffix: str) -> None:
    path, _ = fresh()
    index = segs(path, suffix)[which]
    with open(index, "r+b") as f:
        f.truncate(10 * 2**30)
    before = peak_rss_mib()
    for read_only in (True, False):
        end, records = read(path, read_only=read_only)
        assert (end, records) == (N, EXPECTED)
    with embedlog.open(path, read_only=True) as log:
        assert log.offsets_for_times("t", 0, 1000 + N // 2) == N // 2
    assert peak_rss_mib() - before < 256
    if which == -1:
        assert index.stat().st_size < 2**20  # the writer cut it back to its pre-allocated size


def test_an_index_longer_than_its_log_can_justify_is_ignored_by_readers() -> None:
    path, _ = fresh()
    index = segs(path, ".index")[0]
    log_size = segs(path)[0].stat().st_size
    index.write_bytes(index.read_bytes() + b"\x00\x00\x00\x01\x00\x00\x00\x00" * (log_size // 61))
    assert read(path, read_only=True) == (N, EXPECTED)


# ---------------------------------------------------------------------- class 5: file types

NOT_FILES: dict[str, Callable[[Path, Path], None]] = {
    "fifo": lambda p, _: os.mkfifo(p),
    "directory": lambda p, _: p.mkdir(),
    "symlink": lambda p, outside: p.symlink_to(outside / "victim"),
}


@pytest.mark.parametrize("kind", sorted(NOT_FILES))
@pytest.mark.parametrize("where", ["t-0/{last}.log", "t-0/{first}.log", "t-0/{next}.log",
                                   "t-0/{first}.index", "t-0/{last}.timeindex",
                                   "embedlog.json", "recovery-point-offset-checkpoint",
                                   "log-start-offset-checkpoint", "t-0/embedlog.segments"])
def test_something_else_where_a_file_belongs_is_a_corruption_error(kind: str, where: str
                                                                    ) -> None:
    path, outside = fresh()
    names = [p.stem for p in segs(path)]
    target = path / where.format(first=names[0], last=names[-1], next=f"{10**6:020d}")
    before = snapshot(outside)
    _clear(target)
    NOT_FILES[kind](target, outside)
    for read_only in (True, False):
        try:
            end, records = read(path, read_only=read_only)
        except embedlog.CorruptionError as exc:
            assert exc.path is not None and os.path.basename(exc.path) == target.name, exc
        else:
            # A segment cannot be skipped; files an open does not need may be left alone.
            assert target.suffix != ".log", (kind, where, read_only)
            assert (end, records) == (N, EXPECTED)
    assert snapshot(outside) == before


def _clear(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


# ---------------------------------------------------------------------- class 5: empty segments


def _plant_empty(path: Path, bases: list[int]) -> None:
    for base in bases:
        (path / "t-0" / f"{base:020d}.log").write_bytes(b"")


@pytest.mark.parametrize("bases", [[10**6], [200 + 200 * i for i in range(300)],
                                   [N + 1, N + 2], [10**5, 10**6]])
def test_empty_segment_files_do_not_advance_the_end_offset(bases: list[int]) -> None:
    path, _ = fresh()
    _plant_empty(path, bases)
    # One empty segment after the data is an active segment rolled at its base offset (Kafka's
    # log end offset); several are strays whose base offsets are only claims.
    claimed = bases[0] if len(bases) == 1 else N
    assert read(path, read_only=True) == (claimed, EXPECTED)
    if claimed != N:
        # After a clean close the writer knows where the log ended: a claim beyond is damage.
        with pytest.raises(embedlog.CorruptionError, match="closed cleanly"):
            writer_open(path, adopt=True)  # the partition is quarantined
        (path / ".kafka_cleanshutdown").unlink(missing_ok=True)  # after a crash: Kafka's rule
    with embedlog.open(path, adopt=True) as log:
        assert log.end_offset("t", 0) == claimed
        assert log.append("t", b"next").offset == claimed
    left = [int(p.stem) for p in segs(path)]
    assert len(left) - len(segs(TEMPLATE)) <= 1  # the writer deleted the strays
    end, records = read(path, read_only=True)
    assert end == claimed + 1 and records == [*EXPECTED, (claimed, b"next")]
    with embedlog.open(path, adopt=True) as log:  # and the manifest of sealed sizes agrees
        assert log.end_offset("t", 0) == claimed + 1


def test_a_partition_of_empty_segment_files_is_empty() -> None:
    path = Path(scratch_dir()) / "kafka"
    (path / "t-0").mkdir(parents=True)
    _plant_empty(path, [500, 900, 5000])
    with embedlog.open(path, read_only=True) as log:
        assert log.end_offset("t", 0) == 500 and list(log.read("t", 0)) == []
    with embedlog.open(path, adopt=True) as log:
        assert log.append("t", b"x").offset == 500


# ---------------------------------------------------------------------- class 7: offset gaps


def _kafka_folder(bases: list[int], per_batch: int = 3) -> tuple[Path, list[tuple[int, bytes]]]:
    """A Kafka partition folder (no embedlog files) whose only, active segment has gaps."""
    path = Path(scratch_dir()) / "kafka"
    (path / "t-0").mkdir(parents=True)
    blobs, expected = [], []
    for i, base in enumerate(bases):
        values = [b"b%d-%d" % (i, j) for j in range(per_batch)]
        blobs.append(fmt.encode_batch(values, timestamps=2000 + i, base_offset=base))
        expected += [(base + j, v) for j, v in enumerate(values)]
    (path / "t-0" / f"{bases[0]:020d}.log").write_bytes(b"".join(blobs))
    return path, expected


def test_a_follower_segment_with_offset_gaps_reads_everywhere() -> None:
    path, expected = _kafka_folder([0, 3, 50, 104, 107, 300])
    end = expected[-1][0] + 1
    assert verify_path(str(path)).healthy
    assert read(path, read_only=True) == (end, expected)
    with embedlog.open(path, read_only=True) as log:
        assert [r.offset for r in log.read("t", 0, 60)][:2] == [104, 105]
        assert log.offsets_for_times("t", 0, 2003) == 104
    # A writer recovers it (no clean-shutdown marker: every batch is re-validated) and keeps
    # every batch; the indexes it rebuilds agree with verify.
    with embedlog.open(path, adopt=True) as log:
        assert log.end_offset("t", 0) == end
        assert log.append("t", b"after").offset == end
    assert read(path, read_only=True) == (end + 1, [*expected, (end, b"after")])
    rebuild_indexes(str(path / "t-0"), 0, embedlog.TopicConfig(index_interval_bytes=1))
    assert verify_path(str(path)).healthy
    assert read(path, read_only=False) == (end + 1, [*expected, (end, b"after")])


@pytest.mark.parametrize("bases", [[0, 3, 4], [10, 20, 15], [0, 50, 40]])
def test_offsets_that_go_backwards_are_damage_everywhere(bases: list[int]) -> None:
    path, expected = _kafka_folder(bases)
    assert not verify_path(str(path)).healthy
    with pytest.raises(embedlog.CorruptionError), embedlog.open(path, read_only=True) as log:
        list(log.read("t", 0))
    with pytest.raises(embedlog.CorruptionError), embedlog.open(path, read_only=True) as log:
        log.end_offset("t", 0)
    # The writer's recovery cuts the active segment before both colliding batches.
    with embedlog.open(path, adopt=True) as log:
        kept = [(r.offset, r.value) for r in log.read("t", 0)]
    assert kept == expected[: 3 * (len(bases) - 2)]


# ---------------------------------------------------------------------- random hostile folders

PIECES = ["empty", "fifo", "directory", "symlink", "sparse_index", "truncate", "garbage",
          "bad_name", "valid_copy", "delete_index"]
BENIGN = {"empty_after", "sparse_index", "bad_name", "delete_index"}


def _apply(path: Path, outside: Path, piece: str, k: int, cut: int) -> str:
    """Change ``path`` by one piece aimed at segment ``k``; returns the kind of change."""
    logs = segs(path)
    seg = logs[k % len(logs)]
    stem = seg.with_suffix("")
    fresh_name = path / "t-0" / f"{10**6 + k:020d}.log"
    if piece == "empty":
        _clear(fresh_name)
        fresh_name.write_bytes(b"")
        return "empty_after"
    if piece in ("fifo", "directory", "symlink"):
        target = seg if cut % 2 else fresh_name
        _clear(target)
        NOT_FILES[piece](target, outside)
        return piece
    if piece == "sparse_index":
        index = stem.with_suffix(".index" if cut % 2 else ".timeindex")
        if index.exists() and not index.is_symlink() and index.is_file():
            with open(index, "r+b") as f:
                f.truncate(2**34 + cut)
        return piece
    if piece == "delete_index":
        for suffix in (".index", ".timeindex"):
            index = stem.with_suffix(suffix)
            if index.is_file() and not index.is_symlink():
                index.unlink()
        return piece
    if piece == "bad_name":
        for name in ("123.log", "abc.index", "00000000000000000000.log.bak", "x-0",
                     "..log", f"{k:019d}.log"):
            target = path / "t-0" / name
            _clear(target)  # an earlier piece may have left a FIFO there: never write into it
            target.write_bytes(b"not a segment")
        return piece
    if not seg.is_file() or seg.is_symlink():
        return "none"
    data = seg.read_bytes()
    if piece == "truncate":
        seg.write_bytes(data[: cut % (len(data) + 1)])
    elif piece == "garbage":
        seg.write_bytes(data + bytes((cut * 7 + i) % 256 for i in range(cut % 97 + 1)))
    else:  # a valid segment copied under a later name: its offsets overlap the originals
        _clear(fresh_name)
        fresh_name.write_bytes(data)
    return piece


def _check_outcome(path: Path, changes: set[str], *, read_only: bool) -> None:
    try:
        end, records = read(path, read_only=read_only)
    except embedlog.EmbedlogError:
        return
    truth = dict(EXPECTED)
    assert all(truth.get(o) == v for o, v in records), "a record that was never written"
    assert [o for o, _ in records] == sorted({o for o, _ in records}), "offsets out of order"
    if changes <= BENIGN:
        assert records == EXPECTED
        # One empty segment after the data claims its base offset (Kafka's active segment).
        assert end == N or ("empty_after" in changes and end > N)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.tuples(st.sampled_from(PIECES), st.integers(0, 20),
                                 st.integers(0, 5000)), min_size=1, max_size=4))
def test_random_hostile_folders_read_correctly_or_raise_embedlog_errors(
        pieces: list[tuple[str, int, int]]) -> None:
    path, outside = fresh()
    (path / ".kafka_cleanshutdown").unlink(missing_ok=True)  # the writer recovers everything
    sibling = snapshot(outside)
    changes = {_apply(path, outside, piece, k, cut) for piece, k, cut in pieces}
    _check_outcome(path, changes, read_only=True)
    _check_outcome(path, changes, read_only=False)
    _check_outcome(path, changes, read_only=True)
    assert snapshot(outside) == sibling


def test_a_fifo_left_by_one_piece_is_never_written_into_by_the_next() -> None:
    # bad_name once wrote into whatever stood at its names: after a FIFO took "123.log", the
    # write blocked forever (a hang a random example could hit).
    path, outside = fresh()
    assert _apply(path, outside, "bad_name", 0, 0) == "bad_name"
    k = [p.name for p in segs(path)].index("123.log")
    assert _apply(path, outside, "fifo", k, 1) == "fifo"
    assert stat.S_ISFIFO(os.lstat(path / "t-0" / "123.log").st_mode)
    assert _apply(path, outside, "bad_name", 0, 0) == "bad_name"
    assert (path / "t-0" / "123.log").read_bytes() == b"not a segment"
