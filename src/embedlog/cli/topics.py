"""``embedlog topics create|list|describe|alter|delete`` (Kafka's ``kafka-topics``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ..config import TopicConfig
from ..log import Log
from .options import CONFIG, dir_option, json_option, open_log
from .output import echo_json

__all__ = ["topic_report", "topics"]


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command()
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Number of partitions.")
@click.option("--config", "configs", type=CONFIG, multiple=True,
              help="Topic config under its Kafka name, e.g. cleanup.policy=compact (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly if the topic exists.")
@dir_option
def create(name: str, partitions: int, configs: Sequence[tuple[str, str]],
           if_not_exists: bool, log_dir: str) -> None:
    """Create topic NAME (the log directory is created if missing)."""
    with open_log(log_dir, write=True, create=True) as log:
        if if_not_exists and name in log.topics():
            return
        log.create_topic(name, partitions=partitions, config=dict(configs))
    click.echo(f"Created topic {name}.")


@topics.command("list")
@dir_option
@json_option
def list_topics(log_dir: str, as_json: bool) -> None:
    """List topic names."""
    with open_log(log_dir) as log:
        names = log.topics()
    if as_json:
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


def overrides(config: TopicConfig) -> dict[str, Any]:
    """The settings set explicitly or differing from Kafka's defaults."""
    return config.overrides()


def topic_report(log: Log, name: str) -> dict[str, Any]:
    """Partitions, config overrides and, per partition, offsets, segment count and bytes."""
    parts = []
    for p in range(log.partition_count(name)):
        segments = log.segments(name, p)
        parts.append({
            "partition": p,
            "start_offset": log.start_offset(name, p),
            "end_offset": log.end_offset(name, p),
            "segments": len(segments),
            "bytes": sum(s.size for s in segments),
        })
    return {
        "topic": name,
        "partitions": len(parts),
        "config": overrides(log.topic_config(name)),
        "partition_details": parts,
    }


@topics.command()
@click.argument("names", nargs=-1)
@dir_option
@json_option
def describe(names: Sequence[str], log_dir: str, as_json: bool) -> None:
    """Show partitions, config overrides and per-partition offsets, segments and bytes of the
    NAMES topics (all topics if none is given)."""
    with open_log(log_dir) as log:
        reports = [topic_report(log, n) for n in (names or log.topics())]
    if as_json:
        echo_json(reports)
        return
    for r in reports:
        configs = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                           for k, v in r["config"].items())
        click.echo(f"Topic: {r['topic']}\tPartitionCount: {r['partitions']}\tConfigs: {configs}")
        for p in r["partition_details"]:
            click.echo(
                f"\tTopic: {r['topic']}\tPartition: {p['partition']}\t"
                f"StartOffset: {p['start_offset']}\tEndOffset: {p['end_offset']}\t"
                f"Segments: {p['segments']}\tBytes: {p['bytes']}"
            )


@topics.command()
@click.argument("name")
@click.option("--config", "configs", type=CONFIG, multiple=True,
              help="Setting to change, under its Kafka name (repeatable).")
@click.option("--delete-config", "deleted", multiple=True, metavar="NAME",
              help="Setting to reset to Kafka's default (repeatable).")
@dir_option
def alter(name: str, configs: Sequence[tuple[str, str]], deleted: Sequence[str],
          log_dir: str) -> None:
    """Change the config of topic NAME."""
    if not configs and not deleted:
        raise click.UsageError("give at least one --config or --delete-config")
    changes: dict[str, Any] = dict(configs)
    default = TopicConfig().to_kafka()
    for key in deleted:
        if key not in default:
            TopicConfig.from_kafka({key: ""})  # raises the unknown-config error
        changes[key] = None
    with open_log(log_dir, write=True) as log:
        log.alter_topic(name, changes)
    click.echo(f"Updated config for topic {name}.")


@topics.command()
@click.argument("name")
@dir_option
def delete(name: str, log_dir: str) -> None:
    """Delete topic NAME and all its records."""
    with open_log(log_dir, write=True) as log:
        log.delete_topic(name)
    click.echo(f"Deleted topic {name}.")
