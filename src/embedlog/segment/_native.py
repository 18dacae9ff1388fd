"""Which implementation of the batch codec runs: the compiled core or the pure-Python one.

The compiled core (``embedlog.segment._ccodec``, built from ``_ccodec_src/*.c`` when the package is
installed with a C compiler) takes over the hot loops of :mod:`embedlog.segment.decode` and
:mod:`embedlog.segment.encode` behind their own functions; the pure-Python code is the
reference and the fallback. It is used when the extension was not built, or when the
environment variable ``EMBEDLOG_PURE`` is set to anything but ``""`` or ``"0"`` when embedlog
is imported. Both give the same bytes, records and errors.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, cast

__all__ = ["CORE", "ArrowSink", "Core", "codec_implementation", "load_compiled"]


class ArrowSink(Protocol):
    """The compiled core's Arrow columns of one partition's rows (``_ccodec.ArrowSink``,
    documented there; used by :mod:`embedlog.arrow.sink`)."""

    rows: int
    item_bytes: int

    def append(
        self, data: bytes, start: int, end: int, n: int, base_offset: int, base_timestamp: int,
        max_timestamp: int, last_offset_delta: int, log_append: bool, /,
    ) -> int: ...

    def extend(self, data: bytes, offsets: Any, timestamps: Any, key_pos: Any, key_len: Any,
               value_pos: Any, value_len: Any, /) -> int: ...

    def finish(self) -> tuple[int, bytearray, bytearray, Any, Any]: ...


class Core(Protocol):
    """The functions of the compiled core (documented in ``_ccodec_src/``)."""

    def decode(
        self, data: bytes, n: int, first: int, last: int, base_offset: int,
        base_timestamp: int, max_timestamp: int, last_offset_delta: int, log_append: bool,
        cols64: Any, cols32: Any, /,
    ) -> list[tuple[tuple[str, bytes | None], ...]] | None: ...

    def decode_stored(
        self, buf: bytes, pos: int, size: int, n: int, base_offset: int, base_timestamp: int,
        max_timestamp: int, last_offset_delta: int, log_append: bool, cols64: Any, cols32: Any,
        /,
    ) -> tuple[bytes, list[tuple[tuple[str, bytes | None], ...]] | None]: ...

    def slices(self, data: bytes, pos: Any, lens: Any, /) -> list[bytes | None]: ...

    def gather(self, chunks: Sequence[tuple[bytes, Any, Any]], /) -> tuple[bytes, bytes, int]: ...

    def records(
        self, record_type: type[Any], topic: str, partition: int, ttype: int, data: bytes,
        offsets: Any, timestamps: Any, key_pos: Any, key_len: Any, value_pos: Any,
        value_len: Any, headers: list[tuple[tuple[str, bytes | None], ...]] | None, /,
    ) -> list[Any]: ...

    def encode(
        self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None, tsd: Any,
        od: Any, header: bytes | None, /,
    ) -> bytes: ...

    def encode_listed(
        self, values: Sequence[Any], keys: Sequence[Any] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
        timestamps: Any, header: bytes, flags: int, /,
    ) -> bytes | bytearray | None: ...

    def ArrowSink(self, keys: bool, values: bool, /) -> ArrowSink: ...

    def first_not_bytes(self, seq: list[Any] | tuple[Any, ...], /) -> int: ...

    def first_not_int64(self, seq: list[Any] | tuple[Any, ...], out: Any = None, /) -> int: ...

    def run_records(
        self, record_type: type[Any], topic: str, partition: int, ttype: int, data: bytes,
        n: int, base_offset: int, base_timestamp: int, max_timestamp: int,
        last_offset_delta: int, log_append: bool, /,
    ) -> list[Any] | None: ...

    def file_identity(self, fd: int, /) -> tuple[int, int, int, int] | None: ...

    def deferred(self, fn: Callable[..., Iterable[Any]], args: tuple[Any, ...], /
                 ) -> Iterator[Any]: ...

    def floor_index(self, bases: Any, value: int, /) -> int: ...

    def point_run(
        self, fd: int, identity: tuple[int, int, int, int], start: int, length: int, n: int,
        fields: tuple[int, int, int, int, int, bool], record_type: type[Any], topic: str,
        partition: int, /,
    ) -> list[Any] | bytes | None: ...

    def SlotBuilder(self, cls: type[Any], setters: tuple[Any, ...], /) -> Any: ...


def load_compiled(module: str) -> Any:
    """The compiled extension ``module``, or None when it is not built or ``EMBEDLOG_PURE``
    asks for the pure code (the one switch for every compiled part of embedlog)."""
    if os.environ.get("EMBEDLOG_PURE", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _load() -> Core | None:
    return cast("Core | None", load_compiled("embedlog.segment._ccodec"))


CORE: Core | None = _load()
"""The compiled core, or None when the pure-Python codec runs. Read at each call, so a test
may set it to None to run the reference implementation."""


def codec_implementation() -> str:
    """``"c"`` when the compiled codec core is in use, ``"python"`` for the pure fallback."""
    return "python" if CORE is None else "c"
