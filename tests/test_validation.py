"""Arguments at the public API boundary: wrong types and out-of-range values raise embedlog's
own errors naming the argument, and no call can write a checkpoint that a later open rejects."""

from __future__ import annotations

import array
import contextlib
import decimal
import json
import math
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition, _validate, checkpoint
from embedlog.errors import (
    ArgumentOutOfRangeError,
    CorruptCheckpointError,
    EmbedlogError,
    InvalidArgumentError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UsageError,
)
from embedlog.groups import GroupState
from embedlog.metadata import MAX_PARTITIONS
from embedlog.segment import _native

TP = TopicPartition("t", 0)
NOT_INTEGERS = [True, False, 1.5, 2.0, decimal.Decimal(2), np.float64(2.0), np.True_, "1", b"1",
                None, [1], {1: 2}, object()]


@pytest.fixture
def filled(log: embedlog.Log) -> embedlog.Log:
    log.create_topic("t", 2)
    log.append_batch("t", [b"v%d" % i for i in range(10)], partition=0)
    return log


def _reopen_and_parse(path: str) -> None:
    """Every checkpoint under ``path`` parses and the log opens (nothing was poisoned)."""
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if name.endswith("checkpoint") or name == "offsets":
                checkpoint.read_offsets(full)
            elif name == "state.json":
                GroupState.read(full)
    with embedlog.open(path) as log:
        for topic in log.topics():
            for p in range(log.partition_count(topic)):
                list(log.read(topic, p))


# ---------------------------------------------------------------------- the validators


def test_integers_accept_numpy_and_refuse_bool_float_decimal_str() -> None:
    assert _validate.offset(np.int64(7)) == 7
    assert type(_validate.offset(np.uint32(7))) is int
    assert _validate.partition(np.int8(1)) == 1
    for bad in NOT_INTEGERS:
        with pytest.raises(InvalidArgumentError, match="offset"):
            _validate.offset(bad)
    with pytest.raises(OffsetOutOfRangeError):
        _validate.offset(-1)
    with pytest.raises(OffsetOutOfRangeError):
        _validate.offset(2**63)
    with pytest.raises(ArgumentOutOfRangeError, match="timestamp"):
        _validate.timestamp_ms(2**63)
    with pytest.raises(ArgumentOutOfRangeError, match="max_records"):
        _validate.count(0, "max_records")


def test_new_errors_keep_the_builtin_flavours() -> None:
    assert issubclass(InvalidArgumentError, UsageError)
    assert issubclass(InvalidArgumentError, TypeError)
    assert issubclass(ArgumentOutOfRangeError, UsageError)
    assert issubclass(ArgumentOutOfRangeError, ValueError)
    assert embedlog.InvalidArgumentError is InvalidArgumentError


def test_bytes_and_headers() -> None:
    assert _validate.optional_bytes(bytearray(b"x"), "value") == b"x"
    with pytest.raises(InvalidArgumentError, match=r"value must be bytes.*encode"):
        _validate.optional_bytes("x", "value")
    assert _validate.headers([["k", b"v"], ("n", None)]) == [("k", b"v"), ("n", None)]
    for bad in ["ab", [("a",)], ["ab"], [(1, b"v")], [("k", "v")], 5, {"k": b"v"}]:
        with pytest.raises(InvalidArgumentError, match="headers"):
            _validate.headers(bad)
    with pytest.raises(ArgumentOutOfRangeError, match="UTF-8"):
        _validate.headers([("\ud800", b"")])


@pytest.mark.parametrize("pure", [False, True])
def test_memoryviews_of_any_shape_are_stored_as_their_bytes(
        log: embedlog.Log, monkeypatch: pytest.MonkeyPatch, pure: bool) -> None:
    """A view's length is not its size when its items are wider than a byte or it has more
    than one dimension: every writer stores its bytes (the pure encoder once wrote the item
    count as the length, a corrupt batch); released and non-contiguous views are refused."""
    if pure:
        monkeypatch.setattr(_native, "CORE", None)
    wide = memoryview(array.array("H", [1, 2, 3]))
    square = memoryview(bytearray(b"abcd")).cast("B", (2, 2))
    empty = memoryview(array.array("H"))
    log.create_topic("t")
    log.append("t", wide, key=square, headers=[("h", square)], partition=0)
    log.append_batch("t", [square, empty], keys=[wide, None], partition=0)
    with log.producer() as producer:
        producer.send("t", square, key=wide, headers=[("h", wide)], partition=0)
    got = [(r.key, r.value, list(r.headers or ())) for r in log.read("t", 0)]
    assert got == [(b"abcd", wide.tobytes(), [("h", b"abcd")]),
                   (wide.tobytes(), b"abcd", []), (None, b"", []),
                   (wide.tobytes(), b"abcd", [("h", wide.tobytes())])]
    released = memoryview(b"x")
    released.release()
    for bad, why in ((memoryview(b"abcdef")[::2], "non-contiguous"), (released, "released")):
        with pytest.raises(InvalidArgumentError, match=why):
            log.append("t", bad, partition=0)
        with pytest.raises(InvalidArgumentError, match=rf"values\[0\] is a {why}"):
            log.append_batch("t", [bad], partition=0)
    assert log.end_offset("t", 0) == 4


# ---------------------------------------------------------------------- class 3: offsets


@pytest.mark.parametrize("bad", [True, 1.5, decimal.Decimal(2), np.float64(2.0)])
def test_delete_records_refuses_non_integers_and_the_log_reopens(
        filled: embedlog.Log, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="before_offset"):
        filled.delete_records("t", 0, bad)
    path = filled.path
    filled.close()
    _reopen_and_parse(path)


def test_delete_records_takes_a_numpy_integer(filled: embedlog.Log) -> None:
    assert filled.delete_records("t", 0, np.int64(3)) == 3
    path = filled.path
    filled.close()
    _reopen_and_parse(path)
    with embedlog.open(path) as log:
        assert log.start_offset("t", 0) == 3


@pytest.mark.parametrize("bad", [True, 1.5, decimal.Decimal(1), "1", -1, 2**63, None])
def test_commit_refuses_bad_offsets_and_the_group_restarts(
        filled: embedlog.Log, bad: Any) -> None:
    c = filled.consumer(group="g")
    c.assign([TP])
    with pytest.raises(UsageError, match="committed offset"):
        c.commit({TP: bad})
    c.commit({TP: np.int64(4)})
    c.close()
    path = filled.path
    filled.close()
    _reopen_and_parse(path)
    with embedlog.open(path) as log, log.consumer("t", group="g") as again:
        assert again.committed(TP) == 4


def test_commit_refuses_a_topic_the_checkpoint_could_not_hold(filled: embedlog.Log) -> None:
    c = filled.consumer(group="g")
    with pytest.raises(embedlog.InvalidTopicError):
        c.commit({TopicPartition("a b", 0): 1})
    with pytest.raises(InvalidArgumentError):
        c.commit({("t", 1.0): 1})
    with pytest.raises(InvalidArgumentError):
        c.commit([(TP, 1)])  # type: ignore[arg-type]
    c.close()


def test_checkpoint_writer_refuses_what_its_parser_rejects(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "cp")
    bad_rows: list[Any] = [
        {TopicPartition("t", 0): True}, {TopicPartition("t", 0): 1.5},
        {TopicPartition("t", 0): -1}, {TopicPartition("t", 0): 2**63},
        {TopicPartition("t", 0): np.int64(1)}, {TopicPartition("a b", 0): 1},
        {TopicPartition("", 0): 1}, {TopicPartition("t", True): 1},
    ]
    for offsets in bad_rows:
        with pytest.raises(UsageError, match="refusing to write checkpoint"):
            checkpoint.write_offsets(path, offsets)
        assert not os.path.exists(path)
    with pytest.raises(UsageError, match="refusing"):
        checkpoint.SEGMENT_MANIFEST.format([(0,)])
    checkpoint.write_offsets(path, {TopicPartition("t", 0): 2**63 - 1})
    assert checkpoint.read_offsets(path) == {TopicPartition("t", 0): 2**63 - 1}


@pytest.mark.parametrize("text", [
    "0\n\x1e3\nt 0 1\nt 1 2\n",  # int() refused the separator str.strip() removes
    "0\n" + "9" * 5000 + "\n",  # beyond int()'s digit limit
    "0\n1\nt 0 " + "9" * 5000 + "\n",
    "0\n1\nt 0 9223372036854775808\n",  # 2**63
    "0\n1\nt 0 ١٢\n",  # non-ASCII digits
])
def test_checkpoint_parse_raises_only_corrupt_checkpoint(text: str) -> None:
    with pytest.raises(CorruptCheckpointError):
        checkpoint.parse_offsets(text)


def test_checkpoint_count_line_is_trimmed_like_kafka() -> None:
    # Java's trim() (Kafka's reader) removes every char <= ' ', as str.strip() does here
    got = checkpoint.parse_offsets("0\n\x1e2\nt 0 1\nt 1 2\n")
    assert got == {TopicPartition("t", 0): 1, TopicPartition("t", 1): 2}


# ---------------------------------------------------------------------- class 6: foreign errors


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_read_max_records(filled: embedlog.Log, n: Any) -> None:
    with pytest.raises(UsageError, match="max_records"):
        list(filled.read("t", 0, max_records=n))


@pytest.mark.parametrize("ts", ["123", 1.9, True, 2**63, -5, decimal.Decimal(5)])
def test_timestamps_are_rejected_not_coerced(filled: embedlog.Log, ts: Any) -> None:
    with pytest.raises(UsageError, match="timestamp"):
        filled.append("t", b"x", timestamp=ts)
    with pytest.raises(UsageError, match="timestamps"):
        filled.append_batch("t", [b"x", b"y"], timestamps=[1, ts])
    with pytest.raises(UsageError, match="timestamp"):
        filled.offsets_for_times("t", 0, ts)
    with filled.producer() as p, pytest.raises(UsageError, match="timestamp"):
        p.send("t", b"x", timestamp=ts)
    assert filled.end_offset("t", 1) == 0
    assert filled.append("t", b"x", timestamp=np.int64(5), partition=1).timestamp == 5


def test_str_value_or_key_is_refused_with_a_hint(filled: embedlog.Log) -> None:
    for kwargs in ({"value": "x"}, {"value": b"x", "key": "k"}):
        with pytest.raises(InvalidArgumentError, match="encode"):
            filled.append("t", **kwargs)
    with pytest.raises(InvalidArgumentError, match=r"values\[1\]"):
        filled.append_batch("t", [b"x", "y"])
    with pytest.raises(InvalidArgumentError, match=r"keys\[0\]"):
        filled.append_batch("t", [b"x"], keys=["k"])
    with filled.producer() as p:
        with pytest.raises(InvalidArgumentError, match="value must be bytes"):
            p.send("t", "x")
        with pytest.raises(InvalidArgumentError, match="key must be bytes"):
            p.send("t", b"x", "k")
    assert filled.end_offset("t", 1) == 0


@pytest.mark.parametrize("headers", [[("a",)], ["ab"], [("k", "v")], "ab", [(b"k", b"v")]])
def test_malformed_headers(filled: embedlog.Log, headers: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="headers"):
        filled.append("t", b"x", headers=headers)
    with pytest.raises(InvalidArgumentError, match="headers"):
        filled.append_batch("t", [b"x"], headers=[headers])
    with filled.producer() as p, pytest.raises(InvalidArgumentError, match="headers"):
        p.send("t", b"x", headers=headers)


def test_consumer_arguments(filled: embedlog.Log) -> None:
    with filled.consumer() as c:
        c.assign([TP])
        for bad in (0, -1, 1.5, True):
            with pytest.raises(UsageError, match="max_records"):
                c.poll(max_records=bad)
        for bad_timeout in ("1", -1.0, float("nan"), True, None):
            with pytest.raises(UsageError, match="timeout"):
                c.poll(timeout=bad_timeout)
        with pytest.raises(InvalidArgumentError, match="offset"):
            c.seek(TP, True)
        c.seek(TP, np.int64(2))
        assert c.position(TP) == 2
        with pytest.raises(InvalidArgumentError):
            c.assign([5])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError):
            c.assign("t")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="timestamp_ms"):
            c.offsets_for_times({TP: 1.5})
        assert c.beginning_offsets([("t", np.int64(0))]) == {TP: 0}
    with pytest.raises(InvalidConfigError, match="max_poll_records"):
        filled.consumer(max_poll_records=1.5)
    with pytest.raises(InvalidConfigError, match="session_timeout_ms"):
        filled.consumer(session_timeout_ms="10")


def test_partition_numbers(filled: embedlog.Log) -> None:
    assert filled.append("t", b"x", partition=np.int32(1)).partition == 1
    for bad in (True, 1.0, "1"):
        with pytest.raises(InvalidArgumentError, match="partition"):
            filled.append("t", b"x", partition=bad)
        with pytest.raises(InvalidArgumentError, match="partition"):
            filled.end_offset("t", bad)
    with filled.producer() as p:
        assert p.send("t", b"x", partition=np.int64(1)).partition == 1
        with pytest.raises(InvalidArgumentError, match="partition"):
            p.send("t", b"x", partition=True)
        with pytest.raises(embedlog.InvalidTopicError):
            p.send(["t"], b"x", partition=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="partitions"):
        filled.create_topic("u", 1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="config"):
        filled.create_topic("u", 1, 5)  # type: ignore[arg-type]
    filled.create_topic("u", np.int64(2))  # type: ignore[arg-type]
    assert filled.partition_count("u") == 2


@pytest.mark.parametrize("doc", [
    '{"version": 1, "generation": 1e400, "assignor": null, "members": {}}',
    '{"version": 1, "generation": "7", "assignor": null, "members": {}}',
    '{"version": 1, "generation": -1, "assignor": null, "members": {}}',
    '{"version": 1, "generation": true, "assignor": null, "members": {}}',
    '{"version": 1, "generation": 1, "assignor": 5, "members": {}}',
    '{"version": 1, "generation": 1, "assignor": null, "members": {"m": "abc"}}',
    '{"version": 1, "generation": 1, "assignor": null, "members": {"m": [[1]]}}',
    '{"version": 1, "generation": 1, "assignor": null, "members": []}',
    '[1, 2]', '"text"', 'NaN', '1' * 5000, '[' * 100_000 + ']' * 100_000,
])
def test_group_state_json_junk_is_corruption(tmp_path: pathlib.Path, doc: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(doc)
    with pytest.raises(CorruptCheckpointError):
        GroupState.read(str(path))


def test_group_state_round_trips(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "state.json")
    state = GroupState(3, "range", {"m1": ("a", "b")})
    state.write(path)
    assert GroupState.read(path) == state
    doc = json.loads(pathlib.Path(path).read_text())
    doc["extra"] = 1  # a later version's additional field is ignored
    pathlib.Path(path).write_text(json.dumps(doc))
    assert GroupState.read(path) == state


# ---------------------------------------------------------------------- every entry point


def _few(partitions: Any) -> Any:
    """``partitions`` for a junk ``create_topic``: a count a topic may have, but more than 64,
    becomes one above the limit (refused): thousands of partition folders made by one example
    would slow every later open of the shared log (the limit has its own test)."""
    if type(partitions) is int and 64 < partitions <= MAX_PARTITIONS:
        return MAX_PARTITIONS + 1
    return partitions


class _Odd:
    def __repr__(self) -> str:
        return "<odd>"


junk = st.one_of(
    st.integers(), st.integers(min_value=2**62, max_value=2**70), st.integers(-3, 12),
    st.booleans(), st.floats(allow_nan=True), st.decimals(allow_nan=False),
    st.sampled_from([np.int64(1), np.int32(-1), np.uint64(2**64 - 1), np.float64(1.0),
                     np.True_, np.int8(0)]),
    st.text(max_size=5), st.binary(max_size=5), st.none(), st.just(_Odd()),
    st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.text(max_size=2),
                                                             st.integers(), max_size=2),
    st.just("t"), st.just(TP), st.just([("k", b"v")]),
)

_Call = Callable[[embedlog.Log, Any, Any], Any]


def _brief(timeout: Any) -> Any:
    """``timeout`` for ``poll``: a valid wait longer than 10 ms is cut to 10 ms (the argument's
    check is under test, not the wait: junk holds numbers of seconds up to 1e308); anything
    else is passed as it is."""
    try:
        valid = (not isinstance(timeout, bool) and isinstance(timeout, int | float)
                 and 0.01 < float(timeout) < math.inf)
    except OverflowError:  # an int beyond a float's range: refused by poll
        return timeout
    return 0.01 if valid else timeout


def _pair(a: Any, b: Any) -> dict[Any, Any]:
    """``{a: b}`` (``{TP: b}`` when ``a`` cannot be a key: the test's problem, not the API's)."""
    try:
        return {a: b}
    except TypeError:
        return {TP: b}


def _calls() -> dict[str, _Call]:
    def consumer(f: Callable[[embedlog.Consumer, Any, Any], Any]) -> _Call:
        def call(log: embedlog.Log, a: Any, b: Any) -> Any:
            with log.consumer(group="g") as c:
                c.assign([TP])
                return f(c, a, b)
        return call

    def producer(f: Callable[[embedlog.Producer, Any, Any], Any]) -> _Call:
        def call(log: embedlog.Log, a: Any, b: Any) -> Any:
            with log.producer() as p:
                return f(p, a, b)
        return call

    return {
        "append": lambda log, a, b: log.append("t", a, key=b, partition=0),
        "append_ts": lambda log, a, b: log.append("t", b"x", timestamp=a, partition=b),
        "append_headers": lambda log, a, b: log.append("t", b"x", headers=a, partition=0),
        "append_batch": lambda log, a, b: log.append_batch("t", a, keys=b),
        "append_batch_ts": lambda log, a, b: log.append_batch("t", [b"x"], timestamps=a,
                                                              partition=b),
        "append_batch_headers": lambda log, a, b: log.append_batch("t", [b"x"], headers=a),
        "read": lambda log, a, b: list(log.read("t", 0, a, max_records=b)),
        "read_end": lambda log, a, b: list(log.read("t", a, end_offset=b)),
        "read_batches": lambda log, a, b: list(log.read_batches("t", 0, a, b)),
        "offsets_for_times": lambda log, a, b: log.offsets_for_times("t", b, a),
        "delete_records": lambda log, a, b: log.delete_records("t", b, a),
        "start_end": lambda log, a, b: (log.start_offset("t", a), log.end_offset(b, 0)),
        "roll": lambda log, a, b: log.roll(b, a),
        "create_topic": lambda log, a, b: log.create_topic("n", _few(a), b),
        "enforce_retention": lambda log, a, b: log.enforce_retention(a),
        "compact": lambda log, a, b: log.compact("c", now_ms=a, map_bytes=b),
        "read_table": lambda log, a, b: log.read_table("t", start_offset=a, end_time=b),
        "read_table_select": lambda log, a, b: log.read_table(a, partitions=b, batch_rows=b),
        "send": producer(lambda p, a, b: p.send("t", a, b)),
        "send_ts": producer(lambda p, a, b: p.send("t", b"x", partition=a, timestamp=b)),
        "send_headers": producer(lambda p, a, b: p.send("t", b"x", headers=a)),
        "partitions_for": producer(lambda p, a, b: p.partitions_for(a)),
        "producer_options": lambda log, a, b: log.producer(linger_ms=a, batch_size=b).close(),
        "subscribe": consumer(lambda c, a, b: c.subscribe(a)),
        "assign": consumer(lambda c, a, b: c.assign([a, b])),
        "seek": consumer(lambda c, a, b: c.seek(a, b)),
        "seek_tp": consumer(lambda c, a, b: c.seek(TP, a)),
        "commit": consumer(lambda c, a, b: c.commit(_pair(a, b))),
        "commit_tp": consumer(lambda c, a, b: c.commit({TP: a})),
        "commit_mapping": consumer(lambda c, a, b: c.commit(a)),
        "poll": consumer(lambda c, a, b: c.poll(0 if b is None else _brief(b), max_records=a)),
        "offsets": consumer(lambda c, a, b: (c.beginning_offsets([a]), c.end_offsets([b]))),
        "offsets_for_times_c": consumer(lambda c, a, b: c.offsets_for_times(_pair(a, b))),
        "committed": consumer(lambda c, a, b: c.committed(a)),
        "consumer_options": lambda log, a, b: log.consumer(max_poll_records=a,
                                                           session_timeout_ms=b).close(),
    }


CALLS = _calls()


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("junk") / "log")
    with embedlog.open(path) as log:
        log.create_topic("t", 2)
        log.create_topic("c", 1, {"cleanup.policy": "compact"})
        log.append_batch("t", [b"v%d" % i for i in range(10)], partition=0)
    yield path
    _reopen_and_parse(path)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CALLS)), a=junk, b=junk)
def test_every_entry_point_raises_only_embedlog_errors(
        shared_dir: str, name: str, a: Any, b: Any) -> None:
    with embedlog.open(shared_dir) as log, contextlib.suppress(EmbedlogError):
        CALLS[name](log, a, b)
    _reopen_and_parse(shared_dir)  # nothing written that the next open rejects


@pytest.mark.parametrize("path, error", [
    (None, InvalidArgumentError), (5, InvalidArgumentError), (1.5, InvalidArgumentError),
    (b"log", InvalidArgumentError), ("lo\x00g", ArgumentOutOfRangeError),
    (pathlib.PurePosixPath("lo\x00g"), ArgumentOutOfRangeError),
], ids=repr)
@pytest.mark.parametrize("read_only", [False, True])
def test_open_refuses_a_path_of_another_type_or_with_nul(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, path: Any, error: type,
        read_only: bool) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match="path"):
        embedlog.open(path, read_only=read_only)
    assert os.listdir(tmp_path) == []
    with embedlog.open(pathlib.Path("log")) as log:  # a PathLike of str is fine
        log.create_topic("t")
    assert os.listdir(tmp_path) == ["log"]


@pytest.mark.parametrize("count", [(1 << 20) + 1, 1 << 62, (1 << 63) - 1])
def test_create_topic_refuses_more_partitions_than_the_topic_table_is_read_with(
        tmp_path: pathlib.Path, count: int) -> None:
    """embedlog.json naming more than 2**20 partitions is refused as damage when read, so a
    topic that large is refused when created -- before any folder is made (2**63 - 1 folders
    were planned one by one)."""
    with embedlog.open(tmp_path / "log") as log:
        with pytest.raises(InvalidConfigError, match="partitions"):
            log.create_topic("t", partitions=count)
        assert log.topics() == []
        log.create_topic("u", partitions=3)
    assert not [n for n in os.listdir(tmp_path / "log") if n.startswith("t-")]
    with embedlog.open(tmp_path / "log", read_only=True) as log:
        assert log.topics() == ["u"]


@pytest.mark.parametrize("interval_s", [1 << 63, 1 << 64, 1e300])
def test_start_cleaner_refuses_an_interval_its_thread_cannot_wait(tmp_path: pathlib.Path,
                                                                  interval_s: float) -> None:
    """Such an interval was accepted and the cleaner thread then died at its first wait
    (OverflowError: timestamp out of range for platform time_t), leaving no cleaner."""
    with embedlog.open(tmp_path / "log") as log:
        with pytest.raises(ArgumentOutOfRangeError, match="interval_s"):
            log.start_cleaner(interval_s)
        log.start_cleaner(3600.0)  # none was started: a sane one still starts
        assert log._cleaner is not None and log._cleaner.is_alive()
