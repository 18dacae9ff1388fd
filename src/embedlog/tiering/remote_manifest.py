"""``embedlog.remote-manifest``: the segments of one partition published to the remote store.

Layout (JSON, one object)::

    {"format": "embedlog-remote-manifest", "version": 1, "log_start": <offset>,
     "segments": [{"base": <offset>, "next": <offset>, "max_timestamp": <ms or -1>,
                   "files": {"log": [<size>, <crc32>], "index": [...], "timeindex": [...],
                             "txnindex": [...]}}, ...]}

A segment is listed only once every one of its files is on the remote at the size and CRC-32
given (the manifest is written last); ``next`` is the base offset of the segment that followed
it locally when it was published, so listed segments chain without a hole (``next`` of one is
the ``base`` of the next). ``log_start`` is the partition's log start when the manifest was
written. The remote's manifest is the truth; the writer keeps a copy in the partition folder
(under the same name) so an open needs no network.

The bytes are untrusted: :func:`parse` bounds the size (:data:`MAX_BYTES`), the entries
(:data:`MAX_SEGMENTS`), every number (64-bit; sizes within :data:`SEGMENT_MAX` and
:data:`INDEX_MAX`) and the order, and raises
:class:`~embedlog.errors.CorruptCheckpointError` for anything else.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Final

from .._json import load_untrusted
from ..errors import CorruptCheckpointError
from ..naming import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX

__all__ = ["FILES", "MAX_BYTES", "MAX_SEGMENTS", "Manifest", "Published", "encode", "parse"]

MAX_BYTES: Final = 16 << 20
MAX_SEGMENTS: Final = 100_000
FORMAT: Final = "embedlog-remote-manifest"
FILES: Final = {"log": LOG_SUFFIX, "index": INDEX_SUFFIX, "timeindex": TIMEINDEX_SUFFIX,
                "txnindex": TXNINDEX_SUFFIX}
"""The files of a published segment: manifest key -> suffix (the order they are uploaded:
the ``.log`` last, as a fetch reads indexes first)."""
_LIMIT: Final = 1 << 63
SEGMENT_MAX: Final = (1 << 31) - 1
"""Largest published ``.log``: Kafka's ``segment.bytes`` is an int32."""
INDEX_MAX: Final = 64 << 20
"""Largest published index file (the bound a remote read-only open uses too)."""


@dataclass(frozen=True)
class Published:
    """One published segment: ``[base, next)``, its newest timestamp, ``{key: (size, crc)}``."""

    base: int
    next: int
    max_timestamp: int
    files: dict[str, tuple[int, int]]

    @property
    def size(self) -> int:
        """The ``.log``'s bytes (what ``retention.bytes`` counts)."""
        return self.files["log"][0]


@dataclass(frozen=True)
class Manifest:
    """A partition's published segments (base order) and its log start."""

    log_start: int = 0
    segments: tuple[Published, ...] = field(default=())

    def bases(self) -> list[int]:
        return [s.base for s in self.segments]

    def find(self, base: int) -> Published | None:
        for s in self.segments:
            if s.base == base:
                return s
        return None


def encode(m: Manifest) -> bytes:
    """The manifest's bytes (:func:`parse` reads them back equal)."""
    doc = {"format": FORMAT, "version": 1, "log_start": m.log_start,
           "segments": [{"base": s.base, "next": s.next, "max_timestamp": s.max_timestamp,
                         "files": {k: list(v) for k, v in s.files.items()}}
                        for s in m.segments]}
    return json.dumps(doc, separators=(",", ":")).encode()


def parse(raw: bytes, *, path: str) -> Manifest:
    """The manifest in ``raw`` (read from ``path``), checked; else CorruptCheckpointError."""
    def bad(why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed remote manifest: {why}", path=path)

    doc = load_untrusted(raw, limit=MAX_BYTES, fail=bad)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != 1:
        raise bad("not an embedlog remote manifest of version 1")
    rows = doc.get("segments")
    if not isinstance(rows, list) or len(rows) > MAX_SEGMENTS:
        raise bad(f"'segments' must be a list of at most {MAX_SEGMENTS}")
    segments = tuple(_segment(row, bad) for row in rows)
    for a, b in itertools.pairwise(segments):
        if b.base != a.next:
            raise bad(f"segment {b.base} does not follow segment {a.base} (next {a.next})")
    return Manifest(_number(doc.get("log_start"), bad, "log_start"), segments)


def _segment(row: Any, bad: Any) -> Published:
    if not isinstance(row, dict) or not isinstance(row.get("files"), dict):
        raise bad("a segment entry must be an object with 'files'")
    base = _number(row.get("base"), bad, "base")
    nxt = _number(row.get("next"), bad, "next")
    stamp = row.get("max_timestamp")
    if type(stamp) is not int or not -1 <= stamp < _LIMIT:
        raise bad(f"max_timestamp of segment {base} must be an integer >= -1")
    if nxt <= base:
        raise bad(f"segment {base} ends at {nxt}, not after its base")
    files = row["files"]
    if set(files) != set(FILES):
        raise bad(f"segment {base} must list the files {sorted(FILES)}")
    out: dict[str, tuple[int, int]] = {}
    for key, value in files.items():
        if not (isinstance(value, list) and len(value) == 2):
            raise bad(f"file {key} of segment {base} must be [size, crc]")
        size = _number(value[0], bad, f"{key} size")
        crc = _number(value[1], bad, f"{key} crc")
        if size > (SEGMENT_MAX if key == "log" else INDEX_MAX) or crc >= 1 << 32:
            raise bad(f"file {key} of segment {base}: size {size} or crc {crc} out of range")
        out[key] = (size, crc)
    return Published(base, nxt, stamp, out)


def _number(value: Any, bad: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < _LIMIT:
        raise bad(f"{what} must be an integer in [0, 2**63), got {value!r}")
    return value
