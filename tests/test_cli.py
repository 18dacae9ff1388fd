"""The ``embedlog`` command line, through click's test runner (and a subprocess where a real
process matters): happy paths, JSON output parsed back, bad input with its message and exit
code, never a traceback."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from click.testing import CliRunner, Result

import embedlog
from embedlog.cli import cli
from embedlog.cli.reference import command_paths
from embedlog.partitioner import partition_for_key
from helpers import small_segments

Run = Callable[..., Result]
BASE_TS = 1_700_000_000_000


@pytest.fixture
def run(log_dir: pathlib.Path) -> Run:
    """Invoke ``embedlog ARGS`` with ``$EMBEDLOG_DIR`` set to the test's log directory."""
    runner = CliRunner(env={"EMBEDLOG_DIR": str(log_dir)})

    def invoke(*args: str, input: str | bytes | None = None, code: int = 0) -> Result:
        result = runner.invoke(cli, list(args), input=input, prog_name="embedlog")
        assert result.exit_code == code, (result.output, result.exception)
        assert "Traceback" not in result.output
        return result

    return invoke


def fails(result: Result, code: int, *fragments: str) -> None:
    """The error contract: one line on stderr naming the problem, the exit code, nothing on
    stdout."""
    assert result.exit_code == code
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]
    assert len(lines) == 1          # a usage error too: no usage block
    assert result.stdout == ""


def js(result: Result) -> Any:
    return json.loads(result.stdout)


def records(log_dir: pathlib.Path, topic: str) -> list[embedlog.Record]:
    with embedlog.open(log_dir, read_only=True) as log:
        return [r for p in range(log.partition_count(topic)) for r in log.read(topic, p)]


@pytest.fixture
def events(run: Run, log_dir: pathlib.Path) -> pathlib.Path:
    """Topic ``events``: 3 partitions, 30 keyed records with known timestamps (10 per
    partition, offsets 0..9, timestamp BASE_TS + 1000 * i for the i-th record of a partition)."""
    with embedlog.open(log_dir) as log:
        log.create_topic("events", partitions=3, config=small_segments(
            **{"segment.bytes": 400, "retention.ms": -1}))
        for p in range(3):
            for i in range(10):
                log.append("events", f"v{p}-{i}".encode(), key=f"k{i}".encode(),
                           headers=[("n", str(i).encode())] if i % 2 else None,
                           timestamp=BASE_TS + 1000 * i, partition=p)
    return log_dir


# ---------------------------------------------------------------------------------- topics


def test_topics_lifecycle(run: Run, log_dir: pathlib.Path) -> None:
    out = run("topics", "create", "orders", "--partitions", "4",
              "--config", "cleanup.policy=compact", "--config", "segment.bytes=65536")
    assert out.stdout == "Created topic orders.\n"
    run("topics", "create", "audit")
    assert js(run("topics", "list", "--json")) == ["audit", "orders"]
    assert run("topics", "list").stdout.split() == ["audit", "orders"]

    [orders] = js(run("topics", "describe", "orders", "--json"))
    assert orders["partitions"] == 4
    assert orders["config"] == {"cleanup.policy": "compact", "segment.bytes": 65536}
    assert [p["partition"] for p in orders["partition_details"]] == [0, 1, 2, 3]
    assert all(p["start_offset"] == p["end_offset"] == 0 and p["segments"] == 1
               for p in orders["partition_details"])

    run("topics", "alter", "orders", "--config", "retention.ms=1000",
        "--delete-config", "segment.bytes")
    with embedlog.open(log_dir, read_only=True) as log:
        cfg = log.topic_config("orders")
    assert (cfg.retention_ms, cfg.segment_bytes, cfg.cleanup_policy) == (1000, 1024**3,
                                                                          "compact")
    assert run("topics", "delete", "audit").stdout == "Deleted topic audit.\n"
    assert js(run("topics", "list", "--json")) == ["orders"]
    assert not (log_dir / "audit-0").exists()


def test_topics_describe_counts_records_segments_and_bytes(run: Run, events: pathlib.Path
                                                           ) -> None:
    [report] = js(run("topics", "describe", "--json"))
    with embedlog.open(events, read_only=True) as log:
        for part in report["partition_details"]:
            p = part["partition"]
            segs = log.segments("events", p)
            assert (part["start_offset"], part["end_offset"]) == (0, 10)
            assert part["segments"] == len(segs)
            assert part["bytes"] == sum(s.size for s in segs) > 0
    text = run("topics", "describe", "events").stdout.splitlines()
    assert text[0].startswith("Topic: events\tPartitionCount: 3\tConfigs: ")
    assert "segment.bytes=400" in text[0]
    assert "\tPartition: 2\tStartOffset: 0\tEndOffset: 10\t" in text[3]


def test_topics_errors(run: Run) -> None:
    run("topics", "create", "t")
    fails(run("topics", "create", "t", code=1), 1, "already exists")
    run("topics", "create", "t", "--if-not-exists")
    fails(run("topics", "create", "../escape", code=1), 1, "characters outside")
    fails(run("topics", "create", "u", "--config", "no.such=1", code=1), 1,
          "unknown topic config 'no.such'")
    fails(run("topics", "create", "u", "--config", "segment.bytes=big", code=1), 1,
          "segment.bytes must be a int")
    fails(run("topics", "create", "u", "--config", "novalue", code=2), 2, "NAME=VALUE")
    fails(run("topics", "describe", "missing", code=1), 1, "unknown topic 'missing'")
    fails(run("topics", "alter", "t", code=2), 2, "--config")
    fails(run("topics", "alter", "t", "--delete-config", "bogus", code=1), 1, "bogus")
    fails(run("topics", "delete", "missing", code=1), 1, "unknown topic")


def test_missing_log_directory_is_a_one_line_error(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(cli, ["topics", "list", "--dir", str(tmp_path / "nope")],
                                prog_name="embedlog")
    fails(result, 1, "no log directory")


def test_locked_log_is_a_one_line_error(run: Run, log_dir: pathlib.Path) -> None:
    run("topics", "create", "t")
    with embedlog.open(log_dir):
        fails(run("topics", "create", "u", code=1), 1, "open for writing by another")
        fails(run("produce", "t", input="x\n", code=1), 1, "open for writing by another")
        # readers do not need the lock
        assert js(run("topics", "list", "--json")) == ["t"]


# ---------------------------------------------------------------------------------- produce


def test_produce_text_keys_and_headers(run: Run, log_dir: pathlib.Path) -> None:
    run("topics", "create", "t", "--partitions", "2")
    lines = "trace:a1,span:b\tuser-1=hello\n\tuser-2=wor=ld\n"
    out = run("produce", "t", "--key-separator", "=", "--headers", "--json", input=lines)
    got = sorted(records(log_dir, "t"), key=lambda r: r.key or b"")
    # one batch per partition the keys went to
    assert js(out) == {"topic": "t", "records": 2, "batches": len({r.partition for r in got})}
    assert [(r.key, r.value, r.headers) for r in got] == [
        (b"user-1", b"hello", (("trace", b"a1"), ("span", b"b"))),
        (b"user-2", b"wor=ld", ()),
    ]
    assert all(r.partition == partition_for_key(r.key, 2) for r in got if r.key)


def test_produce_from_file_to_a_partition_with_compression(
    run: Run, log_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    run("topics", "create", "t", "--partitions", "3")
    source = tmp_path / "in.txt"
    source.write_bytes(b"".join(b"line %d\n" % i for i in range(2500)))
    out = run("produce", "t", str(source), "--partition", "2", "--compression", "zstd",
              "--batch-size", "1000", "--timestamp", "2024-01-01T00:00:00Z")
    assert out.stdout == ""
    assert "Produced 2500 records to t in 3 batches." in out.stderr
    got = records(log_dir, "t")
    assert [r.value for r in got] == [b"line %d" % i for i in range(2500)]
    assert {r.partition for r in got} == {2}
    assert {r.timestamp for r in got} == {1_704_067_200_000}
    dump = js(run("dump-log", str(log_dir / "t-2"), "--json"))
    assert {b["compresscodec"] for f in dump["files"] for b in f["batches"]} == {"zstd"}


def test_produce_json_lines(run: Run, log_dir: pathlib.Path) -> None:
    run("topics", "create", "t")
    lines = [
        {"key": "u1", "value": {"page": "/", "n": 1}, "headers": [["h", "x"], ["null", None]],
         "timestamp": BASE_TS},
        {"key": {"base64": "AP8="}, "value": None, "headers": {"a": "b"}},
        {"value": "plain text"},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n\n"
    run("produce", "t", "--format", "json", input=text)
    got = records(log_dir, "t")
    assert [(r.key, r.value, r.headers) for r in got] == [
        (b"u1", b'{"page":"/","n":1}', (("h", b"x"), ("null", None))),
        (b"\x00\xff", None, (("a", b"b"),)),
        (None, b"plain text", ()),
    ]
    assert got[0].timestamp == BASE_TS


def test_consume_json_output_produces_back_identically(run: Run, log_dir: pathlib.Path
                                                       ) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("src")
        log.create_topic("copy")
        log.append("src", b"\x00\x01\xfe binary", key=b"\xff", headers=[("h", b"\x80")],
                   timestamp=BASE_TS)
        log.append("src", None, key=b"tombstone", timestamp=BASE_TS + 1)
        log.append("src", "ünïcode".encode(), timestamp=BASE_TS + 2)
    dumped = run("consume", "src", "--format", "json").stdout
    run("produce", "copy", "--format", "json", input=dumped)
    strip = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records(log_dir, "src")]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in records(log_dir, "copy")] == strip
    first = json.loads(dumped.splitlines()[0])
    assert first["key"] == {"base64": "/w=="}
    assert first["timestamp_type"] == "CreateTime"


@pytest.mark.parametrize(
    ("args", "data", "code", "message"),
    [
        (["--key-separator", ":"], "a:b\nno separator\n", 1, "line 2: no key separator ':'"),
        (["--headers"], "h:v no tab\n", 1, "line 1: no tab after the headers"),
        (["--headers"], "bad\tvalue\n", 1, "line 1: header 'bad' has no ':'"),
        (["--format", "json"], '{"value": 1}\n{oops\n', 1, "line 2: invalid JSON"),
        (["--format", "json"], '["list"]\n', 1, 'line 1: expected a JSON object with a "value"'),
        (["--format", "json"], '{"value": "x", "partition": "1"}\n', 1,
         "line 1: partition must be an integer"),
        (["--format", "json"], '{"value": {"base64": "***"}}\n', 1, "invalid base64"),
        (["--format", "json", "--key-separator", ":"], "", 2, "--format text only"),
        (["--partition", "7"], "x\n", 1, "partition"),
        (["--compression", "brotli"], "x\n", 2, "brotli"),
    ],
)
def test_produce_bad_input(run: Run, log_dir: pathlib.Path, args: list[str], data: str,
                           code: int, message: str) -> None:
    run("topics", "create", "t")
    fails(run("produce", "t", *args, input=data, code=code), code, message)


def test_produce_unknown_topic_reads_no_input(run: Run) -> None:
    run("topics", "create", "t")
    fails(run("produce", "nope", input="x\n", code=1), 1, "unknown topic 'nope'")


# ---------------------------------------------------------------------------------- consume


def test_consume_text_fields(run: Run, events: pathlib.Path) -> None:
    out = run("consume", "events", "--partition", "1", "--offset", "2", "--max-messages", "2",
              "--print-key", "--print-offset", "--print-partition", "--print-timestamp",
              "--print-headers")
    assert out.stdout.splitlines() == [
        f"CreateTime:{BASE_TS + 2000}\tPartition:1\tOffset:2\tNO_HEADERS\tk2\tv1-2",
        f"CreateTime:{BASE_TS + 3000}\tPartition:1\tOffset:3\tn:3\tk3\tv1-3",
    ]
    assert "Processed a total of 2 messages" in out.stderr
    plain = run("consume", "events", "--from-beginning").stdout.splitlines()
    assert sorted(plain) == sorted(f"v{p}-{i}" for p in range(3) for i in range(10))
    hexed = run("consume", "events", "--partition", "0", "--max-messages", "1", "--format",
                "hex", "--print-key", "--key-separator", " ").stdout
    assert hexed == f"{b'k0'.hex()} {b'v0-0'.hex()}\n"


def test_consume_interleaves_partitions_and_keeps_offset_order(run: Run, events: pathlib.Path
                                                               ) -> None:
    rows = [json.loads(line) for line in
            run("consume", "events", "--format", "json").stdout.splitlines()]
    assert len(rows) == 30
    for p in range(3):
        assert [r["offset"] for r in rows if r["partition"] == p] == list(range(10))
    assert rows[5] == {"topic": "events", "partition": 0, "offset": 5,
                       "timestamp": BASE_TS + 5000, "timestamp_type": "CreateTime",
                       "key": "k5", "value": "v0-5", "headers": [["n", "5"]]}


def test_consume_from_time(run: Run, events: pathlib.Path) -> None:
    iso = "2023-11-14T22:13:27Z"  # BASE_TS + 7000 ms
    rows = [json.loads(x) for x in
            run("consume", "events", "--from-time", iso, "--format", "json").stdout.splitlines()]
    assert sorted((r["partition"], r["offset"]) for r in rows) == [
        (p, o) for p in range(3) for o in (7, 8, 9)
    ]
    by_ms = run("consume", "events", "--from-time", str(BASE_TS + 9500)).stdout
    assert by_ms == ""


def test_consume_max_messages_across_partitions(run: Run, events: pathlib.Path) -> None:
    out = run("consume", "events", "--max-messages", "12", "--format", "json").stdout
    assert len(out.splitlines()) == 12


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["events", "--offset", "3"], 2, "--offset needs --partition"),
        (["events", "--offset", "11", "--partition", "0"], 1, "out of range"),
        (["events", "--offset", "soon", "--partition", "0"], 2, "not an offset"),
        (["events", "--partition", "3"], 1, "has no partition 3"),
        (["events", "--from-time", "yesterday"], 2, "ISO 8601"),
        (["events", "--timeout-ms", "5"], 2, "--follow"),
        (["nope"], 1, "unknown topic 'nope'"),
    ],
)
def test_consume_bad_input(run: Run, events: pathlib.Path, args: list[str], code: int,
                           message: str) -> None:
    fails(run("consume", *args, code=code), code, message)


def test_consume_follow_stops_after_idle_timeout(run: Run, events: pathlib.Path) -> None:
    out = run("consume", "events", "--partition", "0", "--from-beginning", "--follow",
              "--timeout-ms", "100")
    assert len(out.stdout.splitlines()) == 10


def test_consume_follow_tails_a_writer(events: pathlib.Path) -> None:
    """A real process tails the log while this one appends to it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "embedlog", "consume", "events", "--partition", "0",
         "--from-beginning", "--follow", "--max-messages", "13", "--dir", str(events)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        seen = [proc.stdout.readline().strip() for _ in range(10)]
        assert seen == [f"v0-{i}" for i in range(10)]
        with embedlog.open(events) as log:
            for i in range(3):
                log.append("events", f"new-{i}".encode(), partition=0)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out.splitlines() == ["new-0", "new-1", "new-2"]
    assert proc.returncode == 0
    assert "Processed a total of 13 messages" in err


# ---------------------------------------------------------------------------------- offsets


def test_get_offsets(run: Run, events: pathlib.Path) -> None:
    assert run("get-offsets").stdout.splitlines() == [f"events:{p}:10" for p in range(3)]
    assert run("get-offsets", "--time", "earliest", "--partitions", "1").stdout == "events:1:0\n"
    at = js(run("get-offsets", "--time", str(BASE_TS + 4500), "--json"))
    assert at == [{"topic": "events", "partition": p, "offset": 5} for p in range(3)]
    late = js(run("get-offsets", "--time", "2100-01-01", "--json", "--topic", "events"))
    assert {r["offset"] for r in late} == {None}
    assert run("get-offsets", "--time", "2100-01-01").stdout == ""
    fails(run("get-offsets", "--time", "never", code=2), 2, "--time")
    fails(run("get-offsets", "--topic", "nope", code=1), 1, "unknown topic")
    fails(run("get-offsets", "--partitions", "a,b", code=2), 2, "--partitions")


def test_delete_records(run: Run, events: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = run("delete-records", "--topic", "events", "--partition", "0", "--offset", "4")
    assert out.stdout.splitlines() == ["Records delete operation completed:",
                                       "partition: events-0\tlow_watermark: 4"]
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "events", "partition": 1,
                                                "offset": -1}], "version": 1}))
    assert js(run("delete-records", "--offset-json-file", str(spec), "--json")) == [
        {"topic": "events", "partition": 1, "low_watermark": 10}]
    assert run("get-offsets", "--time", "earliest").stdout.splitlines() == [
        "events:0:4", "events:1:10", "events:2:0"]
    assert run("consume", "events", "--partition", "0").stdout.splitlines()[0] == "v0-4"
    fails(run("delete-records", "--topic", "events", "--offset", "11", code=1), 1,
          "cannot delete records before 11")
    fails(run("delete-records", "--topic", "events", code=2), 2, "--offset")
    spec.write_text('{"partitions": [{"topic": "events"}]}')
    fails(run("delete-records", "--offset-json-file", str(spec), code=1), 1, "expected")


# ---------------------------------------------------------------------------------- dump-log


def test_dump_log_batches_records_and_indexes(run: Run, events: pathlib.Path) -> None:
    doc = js(run("dump-log", str(events / "events-1"), "--print-data-log", "--verify-index",
                 "--json"))
    assert doc["problems"] == 0
    batches = [b for f in doc["files"] for b in f["batches"]]
    recs = [r for b in batches for r in b["records"]]
    assert [r["offset"] for r in recs] == list(range(10))
    assert [r["payload"] for r in recs] == [f"v1-{i}" for i in range(10)]
    assert recs[3] == {"offset": 3, "timestamp": BASE_TS + 3000, "keySize": 2, "valueSize": 4,
                       "sequence": -1, "headerKeys": ["n"], "key": "k3", "payload": "v1-3"}
    assert all(b["isvalid"] and b["magic"] == 2 and b["count"] == 1 for b in batches)
    assert all(f["indexProblems"] == [] for f in doc["files"])

    text = run("dump-log", str(events / "events-1" / "00000000000000000000.log"),
               "--deep-iteration").stdout.splitlines()
    assert text[:2] == [f"Dumping {events / 'events-1' / '00000000000000000000.log'}",
                        "Log starting offset: 0"]
    assert text[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 ")
    assert f"CreateTime: {BASE_TS} size: " in text[2] and text[2].endswith("isvalid: true")
    assert text[3].startswith(f"| offset: 0 CreateTime: {BASE_TS} keySize: 2 valueSize: 4")
    assert "payload" not in text[3]


def test_dump_log_index_files(run: Run, log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t", config={"index.interval.bytes": 100})
        for i in range(20):
            log.append_batch("t", [b"x" * 50] * 3, timestamps=BASE_TS + i)
    seg = log_dir / "t-0" / "00000000000000000000"
    index = js(run("dump-log", f"{seg}.index", "--verify-index", "--json"))["files"][0]
    assert index["type"] == "index" and index["indexProblems"] == []
    assert len(index["entries"]) > 3
    with embedlog.open(log_dir, read_only=True) as log:
        for e in index["entries"]:
            # every entry names the last offset of a 3-record batch starting at its position
            assert e["offset"] % 3 == 2
            first = next(log.read("t", 0, e["offset"] - 2, max_records=1))
            assert first.offset == e["offset"] - 2
    times = js(run("dump-log", f"{seg}.timeindex", "--json"))["files"][0]["entries"]
    assert times and all(t["timestamp"] == BASE_TS + t["offset"] // 3 for t in times)
    assert run("dump-log", f"{seg}.index").stdout.splitlines()[1].startswith("offset: ")


def test_dump_log_reports_damage(run: Run, events: pathlib.Path) -> None:
    seg = events / "events-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    seg.write_bytes(bytes(data) + b"\x00\x00\x00")
    doc = js(run("dump-log", str(seg), "--json", code=3))
    first = doc["files"][0]["batches"][0]
    assert first["isvalid"] is False and "CRC-32C mismatch" in first["error"]
    assert doc["files"][0]["trailingBytes"] == 3
    assert doc["problems"] == 2
    text = run("dump-log", str(seg), code=3).stdout
    assert "Found 3 invalid bytes at the end of" in text


def test_consume_stops_at_a_corrupt_batch_with_one_line(run: Run, events: pathlib.Path) -> None:
    seg = events / "events-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF
    seg.write_bytes(bytes(data))
    fails(run("consume", "events", "--partition", "0", code=3), 3, "CRC-32C mismatch",
          str(seg))


def test_dump_log_bad_arguments(run: Run, tmp_path: pathlib.Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    fails(run("dump-log", str(other), code=1), 1, "is not a segment file")
    fails(run("dump-log", str(tmp_path / "missing.log"), code=1), 1, "No such file")


def test_dump_log_reads_real_kafka_folders(run: Run, kafka_fixtures: pathlib.Path) -> None:
    doc = js(run("dump-log", str(kafka_fixtures / "kafka30-multipartition"), "--deep-iteration",
                 "--verify-index", "--json"))
    batches = [b for f in doc["files"] for b in f["batches"]]
    assert (doc["problems"], len(batches)) == (0, 1369)
    assert sum(len(b["records"]) for b in batches) == 3126
    lz4 = js(run("dump-log", str(kafka_fixtures / "cp512-connect-lz4"), "--json"))
    codecs = {b["compresscodec"] for f in lz4["files"] for b in f["batches"]}
    assert codecs == {"none", "lz4"}
    compacted = kafka_fixtures / "kafka27-compacted-multiseg" / "__consumer_offsets-39"
    offsets = [b["baseOffset"] for f in js(run("dump-log", str(compacted), "--json"))["files"]
               for b in f["batches"]]
    assert offsets == [4, 16, 17, 18]
    legacy = run("dump-log", str(kafka_fixtures / "kafka08-legacy-magic0"), code=5).stdout
    assert "message format v0/v1 (magic 0) is not supported" in legacy


# ---------------------------------------------------------------------------------- verify


def _corrupt_index(events: pathlib.Path) -> pathlib.Path:
    """Point the first offset-index entry of events-0's first segment at a wrong position."""
    [index] = [p for p in sorted((events / "events-0").glob("*.index"))
               if p.stat().st_size][:1]
    data = bytearray(index.read_bytes())
    data[4:8] = (5).to_bytes(4, "big")
    index.write_bytes(bytes(data))
    return index


def test_verify_healthy_log(run: Run, events: pathlib.Path) -> None:
    doc = js(run("verify", "--json"))
    assert doc["healthy"] is True and doc["problems"] == []
    assert (doc["partitions"], doc["records"], doc["batches"]) == (3, 30, 30)
    assert doc["segments"] > 3  # small segments: several per partition
    assert run("verify", str(events)).stdout.rstrip().endswith(
        "healthy (0 errors, 0 warnings)")


def test_verify_finds_and_fixes_a_broken_index(run: Run, events: pathlib.Path) -> None:
    index = _corrupt_index(events)
    doc = js(run("verify", "--json", code=3))
    [problem] = doc["problems"]
    assert problem["path"] == str(index) and problem["severity"] == "error"
    assert "not the start of a batch" in problem["message"] and problem["fixable"]
    fixed = js(run("verify", "--fix", "--json"))
    assert fixed["healthy"] and fixed["problems"][0]["fixed"]
    assert js(run("verify", "--json"))["problems"] == []
    assert js(run("dump-log", str(index), "--verify-index", "--json"))["problems"] == 0


def test_verify_fix_rebuilds_missing_indexes(run: Run, events: pathlib.Path) -> None:
    victims = [p for p in (events / "events-2").glob("*.index") if p.stat().st_size]
    assert victims
    for p in victims:
        p.unlink()
    doc = js(run("verify", "--json"))  # missing indexes only slow readers down
    assert doc["healthy"] and {p["severity"] for p in doc["problems"]} == {"warning"}
    run("verify", "--fix")
    assert all(p.exists() and p.stat().st_size for p in victims)
    assert js(run("verify", "--json"))["problems"] == []


def test_verify_reports_corrupt_batches_and_checkpoints(run: Run, events: pathlib.Path) -> None:
    seg = events / "events-1" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[70] ^= 0x01
    seg.write_bytes(bytes(data))
    (events / "log-start-offset-checkpoint").write_text("0\n2\nevents 0 1\n")
    doc = js(run("verify", "--json", code=3))
    messages = {p["path"]: p["message"] for p in doc["problems"]}
    assert "CRC-32C mismatch" in messages[str(seg)]
    assert "header says 2 entries, file has 1" in messages[
        str(events / "log-start-offset-checkpoint")]
    # --fix rebuilds indexes only: it never rewrites a log, so the log stays unhealthy
    run("verify", "--fix", code=3)
    assert seg.read_bytes() == bytes(data)


def test_verify_reports_a_torn_tail_as_a_warning_in_the_active_segment(
    run: Run, events: pathlib.Path
) -> None:
    active = sorted((events / "events-0").glob("*.log"))[-1]
    with active.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00partial")
    doc = js(run("verify", "--json"))
    [problem] = doc["problems"]
    assert problem["severity"] == "warning" and "incomplete batch" in problem["message"]


def test_verify_fix_needs_the_writer_lock(run: Run, events: pathlib.Path) -> None:
    _corrupt_index(events)
    with embedlog.open(events):
        fails(run("verify", "--fix", code=1), 1, "open for writing by another")


def test_verify_real_kafka_folders(run: Run, kafka_fixtures: pathlib.Path) -> None:
    for name in ("kafka27-compacted-multiseg", "kafka30-multipartition", "cp512-connect-lz4"):
        doc = js(run("verify", str(kafka_fixtures / name), "--json"))
        assert doc["healthy"], doc["problems"]
        assert doc["errors"] == 0
    legacy = js(run("verify", str(kafka_fixtures / "kafka08-legacy-magic0"), "--json", code=5))
    assert legacy["errors"] == 2


def test_verify_a_copy_of_a_kafka_folder_and_fix_it(run: Run, kafka_fixtures: pathlib.Path,
                                                    tmp_path: pathlib.Path) -> None:
    copy = tmp_path / "kafka"
    shutil.copytree(kafka_fixtures / "kafka30-multipartition", copy)
    os.chmod(copy, 0o755)
    for root, dirs, files in os.walk(copy):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    warned = js(run("verify", str(copy), "--json"))["problems"]
    assert warned and all(p["severity"] == "warning" for p in warned)
    run("verify", str(copy), "--fix")
    assert js(run("verify", str(copy), "--json"))["problems"] == []
    assert js(run("dump-log", str(copy), "--verify-index", "--json"))["problems"] == 0


# ---------------------------------------------------------------------------------- compact


def test_compact(run: Run, log_dir: pathlib.Path) -> None:
    run("topics", "create", "profiles", "--config", "cleanup.policy=compact",
        "--config", "segment.bytes=2000")
    lines = "".join(f"user-{i % 7}:v{i}\n" for i in range(300))
    run("produce", "profiles", "--key-separator", ":", "--batch-size", "10", input=lines)
    before = records(log_dir, "profiles")
    doc = js(run("compact", "profiles", "--roll", "--json"))
    [part] = doc["partitions"]
    assert part["bytes_after"] < part["bytes_before"]
    assert doc["stats"]["records_retained"] == 7
    after = records(log_dir, "profiles")
    latest = {r.key: (r.offset, r.value) for r in before}
    assert {r.key: (r.offset, r.value) for r in after} == latest  # offsets preserved
    assert len(after) == 7
    text = run("compact", "profiles").stdout
    assert text.splitlines()[0].split() == ["PARTITION", "SEGMENTS", "BYTES", "->", "SEGMENTS",
                                            "BYTES"]
    assert text.rstrip().endswith("0 tombstones removed.")
    run("topics", "create", "plain")
    fails(run("compact", "plain", code=1), 1, "only compacted topics can be compacted")
    fails(run("compact", "nope", code=1), 1, "unknown topic")


# ---------------------------------------------------------------------------------- groups


def test_consume_with_a_group_commits_and_resumes(run: Run, events: pathlib.Path) -> None:
    first = run("consume", "events", "--group", "g", "--max-messages", "12", "--format", "json")
    got = [json.loads(x) for x in first.stdout.splitlines()]
    assert len(got) == 12
    rest = [json.loads(x) for x in
            run("consume", "events", "--group", "g", "--format", "json").stdout.splitlines()]
    # at-least-once without duplicates here: every record exactly once over the two runs
    seen = sorted((r["partition"], r["offset"]) for r in got + rest)
    assert seen == [(p, o) for p in range(3) for o in range(10)]
    assert run("consume", "events", "--group", "g").stdout == ""
    assert js(run("groups", "list", "--json")) == ["g"]


def test_groups_describe_shows_lag(run: Run, events: pathlib.Path) -> None:
    run("consume", "events", "--group", "g", "--max-messages", "7")
    [doc] = js(run("groups", "describe", "g", "--json"))
    assert doc["group"] == "g" and doc["members"] == []  # the consumer left when it stopped
    offsets = {r["partition"]: r for r in doc["offsets"]}
    assert sum(r["committed"] or 0 for r in offsets.values()) == 7
    for r in offsets.values():
        assert r["log_end"] == 10
        assert r["lag"] == (None if r["committed"] is None else 10 - r["committed"])
    assert doc["total_lag"] == sum(r["lag"] or 0 for r in offsets.values())
    text = run("groups", "describe", "g").stdout.splitlines()
    assert text[0].startswith("Consumer group 'g' has 0 live members")
    assert text[2].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                               "LOG-END-OFFSET", "LAG", "CONSUMER-ID"]
    fails(run("groups", "describe", "nope", code=1), 1, "does not exist")


def test_groups_describe_a_live_member(run: Run, events: pathlib.Path) -> None:
    with embedlog.open(events, read_only=True) as log, log.consumer("events",
                                                                    group="live") as c:
        assert c.poll(timeout=5.0)
        c.commit()
        [doc] = js(run("groups", "describe", "live", "--json"))
        [member] = doc["members"]
        assert member["alive"] and member["topics"] == ["events"]
        assert sorted(member["partitions"]) == [["events", p] for p in range(3)]
        assert {r["owner"] for r in doc["offsets"]} == {member["id"]}
        # a live group cannot be reset
        fails(run("groups", "reset-offsets", "live", "--all-topics", "--to-earliest",
                  "--execute", code=1), 1, "live member")


def test_groups_reset_offsets(run: Run, events: pathlib.Path) -> None:
    run("consume", "events", "--group", "g")  # everything consumed: committed 10 everywhere
    dry = run("groups", "reset-offsets", "g", "--topic", "events:1", "--to-offset", "3")
    assert dry.stdout.splitlines()[1].split() == ["g", "events", "1", "3"]
    assert "Dry run" in dry.stderr
    assert run("consume", "events", "--group", "g").stdout == ""  # nothing was committed

    def reset(*how: str) -> list[int]:
        doc = js(run("groups", "reset-offsets", "g", "--all-topics", *how, "--execute",
                     "--json"))
        assert doc["executed"]
        return [r["new_offset"] for r in doc["offsets"]]

    assert reset("--shift-by", "-4") == [6, 6, 6]
    assert reset("--shift-by", "-100") == [0, 0, 0]  # clamped to the log start
    assert reset("--to-latest") == [10, 10, 10]
    assert reset("--to-datetime", str(BASE_TS + 7000)) == [7, 7, 7]
    assert reset("--to-earliest") == [0, 0, 0]
    assert reset("--to-offset", "99") == [10, 10, 10]  # clamped to the log end
    run("groups", "reset-offsets", "g", "--topic", "events:0,2", "--to-offset", "8",
        "--execute")
    again = sorted((json.loads(x)["partition"], json.loads(x)["offset"]) for x in run(
        "consume", "events", "--group", "g", "--format", "json").stdout.splitlines())
    assert again == [(0, 8), (0, 9), (2, 8), (2, 9)]
    fails(run("groups", "reset-offsets", "g", "--all-topics", code=2), 2, "exactly one")
    fails(run("groups", "reset-offsets", "g", "--to-latest", code=2), 2, "--all-topics")
    fails(run("groups", "reset-offsets", "g", "--topic", "events:x", "--to-latest", code=2), 2,
          "TOPIC:P1,P2")


def test_consume_group_refuses_explicit_positions(run: Run, events: pathlib.Path) -> None:
    fails(run("consume", "events", "--group", "g", "--partition", "0", code=2), 2,
          "reset-offsets")


def test_verify_checks_group_files(run: Run, events: pathlib.Path) -> None:
    run("consume", "events", "--group", "g", "--max-messages", "3")
    offsets = events / "__groups" / "g" / "offsets"
    offsets.write_text("0\n5\nevents 0 1\n")
    doc = js(run("verify", "--json", code=3))
    assert [p["path"] for p in doc["problems"]] == [str(offsets)]


# ---------------------------------------------------------------------------------- perf-test


def test_perf_test_produce_and_consume(run: Run, log_dir: pathlib.Path) -> None:
    out = run("perf-test", "produce", "--num-records", "3000", "--record-size", "50",
              "--key-size", "8", "--batch-size", "250", "--partitions", "2", "--json")
    produced = js(out)
    assert out.stderr == ""  # no progress bar when stderr is not a terminal
    assert produced["records"] == 3000 and produced["bytes"] == 3000 * 58
    lat = produced["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert produced["records_per_sec"] > 0
    recs = records(log_dir, "perf-test")
    assert len(recs) == 3000 and {len(r.value or b"") for r in recs} == {50}
    assert {r.partition for r in recs} == {0, 1}

    consumed = js(run("perf-test", "consume", "--json", "--fetch-size", "100"))
    assert (consumed["records"], consumed["bytes"]) == (3000, 3000 * 58)
    limited = js(run("perf-test", "consume", "--messages", "1234", "--json"))
    assert limited["records"] == 1234
    line = run("perf-test", "produce", "--num-records", "10", "--topic", "t2").stdout
    assert line.startswith("10 records sent, ") and "ms 99.9th" in line


def test_perf_test_durable_and_throttled(run: Run, log_dir: pathlib.Path) -> None:
    doc = js(run("perf-test", "produce", "--num-records", "40", "--batch-size", "1",
                 "--durability", "fsync", "--throughput", "400", "--json"))
    assert doc["records"] == 40
    assert doc["seconds"] >= 40 / 400 * 0.9  # the cap holds the rate at or below 400/s


# ---------------------------------------------------------------------------------- the program


def test_python_dash_m_and_console_script(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "EMBEDLOG_DIR": str(tmp_path / "log")}
    create = subprocess.run([sys.executable, "-m", "embedlog", "topics", "create", "t"],
                            capture_output=True, text=True, env=env, check=True)
    assert create.stdout == "Created topic t.\n"
    exe = shutil.which("embedlog")
    if exe is None:
        pytest.skip("the embedlog console script is not on PATH (package not installed)")
    listed = subprocess.run([exe, "topics", "list", "--json"], capture_output=True, text=True,
                            env=env, check=True)
    assert json.loads(listed.stdout) == ["t"]
    bad = subprocess.run([exe, "consume", "nope"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1
    assert bad.stderr == "Error: unknown topic 'nope' in " + str(tmp_path / "log") + "\n"


def test_every_command_has_help(run: Run) -> None:
    for path in command_paths():
        args: Sequence[str] = path.split()[1:]
        out = run(*args, "--help")
        assert out.stdout.startswith("Usage: embedlog")
        summary = out.stdout.split("\n\n")[1].strip()
        assert summary and not summary.startswith("Options:"), path
