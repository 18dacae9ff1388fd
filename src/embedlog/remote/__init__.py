"""Reading a log folder in object storage (the read side of Kafka's tiered storage, KIP-405).

``embedlog.open("s3://bucket/prefix", read_only=True)`` -- or ``file://``, ``gs://``,
``hdfs://``: any URI :func:`pyarrow.fs.FileSystem.from_uri` understands, with its query
options such as ``?endpoint_override=...&scheme=http`` -- returns a read-only
:class:`~embedlog.Log` over that folder. The design is a local read-through cache:

* :mod:`.listing` lists the remote folder once, checks every name by :mod:`embedlog.naming`'s
  rules and bounds every size;
* :mod:`.cache` owns the private cache folder (removed on close): files fetched whole or
  filled by ranged reads, never more bytes than the listing promised;
* :mod:`.log` is the :class:`RemoteLog`, a read-only ``Log`` opened on the cache.

The root files (``embedlog.json``, checkpoints) are fetched at open; a partition's index and
manifest files (whole) the first time the partition is used, its ``.log`` files only as reads
reach them and only the byte ranges they read (ranged reads: a point read or a consumer
starting near the end of a large partition fetches a few ranges, not the partition). pyarrow
is the ``arrow`` extra; without it a URI raises :class:`~embedlog.errors.UsageError`. Writing
to a URI is refused with a :class:`~embedlog.errors.UsageError` before anything is fetched.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Final

from ..errors import UsageError

if TYPE_CHECKING:
    from .log import RemoteLog

__all__ = ["is_uri", "open_remote"]

_URI_RE: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_uri(path: object) -> bool:
    """Whether ``path`` is a URI (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and _URI_RE.match(path) is not None


def open_remote(uri: str, *, read_only: bool = False,
                cache_dir: str | os.PathLike[str] | None = None, adopt: bool = False) -> RemoteLog:
    """Open the remote log folder ``uri`` read-only (see the module docstring)."""
    if not read_only:
        raise UsageError(f"{uri!r} is a remote log: it can only be opened read_only=True "
                         "(embedlog writes only to local folders)")
    if adopt:
        raise UsageError("adopt=True writes embedlog's files; a remote log is read-only")
    from ..tiering.store import filesystem
    from .log import RemoteLog

    fs, root = filesystem(uri, "reading a remote log")
    return RemoteLog(fs, root, uri, cache_dir=cache_dir)
