"""atheris target: zigzag varints (``decode_varint``) against an independent encoder."""

import sys

import atheris  # type: ignore[import-untyped]
import numpy  # noqa: F401 - imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.errors import CorruptBatchError
    from embedlog.segment import format as fmt


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    max_bytes = 5 if fdp.ConsumeBool() else 10
    buf = fdp.ConsumeBytes(fdp.remaining_bytes())
    pos = 0
    while pos < len(buf):
        try:
            value, end = fmt.decode_varint(buf, pos, max_bytes)
        except CorruptBatchError:
            return
        if not pos < end <= pos + max_bytes:
            raise AssertionError(f"varint at {pos} ended at {end}")
        if max_bytes == 5 and not -(2**31) <= value < 2**31:
            raise AssertionError(f"int32 varint decoded to {value}")
        again, _ = fmt.decode_varint(fmt.encode_varint(value), 0, max_bytes)
        if again != value:
            raise AssertionError(f"{value} does not round-trip")
        pos = end


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
