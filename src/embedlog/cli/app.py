"""The root ``embedlog`` command group and its error policy.

Every error a user can cause -- a missing topic, a bad offset, a corrupt file, a locked log, an
unreadable input file, a bad command line -- ends the command with one line on stderr and a
non-zero exit code (:data:`EXIT_CODES`), never a traceback or a usage block (a usage error
names the ``--help`` to read). ``EMBEDLOG_DEBUG=1`` re-raises the original exception instead,
for a full traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from ..errors import CorruptionError, EmbedlogError, StorageError, UnsupportedFormatError
from ..segment._native import codec_implementation

__all__ = [
    "EXIT_CODES",
    "EXIT_CORRUPT",
    "EXIT_OS",
    "EXIT_UNSUPPORTED",
    "EXIT_USAGE",
    "CommandError",
    "DamagedDataError",
    "SystemFailureError",
    "cli",
    "command_error",
    "main",
]

EXIT_USAGE = 1
EXIT_CORRUPT = 3
EXIT_OS = 4
EXIT_UNSUPPORTED = 5
EXIT_CODES = {
    0: "success (`verify`: the log is healthy)",
    EXIT_USAGE: "the request cannot be served: unknown topic, offset out of range, log locked "
                "by a writer, bad input data, missing file",
    2: "bad command line: unknown option, missing argument, invalid value",
    EXIT_CORRUPT: "damaged data: a corrupt batch, index or checkpoint (`verify`, `dump-log`: "
                  "problems were found)",
    EXIT_OS: "the operating system failed an operation (EIO, ENOSPC, permission denied)",
    EXIT_UNSUPPORTED: "unsupported data, not damaged: Kafka's message formats v0/v1 (magic 0 "
                      "or 1, Kafka before 0.11)",
}


class CommandError(click.ClickException):
    """A one-line failure of a request that cannot be served (exit code 1).

    click keeps the exit code on the class, so each code has its subclass:
    :class:`DamagedDataError` (3) and :class:`SystemFailureError` (4); :func:`command_error`
    picks one."""

    exit_code = EXIT_USAGE


class DamagedDataError(CommandError):
    """Damaged data was found (exit code 3)."""

    exit_code = EXIT_CORRUPT


class SystemFailureError(CommandError):
    """The operating system failed an operation (exit code 4)."""

    exit_code = EXIT_OS


class UnsupportedDataError(CommandError):
    """The data is in a format embedlog does not read, e.g. Kafka's v0/v1 (exit code 5)."""

    exit_code = EXIT_UNSUPPORTED


_ERRORS_BY_CODE: dict[int, type[CommandError]] = {
    EXIT_USAGE: CommandError, EXIT_CORRUPT: DamagedDataError, EXIT_OS: SystemFailureError,
    EXIT_UNSUPPORTED: UnsupportedDataError,
}


def command_error(message: str, exit_code: int = EXIT_USAGE) -> CommandError:
    """The :class:`CommandError` subclass for ``exit_code`` (1, 3, 4 or 5), carrying
    ``message``."""
    return _ERRORS_BY_CODE[exit_code](message)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, UnsupportedFormatError):
        return EXIT_UNSUPPORTED
    if isinstance(exc, CorruptionError):
        return EXIT_CORRUPT
    if isinstance(exc, StorageError):
        return EXIT_OS
    if isinstance(exc, PermissionError):
        return EXIT_OS
    return EXIT_USAGE


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, EmbedlogError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def fail(exc: BaseException) -> NoReturn:
    """Turn ``exc`` into a :class:`CommandError` (one line, the right exit code)."""
    raise command_error(_one_line(exc), exit_code_for(exc)) from exc


class EmbedlogGroup(click.Group):
    """The root group: translates embedlog and OS errors raised by any subcommand, and prints
    a command-line error as one line."""

    def main(  # type: ignore[override]  # one signature instead of click's two overloads
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        run = super().main
        if not standalone_mode:
            return run(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = run(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"Error: {' '.join(exc.format_message().split())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (EmbedlogError, OSError) as exc:
            if isinstance(exc, BrokenPipeError):
                _quiet_broken_pipe()
            if os.environ.get("EMBEDLOG_DEBUG") == "1":
                raise
            fail(exc)


def _quiet_broken_pipe() -> NoReturn:
    """``embedlog consume ... | head``: the reader went away; exit quietly like ``cat``."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file descriptor (a test runner's stream)
        pass
    raise SystemExit(141)


@click.group(cls=EmbedlogGroup)
@click.version_option(
    package_name="embedlog",
    prog_name="embedlog",
    message=f"%(prog)s, version %(version)s (codec: {codec_implementation()})",
)
@click.option("--adopt", is_flag=True,
              help="Allow commands that write to write into a Kafka broker's log directory "
                   "(adding embedlog's files and rewriting its checkpoints).")
@click.option("--remote-uri", metavar="URI", default=None,
              help="The tiered storage of the log (s3://..., file:///...): commands that "
                   "write to a tiered log need it (a writer never takes the folder's own "
                   "record of where to upload and delete).")
def cli(adopt: bool, remote_uri: str | None) -> None:
    """embedlog: an in-process, file-backed, partitioned commit log whose files are
    byte-compatible with Apache Kafka's log format.

    Commands that work on a log take --dir PATH (default: $EMBEDLOG_DIR, else ./embedlog-data).
    Exit codes: 0 ok, 1 bad request, 2 bad command line, 3 damaged data, 4 OS error,
    5 unsupported format (Kafka's v0/v1).
    """


def main() -> None:
    """Console-script entry point (``embedlog``, ``python -m embedlog``)."""
    cli(prog_name="embedlog")
