"""``embedlog transactions describe-producers|find-hanging|abort`` (Kafka's
``kafka-transactions.sh``, KIP-664).

A transaction whose COMMIT/ABORT marker damage made recovery cut off a partition stays open in
that partition for good: its last stable offset never passes it, so ``read_committed`` readers
stop there. ``find-hanging`` lists such transactions, ``abort`` ends one with an ABORT marker
(:mod:`embedlog.txn_admin`). All three take the writer lock: the producer state is the writer's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import click

from ..txn_admin import HangingTransaction, ProducerInfo
from .options import dir_option, json_option, open_log
from .output import echo_json, table

__all__ = ["transactions"]


def _dash(value: int | None) -> int | str:
    return "-" if value is None else value


@click.group()
def transactions() -> None:
    """Find and abort hanging transactions (Kafka's kafka-transactions.sh)."""


@transactions.command("describe-producers")
@click.option("--topic", required=True, help="Topic.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="Partition.")
@dir_option
@json_option
def describe_producers(topic: str, partition: int, log_dir: str, as_json: bool) -> None:
    """List a partition's producers: epoch, last sequence, last write and the first offset
    of the transaction each has open."""
    with open_log(log_dir, write=True, upkeep=False) as log:
        infos = log.describe_producers(topic, partition)
    if as_json:
        echo_json([dataclasses.asdict(i) for i in infos])
        return
    table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
           "LastTimestamp", "CurrentTransactionStartOffset"],
          [[i.producer_id, i.epoch, i.coordinator_epoch, i.last_sequence, i.last_timestamp,
            _dash(i.txn_start_offset)] for i in infos])


@transactions.command("find-hanging")
@click.option("--topic", help="Topic (default: every topic).")
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Partition (repeatable; default: every partition of --topic).")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), metavar="MINUTES",
              help="Also list transactions whose producer wrote nothing to the partition "
                   "for longer than this (Kafka's transaction.max.timeout.ms is 15).")
@dir_option
@json_option
def find_hanging(topic: str | None, partitions: Sequence[int],
                 max_transaction_timeout: int | None, log_dir: str, as_json: bool) -> None:
    """List transactions open in a partition that nothing will end: the coordinator has no
    ongoing transaction of their producer id and epoch (or, with --max-transaction-timeout,
    they are open longer than it)."""
    if partitions and topic is None:
        raise click.UsageError("--partition needs --topic")
    max_ms = None if max_transaction_timeout is None else max_transaction_timeout * 60_000
    with open_log(log_dir, write=True, upkeep=False) as log:
        found = log.find_hanging_transactions(topic, list(partitions) or None,
                                              max_transaction_timeout_ms=max_ms)
    if as_json:
        echo_json([dataclasses.asdict(h) for h in found])
        return
    table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset",
           "LastTimestamp", "Duration(min)", "Reason"],
          [_hanging_row(h) for h in found])


def _hanging_row(h: HangingTransaction) -> list[object]:
    return [h.topic, h.partition, h.producer_id, h.epoch, h.start_offset, h.last_timestamp,
            h.duration_ms // 60_000, h.reason]


@transactions.command()
@click.option("--topic", required=True, help="Topic.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="Partition.")
@click.option("--start-offset", type=click.IntRange(min=0), required=True,
              help="The first offset of the transaction to abort (find-hanging's StartOffset).")
@dir_option
@json_option
def abort(topic: str, partition: int, start_offset: int, log_dir: str, as_json: bool) -> None:
    """Abort the transaction open at --start-offset: append an ABORT marker of its producer
    id and epoch (durable). Refused when nothing is open there or its producer's transaction
    is still ongoing."""
    with open_log(log_dir, write=True, upkeep=False) as log:
        info = log.abort_transaction(topic, partition, start_offset)
        stable = log.last_stable_offset(topic, partition)
    if as_json:
        echo_json({"topic": topic, "partition": partition, **_aborted(info),
                   "last_stable_offset": stable})
        return
    click.echo(f"Aborted the transaction of producer {info.producer_id} epoch {info.epoch} "
               f"open at offset {start_offset} of {topic}-{partition}; last stable offset "
               f"now {stable}.")


def _aborted(info: ProducerInfo) -> dict[str, object]:
    return {"producer_id": info.producer_id, "epoch": info.epoch,
            "start_offset": info.txn_start_offset}
