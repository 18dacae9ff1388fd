"""Option parsing and precedence (no Spark session needed)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from embedlog.errors import InvalidConfigError
from embedlog.spark.options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    PartitionOffsets,
    PartitionTimestamps,
    Subscribe,
    SubscribePattern,
    parse_read_options,
    parse_write_options,
)

SELECTIONS = ("subscribe", "subscribepattern", "assign")


def batch(**opts: str):  # type: ignore[no-untyped-def]
    """Batch options; ``subscribe=a`` unless a selection option is given."""
    return parse_read_options(_with_selection({"path": "/log", **opts}), streaming=False)


def stream(**opts: str):  # type: ignore[no-untyped-def]
    return parse_read_options(_with_selection({"path": "/log", **opts}), streaming=True)


def _with_selection(opts: dict[str, str]) -> dict[str, str]:
    if not any(k.lower() in SELECTIONS for k in opts):
        opts["subscribe"] = "a"
    return opts


def test_defaults_follow_kafka() -> None:
    b, s = batch(), stream()
    assert b.selection == Subscribe(("a",))
    assert b.starting == Earliest() and b.ending == Latest()
    assert s.starting == Latest()
    assert b.fail_on_data_loss and not b.include_headers and not b.push_filters
    assert b.timestamp_strategy == "error" and b.min_partitions is None


def test_option_keys_are_case_insensitive() -> None:
    o = parse_read_options(
        {"PATH": "/x", "SUBSCRIBE": "a", "includeheaders": "TRUE"}, streaming=False
    )
    assert o.path == "/x" and o.selection == Subscribe(("a",)) and o.include_headers


def test_topic_selection_forms() -> None:
    assert batch(subscribe=" a, b ,,a").selection == Subscribe(("a", "b"))
    pat = batch(subscribePattern="ev.*").selection
    assert isinstance(pat, SubscribePattern)
    assert pat.matches("events") and not pat.matches("xevents")
    assert batch(assign='{"a": [0, 2], "b": [1]}').selection == Assign(
        (("a", 0), ("a", 2), ("b", 1))
    )


@pytest.mark.parametrize(
    ("opts", "named"),
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "subscribe"),
        ({"subscribe": " , "}, "subscribe"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"assign": "[0]"}, "assign"),
        ({"assign": '{"a": [-1]}'}, "assign"),
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"a": {"0": -1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"a": {"0": -3}}'}, "startingOffsets"),
        ({"startingOffsets": '{"a": {"x": 1}}'}, "startingOffsets"),
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"endingTimestamp": "-5"}, "endingTimestamp"),
        ({"startingOffsetsByTimestamp": '{"a": {"0": "1000"}}'}, "startingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestampStrategy": "skip"}, "startingOffsetsByTimestampStrategy"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"minPartitions": "many"}, "minPartitions"),
        ({"includeHeaders": "1"}, "includeHeaders"),
        ({"maxRecordsPerBatch": "-1"}, "maxRecordsPerBatch"),
        ({"startingOfsets": "earliest"}, "startingofsets"),
    ],
)
def test_bad_values_name_the_option(opts: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        batch(**opts)


def test_streaming_rejects_ending_options_and_accepts_latest() -> None:
    for key in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(InvalidConfigError, match=key):
            stream(**{key: "latest" if key == "endingOffsets" else "1"})
    assert stream(startingOffsets='{"a": {"0": -1}}').starting == PartitionOffsets(
        "startingOffsets", {"a": {0: -1}}
    )
    with pytest.raises(InvalidConfigError, match="minOffsetsPerTrigger"):
        stream(maxOffsetsPerTrigger="10", minOffsetsPerTrigger="20")


def test_starting_precedence_timestamp_over_by_timestamp_over_offsets() -> None:
    all_three = batch(
        startingTimestamp="1000",
        startingOffsetsByTimestamp='{"a": {"0": 5}}',
        startingOffsets='{"a": {"0": 7}}',
    )
    assert all_three.starting == GlobalTimestamp("startingTimestamp", 1000)
    two = batch(startingOffsetsByTimestamp='{"a": {"0": 5}}', startingOffsets="earliest")
    assert two.starting == PartitionTimestamps("startingOffsetsByTimestamp", {"a": {0: 5}})
    # a lower-precedence option is still validated
    with pytest.raises(InvalidConfigError, match="startingOffsets"):
        batch(startingTimestamp="1000", startingOffsets="nonsense")


def test_ending_precedence() -> None:
    o = batch(endingTimestamp="9", endingOffsetsByTimestamp='{"a": {"0": 5}}',
              endingOffsets="latest")
    assert o.ending == GlobalTimestamp("endingTimestamp", 9)
    o = batch(endingOffsetsByTimestamp='{"a": {"0": 5}}', endingOffsets="latest")
    assert o.ending == PartitionTimestamps("endingOffsetsByTimestamp", {"a": {0: 5}})
    assert batch(endingOffsets='{"a": {"0": 3, "1": -1}}').ending == PartitionOffsets(
        "endingOffsets", {"a": {0: 3, 1: -1}}
    )


def test_short_json_form_is_for_the_single_topic() -> None:
    assert batch(startingOffsets='{"0": 23, "1": -2}').starting == PartitionOffsets(
        "startingOffsets", {None: {0: 23, 1: -2}}
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_exactly_one_selection_option_as_kafka(streaming: bool) -> None:
    """Spark's Kafka source needs exactly one of subscribe, subscribePattern, assign."""
    with pytest.raises(InvalidConfigError, match="one of the options subscribe, "
                       "subscribePattern, assign must be given"):
        parse_read_options({"path": "/log"}, streaming=streaming)
    for pair in itertools.combinations(
            {"subscribe": "a", "subscribePattern": "a.*", "assign": '{"a": [0]}'}.items(), 2):
        with pytest.raises(InvalidConfigError, match="only one of the options subscribe, "
                           f"subscribePattern, assign can be given, got {pair[0][0]}, "
                           f"{pair[1][0]}$"):
            parse_read_options({"path": "/log", **dict(pair)}, streaming=streaming)
    assert parse_read_options({"path": "/log", "subscribePattern": ".*"},
                              streaming=streaming).selection == SubscribePattern(".*")


def test_kafka_only_options_are_ignored_and_path_is_required() -> None:
    o = batch(**{"kafka.bootstrap.servers": "h:9092", "groupIdPrefix": "g",
                 "fetchOffset.numRetries": "3"})
    assert o.selection == Subscribe(("a",))
    with pytest.raises(InvalidConfigError, match="path"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    one = {"paths": '["/one"]', "subscribe": "a"}
    assert parse_read_options(one, streaming=False).path == "/one"
    with pytest.raises(InvalidConfigError, match="exactly one"):
        parse_read_options({"paths": '["/a", "/b"]', "subscribe": "a"}, streaming=False)


def test_write_options() -> None:
    assert parse_write_options({"path": "/l", "topic": " t "}).topic == "t"
    assert parse_write_options({"path": "/l"}).topic is None
    with pytest.raises(InvalidConfigError, match="topic"):
        parse_write_options({"path": "/l", "topic": " "})
