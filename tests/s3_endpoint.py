"""A real S3 endpoint for tests: moto's threaded server on 127.0.0.1 (the one s3fs's own tests
use), and uploads of local log folders to it through pyarrow.fs."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BUCKET = "embedlog-test"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """``host:port`` of a running S3 endpoint with the bucket :data:`BUCKET`; the credentials
    of :data:`ENV` are in ``os.environ`` meanwhile (child processes inherit them)."""
    server_mod = pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"127.0.0.1:{port}"
        s3fs(endpoint).create_dir(BUCKET)
        yield endpoint
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def s3fs(endpoint: str) -> Any:
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1",
                             access_key="testing", secret_key="testing",
                             allow_bucket_creation=True)


def upload(endpoint: str, local: Path, prefix: str) -> str:
    """Copy the folder ``local`` to ``<bucket>/<prefix>``; the URI embedlog opens it by."""
    import pyarrow.fs as pafs

    pafs.copy_files(str(local), f"{BUCKET}/{prefix}", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3fs(endpoint))
    return (f"s3://{BUCKET}/{prefix}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1")
