"""Options and argument types shared by the commands, and how a command opens its log.

Conventions (Kafka's tools where one exists):

* ``--dir PATH`` names the log directory: default ``$EMBEDLOG_DIR``, else ``./embedlog-data``;
* ``--json`` switches a command's output to one JSON document (``consume`` writes JSON lines);
* times are epoch milliseconds or ISO 8601 (``2024-05-01T12:00:00Z``; no zone means UTC);
* topic configs use Kafka's names: ``--config segment.bytes=1048576``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import click

from .. import log as log_module
from ..errors import UnknownTopicError
from ..log import Log

__all__ = [
    "CONFIG",
    "DEFAULT_DIR",
    "TIMESTAMP",
    "dir_option",
    "format_time_ms",
    "json_option",
    "open_log",
    "parse_time_ms",
    "select_partitions",
]

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DIR = "embedlog-data"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_INTEGER = re.compile(r"-?\d+\Z")


def dir_option(f: F) -> F:
    """``--dir PATH``: the log directory (``$EMBEDLOG_DIR``, else ``./embedlog-data``)."""
    return click.option(
        "--dir",
        "log_dir",
        envvar="EMBEDLOG_DIR",
        default=DEFAULT_DIR,
        show_default="$EMBEDLOG_DIR, else ./embedlog-data",
        type=click.Path(file_okay=False, path_type=str),
        help="Log directory.",
    )(f)


def json_option(f: F) -> F:
    """``--json``: one machine-readable JSON document on stdout instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


@contextlib.contextmanager
def open_log(
    path: str, *, write: bool = False, create: bool = False, upkeep: bool = True
) -> Iterator[Log]:
    """The log at ``path``: read-only (no lock, works beside a running writer, and on a Kafka
    broker's directory) unless ``write``; ``create`` makes a missing directory. Writing into a
    Kafka broker's directory needs the root option ``embedlog --adopt``; writing into a tiered
    log, its remote named with ``embedlog --remote-uri``."""
    if write:
        ctx = click.get_current_context(silent=True)
        root = ctx.find_root().params if ctx else {}
        opened = log_module.open(path, create=create, upkeep=upkeep,
                                 adopt=bool(root.get("adopt")),
                                 remote_uri=root.get("remote_uri") or None)
    else:
        opened = log_module.open(path, read_only=True)
    with opened:
        yield opened


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from ``1714564800000`` or ISO 8601 (``2024-05-01T12:00:00Z``,
    ``2024-05-01 12:00``, ``2024-05-01``); a time without a zone is UTC, one between two
    milliseconds the next."""
    text = text.strip()
    if _INTEGER.match(text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 time "
            "(e.g. 2024-05-01T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    # Rounded up: the lookups (--from-time, --to-datetime, --time) mean "at or after", which a
    # record's whole millisecond is only from the next one on.
    return -((_EPOCH - when) // dt.timedelta(milliseconds=1))


def format_time_ms(ms: int) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2024-05-01T12:00:00.000Z``."""
    when = _EPOCH + dt.timedelta(milliseconds=ms)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class TimestampType(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ConfigType(click.ParamType):  # type: ignore[type-arg]
    """``name=value`` with a Kafka topic config name."""

    name = "NAME=VALUE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        name, sep, setting = str(value).partition("=")
        if not sep or not name.strip():
            self.fail(f"expected NAME=VALUE (e.g. segment.bytes=1048576), got {value!r}",
                      param, ctx)
        return name.strip(), setting.strip()


TIMESTAMP = TimestampType()
CONFIG = ConfigType()


def select_partitions(log: Log, topic: str, partitions: Sequence[int]) -> list[int]:
    """The requested partitions of ``topic`` (all of them when none is given), checked."""
    count = log.partition_count(topic)
    for p in partitions:
        if not 0 <= p < count:
            raise UnknownTopicError(f"topic {topic!r} has no partition {p} (it has {count})")
    return sorted(set(partitions)) if partitions else list(range(count))
