"""atheris target: ``.index`` / ``.timeindex`` readers (reader rule, sanity check, lookups)
and the writer's open of a damaged file. Only CorruptIndexError may escape."""

import contextlib
import os
import sys
import tempfile

import atheris  # type: ignore[import-untyped]
import numpy  # noqa: F401 - imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.errors import CorruptIndexError
    from embedlog.index import OffsetIndex, TimeIndex

_SCRATCH: list[tempfile.TemporaryDirectory[str]] = []


def _index_path() -> str:
    """The scratch index file, in a folder made on first use and removed at exit."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="embedlog-fuzz-index-"))
    return os.path.join(_SCRATCH[0].name, "00000000000000000100.index")


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    path = _index_path()
    kind = TimeIndex if data[0] & 1 else OffsetIndex
    writable = bool(data[0] & 2)
    log_size = int.from_bytes(data[1:3], "big") * 16
    with open(path, "wb") as f:
        f.write(data[3:])
    idx = kind(path, 100, writable=writable, max_bytes=4096)
    try:
        with contextlib.suppress(CorruptIndexError):
            idx.sanity_check(log_size)
        for target in (0, 100, 150, 10**6, 2**62):
            idx.lookup(target)
        if isinstance(idx, TimeIndex):
            idx.last_entry()
        elif writable and not idx.is_full:
            position = idx.lookup(2**63 - 1)[1] + 1
            if position < 2**31 and idx.last_offset - 100 < 2**31 - 2:
                idx.append(idx.last_offset + 1, position)
    finally:
        idx.close()


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
