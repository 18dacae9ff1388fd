"""The transaction coordinator's state log: ``embedlog.transactions``, append-only and framed.

Kafka keeps its coordinators' state in the compacted topic ``__transaction_state``: one record
per state change, keyed by transactional id, the latest record of a key being its state. This
file is the same thing for one log folder (:data:`embedlog.naming.TXN_STATE_FILE`). Layout::

    embedlog-txn-state 2\\n         the file header (:data:`MAGIC`, 21 bytes)
    frame*                          back to back, each:
      0  4 bytes  b"\\xc3TXN"        frame magic (lets a reader find frames after damage)
      4  u32 BE   payload length L, 1 <= L <= MAX_FRAME
      8  u64 BE   durable: how many bytes of the file were known durable (fsynced) when
                  this frame was appended; never more than the frame's own position
     16  u32 BE   CRC-32C of bytes 0..16
     20  u32 BE   CRC-32C of the payload
     24  payload  UTF-8 JSON: {"id": <key>, "value": <object> | null}; null forgets the key

**Durability.** Appends are not synced unless the caller asks (:meth:`TxnStateLog.append`
``sync=True``) or calls :meth:`TxnStateLog.sync`; the file is fsynced once when it is opened
for writing, so every byte found then counts as durable.

**Torn tail.** After an unclean shutdown only frames appended since the last fsync may be
damaged: a frame that is incomplete, fails a CRC, or claims a length or a ``durable`` that
cannot be, is a *torn tail* and cut, with everything after it, when no frame header after it
(magic and header CRC valid) claims it was durable (``durable`` past the bad frame's
position): every frame appended after the last completed fsync claims no more than that
fsync's end. Such a frame, or any damage
after a clean shutdown (everything was synced by :meth:`TxnStateLog.close`), is corruption:
:class:`~embedlog.errors.CorruptCheckpointError` (a :class:`~embedlog.errors.CorruptionError`),
and nothing is changed.

**Compaction.** When the file grows past ``max(4 x its live bytes, 1 MiB)`` (live: the header
and the last frame of each key) it is rewritten whole, atomically
(:func:`embedlog._io.atomic_file`: a crash leaves the old or the new file), with one frame per
live key. The whole file never exceeds :data:`MAX_FILE` bytes; state that would not fit after a
compaction is refused (:class:`~embedlog.errors.UsageError`) before anything is written.

**Legacy files.** embedlog 0.x replaced ``embedlog.transactions`` whole at every change, as a
JSON document (``{"version": 1, "transactions": {...}}``). Such a file (it starts with ``{``) is
read as it is and rewritten in this format (atomically) by the writer that opens it:
:meth:`TxnStateLog.open` returns its ``transactions`` and sets :attr:`TxnStateLog.legacy`.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import crc32c

from . import _io
from ._json import load_untrusted
from .errors import CorruptCheckpointError, UsageError

__all__ = ["FRAME_HEADER", "MAGIC", "MAX_FILE", "MAX_FRAME", "Scan", "TxnStateLog",
           "encode_frame", "scan"]

log = logging.getLogger(__name__)

MAGIC: Final = b"embedlog-txn-state 2\n"
FRAME_MAGIC: Final = b"\xc3TXN"
_HEAD: Final = struct.Struct(">4sIQ")
_CRCS: Final = struct.Struct(">II")
FRAME_HEADER: Final = _HEAD.size + _CRCS.size  # 24
MAX_FRAME: Final = 4 * 1024 * 1024
"""The largest payload: one transactional id's state (a transaction over some ten thousand
partitions with long topic names, or as many group offsets)."""
MAX_FILE: Final = 64 * 1024 * 1024
"""The largest file read or written (the state of some hundred thousand transactional ids)."""
COMPACT_MIN: Final = 1024 * 1024
COMPACT_RATIO: Final = 4
_LEGACY_VERSION: Final = 1


def encode_frame(key: str, value: Mapping[str, Any] | None, durable: int) -> bytes:
    """One frame (see the module notes) of ``key``'s ``value`` (``None``: forget ``key``)."""
    payload = json.dumps({"id": key, "value": value}, sort_keys=True,
                         separators=(",", ":")).encode()
    if len(payload) > MAX_FRAME:
        raise UsageError(f"transaction state of {key!r} would take {len(payload)} bytes, more "
                         f"than the {MAX_FRAME} a record may hold")
    head = _HEAD.pack(FRAME_MAGIC, len(payload), durable)
    return head + _CRCS.pack(crc32c.crc32c(head), crc32c.crc32c(payload)) + payload


@dataclass(frozen=True, slots=True)
class _Frame:
    position: int
    end: int
    durable: int
    payload: bytes


def _header_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """``(payload length, durable)`` of the frame header at ``pos`` if its magic and CRC hold
    and it claims what a frame there can (``None`` otherwise); the payload is not read."""
    if pos + FRAME_HEADER > len(data):
        return None
    magic, length, durable = _HEAD.unpack_from(data, pos)
    hcrc = _CRCS.unpack_from(data, pos + _HEAD.size)[0]
    if magic != FRAME_MAGIC or hcrc != crc32c.crc32c(data[pos:pos + _HEAD.size]):
        return None
    if not 0 < length <= MAX_FRAME or durable > pos:
        return None
    return length, durable


def _frame_at(data: bytes, pos: int) -> _Frame | None:
    """The valid frame at ``pos`` of ``data``, or ``None``."""
    header = _header_at(data, pos)
    if header is None:
        return None
    length, durable = header
    end = pos + FRAME_HEADER + length
    payload = data[pos + FRAME_HEADER:end]
    if end > len(data) or crc32c.crc32c(payload) != _CRCS.unpack_from(data, pos + _HEAD.size)[1]:
        return None
    return _Frame(pos, end, durable, payload)


def _durable_after(data: bytes, pos: int) -> int | None:
    """The position of a frame header after ``pos`` (found by its magic, then its CRC) that
    says byte ``pos`` was durable when it was appended, if any. Its header CRC is evidence
    enough (a payload is not read: damage costs one header check per magic found)."""
    q = data.find(FRAME_MAGIC, pos + 1)
    while q >= 0:
        header = _header_at(data, q)
        if header is not None and header[1] > pos:
            return q
        q = data.find(FRAME_MAGIC, q + 1)
    return None


@dataclass(frozen=True, slots=True)
class Scan:
    """What :func:`scan` found: the payloads in file order, where the valid frames end, and
    why the rest (if any) is a torn tail."""

    payloads: list[tuple[int, bytes]]
    valid_end: int
    torn: str | None


def scan(data: bytes, *, path: str, clean: bool) -> Scan:
    """The frames of a state log's bytes ``data`` (header included); raises
    :class:`CorruptCheckpointError` on damage that is not a torn tail (module notes)."""
    if not data.startswith(MAGIC):
        raise CorruptCheckpointError("not a transaction state log (bad header)", path=path)
    pos, out = len(MAGIC), []
    while pos < len(data):
        frame = _frame_at(data, pos)
        if frame is None:
            break
        out.append((frame.end - frame.position, frame.payload))
        pos = frame.end
    if pos == len(data):
        return Scan(out, pos, None)
    if clean:
        raise CorruptCheckpointError("damaged record after a clean shutdown", path=path,
                                     position=pos)
    later = _durable_after(data, pos)
    if later is not None:
        raise CorruptCheckpointError(f"damaged record before the durable one at byte {later}",
                                     path=path, position=pos)
    return Scan(out, pos, f"{len(data) - pos} bytes after the last valid record")


def _parse(payload: bytes, path: str) -> tuple[str, dict[str, Any] | None]:
    raw = load_untrusted(payload, limit=None, fail=lambda why: CorruptCheckpointError(
        f"malformed transaction state record: {why}", path=path))
    try:
        key, value = raw["id"], raw["value"]
    except (KeyError, TypeError) as exc:
        raise CorruptCheckpointError(f"malformed transaction state record: {exc!r}",
                                     path=path) from exc
    if not isinstance(key, str) or not (value is None or isinstance(value, dict)):
        raise CorruptCheckpointError("malformed transaction state record", path=path)
    return key, value


class TxnStateLog:
    """The state log of one log folder, for its writer (the caller serialises every call).

    Invariants: ``durable <= size``; ``size`` is the file's length (every byte written through
    :mod:`embedlog._io` at ``size``); ``live`` maps each key to its last frame's length.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = 0
        self.durable = 0
        self.live: dict[str, int] = {}
        self._live_total = len(MAGIC)
        self.legacy = False
        self._values: dict[str, bytes] = {}
        self._fd = -1

    # ------------------------------------------------------------------ open / close

    def open(self, *, clean: bool) -> dict[str, dict[str, Any]]:
        """Read the file: each key's latest value (empty when there is no file). A torn tail is
        cut (and the cut made durable); a legacy JSON file is returned as read (see the
        module notes: :attr:`legacy`, then :meth:`rewrite`)."""
        data = _io.read_regular(self.path, MAX_FILE + 1, error=CorruptCheckpointError)
        if data is None:
            return {}
        if len(data) > MAX_FILE:
            raise CorruptCheckpointError(f"transaction state is larger than {MAX_FILE} bytes",
                                         path=self.path)
        if data.startswith(b"{"):
            self.legacy = True
            return _legacy(data, self.path)
        found = scan(data, path=self.path, clean=clean)
        values: dict[str, dict[str, Any]] = {}
        for length, payload in found.payloads:
            key, value = _parse(payload, self.path)
            if value is None:
                values.pop(key, None)
                self._set_live(key, None)
            else:
                values[key] = value
                self._set_live(key, length, payload)
        self._fd = _io.open_file(self.path, os.O_WRONLY)
        if found.torn is not None:
            log.warning("cutting the torn tail of %s at byte %d: %s", self.path,
                        found.valid_end, found.torn)
            _io.truncate(self._fd, found.valid_end)
        _io.fsync(self._fd)  # what was read is on disk before any frame says it is durable
        self.size = self.durable = found.valid_end
        return values

    def close(self) -> None:
        """Make everything appended durable and close the file (idempotent)."""
        if self._fd < 0:
            return
        try:
            self.sync()
        finally:
            fd, self._fd = self._fd, -1
            _io.close(fd)

    def abandon(self) -> None:
        """Close the file without syncing (an open that failed; idempotent)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            _io.close(fd)

    # ------------------------------------------------------------------ writing

    def append(self, key: str, value: Mapping[str, Any] | None, *, sync: bool) -> None:
        """Append ``key``'s new ``value`` (``None``: forget it); durable on return only with
        ``sync``. Compacts first when the file has outgrown its live state."""
        frame = encode_frame(key, value, self.durable)
        if self._fd < 0 or self.size + len(frame) > MAX_FILE or self.size > max(
                COMPACT_RATIO * self._live_bytes(), COMPACT_MIN):
            self.rewrite(None)
            frame = encode_frame(key, value, self.durable)
            if self.size + len(frame) > MAX_FILE:
                raise UsageError(f"transaction state would exceed {MAX_FILE} bytes")
        _io.pwrite(self._fd, frame, self.size)
        self.size += len(frame)
        self._set_live(key, None if value is None else len(frame), frame[FRAME_HEADER:])
        if sync:
            self.sync()

    def sync(self) -> None:
        """Make every frame appended so far durable (nothing to do when it already is)."""
        if self._fd >= 0 and self.durable < self.size:
            _io.fsync(self._fd)
            self.durable = self.size

    def rewrite(self, values: Mapping[str, Mapping[str, Any]] | None) -> None:
        """Replace the file, atomically, by one frame per live key (``values``: replace the
        live state by these values first, as a legacy file's migration does)."""
        if values is not None:
            self._values, self.live, self._live_total = {}, {}, len(MAGIC)
            for key, value in values.items():
                frame = encode_frame(key, value, 0)
                self._set_live(key, len(frame), frame[FRAME_HEADER:])
        frames = [MAGIC]
        for payload in self._values.values():
            head = _HEAD.pack(FRAME_MAGIC, len(payload), 0)
            frames.append(head + _CRCS.pack(crc32c.crc32c(head), crc32c.crc32c(payload))
                          + payload)
        body = b"".join(frames)
        if len(body) > MAX_FILE:
            raise UsageError(f"transaction state would exceed {MAX_FILE} bytes")
        self.abandon()  # the old file is replaced whole: what it held unsynced is rewritten
        _io.write_atomic(self.path, body)
        self._fd = _io.open_file(self.path, os.O_WRONLY)
        self.size = self.durable = len(body)
        self.legacy = False

    def _live_bytes(self) -> int:
        return self._live_total

    def _set_live(self, key: str, length: int | None, payload: bytes = b"") -> None:
        """``key``'s last frame is ``length`` bytes with ``payload`` (``None``: forgotten)."""
        self._live_total -= self.live.pop(key, 0)
        self._values.pop(key, None)
        if length is not None:
            self.live[key] = length
            self._values[key] = payload
            self._live_total += length


def _legacy(data: bytes, path: str) -> dict[str, dict[str, Any]]:
    """The ``transactions`` of a legacy JSON state file (module notes)."""
    raw = load_untrusted(data, limit=None, fail=lambda why: CorruptCheckpointError(
        f"malformed transaction state: {why}", path=path))
    try:
        if raw["version"] != _LEGACY_VERSION:
            raise ValueError(f"version {raw['version']!r}")
        entries = raw["transactions"]
        if not isinstance(entries, dict) or not all(
                isinstance(k, str) and isinstance(v, dict) for k, v in entries.items()):
            raise TypeError("transactions: an object of objects expected")
        return entries
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptCheckpointError(f"malformed transaction state: {exc!r}",
                                     path=path) from exc
