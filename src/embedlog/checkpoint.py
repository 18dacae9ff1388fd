"""Small versioned text files: Kafka's checkpoints and embedlog's own counters and manifests.

Every small text file embedlog keeps has the same shape, described once by a
:class:`VersionedText` and parsed and formatted here (UTF-8, ``\\n`` line ends)::

    <version line>         exactly the format's header, e.g. ``0`` or ``embedlog-segments 1``
    [<entry count>]        only in Kafka's checkpoints
    <field> <field> ...    one entry per line, a fixed number of fields split on whitespace

Formats defined here (file names in :mod:`embedlog.naming`):

* :data:`OFFSETS` -- Kafka's checkpoints (``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``, a group's ``offsets``)::

      0                      version
      2                      number of entries
      orders 0 1042          topic partition offset
      orders 1 977

  An empty file means no entries (Kafka writes one for a cleaner that never ran).
* :data:`SEGMENT_MANIFEST` -- ``embedlog.segments``: ``embedlog-segments 1``, then
  ``base-offset size`` of each sealed segment.
* :data:`PRODUCER_IDS` -- ``embedlog.producer-ids``: ``embedlog-producer-ids 1``, then the next
  free producer id.

Integer fields are plain ASCII digits, never negative and below ``2**63``. Files are replaced
whole through :func:`embedlog._io.write_atomic`, so a crash leaves the old or the new file.
Parsing is pure; a malformed or unreadable file raises
:class:`~embedlog.errors.CorruptCheckpointError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from . import _io
from .errors import ArgumentOutOfRangeError, CorruptCheckpointError, InvalidArgumentError
from .records import TopicPartition

__all__ = [
    "OFFSETS",
    "PRODUCER_IDS",
    "SEGMENT_MANIFEST",
    "VersionedText",
    "format_offsets",
    "parse_offsets",
    "read_offsets",
    "write_offsets",
]

Row = tuple[str | int, ...]
_INT_RE: Final = re.compile(r"-?[0-9]+\Z")
_INT_LIMIT: Final = 1 << 63
"""Integer fields are Kafka longs: ``0 <= value < 2**63``, at most 19 digits."""
_MAX_LINE_BYTES: Final = 320
"""The longest sane entry line: a 249-character topic and two 20-digit numbers, with room."""


@dataclass(frozen=True, slots=True)
class VersionedText:
    """The layout of one kind of small text file.

    Attributes:
        what: what the file is, for error messages ("checkpoint", "segment manifest"...).
        header: the exact first line; a file with any other first line is rejected.
        fields: per entry field, ``str`` or ``int`` (ints are non-negative).
        counted: a second line holds the number of entries (Kafka's checkpoints).
        empty_ok: an empty (or blank) file has no entries instead of being malformed.
        max_bytes: the largest file read; a larger one is malformed.
    """

    what: str
    header: str
    fields: tuple[type[str] | type[int], ...]
    counted: bool = False
    empty_ok: bool = False
    max_bytes: int = 64 * 1024 * 1024

    def parse(self, text: str, *, path: str | None = None, max_entries: int | None = None
              ) -> list[Row]:
        """The entries of ``text``, each a tuple of the format's field types; more than
        ``max_entries`` entries (when given) make the file malformed."""
        if self.empty_ok and not text.strip():
            return []
        lines = [line.rstrip("\r") for line in text.split("\n")]
        if lines and lines[-1] == "":
            lines.pop()
        if not lines or lines[0].strip() != self.header:
            first = lines[0][:40] if lines else ""
            raise self._bad(f"first line {first!r} is not the version line {self.header!r}",
                            path)
        body = lines[1:]
        if self.counted:
            counted = body[0].strip() if body else ""
            if not _INT_RE.match(counted) or len(counted) > 19:
                raise self._bad("missing or non-integer entry count", path)
            count, body = int(counted), body[1:]
            if max_entries is not None and count > max_entries:
                raise self._bad(f"header says {count} entries, more than the {max_entries} "
                                "this log can have", path)
            if count != len(body):
                raise self._bad(f"header says {count} entries, file has {len(body)}", path)
        return [self._row(line, path) for line in body]

    def _row(self, line: str, path: str | None) -> Row:
        parts = line.split()
        if len(parts) != len(self.fields):
            raise self._bad(f"entry {line!r} does not have {len(self.fields)} fields", path)
        row: list[str | int] = []
        for text, kind in zip(parts, self.fields, strict=True):
            if kind is str:
                row.append(text)
                continue
            if not _INT_RE.match(text):
                raise self._bad(f"entry {line!r} has a non-integer field {text!r}", path)
            if text.startswith("-"):
                raise self._bad(f"entry {line!r} has a negative value", path)
            if len(text) > 19 or int(text) >= _INT_LIMIT:
                raise self._bad(f"entry {line!r} has a value beyond 64 bits", path)
            row.append(int(text))
        return tuple(row)

    def format(self, rows: Iterable[Sequence[str | int]]) -> str:
        """The file's text for ``rows`` (in the order given)."""
        rows = [self._checked(row) for row in rows]
        lines = [self.header]
        if self.counted:
            lines.append(str(len(rows)))
        lines += [" ".join(str(v) for v in row) for row in rows]
        return "\n".join(lines) + "\n"

    def _checked(self, row: Sequence[str | int]) -> Sequence[str | int]:
        """``row`` if :meth:`parse` would read it back as it is; a value it would reject is
        refused here, so no file is ever written that its reader rejects."""
        if len(row) != len(self.fields):
            raise ArgumentOutOfRangeError(
                f"refusing to write {self.what}: {row!r} does not have {len(self.fields)} fields")
        for v, kind in zip(row, self.fields, strict=True):
            if type(v) is not kind:
                raise InvalidArgumentError(
                    f"refusing to write {self.what}: {v!r} in {row!r} is not a {kind.__name__}")
            if kind is int and not 0 <= v < _INT_LIMIT:  # type: ignore[operator]
                raise ArgumentOutOfRangeError(
                    f"refusing to write {self.what}: {v!r} in {row!r} is outside [0, 2**63)")
            if kind is str and v.split() != [v]:  # type: ignore[union-attr]
                raise ArgumentOutOfRangeError(
                    f"refusing to write {self.what}: {v!r} is empty or has white space")
        return row

    def read(self, path: str, *, max_entries: int | None = None) -> list[Row] | None:
        """The entries of the file at ``path``; ``None`` if it does not exist. With
        ``max_entries`` a file longer than that many entries can be is refused having read no
        more than that, and one with more entries before they are parsed."""
        limit = self.max_bytes
        if max_entries is not None:
            limit = min(limit, 64 + max_entries * _MAX_LINE_BYTES)
        try:  # a regular file only: a FIFO would block, a symlink could point anywhere
            raw = _io.read_regular(path, limit + 1, error=CorruptCheckpointError)
        except OSError as exc:
            raise CorruptCheckpointError(f"cannot read {self.what}: {exc}", path=path) from exc
        if raw is None:
            return None
        if len(raw) > limit:
            raise self._bad(f"larger than the {limit} bytes this log can justify", path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._bad("not UTF-8", path) from None
        return self.parse(text, path=path, max_entries=max_entries)

    def write(self, path: str, rows: Iterable[Sequence[str | int]]) -> None:
        """Replace the file at ``path`` atomically (tmp, fsync, rename, directory fsync)."""
        _io.write_atomic(path, self.format(rows).encode())

    def _bad(self, msg: str, path: str | None) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed {self.what}: {msg}", path=path)


OFFSETS: Final = VersionedText("checkpoint", "0", (str, int, int), counted=True, empty_ok=True)
SEGMENT_MANIFEST: Final = VersionedText("segment manifest", "embedlog-segments 1", (int, int),
                                        max_bytes=16 * 1024 * 1024)
PRODUCER_IDS: Final = VersionedText("producer id counter", "embedlog-producer-ids 1", (int,),
                                    max_bytes=4096)


def _offsets(rows: list[Row]) -> dict[TopicPartition, int]:
    return {TopicPartition(str(topic), int(p)): int(o) for topic, p, o in rows}


def parse_offsets(text: str, *, path: str | None = None) -> dict[TopicPartition, int]:
    """Parse the ``topic partition offset`` checkpoint format."""
    return _offsets(OFFSETS.parse(text, path=path))


def format_offsets(offsets: Mapping[TopicPartition, int]) -> str:
    """Checkpoint text of ``offsets``, entries sorted by topic and partition."""
    return OFFSETS.format((tp.topic, tp.partition, o) for tp, o in sorted(offsets.items()))


def read_offsets(path: str, *, max_entries: int | None = None) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; a missing file has none (``max_entries``: as
    :meth:`VersionedText.read`)."""
    rows = OFFSETS.read(path, max_entries=max_entries)
    return {} if rows is None else _offsets(rows)


def write_offsets(path: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Replace the checkpoint at ``path`` with ``offsets``."""
    _io.write_atomic(path, format_offsets(offsets).encode())
