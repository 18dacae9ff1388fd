"""The CLI reference (``docs/cli.md``), generated from the commands' ``--help``.

Regenerate after changing a command::

    python -m embedlog.cli.reference > docs/cli.md

``tests/test_readme.py`` fails when the file and the commands disagree.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from . import cli
from .app import EXIT_CODES

__all__ = ["command_paths", "render"]

WIDTH = 100

INTRO = """\
# `embedlog` command line reference

Generated from `--help` by `python -m embedlog.cli.reference > docs/cli.md`; do not edit by
hand. Every command that works on a log takes `--dir PATH` (default: `$EMBEDLOG_DIR`, else
`./embedlog-data`). `python -m embedlog` is the same program.

## Exit codes
"""


def _walk(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[str, click.Context]]:
    yield ctx.command_path, ctx
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx,
                                                    terminal_width=WIDTH,
                                                    max_content_width=WIDTH))


def _root() -> click.Context:
    return click.Context(cli, info_name="embedlog", terminal_width=WIDTH,
                         max_content_width=WIDTH)


def command_paths() -> list[str]:
    """Every command, e.g. ``embedlog topics create``, root first."""
    return [path for path, _ in _walk(cli, _root())]


def _exit_code_table() -> str:
    rows = "".join(f"| {code} | {text} |\n" for code, text in sorted(EXIT_CODES.items()))
    return "| code | meaning |\n|---|---|\n" + rows


def render() -> str:
    """The whole ``docs/cli.md``."""
    parts = [INTRO, "\n", _exit_code_table()]
    for path, ctx in _walk(cli, _root()):
        parts.append(f"\n## `{path}`\n\n```text\n{ctx.get_help()}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    click.echo(render(), nl=False)
