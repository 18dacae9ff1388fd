"""atheris target: the compiled codec core against the pure-Python decoder and encoder.

Each input is a record batch (the first byte picks CRC fix-up, a record count lie and a
point-read range); both implementations decode it and must return the same columns, values,
headers and Record objects, or raise the same CorruptBatchError message; so must the batch
placed after a few bytes of a larger read (the compiled core's one call for a whole stored batch,
``decode_stored``), which is also called with lying positions and sizes. The compiled Arrow
sink's one pass over the batch (``ArrowSink.append``) must append exactly the rows of the
decoder's columns, or nothing when the decoder refuses the batch. The records section read as a
point read's run of records (``run_records``, a record count from the first byte) must give
the same records or error with either implementation; so must the same run read back from a
file by the compiled point read (``point_run``: the file's identity checked, one ``pread``,
the records built) and by its pure twin, given the file's identity or another one. The input
read as int64s is also the point-read memo's search by offset: the compiled ``floor_index`` of
values in and around them must be its pure twin's.

The same input, read as ``append_batch`` arguments (values, keys and timestamps of every
kind, good and bad), goes to the encoder: ``encode_batch`` by the core (its listed-timestamps
pass, ``encode_listed``) must give the pure encoder's bytes or error, and the strict encoder
of unchecked arguments (``encode_for_append`` with ``STRICT``) must encode exactly the plain
arguments, to those bytes, and give None for anything else. Coverage guidance comes from the
instrumented pure code. Skips (exit 0 at once) when the core is not built.
"""

import os
import sys
from array import array
from collections.abc import Callable

import atheris  # type: ignore[import-untyped]
import crc32c
import numpy  # imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.errors import CorruptBatchError
    from embedlog.records import Record
    from embedlog.segment import _native, decode, encode, point_memo, point_read
    from embedlog.segment import format as fmt
    from embedlog.segment.crc_memo import identity
    from embedlog.segment.run_records import run_records

try:
    from embedlog.segment import _ccodec
except ImportError:
    _ccodec = None

MAX_BATCH = 1 << 20


def _decode(buf: bytes, first: int, count: int | None, pos: int = 0) -> object:
    try:
        header = fmt.next_batch(buf, pos, verify=True, max_batch_size=MAX_BATCH)
        if header is None:
            return None
        r = fmt.decode_records(buf, pos, header, max_decompressed=MAX_BATCH, first=first,
                               count=count)
        return (r.offsets.tolist(), r.timestamps.tolist(), r.key_pos.tolist(),
                r.key_len.tolist(), r.value_pos.tolist(), r.value_len.tolist(), r.keys(),
                r.values(), r.headers, r.records("t", 0, header.timestamp_type))
    except CorruptBatchError as e:
        return (type(e), str(e))


def _stored(buf: bytes, lead: int, size_lie: int) -> None:
    """The batch behind ``lead`` bytes of a read decodes as it does alone; ``decode_stored``
    called with a position and size off by ``lead`` / ``size_lie`` either refuses them or
    decodes exactly the section they name."""
    read = bytes(lead) + buf
    try:
        header = fmt.next_batch(read, lead, verify=True, max_batch_size=MAX_BATCH)
    except CorruptBatchError:
        return
    if header is None:
        return
    got = _decode(read, 0, None, lead)
    alone = _decode(buf, 0, None)
    if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], str):  # an error
        got = (got[0], got[1].replace(f"(byte {lead})", "(byte 0)"))
    if got != alone:
        raise AssertionError(f"at byte {lead}: {got!r} != alone {alone!r}")
    n = header.records_count
    m = n if n <= len(read) else 0  # a lying count is refused before the columns are sized
    cols = numpy.empty((4, m), numpy.int64), numpy.empty((2, m), numpy.int32)
    pos, size = lead - (size_lie & 3), header.size + (size_lie >> 2) - 4
    try:
        data, _ = _ccodec.decode_stored(read, pos, size, n, header.base_offset,
                                        header.base_timestamp, header.max_timestamp,
                                        header.last_offset_delta, False, *cols)
    except (ValueError, IndexError, CorruptBatchError):
        return
    if data != read[pos + fmt.HEADER_SIZE : pos + size]:
        raise AssertionError("decode_stored decoded another section than it was given")


def _sink_rows(buf: bytes, fused: bool) -> object:
    """The Arrow sink's rows of the batch: from ``append`` (``fused``; None when it leaves the
    batch to the decoder) or from the decoder's columns (None when it raises)."""
    sink = _ccodec.ArrowSink(True, True)
    try:
        header = fmt.next_batch(buf, 0, verify=False, max_batch_size=MAX_BATCH)
        if header is None:
            return None
        if fused:
            data, start, end = decode.records_section(buf, 0, header,
                                                      max_decompressed=MAX_BATCH)
            if sink.append(data, start, end, header.records_count, header.base_offset,
                           header.base_timestamp, header.max_timestamp,
                           header.last_offset_delta,
                           bool(header.attributes & fmt.TIMESTAMP_TYPE_MASK)) < 0:
                return None
        else:
            r = fmt.decode_records(buf, 0, header, max_decompressed=MAX_BATCH)
            sink.extend(r.data, r.offsets, r.timestamps, r.key_pos, r.key_len, r.value_pos,
                        r.value_len)
    except CorruptBatchError:
        return None
    return sink.finish()


class _Bytes(bytes):
    pass


def _item(kind: int, raw: bytes) -> object:
    """A value or key of one of the kinds append_batch may be given."""
    made = (None, raw, bytearray(raw), memoryview(raw), memoryview(raw)[::2], raw.hex(),
            len(raw), _Bytes(raw))
    return made[kind % len(made)]


def _stamp(kind: int, raw: bytes) -> object:
    value = int.from_bytes(raw.ljust(8, b"\0"), "big", signed=True)
    made = (value, abs(value), kind, value + 2**64, True, float(kind), str(kind), None)
    return made[kind % len(made)]


def _arguments(data: bytes) -> tuple[list[object], list[object] | None, object]:
    """values, keys (None or one per value) and timestamps (a list, a tuple, one value, or a
    list of the wrong length) read from the input."""
    n, form, pos = data[0] % 9, data[1], 2
    items: list[object] = []
    while len(items) < n * (1 + (form & 1)) and pos + 2 <= len(data):
        size = data[pos + 1] % 24
        items.append(_item(data[pos], data[pos + 2:pos + 2 + size]))
        pos += 2 + size
    n = len(items) // (1 + (form & 1))
    values, keys = items[:n], (items[n:2 * n] if form & 1 else None)
    stamps = []
    for _ in range(n + ((form >> 3) & 1)):
        stamps.append(_stamp(data[pos] if pos < len(data) else 0, data[pos + 1:pos + 9]))
        pos += 9
    shape = (form >> 1) & 3
    return values, keys, (stamps if shape < 2 else tuple(stamps) if shape == 2
                          else stamps[0] if stamps else 0)


def _plain(item: object) -> bool:
    if type(item) is memoryview:
        return item.c_contiguous
    return item is None or type(item) is bytes or type(item) is bytearray


def _outcome(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as e:
        return (type(e), str(e))


def check_encoder(data: bytes) -> None:
    values, keys, stamps = _arguments(data)
    items = values + (keys or [])
    column = list(stamps) if isinstance(stamps, list | tuple) else [stamps] * len(values)
    plain = bool(values) and all(_plain(i) for i in items) and len(column) == len(values) and all(
        type(t) is int and 0 <= t < 2**63 for t in column)
    saved = _native.CORE
    try:
        _native.CORE = _ccodec
        strict = encode.encode_for_append(values, keys, None, stamps, encode.PLAIN, None,
                                          encode.STRICT)  # type: ignore[arg-type]
        if all(_plain(i) for i in items):  # the encoders' (shared) refusals of other items aside
            got_c = _outcome(lambda: fmt.encode_batch(values, keys=keys, timestamps=stamps))
            _native.CORE = None
            got_py = _outcome(lambda: fmt.encode_batch(values, keys=keys, timestamps=stamps))
            if got_c != got_py:
                raise AssertionError(f"compiled encoder {got_c!r} != pure {got_py!r}")
            if plain and strict != got_py:
                raise AssertionError(f"strict encoder {strict!r} != {got_py!r}")
    finally:
        _native.CORE = saved
    if (strict is not None) != plain:
        raise AssertionError(f"strict encoder gave {strict!r} for {values!r}, {keys!r}, "
                             f"{stamps!r}")


def _run(buf: bytes, n: int) -> object:
    """The bytes after the header as a run of ``n`` records of that batch (run_records)."""
    try:
        header = fmt.parse_header(buf, 0)
        return run_records(buf[fmt.HEADER_SIZE:], n, header, 0, "t", 0)
    except CorruptBatchError as e:
        return (type(e), str(e))


_FILE: list[int] = []  # one scratch file (memfd), rewritten by each input


def _point(buf: bytes, n: int, lie: int) -> object:
    """The records section read back from a file as a point read's run of ``n`` records
    (None: refused), with the file's identity or (``lie``) another one."""
    try:
        header = fmt.parse_header(buf, 0)
    except CorruptBatchError:
        return "no header"
    section = buf[fmt.HEADER_SIZE:]
    if not section:
        return "empty"
    if not _FILE:
        _FILE.append(os.memfd_create("point-run"))
    fd = _FILE[0]
    os.ftruncate(fd, 0)
    os.pwrite(fd, section, 0)
    ident = identity(fd)
    if lie:
        ident = (ident[0], ident[1], ident[2] + lie, ident[3])
    try:
        core = _native.CORE
        got = (point_read.point_run(fd, ident, 0, len(section)) if core is None else
               core.point_run(fd, ident, 0, len(section), n, point_memo.header_fields(header),
                              Record, "t", 0))
        if got is None or isinstance(got, list):
            return got
        return run_records(got, n, header, 0, "t", 0)
    except CorruptBatchError as e:
        return (type(e), str(e))


def _check_point(buf: bytes, n: int, lie: int, run: object) -> None:
    saved = _native.CORE
    try:
        _native.CORE = _ccodec
        point_c = _point(buf, n, lie)
        _native.CORE = None
        point_py = _point(buf, n, lie)
    finally:
        _native.CORE = saved
    if point_c != point_py:
        raise AssertionError(f"point run: compiled {point_c!r} != pure {point_py!r}")
    if isinstance(point_c, str):
        return
    if point_c != (None if lie else run):
        raise AssertionError(f"point run {point_c!r} != run {run!r}")


def _check_floor(data: bytes) -> None:
    """The input's int64s (at most 64), sorted: the memo's search by offset for values in and
    around them, compiled against pure."""
    words = [int.from_bytes(data[i:i + 8], "big", signed=True) for i in range(0, len(data) - 7, 8)]
    bases = array("q", sorted(words[:64]))
    probe = int.from_bytes(data[-8:].rjust(8, b"\0"), "little", signed=True)
    for v in (probe, *bases[:8], *(b - 1 for b in bases[:8] if b > -(2**63))):
        if _ccodec.floor_index(bases, v) != point_memo.floor_index(bases, v):
            raise AssertionError(f"floor_index({bases!r}, {v}) differs")


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    _check_floor(data)
    check_encoder(data)
    mode, buf = data[0], bytearray(data[1:])
    first, count = (mode >> 2) & 7, (None if mode & 0x20 else (mode >> 6))
    if len(buf) >= fmt.HEADER_SIZE:
        if mode & 2:
            count_lie = (int.from_bytes(buf[57:61], "big") + 1) & 0xFFFFFFFF
            buf[57:61] = count_lie.to_bytes(4, "big")
        if mode & 1 or mode & 2:
            buf[17:21] = crc32c.crc32c(bytes(buf[21:])).to_bytes(4, "big")
    saved = _native.CORE
    try:
        _native.CORE = _ccodec
        got_c = _decode(bytes(buf), first, count)
        _native.CORE = None
        got_py = _decode(bytes(buf), first, count)
        _native.CORE = _ccodec
        _stored(bytes(buf), mode & 7, mode >> 3)
    finally:
        _native.CORE = saved
    if got_c != got_py:
        raise AssertionError(f"compiled {got_c!r} != pure {got_py!r}")
    if len(buf) >= fmt.HEADER_SIZE:
        n = max(0, int.from_bytes(buf[57:61], "big") - (mode >> 5))  # the count, or fewer
        try:
            _native.CORE = _ccodec
            run_c = _run(bytes(buf), n)
            _native.CORE = None
            run_py = _run(bytes(buf), n)
        finally:
            _native.CORE = saved
        if run_c != run_py:
            raise AssertionError(f"run: compiled {run_c!r} != pure {run_py!r}")
        _check_point(bytes(buf), n, (mode >> 4) & 1, run_c)
    fused = _sink_rows(bytes(buf), True)
    if fused is not None and fused != _sink_rows(bytes(buf), False):
        raise AssertionError(f"sink appended {fused!r}, not the decoded rows")


def main() -> None:
    if _ccodec is None:
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
