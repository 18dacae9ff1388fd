"""How commands write: JSON documents, aligned tables, sizes, and progress bars.

Progress bars (``click.progressbar``) go to stderr and only when stderr is a terminal, so piped
or scripted runs stay quiet and stdout carries nothing but the command's result.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

__all__ = ["echo_json", "human_bytes", "progressbar", "run_with_spinner", "stderr_is_tty",
           "table", "timestamp_type_name"]

T = TypeVar("T")


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def progressbar(length: int, label: str, *, status: bool = False) -> ProgressBar[Any]:
    """A bar of ``length`` steps on stderr; hidden (prints nothing) when stderr is not a TTY or
    the length is unknown (0). Use as a context manager and call ``update(n)``; with
    ``status``, ``update(n, text)`` shows ``text`` after the bar (e.g. a live rate)."""
    return click.progressbar(
        length=max(length, 1),
        label=label,
        file=sys.stderr,
        hidden=length <= 0 or not stderr_is_tty(),
        show_eta=True,
        item_show_func=(lambda text: text) if status else None,
    )


def echo_json(doc: Any) -> None:
    """One JSON document on stdout (keys in insertion order)."""
    click.echo(json.dumps(doc))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns separated by two spaces, with a header line."""
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def timestamp_type_name(timestamp_type: int) -> str:
    """Kafka's names: ``CreateTime`` (0), ``LogAppendTime`` (1)."""
    return {0: "CreateTime", 1: "LogAppendTime"}.get(timestamp_type, "NoTimestampType")


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while abs(n) >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{n:.0f} B" if i == 0 else f"{n:.1f} {units[i]}"


def _ticks(done: threading.Event, interval_s: float) -> Iterator[None]:
    while not done.wait(interval_s):
        yield None


def run_with_spinner(fn: Callable[[], T], label: str) -> T:
    """``fn()``, showing an indeterminate bar on a terminal while it runs (for an operation
    that reports no progress of its own)."""
    if not stderr_is_tty():
        return fn()
    done = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future: Future[T] = pool.submit(fn)
        future.add_done_callback(lambda _: done.set())
        with click.progressbar(_ticks(done, 0.1), label=label,
                               file=sys.stderr) as bar:
            for _ in bar:
                pass
        return future.result()
