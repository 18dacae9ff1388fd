"""Hostile JSON: every JSON document embedlog reads -- from the log folder, from a file named on
the command line, from a line of input, from a Spark option -- is untrusted.

A document nested deeper than Python's recursion limit makes ``json.loads`` raise
``RecursionError``; a number such as ``Infinity`` is not standard JSON (``json.loads`` takes it,
as a float no ``int()`` takes); a string may hold a lone surrogate that has no UTF-8. Each is a
clear error of embedlog's own tree (or the command line's one-line error), never a bare Python
exception, and nothing stored changes. (Every reader parses through ``embedlog._json``, whose
own rules are tested in tests/test_json_loader.py.)
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest
from click.testing import CliRunner, Result

import embedlog
from embedlog import txn_state_log
from embedlog.cli import cli
from embedlog.errors import CorruptCheckpointError, InvalidConfigError
from embedlog.naming import TIERING_FILE, TXN_STATE_FILE
from embedlog.spark.options import parse_read_options
from embedlog.spark.specs import json_object

pytestmark = pytest.mark.timeout(120)

DEEP_ARRAY = b"[" * 50_000 + b"]" * 50_000
DEEP_OBJECT = b'{"a":' * 50_000 + b"1" + b"}" * 50_000


def _filled(path: Path) -> None:
    with embedlog.open(path) as log:
        log.create_topic("t")
        log.append_batch("t", [b"a", b"b", b"c"])


def _frame(payload: bytes) -> bytes:
    """One well-formed frame of the transaction state log around ``payload`` (CRCs valid)."""
    head = struct.pack(">4sIQ", txn_state_log.FRAME_MAGIC, len(payload), 0)
    return head + struct.pack(">II", crc32c.crc32c(head), crc32c.crc32c(payload)) + payload


def _stored(path: Path) -> list[bytes]:
    with embedlog.open(path, read_only=True) as log:
        return [r.value for r in log.read("t", 0)]


@pytest.mark.parametrize("doc", [b"[" * 30_000 + b"]" * 30_000,
                                 b'{"version": 1, "remote_uri": ' + b"[" * 30_000 + b"]" * 30_000
                                 + b"}"], ids=["array", "field"])
@pytest.mark.parametrize("read_only", [True, False])
def test_a_deeply_nested_tiering_file_is_a_checkpoint_error(tmp_path: Path, doc: bytes,
                                                            read_only: bool) -> None:
    path = tmp_path / "log"
    _filled(path)
    (path / TIERING_FILE).write_bytes(doc)
    with pytest.raises(CorruptCheckpointError, match="tiering"):
        embedlog.open(path, read_only=read_only)
    (path / TIERING_FILE).unlink()
    assert _stored(path) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("content", [
    txn_state_log.MAGIC + _frame(DEEP_ARRAY),
    txn_state_log.MAGIC + _frame(b'{"id": "x", "value": ' + DEEP_OBJECT + b"}"),
    b'{"version": 1, "transactions": ' + DEEP_OBJECT + b"}",  # the legacy JSON file
], ids=["frame", "frame-value", "legacy"])
def test_a_deeply_nested_transaction_state_is_a_checkpoint_error(tmp_path: Path,
                                                                 content: bytes) -> None:
    path = tmp_path / "log"
    _filled(path)
    (path / TXN_STATE_FILE).write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match="transaction state"):
        embedlog.open(path)
    assert (path / TXN_STATE_FILE).read_bytes() == content  # nothing rewritten
    assert _stored(path) == [b"a", b"b", b"c"]


def _cli(path: Path, *args: str, input: bytes | None = None) -> Result:
    runner = CliRunner(env={"EMBEDLOG_DIR": str(path)})
    return runner.invoke(cli, list(args), input=input, prog_name="embedlog")


def _one_line_error(result: Result, code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception,
                                                                     SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("doc", [
    DEEP_ARRAY,
    b'{"partitions": [{"topic": "t", "partition": 0, "offset": Infinity}], "version": 1}',
    b'{"partitions": [{"topic": "t", "partition": -Infinity, "offset": 1}], "version": 1}',
], ids=["deep", "infinite-offset", "infinite-partition"])
def test_delete_records_refuses_a_hostile_offset_json_file(tmp_path: Path, doc: bytes) -> None:
    path = tmp_path / "log"
    _filled(path)
    spec = tmp_path / "offsets.json"
    spec.write_bytes(doc)
    _one_line_error(_cli(path, "delete-records", "--offset-json-file", str(spec)), 1,
                    "expected")
    assert _stored(path) == [b"a", b"b", b"c"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_delete_records_reads_an_endless_offset_json_file_only_as_far_as_its_bound(
        tmp_path: Path) -> None:
    """A process of its own, its address space capped at 1 GiB: an unbounded read of
    ``/dev/zero`` ends in ``MemoryError`` there instead of taking the machine's memory."""
    path = tmp_path / "log"
    _filled(path)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {**os.environ, "EMBEDLOG_DIR": str(path)}
    done = subprocess.run([sys.executable, "-m", "embedlog", "delete-records",
                           "--offset-json-file", "/dev/zero"], env=env, preexec_fn=cap,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "larger than" in lines[0]
    assert _stored(path) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("line, fragment", [
    (DEEP_ARRAY, "invalid JSON"),
    (b'{"value": ' + DEEP_OBJECT + b"}", "invalid JSON"),
    (b'{"value": "\\ud800"}', "value is not valid Unicode"),
    (b'{"value": "a", "key": "x\\udfff"}', "key is not valid Unicode"),
], ids=["deep", "deep-value", "surrogate-value", "surrogate-key"])
def test_produce_refuses_a_hostile_json_line_and_writes_nothing(tmp_path: Path, line: bytes,
                                                                fragment: str) -> None:
    path = tmp_path / "log"
    _filled(path)
    result = _cli(path, "produce", "t", "--format", "json", input=b'{"value": "ok"}\n' + line)
    _one_line_error(result, 1, fragment)
    assert "line 2" in result.stderr
    assert _stored(path) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("options", [
    {"path": "/x", "assign": DEEP_ARRAY.decode()},
    {"path": "/x", "subscribe": "t", "startingOffsets": DEEP_OBJECT.decode()},
    {"paths": DEEP_ARRAY.decode(), "subscribe": "t"},
], ids=["assign", "startingOffsets", "paths"])
def test_a_deeply_nested_spark_option_is_a_config_error(options: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError):
        parse_read_options(options, streaming=False)
    if "assign" in options:
        with pytest.raises(InvalidConfigError):
            json_object("assign", options["assign"], "{}")


def test_the_refused_documents_really_are_too_deep_for_json() -> None:
    """The premise of this file: ``json.loads`` itself gives up on these documents."""
    for doc in (DEEP_ARRAY, DEEP_OBJECT):
        with pytest.raises(RecursionError):
            json.loads(doc)
