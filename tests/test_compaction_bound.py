"""A batch the cleaner encodes afresh (a delete horizon set on it makes its records' timestamp
deltas larger) may pass what a read decompresses (:data:`embedlog.segment.codecs.
MAX_DECOMPRESSED`); the cleaner then splits it into batches that stay within it, with the
same records, offsets and producer fields, instead of failing the pass with the encoder's
``SectionTooLargeError``. The bound is made small here (the real one is 64 MiB)."""

from __future__ import annotations

import pathlib

import pytest

import embedlog
from embedlog.segment import codecs, encode
from embedlog.segment import format as fmt

_N = 200


def _stored(folder: pathlib.Path) -> list[tuple[fmt.BatchHeader, int]]:
    """(header, decompressed records bytes) of each batch of the partition's segments."""
    out = []
    for path in sorted(folder.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + fmt.HEADER_SIZE <= len(data):
            h = fmt.parse_header(data, pos)
            body = data[pos + fmt.HEADER_SIZE: pos + h.size]
            if h.compression:
                body = codecs.decompress(codecs.Compression(h.compression), body,
                                         max_size=codecs.MAX_DECOMPRESSED)
            out.append((h, len(body)))
            pos += h.size
    return out


@pytest.mark.parametrize("margin", [1, None])
def test_a_reencoded_batch_past_the_bound_is_split(tmp_path: pathlib.Path, margin: int | None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``margin``: the bound is that many bytes above the stored records (``None``: below
    any one record, which is then stored alone, uncompressed, as the write path does)."""
    config = {"cleanup.policy": "compact", "compression.type": "gzip",
              "delete.retention.ms": str(24 * 3600 * 1000)}
    with embedlog.open(tmp_path / "log", upkeep=False) as log:
        log.create_topic("t", config=config)
        keys = [b"k%d" % i for i in range(_N)]
        values: list[bytes | None] = [b"v%d" % i * 20 for i in range(_N)]
        values[7] = None  # a tombstone kept by the first pass: it gets a delete horizon
        log.append_batch("t", values, keys=keys, partition=0, timestamps=1_000)
        log.roll("t", 0)
        folder = tmp_path / "log" / "t-0"
        [(before, size)] = _stored(folder)
        assert before.compression and not before.has_delete_horizon
        bound = 1 if margin is None else size + margin  # the horizon adds a few bytes: past
        monkeypatch.setattr(encode, "MAX_DECOMPRESSED", bound)
        log.compact("t", now_ms=2_000)
        after = [(h, n) for h, n in _stored(folder) if h.records_count]
        assert len(after) == (_N if margin is None else 2)
        assert all(n <= bound or not h.compression for h, n in after)
        codec = 0 if margin is None else before.compression
        assert all(h.has_delete_horizon and h.compression == codec for h, _ in after)
        assert after[0][0].base_offset == 0 and after[-1][0].last_offset == before.last_offset
        got = list(log.read("t", 0, 0, max_records=_N))
        assert [r.offset for r in got] == list(range(_N))
        assert [r.key for r in got] == keys and [r.value for r in got] == values
        assert all(r.timestamp == 1_000 for r in got)
