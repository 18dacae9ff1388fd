"""atheris target: bounded decompression of every codec (gzip, snappy, lz4, zstd).

The output limit is 1 MiB and libFuzzer runs with an RSS limit: a frame that lies about its
size, or a bomb, must end in CorruptBatchError, never in a big allocation."""

import sys

import atheris  # type: ignore[import-untyped]
import numpy  # noqa: F401 - imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.errors import CorruptBatchError
    from embedlog.segment.codecs import decompress

LIMIT = 1 << 20


def test_one_input(data: bytes) -> None:
    if not data:
        return
    codec = 1 + data[0] % 4
    try:
        out = decompress(codec, data[1:], max_size=LIMIT)
    except CorruptBatchError:
        return
    if len(out) > LIMIT:
        raise AssertionError(f"codec {codec} returned {len(out)} bytes")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
