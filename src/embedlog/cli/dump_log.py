"""``embedlog dump-log FILE...``: print segment files as Kafka's ``kafka-dump-log`` does.

FILE may be a ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` or producer ``.snapshot``
file (one line per producer, with ``kafka-dump-log``'s field names), a partition folder, or
a whole log directory (embedlog's or a Kafka broker's): folders expand to their ``.log`` files
in offset order. A URI (``s3://...``, ``file://...``) is a remote log folder -- a tiered log's
remote among them, of which only the published segments are dumped: its files are fetched
into a private cache (:mod:`embedlog.remote`) and named by their remote path.
Batch lines use ``kafka-dump-log``'s field names, a ``.txnindex`` entry line
its ``version: producerId: firstOffset: lastOffset: lastStableOffset:``; ``--deep-iteration``
adds a line per record (a transaction marker's: ``endTxnMarker: COMMIT coordinatorEpoch: 0``)
and ``--print-data-log`` its key and payload (a marker's only in ``--json``).
``--verify-index`` checks every entry of the segment's indexes (the ``.txnindex`` too, against
the log's ABORT markers).
The exit code is 3 when anything was invalid (a CRC, a record, an incomplete tail, an index
entry), 5 when a segment is in Kafka's unsupported v0/v1 format.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from ..errors import CorruptionError, UnsupportedFormatError
from ..inspect import (
    SegmentWalk,
    WalkedBatch,
    check_offset_index,
    check_time_index,
    check_txn_index,
    codec_name,
    control_record_type,
    offset_index_entries,
    read_producer_snapshot,
    segment_file,
    segment_files,
    time_index_entries,
    txn_index_entries,
)
from ..naming import INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX
from ..remote import is_uri, open_remote
from .app import EXIT_CORRUPT, EXIT_UNSUPPORTED, CommandError
from .jsonbytes import to_json
from .options import json_option
from .output import echo_json, timestamp_type_name

__all__ = ["dump_log"]

_E = TypeVar("_E")


def _batch_doc(b: WalkedBatch) -> dict[str, Any]:
    h = b.header
    seq = h.base_sequence
    return {
        "baseOffset": h.base_offset,
        "lastOffset": h.last_offset,
        "count": h.records_count,
        "baseSequence": seq,
        "lastSequence": seq + h.last_offset_delta if seq >= 0 else -1,
        "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch,
        "partitionLeaderEpoch": h.leader_epoch,
        "isTransactional": h.is_transactional,
        "isControl": h.is_control,
        "deleteHorizonMs": h.delete_horizon_ms,
        "position": b.position,
        "timestampType": timestamp_type_name(h.timestamp_type),
        "maxTimestamp": h.max_timestamp,
        "size": h.size,
        "magic": h.magic,
        "compresscodec": codec_name(h),
        "crc": h.crc,
        "isvalid": b.error is None,
        "error": b.error,
    }


def _record_docs(b: WalkedBatch, data: bool) -> Iterator[dict[str, Any]]:
    recs = b.records
    if recs is None:
        return
    seq = b.header.base_sequence
    for i in range(len(recs)):
        offset = int(recs.offsets[i])
        key, value = recs.key(i), recs.value(i)
        doc: dict[str, Any] = {
            "offset": offset,
            "timestamp": int(recs.timestamps[i]),
            "keySize": -1 if key is None else len(key),
            "valueSize": -1 if value is None else len(value),
            "sequence": seq + offset - b.header.base_offset if seq >= 0 else -1,
            "headerKeys": [k for k, _ in recs.header(i)],
        }
        if b.header.is_control:
            doc["endTxnMarker"] = kind = control_record_type(key)
            if kind in ("ABORT", "COMMIT") and value is not None and len(value) >= 6:
                doc["coordinatorEpoch"] = int.from_bytes(value[2:6], "big", signed=True)
        if data:
            doc["key"] = to_json(key)
            doc["payload"] = to_json(value)
        yield doc


def _text(doc: dict[str, Any], fields: Sequence[str]) -> str:
    def show(v: Any) -> str:
        if v is None:
            return "null"
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, dict):
            return "base64:" + str(v["base64"])
        if isinstance(v, list):
            return "[" + ",".join(str(x) for x in v) + "]"
        return str(v)

    return " ".join(f"{k}: {show(doc[k])}" for k in fields if k in doc)


BATCH_FIELDS = ("baseOffset", "lastOffset", "count", "baseSequence", "lastSequence",
                "producerId", "producerEpoch", "partitionLeaderEpoch", "isTransactional",
                "isControl", "deleteHorizonMs", "position", "CreateTime", "LogAppendTime",
                "size", "magic", "compresscodec", "crc", "isvalid", "error")
RECORD_FIELDS = ("offset", "CreateTime", "LogAppendTime", "keySize", "valueSize", "sequence",
                 "headerKeys", "endTxnMarker", "coordinatorEpoch", "key", "payload")


@dataclass
class _Dump:
    """A dump-log run: text goes out as it is read, JSON documents collect in ``docs``;
    ``problems`` counts what makes the exit code 3."""

    as_json: bool
    deep: bool
    data: bool
    verify_index: bool
    problems: int = 0
    unsupported: bool = False
    docs: list[dict[str, Any]] = field(default_factory=list)

    def out(self, line: str) -> None:
        if not self.as_json:
            click.echo(line)

    def log_file(self, directory: str, base: int, path: str) -> None:
        walk = SegmentWalk(directory, base, decode=self.deep)
        self.out(f"Dumping {path}")
        self.out(f"Log starting offset: {base}")
        batches = []
        for b in walk:
            doc = _batch_doc(b)
            records = list(_record_docs(b, self.data)) if self.deep else []
            if self.as_json:
                if self.deep:
                    doc["records"] = records
                batches.append(doc)
            else:
                # kafka-dump-log's text: "CreateTime: <ts>", empty horizon, no error field
                ts_type = doc.pop("timestampType")
                doc[ts_type] = doc.pop("maxTimestamp")
                if doc["deleteHorizonMs"] is None:
                    doc["deleteHorizonMs"] = "OptionalLong.empty"
                if doc["error"] is None:
                    del doc["error"]
                self.out(_text(doc, BATCH_FIELDS))
                for r in records:
                    r[ts_type] = r.pop("timestamp")
                    if "endTxnMarker" in r:  # a marker's key and value are its fields
                        r.pop("key", None), r.pop("payload", None)
                    self.out("| " + _text(r, RECORD_FIELDS))
        self.problems += walk.bad_batches
        result: dict[str, Any] = {"path": path, "type": "log", "baseOffset": base,
                                  "batches": batches, "validBytes": walk.valid_bytes,
                                  "trailingBytes": walk.trailing_bytes,
                                  "error": str(walk.error) if walk.error else None}
        if walk.error is not None:
            self.problems += 1
            self.unsupported |= isinstance(walk.error, UnsupportedFormatError)
            self.out(f"Error: {walk.error}")
        elif walk.trailing_bytes:
            self.problems += 1
            self.out(f"Found {walk.trailing_bytes} invalid bytes at the end of {path} "
                     f"(an incomplete batch at position {walk.valid_bytes})")
        if self.verify_index:
            result["indexProblems"] = self._index_problems(walk)
        self.docs.append(result)

    def _index_problems(self, walk: SegmentWalk) -> list[str]:
        problems: list[str] = []
        for suffix, check in ((INDEX_SUFFIX, check_offset_index),
                              (TIMEINDEX_SUFFIX, check_time_index),
                              (TXNINDEX_SUFFIX, check_txn_index)):
            path = walk.path[: -len(LOG_SUFFIX)] + suffix
            if os.path.lexists(path):  # a link or a FIFO there is reported, not followed
                problems += [f"{os.path.basename(path)}: {p}" for p in check(path, walk)]
        return self._report_index(problems)

    def _report_index(self, problems: list[str]) -> list[str]:
        for p in problems:
            self.out(f"Index mismatch: {p}")
        if not problems:
            self.out("Index check: OK")
        self.problems += len(problems)
        return problems

    def index_file(self, directory: str, base: int, suffix: str, path: str) -> None:
        self.out(f"Dumping {path}")
        entries: list[dict[str, int]] = []
        if suffix == TXNINDEX_SUFFIX:
            return self._txn_index(directory, base, path)
        if suffix == INDEX_SUFFIX:
            for offset, pos in offset_index_entries(path, base):
                entries.append({"offset": offset, "position": pos})
                self.out(f"offset: {offset} position: {pos}")
        else:
            for ts, offset in time_index_entries(path, base):
                entries.append({"timestamp": ts, "offset": offset})
                self.out(f"timestamp: {ts} offset: {offset}")
        result: dict[str, Any] = {"path": path, "type": suffix[1:], "baseOffset": base,
                                  "entries": entries}
        if self.verify_index:
            walk = SegmentWalk(directory, base, decode=False)
            for _ in walk:
                pass
            check = check_offset_index if suffix == INDEX_SUFFIX else check_time_index
            result["indexProblems"] = self._report_index(check(path, walk))
        self.docs.append(result)


    def _entries(self, read: Callable[[str], Sequence[_E]], path: str, result: dict[str, Any]
                 ) -> Sequence[_E]:
        """``read(path)``; a corrupt file is a problem, reported, and has no entries."""
        try:
            return read(path)
        except CorruptionError as exc:
            self.problems += 1
            self.out(f"Error: {exc}")
            result["error"] = str(exc)
            return []

    def snapshot_file(self, path: str) -> None:
        """A producer snapshot: one line per producer (``DumpLogSegments``' fields)."""
        self.out(f"Dumping {path}")
        result: dict[str, Any] = {"path": path, "type": "snapshot", "entries": []}
        for e in self._entries(read_producer_snapshot, path, result):
            result["entries"].append(e._asdict())
            self.out(f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                     f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: "
                     f"{e.current_txn_first_offset} lastTimestamp: {e.timestamp} "
                     f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                     f"offsetDelta: {e.offset_delta}")
        self.docs.append(result)

    def _txn_index(self, directory: str, base: int, path: str) -> None:
        result: dict[str, Any] = {"path": path, "type": "txnindex", "baseOffset": base,
                                  "entries": []}
        for e in self._entries(lambda p: txn_index_entries(p, base), path, result):
            result["entries"].append(e._asdict())
            self.out(f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
                     f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}")
        if self.verify_index and "error" not in result:
            walk = SegmentWalk(directory, base, decode=False)
            for _ in walk:
                pass
            result["indexProblems"] = self._report_index(check_txn_index(path, walk))
        self.docs.append(result)


@contextlib.contextmanager
def _local(arg: str) -> Iterator[tuple[str, str]]:
    """``(local path, shown name)`` of a dump-log argument: itself, or for a URI the cache
    folder of a remote read-only open with every partition fetched (removed afterwards)."""
    if not is_uri(arg):
        yield arg, arg
        return
    remote = open_remote(arg, read_only=True)
    with remote as log:
        remote.fetch_all()  # dump-log reads the cache folder's files as a local folder's
        yield log.path, arg.split("?", 1)[0].rstrip("/")


@click.command("dump-log")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--deep-iteration", is_flag=True, help="Also print one line per record.")
@click.option("--print-data-log", is_flag=True,
              help="Also print each record's key and payload (implies --deep-iteration).")
@click.option("--verify-index", is_flag=True,
              help="Check every index entry against the log.")
@json_option
def dump_log(files: Sequence[str], deep_iteration: bool, print_data_log: bool,
             verify_index: bool, as_json: bool) -> None:
    """Print the batches (and records) of segment FILES: .log, .index, .timeindex, .txnindex
    or producer .snapshot files, partition folders or log directories, embedlog's or Kafka's,
    or a remote log folder's URI (a tiered log's remote: its published segments)."""
    dump = _Dump(as_json, deep_iteration or print_data_log, print_data_log, verify_index)
    for arg in files:
        with _local(arg) as (folder, shown):
            for path in segment_files(folder):
                try:
                    directory, base, suffix = segment_file(path)
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
                if suffix == LOG_SUFFIX:
                    dump.log_file(directory, base, shown + path[len(folder):])
                elif suffix == SNAPSHOT_SUFFIX:
                    dump.snapshot_file(path)
                else:
                    dump.index_file(directory, base, suffix, path)
    if as_json:
        echo_json({"files": dump.docs, "problems": dump.problems})
    if dump.problems:
        click.get_current_context().exit(EXIT_UNSUPPORTED if dump.unsupported else EXIT_CORRUPT)
