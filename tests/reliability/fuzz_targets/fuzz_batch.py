"""atheris target: the v2 batch walk and record decoder (``next_batch``, ``decode_records``).

Half the inputs get their CRC-32C fixed up before decoding, so mutations reach the record
parser instead of dying at the checksum. Only embedlog's CorruptBatchError may escape.
"""

import sys

import atheris  # type: ignore[import-untyped]
import crc32c
import numpy  # noqa: F401 - imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog.errors import CorruptBatchError
    from embedlog.segment import format as fmt

MAX_BATCH = 1 << 20


def test_one_input(data: bytes) -> None:
    if not data:
        return
    fix_crc, buf = data[0] & 1, bytearray(data[1:])
    if fix_crc and len(buf) >= fmt.HEADER_SIZE:
        buf[17:21] = crc32c.crc32c(bytes(buf[21:])).to_bytes(4, "big")
    pos = 0
    try:
        while (header := fmt.next_batch(buf, pos, verify=True, max_batch_size=MAX_BATCH)):
            if header.records_count or not header.is_control:
                records = fmt.decode_records(buf, pos, header, max_decompressed=MAX_BATCH)
                records.keys()
                records.values()
                for i in range(min(len(records), 8)):
                    records.header(i)
            pos += header.size
    except CorruptBatchError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
