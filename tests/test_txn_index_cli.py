"""``embedlog dump-log`` prints a ``.txnindex`` (kafka-dump-log's entry line) and checks it
against the segment's ABORT markers (``--verify-index``); ``embedlog verify`` does too, and
``--fix`` drops a stale one (readers then decide the segment by its markers)."""

from __future__ import annotations

import json
import pathlib

from click.testing import CliRunner

import embedlog
from embedlog.cli import cli
from embedlog.index.txn_index import TxnIndexEntry, encode_entries
from helpers import aborted_log


def _dump(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["dump-log", *args])
    return result.exit_code, result.output


def test_dump_log_prints_and_checks_a_txnindex(tmp_path: pathlib.Path) -> None:
    index = aborted_log(tmp_path / "log")
    code, out = _dump(str(index))
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.startswith("version:")]
    assert len(lines) == 1
    fields = dict(zip(lines[0].split()[::2], lines[0].split()[1::2], strict=True))
    assert fields["version:"] == "0" and fields["firstOffset:"] == "2"
    assert fields["lastOffset:"] == "3" and fields["lastStableOffset:"] == "4"
    code, out = _dump("--verify-index", "--json", str(index))
    doc = json.loads(out)
    assert code == 0 and doc["problems"] == 0
    entry = doc["files"][0]["entries"][0]
    assert (entry["first_offset"], entry["last_offset"]) == (2, 3)
    code, out = _dump("--verify-index", str(index.with_suffix(".log")))
    assert code == 0 and "Index check: OK" in out and "Index mismatch" not in out


def test_a_txnindex_that_misses_an_abort_or_names_data_is_reported(
        tmp_path: pathlib.Path) -> None:
    index = aborted_log(tmp_path / "log")
    pid = int(_dump(str(index))[1].split("producerId: ")[1].split()[0])
    index.write_bytes(b"")  # the ABORT marker at offset 3 has no entry
    code, out = _dump("--verify-index", str(index))
    assert code == 3 and "has no entry" in out
    # An entry whose marker is gone (past the log here, as compaction can leave it) is kept.
    index.write_bytes(encode_entries([TxnIndexEntry(pid, 2, 3, 4), TxnIndexEntry(pid, 9, 9, 10)]))
    code, out = _dump("--verify-index", str(index))
    assert code == 0 and "Index mismatch" not in out, out
    index.write_bytes(encode_entries([TxnIndexEntry(pid, 0, 0, 1), TxnIndexEntry(pid, 2, 3, 4)]))
    code, out = _dump("--verify-index", str(index))
    assert code == 3 and "entry 0 names offset 0, which is not an ABORT marker" in out
    index.write_bytes(encode_entries([TxnIndexEntry(pid + 1, 2, 3, 4)]))
    code, out = _dump("--verify-index", str(index))
    assert code == 3 and f"is producer {pid}'s" in out
    index.write_bytes(b"\x00" * 35)  # not whole entries
    code, out = _dump(str(index))
    assert code == 3 and "not a whole number" in out


def test_verify_reports_and_fix_drops_a_stale_txnindex(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "log"
    index = aborted_log(log)
    runner = CliRunner()
    assert runner.invoke(cli, ["verify", str(log)]).exit_code == 0
    index.write_bytes(b"")
    result = runner.invoke(cli, ["verify", str(log)])
    assert result.exit_code == 3 and "has no entry" in result.output
    result = runner.invoke(cli, ["verify", "--fix", str(log)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(cli, ["verify", str(log)]).exit_code == 0
    with embedlog.open(log, read_only=True) as ro:  # the abort is still hidden
        c = ro.consumer(isolation_level="read_committed")
        c.assign([embedlog.TopicPartition("t", 0)])
        assert [r.value for r in c.poll()] == [b"v"]
        c.close()
