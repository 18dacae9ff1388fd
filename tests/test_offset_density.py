"""Offset density: a base offset moved forward by damage is not a legal gap where embedlog wrote
the segment (``embedlog.segment.rules``).

The base offset of a batch lies outside its CRC. Gaps between batches stay legal in Kafka
folders and in segments the cleaner rewrote; the active segment of a topic embedlog created has
none, and every segment ends below the next one's base offset.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import embedlog
from embedlog.cli.verify import verify_path
from embedlog.metadata import parse_metadata
from embedlog.segment import format as fmt
from embedlog.segment.rules import Bounds, GapError, bounds_of, check_order

T0 = 1_700_000_000_000


def _batch_starts(log_file: Path) -> list[int]:
    data = log_file.read_bytes()
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    return starts


def _move_base(log_file: Path, batch: int, by: int) -> int:
    """Add ``by`` to the base offset of batch number ``batch`` (-1: the last); returns the
    original base offset."""
    data = bytearray(log_file.read_bytes())
    pos = _batch_starts(log_file)[batch]
    base = int.from_bytes(data[pos : pos + 8], "big")
    data[pos : pos + 8] = (base + by).to_bytes(8, "big")
    log_file.write_bytes(bytes(data))
    return base


def _segments(path: Path, topic: str = "t") -> list[Path]:
    return sorted((path / f"{topic}-0").glob("*.log"))


def _offsets(path: Path, **kw: object) -> list[int]:
    with embedlog.open(path, upkeep=False, **kw) as log:  # type: ignore[arg-type]
        return [r.offset for r in log.read("t", 0)]


def _fill(path: Path, batches: int, config: dict[str, object] | None = None) -> None:
    """``batches`` batches of 3 records; every third record has a key of its own, the others
    share one (so compaction leaves gaps)."""
    with embedlog.open(path, upkeep=False) as log:
        log.create_topic("t", config=config or {})
        for b in range(batches):
            log.append_batch("t", [b"v%d-%d" % (b, j) for j in range(3)],
                             keys=[b"k%d" % b if j == 0 else b"hot" for j in range(3)],
                             timestamps=T0 + b)


def _read_until_damage(log: embedlog.Log) -> list[tuple[int, bytes | None]]:
    """The records a read hands out before it raises ``CorruptionError`` (it must raise)."""
    got: list[tuple[int, bytes | None]] = []
    with pytest.raises(embedlog.CorruptionError):
        for r in log.read("t", 0):
            got.append((r.offset, r.value))
    return got


def _written(offset: int) -> bytes:
    """The value ``_fill`` wrote at ``offset``."""
    return b"v%d-%d" % divmod(offset, 3)


def _crash(path: Path) -> None:
    """What an unclean shutdown leaves: no clean-shutdown marker."""
    (path / ".kafka_cleanshutdown").unlink()


# ---------------------------------------------------------------------- the rules


@dataclass
class _Seg:
    base_offset: int
    size: int = 1
    next_offset: int = 0


def test_bounds_follow_the_partition_listing() -> None:
    segs = [_Seg(0), _Seg(10), _Seg(25)]
    assert bounds_of(segs, dense_tail=True) == [
        Bounds(10, False), Bounds(25, False), Bounds(None, True)]
    assert bounds_of(segs[:2], dense_tail=False)[-1] == Bounds(None, False)
    assert bounds_of([], dense_tail=True) == []


def test_check_order_in_a_dense_segment() -> None:
    header = fmt.parse_header(fmt.encode_batch([b"a", b"b"], timestamps=0, base_offset=12))
    dense = Bounds(None, True)
    assert check_order(header, 12, 10, "x", 0, dense) == 14
    with pytest.raises(GapError, match="expected base offset 11"):
        check_order(header, 11, 10, "x", 0, dense)
    with pytest.raises(GapError):
        check_order(header, 13, 10, "x", 0, dense)
    assert check_order(header, None, 10, "x", 0, dense) == 14  # a walk from the middle
    assert check_order(header, 11, 10, "x", 0) == 14  # a gap elsewhere is legal
    with pytest.raises(embedlog.CorruptionError, match="next segment"):
        check_order(header, 11, 10, "x", 0, Bounds(13, False))


# ---------------------------------------------------------------------- embedlog's own topics


@pytest.mark.parametrize("batch", [-1, -2, 0])
def test_a_forward_base_offset_in_the_active_segment_is_cut_by_recovery(
        tmp_path: Path, batch: int) -> None:
    path = tmp_path / "log"
    _fill(path, 5)
    [active] = _segments(path)
    original = _move_base(active, batch, 1 << 19)
    _crash(path)
    # Recovery cuts the active segment at the damaged batch and keeps everything before it.
    assert _offsets(path) == list(range(original))
    with embedlog.open(path, upkeep=False) as log:
        assert log.end_offset("t", 0) == original
        assert log.append("t", b"next").offset == original


def test_a_read_only_view_refuses_a_forward_base_offset_in_the_active_segment(
        tmp_path: Path) -> None:
    path = tmp_path / "log"
    _fill(path, 5)
    [active] = _segments(path)
    _move_base(active, -1, 1 << 19)
    with pytest.raises(embedlog.CorruptionError, match="without gaps"):
        _offsets(path, read_only=True)


def test_verify_reports_a_gap_in_the_active_segment(tmp_path: Path) -> None:
    path = tmp_path / "log"
    _fill(path, 5)
    assert verify_path(str(path)).healthy
    [active] = _segments(path)
    _move_base(active, -1, 1 << 19)
    report = verify_path(str(path))
    assert not report.healthy
    assert any("without gaps" in p.message for p in report.problems)


def test_a_forward_base_offset_in_a_sealed_segment_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "log"
    _fill(path, 12, {"segment.bytes": 300})
    sealed = _segments(path)[0]
    assert len(_segments(path)) > 2 and len(_batch_starts(sealed)) >= 2
    for batch, by in ((-1, 1), (0, 1), (0, 2), (1, 1)):
        backup = sealed.read_bytes()
        _move_base(sealed, batch, by)
        for crash in (False, True):
            if crash:
                _crash(path)
                (path / "recovery-point-offset-checkpoint").unlink()  # re-validate everything
            with embedlog.open(path, read_only=True) as log:
                got = _read_until_damage(log)
            # Every record handed out before the damage is the one written at its offset.
            assert got == [(o, _written(o)) for o, _ in got]
            with embedlog.open(path, upkeep=False) as log:
                # Never cut: the partition is quarantined, or the read reaches the damage.
                if not log.quarantined():
                    got = _read_until_damage(log)
                    assert got == [(o, _written(o)) for o, _ in got]
        sealed.write_bytes(backup)
        assert _offsets(path) == list(range(36))


def test_recovery_cuts_a_segment_reaching_into_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "log"
    _fill(path, 12, {"segment.bytes": 300})
    logs = _segments(path)
    # Crash between a roll and its manifest: the segment before the active one is not sealed.
    (path / "t-0" / "embedlog.segments").unlink()
    os.remove(path / "recovery-point-offset-checkpoint")
    _crash(path)
    second = int(logs[1].stem)
    _move_base(logs[0], -1, 1)  # now reaches the next segment's base offset
    with embedlog.open(path, upkeep=False) as log:
        got = [r.offset for r in log.read("t", 0)]
    assert got == list(range(got[-1] + 1)) and got[-1] < second - 1


# ---------------------------------------------------------------------- where gaps stay legal


def test_a_compacted_topic_keeps_its_cleaned_gaps_and_checks_its_active_segment(
        tmp_path: Path) -> None:
    path = tmp_path / "log"
    _fill(path, 30, {"cleanup.policy": "compact", "segment.bytes": 400,
                     "min.cleanable.dirty.ratio": 0.01})
    with embedlog.open(path, upkeep=False) as log:
        log.compact("t")
        kept = [(r.offset, r.value) for r in log.read("t", 0)]
    offsets = [o for o, _ in kept]
    assert offsets != list(range(offsets[0], offsets[-1] + 1))  # the cleaner left gaps
    # After a crash with no recovery point every segment is validated again: the gaps the
    # cleaner left are legal.
    _crash(path)
    (path / "recovery-point-offset-checkpoint").unlink()
    with embedlog.open(path, upkeep=False) as log:
        assert [(r.offset, r.value) for r in log.read("t", 0)] == kept
    with embedlog.open(path, read_only=True) as log:
        assert [(r.offset, r.value) for r in log.read("t", 0)] == kept
    # The active segment is never cleaned: a forward base offset there is damage.
    active = _segments(path)[-1]
    original = _move_base(active, -1, 1 << 19)
    _crash(path)
    with embedlog.open(path, upkeep=False) as log:
        assert [(r.offset, r.value) for r in log.read("t", 0)] == [
            (o, v) for o, v in kept if o < original]


def test_an_adopted_kafka_topic_keeps_kafka_rules_after_embedlog_json(tmp_path: Path) -> None:
    path = tmp_path / "kafka"
    (path / "t-0").mkdir(parents=True)
    bases = [0, 3, 50, 104]
    (path / "t-0" / f"{0:020d}.log").write_bytes(b"".join(
        fmt.encode_batch([b"a", b"b", b"c"], timestamps=T0, base_offset=b) for b in bases))
    expected = [b + j for b in bases for j in range(3)]
    with embedlog.open(path, adopt=True, upkeep=False) as log:
        log.create_topic("mine")  # writes embedlog.json: the folder now looks like embedlog's
    doc = json.loads((path / "embedlog.json").read_text())
    assert doc["topics"]["mine"]["dense"] is True and "dense" not in doc["topics"]["t"]
    _crash(path)
    assert _offsets(path) == expected
    assert _offsets(path, read_only=True) == expected


def test_the_dense_flag_of_embedlog_json() -> None:
    doc = {"version": 1, "topics": {"a": {"partitions": 1, "dense": True},
                                     "b": {"partitions": 2}}}
    dense: set[str] = set()
    assert set(parse_metadata(json.dumps(doc).encode(), dense=dense)) == {"a", "b"}
    assert dense == {"a"}
    doc["topics"]["b"]["dense"] = "yes"  # type: ignore[index]
    with pytest.raises(embedlog.CorruptionError, match="dense flag"):
        parse_metadata(json.dumps(doc).encode())
