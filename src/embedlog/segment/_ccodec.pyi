from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

def decode(
    data: bytes, n: int, first: int, last: int, base_offset: int, base_timestamp: int,
    max_timestamp: int, last_offset_delta: int, log_append: bool, cols64: Any, cols32: Any,
    /,
) -> list[tuple[tuple[str, bytes | None], ...]] | None: ...
def decode_stored(
    buf: bytes, pos: int, size: int, n: int, base_offset: int, base_timestamp: int,
    max_timestamp: int, last_offset_delta: int, log_append: bool, cols64: Any, cols32: Any,
    /,
) -> tuple[bytes, list[tuple[tuple[str, bytes | None], ...]] | None]: ...
def slices(data: bytes, pos: Any, lens: Any, /) -> list[bytes | None]: ...
def records(
    record_type: type[Any], topic: str, partition: int, ttype: int, data: bytes,
    offsets: Any, timestamps: Any, key_pos: Any, key_len: Any, value_pos: Any,
    value_len: Any, headers: list[tuple[tuple[str, bytes | None], ...]] | None, /,
) -> list[Any]: ...
def encode(
    values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None, tsd: Any, od: Any,
    header: bytes | None, /,
) -> bytes: ...
def encode_listed(
    values: Sequence[Any], keys: Sequence[Any] | None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None, timestamps: Any,
    header: bytes, flags: int, /,
) -> bytes | bytearray | None: ...
def gather(chunks: Sequence[tuple[bytes, Any, Any]], /) -> tuple[bytes, bytes, int]: ...
def first_not_bytes(seq: list[Any] | tuple[Any, ...], /) -> int: ...
def first_not_int64(seq: list[Any] | tuple[Any, ...], out: Any = None, /) -> int: ...
def run_records(
    record_type: type[Any], topic: str, partition: int, ttype: int, data: bytes, n: int,
    base_offset: int, base_timestamp: int, max_timestamp: int, last_offset_delta: int,
    log_append: bool, /,
) -> list[Any] | None: ...
def file_identity(fd: int, /) -> tuple[int, int, int, int] | None: ...
def deferred(fn: Callable[..., Iterable[Any]], args: tuple[Any, ...], /) -> Iterator[Any]: ...
def point_run(
    fd: int, identity: tuple[int, int, int, int], start: int, length: int, n: int,
    fields: tuple[int, int, int, int, int, bool], record_type: type[Any], topic: str,
    partition: int, /,
) -> list[Any] | bytes | None: ...

class ArrowSink:
    rows: int
    item_bytes: int
    def __init__(self, keys: bool, values: bool) -> None: ...
    def append(
        self, data: bytes, start: int, end: int, n: int, base_offset: int,
        base_timestamp: int, max_timestamp: int, last_offset_delta: int, log_append: bool, /,
    ) -> int: ...
    def extend(
        self, data: bytes, offsets: Any, timestamps: Any, key_pos: Any, key_len: Any,
        value_pos: Any, value_len: Any, /,
    ) -> int: ...
    def finish(self) -> tuple[int, bytearray, bytearray, Any, Any]: ...
