"""Point reads answered from remembered record ends (embedlog.segment.point_memo): the records
handed out are exactly those of a read of the whole batch, for every kind of batch, and an entry
is never used for other bytes than those it was made from."""

from __future__ import annotations

import os
import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.errors import CorruptBatchError
from embedlog.segment import decode as dec
from embedlog.segment import format as fmt
from embedlog.segment import point_memo
from embedlog.segment.header import HEADER_SIZE


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    point_memo.clear()


def _fill(log: embedlog.Log, rng: random.Random, batches: int) -> None:
    """Batches of every kind: dense uncompressed ones (remembered), with nulls, with record
    headers, compressed, small, and transaction markers between them."""
    log.create_topic("t", config={"segment.bytes": 64 * 1024})
    for b in range(batches):
        n = rng.choice([1, 5, 16, 40, 120])
        kind = rng.choice(["plain", "plain", "nulls", "headers", "zstd"])
        values = [None if kind == "nulls" and i % 3 == 0 else rng.randbytes(rng.randint(0, 300))
                  for i in range(n)]
        keys = [None if i % 4 == 0 else b"k%d" % i for i in range(n)]
        headers = [[("h", b"%d" % i)] if kind == "headers" and i % 2 else [] for i in range(n)]
        log.append_batch("t", values, keys=keys, headers=headers, partition=0,
                         compression="zstd" if kind == "zstd" else None)
        if b % 7 == 3:
            p = log.producer(transactional_id=f"x{b}")
            p.init_transactions()
            p.begin_transaction()
            p.send("t", b"in-txn", partition=0)
            p.commit_transaction() if b % 2 else p.abort_transaction()
            p.close()


def _written(folder: pathlib.Path, *batches: list[bytes]) -> pathlib.Path:
    """A log at ``folder`` whose topic ``t`` holds ``batches`` (one append each)."""
    with embedlog.open(folder) as log:
        log.create_topic("t")
        for values in batches:
            log.append_batch("t", values, partition=0)
    return folder


def _whole(log: embedlog.Log, end: int) -> dict[int, embedlog.Record]:
    return {r.offset: r for r in log.read("t", 0, 0, end_offset=end)}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_point_reads_equal_whole_reads_before_and_after_the_batch_is_remembered(
        tmp_path_factory: pytest.TempPathFactory, seed: int) -> None:
    rng = random.Random(seed)
    folder = tmp_path_factory.mktemp("memo") / "log"
    with embedlog.open(folder) as writer:
        _fill(writer, rng, 40)
        end = writer.end_offset("t", 0)
        probes = [(rng.randrange(end), rng.choice([1, 1, 2, 7, 200])) for _ in range(300)]
        for view in (writer, embedlog.open(folder, read_only=True)):
            whole = _whole(view, end)
            for _ in range(2):  # the second pass reads from remembered batches
                for offset, k in probes:
                    want = [whole[o] for o in sorted(whole) if o >= offset][:k]
                    assert list(view.read("t", 0, offset, max_records=k)) == want
            if view is not writer:
                view.close()
    assert len(point_memo._table) > 0  # the read-only view's sealed segments were remembered


def test_a_remembered_batch_is_read_with_one_small_pread(tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _written(tmp_path / "log", [b"%05d" % i * 20 for i in range(500)])
    reads = _spy_reads(monkeypatch)
    with embedlog.open(folder, read_only=True) as log:
        first = next(log.read("t", 0, 123, max_records=1))
        assert max(reads) > 50_000  # the first read takes the whole batch
        reads.clear()
        again = next(log.read("t", 0, 321, max_records=1))
        # one record: 100 B of value and 10 B of varints, attributes and headers count
        assert reads == [110]
    assert first.value == b"00123" * 20 and first.offset == 123
    assert again.value == b"00321" * 20 and again.offset == 321


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of every read of a ``.log`` from now on (``pread`` pins, then calls
    ``pread_pinned``; a point read's one call, the compiled ``point_run`` or its pure twin,
    reads itself)."""
    from embedlog.segment import _native, point_read
    from embedlog.segment.files import SegmentFiles
    reads: list[int] = []
    real = SegmentFiles.pread_pinned

    def pread(self: SegmentFiles, position: int, length: int) -> bytes:
        reads.append(length)
        return real(self, position, length)

    monkeypatch.setattr(SegmentFiles, "pread_pinned", pread)
    core, pure = _native.CORE, point_read.point_run

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(core, name)

        def point_run(self, fd: int, ident: object, start: int, length: int,
                      *rest: object) -> object:
            reads.append(length)
            return core.point_run(fd, ident, start, length, *rest)  # type: ignore[union-attr, arg-type]

    def pure_run(fd: int, ident: tuple[int, int, int, int], start: int, length: int
                 ) -> bytes | None:
        reads.append(length)
        return pure(fd, ident, start, length)

    if core is not None:
        monkeypatch.setattr(_native, "CORE", Spy())
    monkeypatch.setattr(point_read, "point_run", pure_run)
    return reads


def test_an_entry_is_not_used_once_the_file_changed(tmp_path: pathlib.Path) -> None:
    """A read-only view of a live segment: each append is a new file identity, and a segment
    object made after the file was replaced never sees the old object's entries."""
    folder = tmp_path / "log"
    with embedlog.open(folder) as log:
        log.create_topic("t")
        log.append_batch("t", [b"a%03d" % i for i in range(50)], partition=0)
        with embedlog.open(folder, read_only=True) as view:
            assert next(view.read("t", 0, 10, max_records=1)).value == b"a010"
            assert len(point_memo._table) == 1
            log.append_batch("t", [b"b%03d" % i for i in range(50)], partition=0)
            assert [r.value for r in view.read("t", 0, 45, max_records=10)] == (
                [b"a%03d" % i for i in range(45, 50)] + [b"b%03d" % i for i in range(5)])
            assert next(view.read("t", 0, 10, max_records=1)).value == b"a010"
    with embedlog.open(folder) as log:
        log.delete_topic("t")
        log.create_topic("t")
        log.append_batch("t", [b"c%03d" % i for i in range(50)], partition=0)
    with embedlog.open(folder, read_only=True) as view:
        assert next(view.read("t", 0, 10, max_records=1)).value == b"c010"


def test_the_memo_is_bounded(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(point_memo, "MEMO_RECORDS", 100)
    folder = _written(tmp_path / "log", *([b"%d-%d" % (b, i) for i in range(40)]
                                          for b in range(10)))
    with embedlog.open(folder, read_only=True) as view:
        for o in range(0, 400, 40):
            assert next(view.read("t", 0, o + 1, max_records=1)).value == b"%d-1" % (o // 40)
            assert point_memo._held[0] <= 100
        assert len(point_memo._table) == 2  # the two most recent batches


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=200)),
                          st.one_of(st.none(), st.binary(max_size=300))),
                min_size=point_memo.MIN_RECORDS, max_size=60))
def test_remembered_ends_are_the_record_length_chain(pairs: list[tuple[bytes | None,
                                                                       bytes | None]]) -> None:
    """The ends computed from the decoded values equal the chain of record lengths, and a run
    of records decoded alone equals the same records decoded with their batch."""
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    batch = fmt.encode_batch(values, keys=keys, base_offset=1000, timestamps=[5] * len(values))
    header = fmt.parse_header(batch, 0)
    whole = fmt.decode_records(batch, 0, header)
    key = (point_memo.new_owner(), (0, 0, 0, 0))
    point_memo.remember(key, 0, header, whole)
    entry = point_memo.get(key, 0)
    assert entry is not None
    starts, end = dec._walk(bytes(batch[HEADER_SIZE:]), len(values))
    assert entry.ends.tolist() == [*starts[1:], end]
    lo, hi = sorted(random.Random(len(values)).sample(range(len(values) + 1), 2))
    start, length = entry.span(lo, hi)
    run = fmt.decode_run(bytes(batch[start:start + length]), hi - lo, header, 0)
    assert run.records("t", 0, 0) == whole.slice(lo, hi).records("t", 0, 0)


def test_a_run_that_is_not_whole_records_is_corruption() -> None:
    batch = fmt.encode_batch([b"x" * 30] * 20, base_offset=0, timestamps=[1] * 20)
    header = fmt.parse_header(batch, 0)
    section = bytes(batch[HEADER_SIZE:])
    with pytest.raises(CorruptBatchError):
        fmt.decode_run(section[:-5], 20, header, 0)
    with pytest.raises(CorruptBatchError):
        fmt.decode_run(section + b"\0", 20, header, 0)


def test_the_writers_active_segment_is_not_remembered(tmp_path: pathlib.Path) -> None:
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        log.append_batch("t", [b"v%d" % i for i in range(50)], partition=0)
        assert next(log.read("t", 0, 7, max_records=1)).value == b"v7"
        assert not point_memo._table
    assert os.path.isdir(tmp_path / "log")


def test_a_fork_child_starts_with_an_empty_memo_and_a_free_lock(tmp_path: pathlib.Path) -> None:
    folder = _written(tmp_path / "log", [b"v%d" % i for i in range(50)])
    with embedlog.open(folder, read_only=True) as view:
        assert next(view.read("t", 0, 7, max_records=1)).value == b"v7"
    assert point_memo._table
    with point_memo._lock:  # held by this thread while the child is made
        pid = os.fork()
        if pid == 0:
            ok = not point_memo._table and point_memo._lock.acquire(timeout=5)
            if ok:
                point_memo._lock.release()
            with embedlog.open(folder, read_only=True) as view:
                ok = ok and next(view.read("t", 0, 9, max_records=1)).value == b"v9"
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_segment_with_nothing_remembered_takes_no_file_identity(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point reads of batches that cannot be remembered (compressed) cost the memo nothing:
    no fstat for the file identity, no lookup."""
    folder = tmp_path / "log"
    with embedlog.open(folder) as log:
        log.create_topic("t")
        for b in range(3):
            log.append_batch("t", [b"%d-%d" % (b, i) for i in range(40)], partition=0,
                             compression="zstd")
    from embedlog.segment.segment import Segment
    taken: list[int] = []
    real = Segment.read_identity

    def spy(self: Segment) -> point_memo.Key | None:
        taken.append(1)
        return real(self)

    monkeypatch.setattr(Segment, "read_identity", spy)
    with embedlog.open(folder, read_only=True) as view:
        for o in (5, 45, 85, 5):
            assert next(view.read("t", 0, o, max_records=1)).value == b"%d-%d" % (o // 40, o % 40)
    assert taken == [] and not point_memo._table


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_bounded_reads_answered_from_remembered_batches_equal_whole_reads(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        seed: int) -> None:
    """Reads with ``max_records`` and ``end_offset`` (across batch and segment ends, into
    transaction markers' offsets, below the log start), by the writer and by a view: the
    records (or the error) of a whole read, whether the remembered batch answered or not."""
    from embedlog import partition_read
    rng = random.Random(seed)
    answered: list[int] = []
    real = partition_read._remembered

    def spy(*args: object) -> list[embedlog.Record] | None:
        found = real(*args)  # type: ignore[arg-type]
        answered.append(found is not None)
        return found

    monkeypatch.setattr(partition_read, "_remembered", spy)
    folder = tmp_path_factory.mktemp("fast") / "log"
    with embedlog.open(folder) as writer:
        _fill(writer, rng, 30)
        cut = writer.delete_records("t", 0, rng.randrange(writer.end_offset("t", 0) // 3))
        end = writer.end_offset("t", 0)
        probes = [(rng.randrange(end + 1), rng.choice([1, 1, 1, 3, 50]),
                   rng.choice([None, None, rng.randrange(end + 5)])) for _ in range(250)]
        probes += [(rng.randrange(cut), 1, None)] if cut else []
        for view in (writer, embedlog.open(folder, read_only=True)):
            whole = {r.offset: r for r in view.read("t", 0, cut, end_offset=end)}
            for _ in range(2):
                for offset, k, stop in probes:
                    got = _outcome(view, offset, k, stop)
                    if offset < cut:
                        assert got[0] == "OffsetOutOfRangeError"
                        continue
                    want = [whole[o] for o in sorted(whole)
                            if o >= offset and (stop is None or o < stop)][:k]
                    assert got == ("ok", want)
            if view is not writer:
                view.close()
    assert any(answered) and not all(answered)


def _outcome(log: embedlog.Log, offset: int, k: int, stop: int | None = None
             ) -> tuple[str, object]:
    try:
        return "ok", list(log.read("t", 0, offset, max_records=k, end_offset=stop))
    except embedlog.errors.EmbedlogError as exc:
        return type(exc).__name__, str(exc)


def test_a_remembered_point_read_makes_no_index_lookup(tmp_path: pathlib.Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch is found among the remembered ones by offset: no offset-index lookup, no
    walk from the index's position (and no lstat of a live segment's index)."""
    folder = _written(tmp_path / "log", *([b"%d-%d" % (b, i) for i in range(40)]
                                          for b in range(6)))
    from embedlog.segment.segment import Segment
    looked: list[int] = []
    real = Segment._indexed_position

    def spy(self: Segment, offset: int) -> int:
        looked.append(offset)
        return real(self, offset)

    monkeypatch.setattr(Segment, "_indexed_position", spy)
    with embedlog.open(folder, read_only=True) as view:
        for o in range(3, 240, 40):
            assert next(view.read("t", 0, o, max_records=1)).value == b"%d-3" % (o // 40)
        assert len(looked) == 6
        looked.clear()
        for o in range(5, 240, 17):
            assert next(view.read("t", 0, o, max_records=1)).value == b"%d-%d" % (o // 40,
                                                                                 o % 40)
        assert looked == []


def _header(base: int, count: int) -> fmt.BatchHeader:
    batch = fmt.encode_batch([b"v"] * count, base_offset=base, timestamps=1)
    return fmt.parse_header(batch, 0)


def test_batches_out_of_order_with_the_remembered_ones_are_not_remembered() -> None:
    """By offset and by position the remembered batches of one file keep one order, with no
    overlap: a batch breaking it (only in a damaged file) is not remembered."""
    key = (point_memo.new_owner(), (1, 2, 3, 4))

    def remember(position: int, base: int, count: int = 20) -> bool:
        header = _header(base, count)
        batch = fmt.encode_batch([b"v"] * count, base_offset=base, timestamps=1)
        point_memo.remember(key, position, header, fmt.decode_records(batch, 0, header))
        return point_memo.get(key, position) is not None

    assert remember(1000, 100)
    assert not remember(500, 200)  # later offsets at an earlier position
    assert not remember(2000, 110)  # offsets overlapping the batch at 1000
    assert not remember(2000, 80)  # overlapping it from below
    assert remember(2000, 120) and remember(10, 0)
    found = point_memo.find(key, 125, 10**6, 3)
    assert found is not None and found[0].position == 2000 and found[3] == 3
    assert point_memo.find(key, 20, 10**6, 1) is None  # between remembered batches
    assert point_memo.find(key, 119, 10**6, 5) is None  # fewer than wanted, more to read
    last = point_memo.find(key, 119, 120, 5)
    assert last is not None and last[0].position == 1000 and last[3] == 1


def test_a_view_whose_segment_vanished_reads_as_the_scan_does(tmp_path: pathlib.Path) -> None:
    """A remembered segment deleted under a view, its descriptor closed meanwhile: the point
    read leaves it to the scan (which lists the folder again), and answers as a view that
    never remembered it."""
    folder = tmp_path / "log"
    with embedlog.open(folder) as log:
        log.create_topic("t", config={"segment.bytes": 4096})
        for b in range(12):
            log.append_batch("t", [b"%02d-%02d" % (b, i) * 4 for i in range(20)], partition=0)
        with embedlog.open(folder, read_only=True) as view, \
                embedlog.open(folder, read_only=True) as fresh:
            assert next(view.read("t", 0, 25, max_records=1)).value == b"01-05" * 4
            assert point_memo.holds(view._partition_of("t", 0).segments[0]._point_owner)
            for seg in view._partition_of("t", 0).segments:
                seg.release_handles()
            log.delete_records("t", 0, 200)
            for o in (25, 230):
                assert _outcome(view, o, 1) == _outcome(fresh, o, 1)


def test_a_file_changed_in_place_is_never_answered_from_the_memo(tmp_path: pathlib.Path
                                                                ) -> None:
    """A remembered segment's bytes rewritten in place (same size, a new modification time):
    the point read does not take the remembered batch, it reads the batch again, and its CRC
    check finds the damage."""
    folder = _written(tmp_path / "log", [b"v%04d" % i * 8 for i in range(200)])
    log_file = next((folder / "t-0").glob("*.log"))
    with embedlog.open(folder, read_only=True) as view:
        assert next(view.read("t", 0, 150, max_records=1)).value == b"v0150" * 8
        assert next(view.read("t", 0, 151, max_records=1)).value == b"v0151" * 8
        data = bytearray(log_file.read_bytes())
        at = data.index(b"v0151" * 8)
        data[at:at + 5] = b"X0151"
        with open(log_file, "r+b") as f:  # in place: the same inode, the same size
            f.write(data)
        st = os.stat(log_file)
        os.utime(log_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        with pytest.raises(CorruptBatchError):
            next(view.read("t", 0, 151, max_records=1))


def test_find_latest_answers_from_the_identity_remembered_or_found_last() -> None:
    """A segment object's point reads look up the file identity it remembered or found last
    (the reader then checks the file still has it); an identity forgotten is not looked up."""
    owner = point_memo.new_owner()
    old, grown = (owner, (1, 2, 3000, 4)), (owner, (1, 2, 6000, 5))
    batch = fmt.encode_batch([b"v"] * 20, base_offset=100, timestamps=1)
    header = fmt.parse_header(batch, 0)
    assert point_memo.find_latest(owner, 105, 10**6, 1) is None
    point_memo.remember(old, 0, header, fmt.decode_records(batch, 0, header))
    found = point_memo.find_latest(owner, 105, 10**6, 1)
    assert found is not None and found[0].key == old
    point_memo.remember(grown, 0, header, fmt.decode_records(batch, 0, header))
    found = point_memo.find_latest(owner, 105, 10**6, 1)
    assert found is not None and found[0].key == grown
    assert point_memo.find(old, 105, 10**6, 1) is not None
    found = point_memo.find_latest(owner, 105, 10**6, 1)
    assert found is not None and found[0].key == old
    assert point_memo.find_latest(point_memo.new_owner(), 105, 10**6, 1) is None
    point_memo.clear()
    assert point_memo.find_latest(owner, 105, 10**6, 1) is None


def test_a_touched_file_is_read_whole_again_then_answered_from_the_memo_again(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new modification time alone (the bytes unchanged): the remembered batch is not used
    (the file's identity is not the one it was made under); the read takes the batch whole,
    remembers it under the new identity, and the next point read is one small read again."""
    folder = _written(tmp_path / "log", [b"%05d" % i * 20 for i in range(500)])
    log_file = next((folder / "t-0").glob("*.log"))
    reads = _spy_reads(monkeypatch)
    with embedlog.open(folder, read_only=True) as log:
        assert next(log.read("t", 0, 107, max_records=1)).value == b"00107" * 20
        reads.clear()
        assert next(log.read("t", 0, 108, max_records=1)).value == b"00108" * 20
        assert reads == [110]
        st = os.stat(log_file)
        os.utime(log_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        reads.clear()
        assert next(log.read("t", 0, 109, max_records=1)).value == b"00109" * 20
        assert max(reads) > 50_000  # the batch read whole
        reads.clear()
        assert next(log.read("t", 0, 110, max_records=1)).value == b"00110" * 20
        assert reads == [110]
