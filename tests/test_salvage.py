"""A damaged sealed segment quarantines its partition only, and ``embedlog recover
--truncate-damaged`` salvages it: every valid batch kept, damaged bytes moved to lost+found,
losses reported, the log healthy again."""

from __future__ import annotations

import json
import pathlib

import pytest
from click.testing import CliRunner

import embedlog
from embedlog.cli import cli
from embedlog.naming import LOST_FOUND_DIR

N = 120


def build(path: pathlib.Path) -> list[bytes]:
    values = [b"value-%04d" % i * 5 for i in range(N)]
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t", config={"segment.bytes": 1500, "index.interval.bytes": 100})
        log.create_topic("u", 2)
        for i, v in enumerate(values):
            log.append("t", v, key=b"k%d" % (i % 7), timestamp=1000 + i)
            log.append("u", v, partition=i % 2)
    return values


def sealed(path: pathlib.Path, i: int = 1) -> pathlib.Path:
    segs = sorted((path / "t-0").glob("*.log"))
    assert len(segs) > 3
    return segs[i]


def batches(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of each batch of a segment's bytes."""
    out, pos = [], 0
    while pos < len(data):
        size = 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
        out.append((pos, size))
        pos += size
    return out


def base_of(seg: pathlib.Path) -> int:
    return int(seg.name.split(".")[0])


def recover(path: pathlib.Path, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["recover", str(path), *args], prog_name="embedlog")
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result.output


def test_truncated_sealed_segment_quarantines_only_its_partition(tmp_path: pathlib.Path
                                                                  ) -> None:
    path = tmp_path / "log"
    values = build(path)
    seg = sealed(path)
    data = seg.read_bytes()
    cut = batches(data)[3][0]  # at a batch boundary: invisible to CRCs
    seg.write_bytes(data[:cut])
    next_base = base_of(sorted((path / "t-0").glob("*.log"))[2])
    first_lost = base_of(seg) + 3
    with embedlog.open(path, durability="fsync") as log:
        damage = log.quarantined()
        assert list(damage) == [embedlog.TopicPartition("t", 0)]
        assert "sealed segment" in str(damage[embedlog.TopicPartition("t", 0)])
        # other partitions append and read normally
        for p in (0, 1):
            md = log.append("u", b"more", partition=p)
            assert [r.value for r in log.read("u", p, md.offset)] == [b"more"]
        # the damaged partition reads up to the damage
        assert [r.value for r in log.read("t", 0)] == values[:first_lost]
        with pytest.raises(embedlog.PartitionQuarantinedError, match="embedlog recover") as info:
            log.append("t", b"x", key=b"k")
        assert "t-0" in str(info.value) and isinstance(info.value, embedlog.CorruptionError)
        with pytest.raises(embedlog.PartitionQuarantinedError):
            log.delete_records("t", 0, 1)
        log.enforce_retention()
        log.flush()
    assert seg.read_bytes() == data[:cut]  # nothing was changed behind the user's back
    # still quarantined on the next open: the damage is never papered over
    with embedlog.open(path) as log:
        assert list(log.quarantined()) == [embedlog.TopicPartition("t", 0)]

    out = recover(path, code=3)  # a dry run reports and changes nothing
    assert f"t-0: offsets {first_lost}..{next_base - 1} lost" in out
    assert seg.read_bytes() == data[:cut]
    doc = json.loads(recover(path, "--truncate-damaged", "--json"))
    assert [(x["partition"], x["first_offset"], x["last_offset"]) for x in doc["losses"]] == [
        ("t-0", first_lost, next_base - 1)]
    assert doc["losses"][0]["bytes"] == len(data) - cut

    with embedlog.open(path) as log:
        assert log.quarantined() == {}
        got = [(r.offset, r.value) for r in log.read("t", 0)]
        assert got == [(o, values[o]) for o in range(N) if not first_lost <= o < next_base]
        md = log.append("t", b"after", key=b"k")
        assert md.offset == N
    assert recover(path).strip() == "nothing is damaged"
    result = CliRunner().invoke(cli, ["verify", str(path)], prog_name="embedlog")
    assert result.exit_code == 0, result.output


def test_bad_crc_in_a_sealed_segment_keeps_every_valid_batch(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    values = build(path)
    (path / ".kafka_cleanshutdown").unlink()
    (path / "recovery-point-offset-checkpoint").unlink()  # re-validate everything
    seg = sealed(path)
    data = bytearray(seg.read_bytes())
    pos, size = batches(bytes(data))[2]
    data[pos + size - 2] ^= 0x01  # inside the records: the CRC catches it
    seg.write_bytes(bytes(data))
    lost = base_of(seg) + 2
    with embedlog.open(path) as log:
        assert list(log.quarantined()) == [embedlog.TopicPartition("t", 0)]
        got = []
        with pytest.raises(embedlog.CorruptionError):
            for r in log.read("t", 0):
                got.append(r.value)
        assert got == values[:lost]
        assert log.append("u", b"fine", partition=0).offset == N // 2
    out = recover(path, "--truncate-damaged")
    assert f"t-0: offsets {lost}..{lost} lost ({size} bytes, moved to {LOST_FOUND_DIR}/t-0/" in out
    moved = list((path / LOST_FOUND_DIR / "t-0").iterdir())
    assert [m.read_bytes() for m in moved] == [bytes(data[pos : pos + size])]
    with embedlog.open(path) as log:
        assert log.quarantined() == {}
        assert [r.offset for r in log.read("t", 0)] == [o for o in range(N) if o != lost]
        assert log.append("t", b"x", key=b"k").offset == N


def test_missing_sealed_segment_is_reported_with_its_offsets(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    values = build(path)
    segs = sorted((path / "t-0").glob("*.log"))
    gone = segs[2]
    lo, hi = base_of(gone), base_of(segs[3])
    gone.unlink()
    with embedlog.open(path) as log:
        assert [r.value for r in log.read("t", 0)] == values[:lo]
        with pytest.raises(embedlog.PartitionQuarantinedError, match="missing"):
            log.append("t", b"x", key=b"k")
    assert f"t-0: offsets {lo}..{hi - 1} lost" in recover(path, "--truncate-damaged")
    with embedlog.open(path) as log:
        assert log.quarantined() == {}
        assert [r.offset for r in log.read("t", 0)] == [o for o in range(N) if not lo <= o < hi]


def test_quarantined_log_is_never_closed_clean(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    build(path)
    seg = sealed(path)
    seg.write_bytes(seg.read_bytes()[:-1])
    with embedlog.open(path):
        pass
    assert not (path / ".kafka_cleanshutdown").exists()
    with embedlog.open(path) as log:  # and the checkpoints it wrote still describe the damage
        assert list(log.quarantined()) == [embedlog.TopicPartition("t", 0)]
