"""atheris target: the cleaner's compiled record walks against the decoded columns path.

Each input is a run of record batches in one buffer (the first byte picks CRC fix-ups, the
first dirty offset, the end offset and the time). The uncompressed data batches among them go
through ``map_batches`` and ``filter_batches`` (compaction/walk.py) and, one by one, through the
decoded columns path of the cleaner (compaction/columns.py, cleaner.py, mapping.py): a batch the
walk reads must decode, one it leaves must be one it cannot read (damage: the decoder raises; or
headers), the key map they build must be the same array for array, and every batch the walk
reads must come out of the rewrite as the same bytes (or be dropped the same way) with the same
statistics. Skips (exit 0 at once) when the compiled key map is not built.
"""

import sys

import atheris  # type: ignore[import-untyped]
import crc32c
import numpy  # imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.compaction import _native, walk
    from embedlog.compaction.cleaner import _Batch, _Pass
    from embedlog.compaction.columns import decode_batches
    from embedlog.compaction.digest import Digester, padded
    from embedlog.compaction.offset_map import OffsetMap
    from embedlog.compaction.stats import CompactionStats
    from embedlog.errors import CorruptBatchError
    from embedlog.segment import format as fmt

MAX_BATCH = 1 << 16


def _batches(buf: bytes) -> list[tuple[bytes, int, fmt.BatchHeader]]:
    out, pos = [], 0
    while pos + fmt.HEADER_SIZE <= len(buf):
        try:
            h = fmt.next_batch(buf, pos, verify=False, max_batch_size=MAX_BATCH)
        except CorruptBatchError:
            break
        if h is None:
            break
        out.append((buf, pos, h))
        pos += h.size
    return out


class _NoProducers:
    @staticmethod
    def keeps_header(h: fmt.BatchHeader) -> bool:
        return h.producer_id == 7


class _Config:
    delete_retention_ms = 86_400_000


def _pass(omap: OffsetMap, digester: Digester, mode: int, first_dirty: int) -> _Pass:
    """A cleaning pass's decision state without a partition."""
    p = _Pass.__new__(_Pass)
    value = omap.arrays()[2]  # the survivors, sorted here: atheris's traced comparisons of the
    p.map, p.digester, p.survivors = omap, digester, numpy.sort(value[value >= 0])  # map grow
    p.first_dirty, p.end_offset = first_dirty, first_dirty + (mode >> 4) * 3
    p.first_uncleanable = p.end_offset + 5
    p.now = 1_700_000_000_000 + (mode & 3) * 86_400_000
    p.stats = CompactionStats()
    p.plog = _NoProducers()  # type: ignore[assignment]
    p.config = _Config()  # type: ignore[assignment]
    return p


def _map_reference(omap: OffsetMap, digester: Digester, raw: memoryview, h: fmt.BatchHeader,
                   first_dirty: int) -> bool:
    """The keys of one batch put in ``omap`` from its decoded columns; False (nothing put)
    when it does not decode or has headers: the compiled walk leaves exactly those."""
    try:
        r = decode_batches([(raw, h)]).records
    except CorruptBatchError:
        return False
    if r.headers is not None:
        return False
    mapped = numpy.flatnonzero((r.offsets >= first_dirty) & (r.key_len >= 0))
    lane0, lane1 = digester.digests(padded(r.data), r.key_pos[mapped],
                                    r.key_len[mapped].astype(numpy.int64))
    omap.put(lane0, lane1, r.offsets[mapped])
    return True


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, buf = data[0], bytearray(data[1:])
    for _, pos, h in _batches(bytes(buf)) if mode & 4 else []:
        end = pos + h.size
        buf[pos + 17 : pos + 21] = crc32c.crc32c(bytes(buf[pos + 21 : end])).to_bytes(4, "big")
    run = [b for b in _batches(bytes(buf)) if walk.readable(b[2])]
    if not run:
        return
    first_dirty = run[0][2].base_offset + ((mode >> 3) & 1) * 2
    digester = Digester(mode)
    size = len(buf) // 7 + 1  # a map just large enough: sized to the input, not to its budget
    got, want = (OffsetMap(1 << 20, initial_entries=size) for _ in range(2))
    lying = [b for b in run if b[2].records_count * 7 > b[2].size - fmt.HEADER_SIZE]
    for item in lying:  # more records than fit: refused, the map untouched (no room asked)
        added, left = _native.CORE.map_batches(item[0], walk._table([item], None), 0,
                                               *digester.seeds, *got.arrays())
        if (added, left) != (0, [0]):
            raise AssertionError(f"a batch of {item[2].records_count} records was read")
    run = [b for b in run if b not in lying]
    if not run:
        return
    left = walk.map_run(got, digester, run, first_dirty)
    for item in run:
        buf_, pos, h = item
        plain = _map_reference(want, digester, memoryview(buf_)[pos : pos + h.size], h,
                               first_dirty)
        if plain == (item in left):
            raise AssertionError(f"batch at {pos}: decodes plainly {plain}, walk left it out "
                                 f"{item in left}")
    for a, b in zip(got.arrays(), want.arrays(), strict=True):
        if a.tolist() != b.tolist():
            raise AssertionError("the key maps differ")
    _compare_rewrite(run, left, got, digester, mode, first_dirty)


def _outcome(p: _Pass, b: _Batch, decision: object) -> object:
    """The batch bytes ``p`` makes of ``b``, None, or the error raised (the same in both)."""
    try:
        made = p._data(b, decision)  # type: ignore[arg-type]
    except Exception as e:  # a batch the re-encoder refuses (offset deltas out of order)
        return type(e), str(e)
    return None if made is None else bytes(made)


def _compare_rewrite(run: list[tuple[bytes, int, fmt.BatchHeader]], left: list[object],
                     omap: OffsetMap, digester: Digester, mode: int, first_dirty: int) -> None:
    compiled, reference = _pass(omap, digester, mode, first_dirty), _pass(omap, digester, mode,
                                                                          first_dirty)
    outcomes, gone = walk.filter_run(run, omap=omap, digester=digester,
                                     survivors=compiled.survivors, first_dirty=first_dirty,
                                     end_offset=compiled.end_offset, now=compiled.now)
    compiled.stats.tombstones_removed += gone
    for item, outcome in zip(run, outcomes, strict=True):
        if (outcome.how == walk.NOT_READ) != (item in left):
            raise AssertionError("the map and the rewrite read different batches")
        if outcome.how == walk.NOT_READ:
            continue
        buf, pos, h = item
        b = _Batch(buf, pos, memoryview(buf)[pos : pos + h.size], h)
        keep: dict[int, object] = {}
        reference._decide_decoded([b], keep)  # type: ignore[arg-type]
        want = _outcome(reference, b, keep[id(b)])
        have = _outcome(compiled, b, outcome)
        if have != want:
            raise AssertionError(f"batch at {pos}: compiled {have!r} != decoded {want!r}")
    if compiled.stats != reference.stats:
        raise AssertionError(f"stats {compiled.stats} != {reference.stats}")


def main() -> None:
    if _native.CORE is None:
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
