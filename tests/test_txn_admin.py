"""Hanging transactions (KIP-664): a COMMIT marker that damage made recovery cut off the active
segment's tail leaves its transaction open in the partition for good; ``find_hanging_transactions``
lists it, ``abort_transaction`` ends it with an ABORT marker, and refuses anything else."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import time

import pytest
from click.testing import CliRunner

import embedlog
from embedlog import HangingTransaction, ProducerInfo, TopicPartition, TransactionStateError
from embedlog.cli import cli
from embedlog.naming import CLEAN_SHUTDOWN_FILE

TP = TopicPartition("t", 0)


def committed_values(log: embedlog.Log) -> list[bytes | None]:
    """What a read_committed consumer reads from the start up to the last stable offset (a poll
    may return nothing while it passes aborted records and markers: it goes on until there)."""
    consumer = log.consumer(isolation_level="read_committed")
    consumer.assign([TP])
    consumer.seek_to_beginning()
    got: list[bytes | None] = []
    for _ in range(1000):
        if consumer.position(TP) >= log.last_stable_offset("t", 0):
            break
        got += [r.value for r in consumer.poll(max_records=100)]
    consumer.close()
    return got


def transaction(producer: embedlog.TransactionalProducer, name: str, n: int, *,
                commit: bool = True) -> list[bytes]:
    values = [b"%s-%d" % (name.encode(), i) for i in range(n)]
    producer.begin_transaction()
    for v in values:
        producer.send("t", v, partition=0)
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()
    return values


def open_transaction(log: embedlog.Log, value: bytes, timeout_ms: int
                     ) -> embedlog.TransactionalProducer:
    """A producer of transactional id ``tx`` with ``value`` written in its open transaction."""
    log.create_topic("t")
    p: embedlog.TransactionalProducer = log.producer(transactional_id="tx",
                                                     transaction_timeout_ms=timeout_ms)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value, partition=0)
    p.flush()
    return p


def hang(path: pathlib.Path) -> tuple[list[bytes], int]:
    """A log whose last transaction's COMMIT marker is cut by damage: the values read_committed
    must return once it is aborted, and the hanging transaction's first offset."""
    with embedlog.open(path) as log:
        log.create_topic("t")
        p = log.producer(transactional_id="tx")
        p.init_transactions()
        kept = transaction(p, "a", 3)
        transaction(p, "b", 2, commit=False)
        log.append("t", b"plain", partition=0)
        kept.append(b"plain")
        start = log.end_offset("t", 0)
        transaction(p, "c", 3)  # its marker is the partition's last batch
        p.close()
        assert committed_values(log)[-3:] == [b"c-0", b"c-1", b"c-2"]
    active = sorted((path / "t-0").glob("*.log"))[-1]
    os.truncate(active, active.stat().st_size - 5)  # the marker torn: recovery cuts it
    (path / CLEAN_SHUTDOWN_FILE).unlink()
    return kept, start


def test_a_cut_marker_hangs_until_aborted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    kept, start = hang(path)
    now = int(time.time() * 1000)
    with embedlog.Log(path, clock=lambda: now) as log:  # durations stay what they are
        end = log.end_offset("t", 0)
        assert end == start + 3 and not log.quarantined()
        assert log.last_stable_offset("t", 0) == start
        p = log.producer(transactional_id="tx")
        p.init_transactions()  # a new epoch: the coordinator has nothing ongoing
        assert log.last_stable_offset("t", 0) == start
        [info] = log.describe_producers("t", 0)
        assert (info.epoch, info.txn_start_offset) == (0, start)
        [hanging] = log.find_hanging_transactions()
        assert hanging == HangingTransaction("t", 0, info.producer_id, 0, start,
                                             info.last_timestamp, now - info.last_timestamp,
                                             "no-ongoing-transaction")
        assert log.find_hanging_transactions("t", [0]) == [hanging]
        assert log.abort_transaction("t", 0, start) == info
        assert log.last_stable_offset("t", 0) == end + 1 == log.end_offset("t", 0)
        assert log.find_hanging_transactions() == []
        assert log.describe_producers("t", 0)[0].txn_start_offset is None
        assert committed_values(log) == kept
        later = transaction(p, "d", 2)  # the re-initialised producer goes on
        p.close()
        assert committed_values(log) == kept + later
    txnindex = (path / "t-0" / f"{0:020d}.txnindex").read_bytes()
    entries = [struct.unpack_from(">hqqqq", txnindex, i) for i in range(0, len(txnindex), 34)]
    assert entries[-1][1:4] == (info.producer_id, start, end)
    with embedlog.open(path) as log:  # the abort is durable
        assert log.last_stable_offset("t", 0) == log.end_offset("t", 0)
        assert log.find_hanging_transactions() == []
        assert committed_values(log) == kept + later
    pytest.importorskip("pyarrow")
    with embedlog.open(path, read_only=True) as reader:  # what Arrow (and Spark) read too
        table = reader.read_table("t", isolation_level="read_committed")
        assert table.column("value").to_pylist() == kept + later


def test_a_live_transaction_is_not_hanging_nor_aborted(tmp_path: pathlib.Path) -> None:
    now = [1_000_000]
    with embedlog.Log(tmp_path / "log", clock=lambda: now[0]) as log:
        p = open_transaction(log, b"open", 600_000)
        assert log.find_hanging_transactions() == []
        now[0] += 120_000
        assert log.find_hanging_transactions(max_transaction_timeout_ms=60_000) == [
            HangingTransaction("t", 0, p.producer_id, p.producer_epoch, 0, 1_000_000, 120_000,
                               "timed-out")]
        with pytest.raises(TransactionStateError, match="ongoing for transactional id 'tx'"):
            log.abort_transaction("t", 0, 0)
        assert log.last_stable_offset("t", 0) == 0
        p.commit_transaction()
        assert committed_values(log) == [b"open"]
        p.close()


def test_find_hanging_defaults_to_kafkas_15_minute_max_transaction_timeout(
        tmp_path: pathlib.Path) -> None:
    # kafka-transactions.sh find-hanging's --max-transaction-timeout defaults to 15 minutes: a
    # transaction its coordinator still has ongoing counts as hanging once open longer.
    now = [1_000_000]
    with embedlog.Log(tmp_path / "log", clock=lambda: now[0]) as log:
        p = open_transaction(log, b"open", 3_600_000)
        now[0] += 15 * 60_000
        assert log.find_hanging_transactions() == []  # not longer than 15 minutes yet
        now[0] += 1
        timed_out = HangingTransaction("t", 0, p.producer_id, p.producer_epoch, 0, 1_000_000,
                                       15 * 60_000 + 1, "timed-out")
        assert log.find_hanging_transactions() == [timed_out]
        assert log.find_hanging_transactions("t", [0]) == [timed_out]
        assert log.find_hanging_transactions(max_transaction_timeout_ms=None) == []
        assert log.find_hanging_transactions(max_transaction_timeout_ms=16 * 60_000) == []
        p.commit_transaction()
        assert log.find_hanging_transactions() == []
        p.close()


def test_cli_find_hanging_defaults_to_15_minutes(tmp_path: pathlib.Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The command opens the log, which aborts what an earlier process left ongoing (its
    # producer is dead): the timeout it passes only matters to a process with live producers.
    path = tmp_path / "log"
    hang(path)
    asked: list[int | None] = []
    real = embedlog.Log.find_hanging_transactions

    def spy(self: embedlog.Log, *args: object, **kwargs: int | None) -> list[HangingTransaction]:
        asked.append(kwargs["max_transaction_timeout_ms"])
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(embedlog.Log, "find_hanging_transactions", spy)
    runner = CliRunner(env={"EMBEDLOG_DIR": str(path)})
    for args in ([], ["--max-transaction-timeout", "30"], ["--max-transaction-timeout", "0"]):
        result = runner.invoke(cli, ["transactions", "find-hanging", "--json", *args])
        assert result.exit_code == 0, result.output
        [row] = json.loads(result.output)  # the cut marker's: hanging at any age
        assert row["reason"] == "no-ongoing-transaction"
    assert asked == [15 * 60_000, 30 * 60_000, 0]
    help_text = runner.invoke(cli, ["transactions", "find-hanging", "--help"]).output
    assert "[default: 15;" in help_text


def test_a_timed_out_transaction_is_aborted_by_the_coordinator_first(
        tmp_path: pathlib.Path) -> None:
    now = [1_000_000]
    with embedlog.Log(tmp_path / "log", clock=lambda: now[0]) as log:
        p = open_transaction(log, b"late", 1_000)
        now[0] += 5_000
        with pytest.raises(TransactionStateError, match="no transaction is open at offset 0"):
            log.abort_transaction("t", 0, 0)  # the timeout aborted it: one marker, not two
        assert log.end_offset("t", 0) == log.last_stable_offset("t", 0) == 2
        assert committed_values(log) == []
        with pytest.raises(embedlog.ProducerFencedError):
            p.commit_transaction()


def test_abort_by_producer_id(tmp_path: pathlib.Path) -> None:
    # kafka-transactions.sh abort --producer-id --producer-epoch --coordinator-epoch: the open
    # transaction of that producer in the partition, its epoch checked.
    path = tmp_path / "log"
    kept, start = hang(path)
    with embedlog.open(path) as log:
        end = log.end_offset("t", 0)
        [info] = log.describe_producers("t", 0)
        pid = info.producer_id
        assert (info.epoch, info.txn_start_offset) == (0, start)
        with pytest.raises(TransactionStateError, match=f"producer {pid + 1} has no open"):
            log.abort_transaction("t", 0, producer_id=pid + 1, producer_epoch=0)
        with pytest.raises(TransactionStateError, match="epoch 0, not 1"):
            log.abort_transaction("t", 0, producer_id=pid, producer_epoch=1)
        assert log.end_offset("t", 0) == end  # refusals write nothing
        assert log.abort_transaction("t", 0, producer_id=pid, producer_epoch=0,
                                     coordinator_epoch=7) == info
        assert log.last_stable_offset("t", 0) == end + 1 == log.end_offset("t", 0)
        assert log.find_hanging_transactions() == []
        assert committed_values(log) == kept
        [marker] = list(log.read_batches("t", 0, end, control=True))
        assert marker.is_control and (marker.producer_id, marker.producer_epoch) == (pid, 0)
        # an ABORT control key; the marker value's coordinator epoch is the one given
        assert (marker.key(0), marker.value(0)) == (struct.pack(">hh", 0, 0),
                                                    struct.pack(">hi", 0, 7))
        with pytest.raises(TransactionStateError, match=f"producer {pid} has no open"):
            log.abort_transaction("t", 0, producer_id=pid, producer_epoch=0)


def test_abort_by_producer_id_refuses_an_ongoing_transaction(tmp_path: pathlib.Path) -> None:
    with embedlog.Log(tmp_path / "log") as log:
        p = open_transaction(log, b"open", 600_000)
        with pytest.raises(TransactionStateError, match="ongoing for transactional id 'tx'"):
            log.abort_transaction("t", 0, producer_id=p.producer_id,
                                  producer_epoch=p.producer_epoch)
        p.commit_transaction()
        assert committed_values(log) == [b"open"]
        p.close()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({}, embedlog.UsageError, "start_offset, or producer_id and producer_epoch"),
    ({"start_offset": 0, "producer_id": 0}, embedlog.UsageError, "not both"),
    ({"start_offset": 0, "producer_id": 0, "producer_epoch": 0}, embedlog.UsageError,
     "not both"),
    ({"producer_id": 0}, embedlog.UsageError, "producer_id needs producer_epoch"),
    ({"start_offset": 0, "producer_epoch": 0}, embedlog.UsageError, "go with producer_id"),
    ({"producer_epoch": 0, "coordinator_epoch": 0}, embedlog.UsageError,
     "go with producer_id"),
    ({"producer_id": -1, "producer_epoch": 0}, embedlog.ArgumentOutOfRangeError,
     "producer_id"),
    ({"producer_id": 0, "producer_epoch": "0"}, embedlog.InvalidArgumentError,
     "producer_epoch"),
    ({"producer_id": 0, "producer_epoch": 0, "coordinator_epoch": 2**31},
     embedlog.ArgumentOutOfRangeError, "coordinator_epoch"),
])
def test_abort_argument_combinations(tmp_path: pathlib.Path, kwargs: dict[str, object],
                                     error: type[Exception], match: str) -> None:
    path = tmp_path / "log"
    hang(path)
    with embedlog.open(path) as log:
        end = log.end_offset("t", 0)
        with pytest.raises(error, match=match):
            log.abort_transaction("t", 0, **kwargs)  # type: ignore[arg-type]
        assert log.end_offset("t", 0) == end and log.find_hanging_transactions() != []


def test_refusals(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
        log.append("t", b"plain", partition=0)
        with pytest.raises(TransactionStateError, match="no transaction is open at offset 0"):
            log.abort_transaction("t", 0, 0)
        assert log.describe_producers("t", 0) == []
        with pytest.raises(embedlog.UnknownTopicError):
            log.abort_transaction("nope", 0, 0)
        with pytest.raises(embedlog.OffsetOutOfRangeError):
            log.abort_transaction("t", 0, -1)
        with pytest.raises(embedlog.ArgumentOutOfRangeError):
            log.find_hanging_transactions(max_transaction_timeout_ms=-1)
        with pytest.raises(embedlog.UsageError, match="partitions need a topic"):
            log.find_hanging_transactions(partitions=[0])
        with pytest.raises(embedlog.InvalidArgumentError):
            log.find_hanging_transactions("t", 0)  # type: ignore[arg-type]
        with pytest.raises(embedlog.UnknownTopicError):
            log.find_hanging_transactions("t", [1])
        assert log.end_offset("t", 0) == 1
    hang(tmp_path / "hanging")
    with embedlog.open(tmp_path / "hanging", read_only=True) as reader:
        for call in (lambda: reader.describe_producers("t", 0),
                     reader.find_hanging_transactions,
                     lambda: reader.abort_transaction("t", 0, 4)):
            with pytest.raises(embedlog.ReadOnlyError):
                call()


def test_cli_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    kept, start = hang(path)
    runner = CliRunner(env={"EMBEDLOG_DIR": str(path)})

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli, ["transactions", *args], prog_name="embedlog")
        assert result.exit_code == code, result.output
        return result.output

    [row] = json.loads(run("describe-producers", "--topic", "t", "--partition", "0", "--json"))
    assert row["txn_start_offset"] == start and row["epoch"] == 0
    text = run("find-hanging", "--topic", "t")
    assert "StartOffset" in text and f"  {start}  " in text
    [hanging] = json.loads(run("find-hanging", "--json", "--max-transaction-timeout", "15"))
    assert (hanging["topic"], hanging["start_offset"]) == ("t", start)
    assert "no transaction is open at offset" in run(
        "abort", "--topic", "t", "--partition", "0", "--start-offset", str(start - 1), code=1)
    done = json.loads(run("abort", "--topic", "t", "--partition", "0", "--start-offset",
                          str(start), "--json"))
    assert done == {"topic": "t", "partition": 0, "producer_id": row["producer_id"],
                    "epoch": 0, "start_offset": start, "last_stable_offset": start + 4}
    assert json.loads(run("find-hanging", "--json")) == []
    assert "--partition needs --topic" in run("find-hanging", "--partition", "0", code=2)
    assert "--start-offset, or --producer-id and --producer-epoch" in run(
        "abort", "--topic", "t", "--partition", "0", code=2)
    with embedlog.open(path, read_only=True) as log:
        assert log.last_stable_offset("t", 0) == log.end_offset("t", 0)
        assert committed_values(log) == kept


def test_cli_abort_by_producer_id(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    kept, start = hang(path)
    runner = CliRunner(env={"EMBEDLOG_DIR": str(path)})

    def abort(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli, ["transactions", "abort", "--topic", "t", "--partition",
                                     "0", *args], prog_name="embedlog")
        assert result.exit_code == code, result.output
        return result.output

    for args, message in [
        ((), "--start-offset, or --producer-id and --producer-epoch"),
        (("--start-offset", str(start), "--producer-id", "0"), "not both"),
        (("--producer-id", "0"), "--producer-id needs --producer-epoch"),
        (("--producer-epoch", "0"), "go with --producer-id"),
        (("--start-offset", str(start), "--coordinator-epoch", "0"), "go with --producer-id"),
    ]:
        assert message in abort(*args, code=2)
    [row] = json.loads(runner.invoke(cli, ["transactions", "describe-producers", "--topic",
                                           "t", "--partition", "0", "--json"]).output)
    pid = str(row["producer_id"])
    assert "epoch 0, not 3" in abort("--producer-id", pid, "--producer-epoch", "3", code=1)
    assert "has no open transaction" in abort("--producer-id", str(int(pid) + 1),
                                              "--producer-epoch", "0", code=1)
    text = abort("--producer-id", pid, "--producer-epoch", "0", "--coordinator-epoch", "-1")
    assert f"producer {pid} epoch 0 open at offset {start} of t-0" in text
    assert "has no open transaction" in abort("--producer-id", pid, "--producer-epoch", "0",
                                              "--json", code=1)
    with embedlog.open(path, read_only=True) as log:
        assert log.last_stable_offset("t", 0) == log.end_offset("t", 0)
        assert committed_values(log) == kept


def test_exports() -> None:
    assert ProducerInfo.__doc__ and HangingTransaction.__doc__
    assert issubclass(TransactionStateError, embedlog.UsageError)
