"""Helpers of the tiered-storage tests: tiered logs on a ``file://`` folder or on moto's S3
server, and what the remote holds."""

from __future__ import annotations

import json
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import embedlog

TOPIC = "events"
T0 = int(time.time() * 1000) - 60_000
"""The first record's timestamp: recent, so only size rules retire segments."""
SMALL_SEGMENTS = {"remote.storage.enable": True, "segment.bytes": 1024,
                  "index.interval.bytes": 128}


def s3_uri(endpoint: str) -> str:
    """A fresh prefix of the test bucket on the moto endpoint. ``allow_delayed_open`` makes
    pyarrow send a small object in one PutObject: moto's answer to CompleteMultipartUpload
    (pyarrow's path otherwise) is one pyarrow refuses."""
    from s3_endpoint import BUCKET

    return (f"s3://{BUCKET}/tiered-{uuid.uuid4().hex[:12]}?endpoint_override={endpoint}"
            "&scheme=http&region=us-east-1&allow_delayed_open=true")


def file_uri(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve().as_uri()


def remote_fs(uri: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(uri)
    return fs, root.rstrip("/")


def remote_objects(uri: str) -> dict[str, int]:
    """``{relative path: size}`` of every object under the remote root."""
    import pyarrow.fs as pafs

    fs, root = remote_fs(uri)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return {i.path[len(root) + 1:]: i.size for i in infos if i.type == pafs.FileType.File}


def read_remote(uri: str, name: str) -> bytes | None:
    fs, root = remote_fs(uri)
    try:
        with fs.open_input_stream(f"{root}/{name}") as s:
            return bytes(s.read())
    except (FileNotFoundError, OSError):
        return None


def put_remote(uri: str, name: str, data: bytes) -> None:
    fs, root = remote_fs(uri)
    with fs.open_output_stream(f"{root}/{name}") as s:
        s.write(data)


def manifest(uri: str, folder: str = f"{TOPIC}-0") -> dict[str, Any]:
    raw = read_remote(uri, f"{folder}/embedlog.remote-manifest")
    assert raw is not None, "no remote manifest"
    doc: dict[str, Any] = json.loads(raw)
    return doc


def check_published_complete(uri: str, folder: str = f"{TOPIC}-0") -> list[int]:
    """Every segment the remote manifest lists has every file at its size and CRC; returns
    the published bases."""
    raw = read_remote(uri, f"{folder}/embedlog.remote-manifest")
    if raw is None:
        return []
    suffix = {"log": ".log", "index": ".index", "timeindex": ".timeindex",
              "txnindex": ".txnindex"}
    bases = []
    for seg in json.loads(raw)["segments"]:
        for key, (size, crc) in seg["files"].items():
            data = read_remote(uri, f"{folder}/{seg['base']:020d}{suffix[key]}")
            assert data is not None, f"published {seg['base']}{suffix[key]} is missing"
            assert (len(data), zlib.crc32(data)) == (size, crc), seg
        bases.append(seg["base"])
    return bases


def open_tiered(path: Path, uri: str | None, config: dict[str, Any] | None = None,
                **kw: Any) -> embedlog.Log:
    """A writer (no upkeep thread) on ``path`` tiered to ``uri``; the topic made if new."""
    log = embedlog.open(path, remote_uri=uri, upkeep=False, **kw)
    if TOPIC not in log.topics():
        log.create_topic(TOPIC, partitions=1, config=config or SMALL_SEGMENTS)
    return log


def fill(log: embedlog.Log, count: int, start: int = 0, size: int = 40) -> list[bytes]:
    values = [b"%06d-" % i + b"x" * size for i in range(start, start + count)]
    for i, v in zip(range(start, start + count), values, strict=True):
        log.append(TOPIC, v, key=b"k%d" % i, timestamp=T0 + i, partition=0)
    return values


def local_bases(path: Path, folder: str = f"{TOPIC}-0") -> list[int]:
    return sorted(int(p.name[:20]) for p in (path / folder).glob("*.log"))
