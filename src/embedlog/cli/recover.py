"""``embedlog recover [PATH] [--truncate-damaged]``: salvage damaged partitions.

Without ``--truncate-damaged`` it only reports what a salvage would drop (a dry run: exit code
3 if anything would be, 0 if nothing is damaged). With it, under the writer lock, it keeps every
valid batch, moves the damaged bytes to ``lost+found/`` inside the log, removes a log start
offset beyond a partition's end, and prints each loss: partition, offsets, bytes, where they
went (:mod:`embedlog.salvage`). The log then opens with every partition writable.
"""

from __future__ import annotations

import dataclasses
import os

import click

from ..inspect import writer_lock
from ..salvage import Loss, salvage
from .app import EXIT_CORRUPT
from .options import dir_option, json_option
from .output import echo_json

__all__ = ["recover"]


def _line(loss: Loss, root: str) -> str:
    offsets = (f"offsets {loss.first_offset}..{loss.last_offset}"
               if loss.last_offset >= loss.first_offset else "no offsets")
    where = f", moved to {os.path.relpath(loss.moved_to, root)}" if loss.moved_to else ""
    return f"{loss.partition}: {offsets} lost ({loss.bytes} bytes{where}): {loss.reason}"


@click.command()
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=str))
@dir_option
@click.option("--truncate-damaged", is_flag=True,
              help="Do it: keep every valid batch, move damaged bytes to lost+found/ (takes "
                   "the writer lock). Without it, only report what would be lost.")
@json_option
def recover(path: str | None, log_dir: str, truncate_damaged: bool, as_json: bool) -> None:
    """Salvage partitions a writer open quarantined: report (or, with --truncate-damaged,
    drop) what is damaged. Exit code 0: nothing (more) is damaged; 3: a dry run found damage."""
    root = os.path.abspath(path or log_dir)
    if not os.path.isdir(root):
        raise FileNotFoundError(2, "No such log directory", root)
    with writer_lock(root):
        losses = salvage(root, apply=truncate_damaged)
    if as_json:
        echo_json({"path": root, "applied": truncate_damaged,
                   "losses": [dataclasses.asdict(loss) for loss in losses]})
    else:
        verb = "salvaged" if truncate_damaged else "would lose (dry run: add --truncate-damaged)"
        for loss in losses:
            click.echo(_line(loss, root))
        click.echo(f"{len(losses)} damaged range(s) {verb}" if losses else "nothing is damaged")
    if losses and not truncate_damaged:
        click.get_current_context().exit(EXIT_CORRUPT)
