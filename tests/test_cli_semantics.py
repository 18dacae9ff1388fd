"""The command line's answers compared with Kafka's tools: where ``consume`` starts and stops
under each isolation level, and what ``dump-log`` prints of transaction markers."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

import embedlog
from embedlog.cli import cli
from embedlog.consumer import Consumer
from helpers import aborted_log


def invoke(log_dir: pathlib.Path, *args: str) -> Result:
    """``embedlog ARGS`` on the log at ``log_dir``, which must succeed."""
    result = CliRunner(env={"EMBEDLOG_DIR": str(log_dir)}).invoke(cli, list(args),
                                                                 prog_name="embedlog")
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture
def open_txn(log: embedlog.Log) -> Iterator[Any]:
    """Topic ``t``: ``before`` (offset 0), then ``in-txn`` (offset 1) in a transaction still
    open; yields its producer."""
    log.create_topic("t")
    log.append("t", b"before")
    producer = log.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"in-txn", partition=0)
    producer.flush()
    assert (log.last_stable_offset("t", 0), log.end_offset("t", 0)) == (1, 2)
    yield producer
    producer.close()


def _commit_on_first_poll(monkeypatch: pytest.MonkeyPatch, log: embedlog.Log,
                          producer: Any) -> None:
    """Once the command's consumer is placed and polls, the transaction commits and one more
    record is appended."""
    original = Consumer.poll
    done: list[bool] = []

    def poll(self: Consumer, *args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            producer.commit_transaction()
            log.append("t", b"after")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Consumer, "poll", poll)


@pytest.mark.parametrize("placement", [["--follow"], ["--follow", "--partition", "0",
                                                      "--offset", "latest"]])
def test_read_committed_tail_starts_at_the_last_stable_offset(
        log: embedlog.Log, log_dir: pathlib.Path, open_txn: Any,
        monkeypatch: pytest.MonkeyPatch, placement: list[str]) -> None:
    """Kafka's read_committed console consumer starts a tail at the last stable offset, so
    the records of a transaction open then are printed once it commits."""
    _commit_on_first_poll(monkeypatch, log, open_txn)
    out = invoke(log_dir, "consume", "t", *placement, "--isolation-level", "read_committed",
                 "--max-messages", "2", "--timeout-ms", "3000")
    assert out.stdout.splitlines() == ["in-txn", "after"]


def test_read_uncommitted_tail_starts_at_the_log_end(
        log: embedlog.Log, log_dir: pathlib.Path, open_txn: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _commit_on_first_poll(monkeypatch, log, open_txn)
    out = invoke(log_dir, "consume", "t", "--follow", "--max-messages", "1",
                 "--timeout-ms", "3000")
    assert out.stdout.splitlines() == ["after"]


def test_read_committed_without_follow_stops_at_the_last_stable_offset(
        log_dir: pathlib.Path, open_txn: Any) -> None:
    assert invoke(log_dir, "consume", "t", "--isolation-level", "read_committed"
                  ).stdout.splitlines() == ["before"]
    assert invoke(log_dir, "consume", "t").stdout.splitlines() == ["before", "in-txn"]


def test_times_between_two_milliseconds_mean_the_next(log: embedlog.Log,
                                                      log_dir: pathlib.Path) -> None:
    """Every TIME option means "at or after": ``...00.0005Z`` passes over a record of
    ``...00.000``, in consume, get-offsets and groups reset-offsets alike."""
    t0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
    log.create_topic("t")
    log.append_batch("t", [b"at", b"next"], timestamps=[t0, t0 + 1])
    for when, first in (("2024-05-01T12:00:00Z", 0), ("2024-05-01T12:00:00.0005Z", 1),
                        ("2024-05-01T12:00:00.001Z", 1)):
        assert invoke(log_dir, "consume", "t", "--from-time", when).stdout.splitlines() == [
            b.decode() for b in (b"at", b"next")[first:]]
        assert invoke(log_dir, "get-offsets", "--time", when).stdout.split() == [f"t:0:{first}"]
        reset = invoke(log_dir, "groups", "reset-offsets", "g", "--topic", "t", "--json",
                       "--to-datetime", when)
        assert json.loads(reset.stdout)["offsets"][0]["new_offset"] == first


def test_dump_log_prints_markers_as_kafka_dump_log(log_dir: pathlib.Path) -> None:
    """A COMMIT/ABORT marker's record line names its type and coordinator epoch, and never
    prints the marker's key and value bytes as a key and payload."""
    aborted_log(log_dir)
    out = invoke(log_dir, "dump-log", str(log_dir / "t-0"), "--print-data-log").stdout
    markers = [line for line in out.splitlines() if "endTxnMarker" in line]
    assert [m.split(" sequence: ")[1] for m in markers] == [
        "-1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 0",
        "-1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 0"]
    assert out.count("payload: v") == 2
    doc = json.loads(invoke(log_dir, "dump-log", str(log_dir / "t-0"), "--print-data-log",
                            "--json").stdout)
    records = [r for b in doc["files"][0]["batches"] for r in b["records"]]
    assert [(r.get("endTxnMarker"), r.get("coordinatorEpoch")) for r in records] == [
        (None, None), ("COMMIT", 0), (None, None), ("ABORT", 0)]


@pytest.mark.parametrize("bad", [{"topic": "nope", "partition": 0, "offset": 1},
                                 {"topic": "t", "partition": 3, "offset": 1},
                                 {"topic": "t", "partition": 1, "offset": 99},
                                 {"topic": "t", "partition": 1, "offset": -3}])
def test_delete_records_that_fails_deletes_nothing(log_dir: pathlib.Path,
                                                   tmp_path: pathlib.Path,
                                                   bad: dict[str, Any]) -> None:
    """Every target of an offset JSON file is checked before any record is deleted: a request
    that ends in an error (exit code 1) leaves every partition as it was."""
    with embedlog.open(log_dir) as log:
        log.create_topic("t", partitions=2)
        for p in range(2):
            log.append_batch("t", [b"v"] * 10, partition=p)
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "offset": 5}, bad]}))
    result = CliRunner(env={"EMBEDLOG_DIR": str(log_dir)}).invoke(
        cli, ["delete-records", "--offset-json-file", str(spec)])
    assert result.exit_code == 1, result.output
    assert result.stdout == "" and "Error: " in result.stderr
    with embedlog.open(log_dir, read_only=True) as log:
        assert [log.start_offset("t", p) for p in range(2)] == [0, 0]
        assert len(list(log.read("t", 0))) == 10
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "offset": 5}, {"topic": "t", "partition": 1,
                                                      "offset": -1}]}))
    assert invoke(log_dir, "delete-records", "--offset-json-file", str(spec)).stdout.split(
        "\n")[1:3] == ["partition: t-0\tlow_watermark: 5", "partition: t-1\tlow_watermark: 10"]


def test_produce_refuses_an_empty_key_separator(log: embedlog.Log,
                                                log_dir: pathlib.Path) -> None:
    """A bad command line: exit code 2 and one line on stderr, nothing read or written."""
    log.create_topic("t")
    log.close()
    result = CliRunner(env={"EMBEDLOG_DIR": str(log_dir)}).invoke(
        cli, ["produce", "t", "--key-separator", ""], input="k:v\n", prog_name="embedlog")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: ") and "--key-separator" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
    with embedlog.open(log_dir, read_only=True) as view:
        assert view.end_offset("t", 0) == 0


def test_delete_records_refuses_a_compact_only_topic_as_kafka(tmp_path: Any) -> None:
    """Kafka's DeleteRecords is a PolicyViolation on a topic whose cleanup.policy lacks
    ``delete``; the CLI checks it with the other targets, before deleting anything."""
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("plain", partitions=1)
        log.create_topic("keys", partitions=1, config={"cleanup.policy": "compact"})
        log.create_topic("both", partitions=1, config={"cleanup.policy": "compact,delete"})
        for topic in ("plain", "keys", "both"):
            log.append_batch(topic, [b"v%d" % i for i in range(10)],
                             keys=[b"k%d" % i for i in range(10)])
        with pytest.raises(embedlog.PolicyViolationError, match=r"cleanup\.policy"):
            log.delete_records("keys", 0, 5)
        assert log.start_offset("keys", 0) == 0
        assert log.delete_records("both", 0, 3) == 3
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "plain", "partition": 0, "offset": 5},
        {"topic": "keys", "partition": 0, "offset": 5}]}))
    result = CliRunner(env={"EMBEDLOG_DIR": path}).invoke(
        cli, ["delete-records", "--offset-json-file", str(spec)], prog_name="embedlog")
    assert result.exit_code != 0
    assert "cleanup.policy" in result.output
    with embedlog.open(path, read_only=True) as log:
        assert log.start_offset("plain", 0) == 0  # nothing was deleted
