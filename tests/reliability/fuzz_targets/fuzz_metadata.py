"""atheris target: the text files of a log directory -- Kafka offset checkpoints, the topic
metadata ``embedlog.json`` and the segment manifest. Only embedlog's errors may escape."""

import os
import sys
import tempfile

import atheris  # type: ignore[import-untyped]
import numpy  # noqa: F401 - imported first so that only embedlog is instrumented

with atheris.instrument_imports(include=["embedlog"]):
    from embedlog import checkpoint
    from embedlog.errors import CorruptionError
    from embedlog.manifest import MANIFEST, read_manifest
    from embedlog.metadata import parse_metadata

_SCRATCH: list[tempfile.TemporaryDirectory[str]] = []


def _scratch() -> str:
    """A folder for the manifest, made on first use and removed at exit."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="embedlog-fuzz-meta-"))
    return _SCRATCH[0].name


def test_one_input(data: bytes) -> None:
    if not data:
        return
    which, raw = data[0] % 3, data[1:]
    try:
        if which == 0:
            offsets = checkpoint.parse_offsets(raw.decode("utf-8", "replace"))
            assert all(v >= 0 for v in offsets.values())
            again = checkpoint.parse_offsets(checkpoint.format_offsets(offsets))
            assert again == offsets or len({tp.topic for tp in offsets}) != len(offsets)
        elif which == 1:
            for name, (count, _config) in parse_metadata(raw).items():
                assert name and count > 0
        else:
            folder = _scratch()
            with open(os.path.join(folder, MANIFEST), "wb") as f:
                f.write(raw)
            assert all(v >= 0 for v in read_manifest(folder).values())
    except CorruptionError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
