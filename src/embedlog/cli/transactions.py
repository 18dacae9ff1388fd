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

from ..txn_admin import DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, HangingTransaction, ProducerInfo
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
              default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS // 60_000, show_default=True,
              help="Also list transactions the coordinator has ongoing whose producer wrote "
                   "nothing to the partition for longer than this (Kafka's default: its "
                   "transaction.max.timeout.ms). Opening the log for this command aborts what "
                   "earlier processes left ongoing.")
@dir_option
@json_option
def find_hanging(topic: str | None, partitions: Sequence[int],
                 max_transaction_timeout: int, log_dir: str, as_json: bool) -> None:
    """List transactions open in a partition that nothing will end: the coordinator has no
    ongoing transaction of their producer id and epoch, or they are open longer than
    --max-transaction-timeout."""
    if partitions and topic is None:
        raise click.UsageError("--partition needs --topic")
    with open_log(log_dir, write=True, upkeep=False) as log:
        found = log.find_hanging_transactions(
            topic, list(partitions) or None,
            max_transaction_timeout_ms=max_transaction_timeout * 60_000)
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
@click.option("--start-offset", type=click.IntRange(min=0),
              help="The first offset of the transaction to abort (find-hanging's StartOffset).")
@click.option("--producer-id", type=click.IntRange(min=0),
              help="Instead of --start-offset: abort this producer's open transaction "
                   "(describe-producers' ProducerId).")
@click.option("--producer-epoch", type=click.IntRange(min=0),
              help="With --producer-id: its epoch (describe-producers' ProducerEpoch); "
                   "refused if the open transaction's differs.")
@click.option("--coordinator-epoch", type=int,
              help="With --producer-id: the coordinator epoch written in the marker "
                   "(describe-producers' LatestCoordinatorEpoch; a negative one: 0; default 0).")
@dir_option
@json_option
def abort(topic: str, partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int | None, log_dir: str,
          as_json: bool) -> None:
    """Abort the transaction open at --start-offset, or the open transaction of --producer-id
    and --producer-epoch: append an ABORT marker of its producer id and epoch (durable).
    Refused when nothing is open there, the epoch differs or its producer's transaction is
    still ongoing."""
    _check_abort_options(start_offset, producer_id, producer_epoch, coordinator_epoch)
    with open_log(log_dir, write=True, upkeep=False) as log:
        info = log.abort_transaction(topic, partition, start_offset, producer_id=producer_id,
                                     producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch)
        stable = log.last_stable_offset(topic, partition)
    if as_json:
        echo_json({"topic": topic, "partition": partition, **_aborted(info),
                   "last_stable_offset": stable})
        return
    click.echo(f"Aborted the transaction of producer {info.producer_id} epoch {info.epoch} "
               f"open at offset {info.txn_start_offset} of {topic}-{partition}; last stable "
               f"offset now {stable}.")


def _check_abort_options(start_offset: int | None, producer_id: int | None,
                         producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Kafka's two forms of ``abort``: --start-offset, or --producer-id with --producer-epoch
    (and optionally --coordinator-epoch)."""
    if producer_id is None and (producer_epoch is not None or coordinator_epoch is not None):
        raise click.UsageError("--producer-epoch and --coordinator-epoch go with --producer-id")
    if start_offset is not None and producer_id is not None:
        raise click.UsageError("give --start-offset or --producer-id, not both")
    if start_offset is None and producer_id is None:
        raise click.UsageError("give the transaction to abort: --start-offset, or --producer-id "
                               "and --producer-epoch")
    if producer_id is not None and producer_epoch is None:
        raise click.UsageError("--producer-id needs --producer-epoch")


def _aborted(info: ProducerInfo) -> dict[str, object]:
    return {"producer_id": info.producer_id, "epoch": info.epoch,
            "start_offset": info.txn_start_offset}
