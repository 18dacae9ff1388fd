"""The ``embedlog`` command line (also ``python -m embedlog``).

Each command lives in its own module; this package wires them to the root group of
:mod:`embedlog.cli.app`, which owns the shared error policy and exit codes.
"""

from __future__ import annotations

from .app import cli, main
from .cleanup import cleanup
from .compact import compact
from .consume import consume
from .demo import demo
from .dump_log import dump_log
from .groups import groups
from .offsets import delete_records, get_offsets
from .perf import perf_test
from .produce import produce
from .recover import recover
from .topics import topics
from .transactions import transactions
from .verify import verify

__all__ = ["cli", "main"]

for _command in (topics, produce, consume, dump_log, get_offsets, delete_records,
                 groups, transactions, compact, cleanup, verify, recover, perf_test, demo):
    cli.add_command(_command)
