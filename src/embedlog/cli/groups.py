"""``embedlog groups list|describe|reset-offsets`` (Kafka's ``kafka-consumer-groups``).

Groups live in ``<log dir>/__groups/<group>/`` (see :mod:`embedlog.groups`); these commands read
them without joining. ``reset-offsets`` is a dry run unless ``--execute``, and like Kafka's it
refuses to change a group that has live members (their processes hold their member files'
locks), because they would overwrite the reset at their next commit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from ..errors import GroupError, UnknownTopicError
from ..groups import (
    ASSIGNORS,
    GroupState,
    OffsetStore,
    group_directory,
    group_names,
    live_members,
)
from ..log import Log
from ..naming import GROUP_LOCK_FILE, GROUP_STATE_FILE
from ..records import TopicPartition
from .options import TIMESTAMP, dir_option, json_option, open_log, select_partitions
from .output import echo_json, table

__all__ = ["GroupView", "groups"]


@dataclass(frozen=True)
class GroupView:
    """A group as stored: its state, committed offsets, and which members are alive."""

    name: str
    directory: str
    state: GroupState
    committed: dict[TopicPartition, int]
    alive: frozenset[str]

    @classmethod
    def load(cls, log: Log, name: str) -> GroupView:
        directory = _existing_group(log, name)
        if directory is None:
            raise GroupError(f"consumer group {name!r} does not exist in {log.path}")
        state = GroupState.read(os.path.join(directory, GROUP_STATE_FILE))
        committed = OffsetStore(directory, os.path.join(directory, GROUP_LOCK_FILE)).read()
        alive = live_members(directory, state)
        return cls(name, directory, state, committed, alive)

    def owners(self, log: Log) -> dict[TopicPartition, str]:
        """Which live member the group's assignor gives each partition to."""
        members = {m: t for m, t in self.state.members.items() if m in self.alive}
        if not members:
            return {}
        counts = {t: _count(log, t) for ts in members.values() for t in ts}
        assign = ASSIGNORS[self.state.assignor or "range"]
        return {tp: m for m, tps in assign(members, counts).items() for tp in tps}

    def topics(self) -> list[str]:
        subscribed = {t for m in self.alive for t in self.state.members[m]}
        return sorted(subscribed | {tp.topic for tp in self.committed})


def _count(log: Log, topic: str) -> int:
    try:
        return log.partition_count(topic)
    except UnknownTopicError:
        return 0


def _existing_group(log: Log, name: str) -> str | None:
    """The folder of group ``name`` if it exists; checked as the library checks it (a valid
    name; ``__groups`` and the group folder real folders, a symbolic link is a
    :class:`~embedlog.errors.CorruptionError`, never followed)."""
    directory = group_directory(log.path, name, create=False)
    return directory if os.path.lexists(directory) else None


def describe_group(log: Log, view: GroupView) -> dict[str, Any]:
    """Members and, per partition, committed offset, log start/end and lag."""
    owners = view.owners(log)
    rows = []
    for topic in view.topics():
        for p in range(_count(log, topic)):
            tp = TopicPartition(topic, p)
            committed = view.committed.get(tp)
            end = log.end_offset(topic, p)
            rows.append({
                "topic": topic,
                "partition": p,
                "committed": committed,
                "log_start": log.start_offset(topic, p),
                "log_end": end,
                "lag": None if committed is None else max(end - committed, 0),
                "owner": owners.get(tp),
            })
    members = [{"id": m, "topics": list(ts), "alive": m in view.alive,
                "partitions": [[tp.topic, tp.partition] for tp, o in sorted(owners.items())
                               if o == m]}
               for m, ts in sorted(view.state.members.items())]
    return {"group": view.name, "generation": view.state.generation,
            "assignor": view.state.assignor, "members": members, "offsets": rows,
            "total_lag": sum(r["lag"] or 0 for r in rows)}


@click.group()
def groups() -> None:
    """List, describe and reset consumer groups (committed offsets and lag)."""


@groups.command("list")
@dir_option
@json_option
def list_groups(log_dir: str, as_json: bool) -> None:
    """List consumer groups."""
    with open_log(log_dir) as log:
        names = group_names(log.path)
    if as_json:
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


@groups.command()
@click.argument("names", nargs=-1)
@dir_option
@json_option
def describe(names: Sequence[str], log_dir: str, as_json: bool) -> None:
    """Show committed offsets, log end offsets, lag per partition and members of the NAMES
    groups (all groups if none is given)."""
    with open_log(log_dir) as log:
        docs = [describe_group(log, GroupView.load(log, n)) for n in names or group_names(log.path)]
    if as_json:
        echo_json(docs)
        return
    for i, doc in enumerate(docs):
        if i:
            click.echo()
        live = sum(m["alive"] for m in doc["members"])
        click.echo(f"Consumer group '{doc['group']}' has {live} live members "
                   f"(generation {doc['generation']}, assignor {doc['assignor'] or '-'}).")
        click.echo()
        table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
               "CONSUMER-ID"],
              [[doc["group"], r["topic"], r["partition"], _dash(r["committed"]), r["log_end"],
                _dash(r["lag"]), _dash(r["owner"])] for r in doc["offsets"]])


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def _parse_topic_spec(spec: str) -> tuple[str, list[int]]:
    """Kafka's ``topic`` or ``topic:0,1,2``."""
    topic, _, parts = spec.partition(":")
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected TOPIC or TOPIC:P1,P2",
                                 param_hint="--topic") from None


def _new_offset(log: Log, tp: TopicPartition, current: int | None, how: str, value: Any
                ) -> int:
    start, end = log.start_offset(*tp), log.end_offset(*tp)
    if how == "to_earliest":
        target = start
    elif how == "to_latest":
        target = end
    elif how == "to_offset":
        target = value
    elif how == "to_datetime":
        found = log.offsets_for_times(tp.topic, tp.partition, value)
        target = end if found is None else found
    elif how == "shift_by":
        target = (start if current is None else current) + value
    else:  # to_current
        target = start if current is None else current
    return min(max(target, start), end)  # Kafka clamps into the log


RESETS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by", "to_current")


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P1,P2]",
              help="Topic (optionally some partitions) to reset (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-offset", type=int, help="Reset to this offset.")
@click.option("--to-datetime", type=TIMESTAMP,
              help="Reset to the first offset at or after this time (epoch ms or ISO 8601).")
@click.option("--shift-by", type=int, help="Move the committed offset by N (may be negative).")
@click.option("--to-current", is_flag=True, help="Keep the committed offset.")
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: dry run).")
@dir_option
@json_option
def reset_offsets(group: str, topic_specs: Sequence[str], all_topics: bool, to_earliest: bool,
                  to_latest: bool, to_offset: int | None, to_datetime: int | None,
                  shift_by: int | None, to_current: bool, execute: bool, log_dir: str,
                  as_json: bool) -> None:
    """Compute new committed offsets for GROUP; commit them with --execute. Offsets are
    clamped into each partition's [log start, log end]."""
    chosen = {name: value for name, value in (
        ("to_earliest", to_earliest or None), ("to_latest", to_latest or None),
        ("to_offset", to_offset), ("to_datetime", to_datetime), ("shift_by", shift_by),
        ("to_current", to_current or None)) if value is not None}
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                               "--to-datetime, --shift-by, --to-current")
    if bool(topic_specs) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    [(how, value)] = chosen.items()
    with open_log(log_dir) as log:
        exists = _existing_group(log, group) is not None
        view = GroupView.load(log, group) if exists or all_topics else None
        committed = view.committed if view else {}
        targets: list[TopicPartition] = []
        if all_topics:
            targets = sorted(committed)
        for spec in topic_specs:
            topic, parts = _parse_topic_spec(spec)
            targets += [TopicPartition(topic, p) for p in select_partitions(log, topic, parts)]
        new = {tp: _new_offset(log, tp, committed.get(tp), how, value) for tp in targets}
        if execute:
            directory = group_directory(log.path, group)
            store = OffsetStore(directory, os.path.join(directory, GROUP_LOCK_FILE))
            store.commit(new, check=lambda: _check_inactive(directory, group))
    rows = [{"group": group, "topic": tp.topic, "partition": tp.partition,
             "new_offset": off} for tp, off in sorted(new.items())]
    if as_json:
        echo_json({"executed": execute, "offsets": rows})
    else:
        table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
              [[r["group"], r["topic"], r["partition"], r["new_offset"]] for r in rows])
    if not execute:
        click.echo("Dry run: nothing was committed; add --execute to commit.", err=True)


def _check_inactive(directory: str, group: str) -> None:
    live = live_members(directory, GroupState.read(os.path.join(directory, GROUP_STATE_FILE)))
    if live:
        raise GroupError(
            f"consumer group {group!r} has {len(live)} live member(s); offsets can only be "
            "reset while the group is inactive"
        )
