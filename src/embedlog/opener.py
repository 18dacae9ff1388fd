"""``embedlog.open``: a local folder opens a :class:`~embedlog.Log`; a URI opens a remote log.

A ``str`` of the form ``scheme://...`` (``s3://``, ``gs://``, ``hdfs://``, ``file://``) is a
remote log folder, opened read-only through :mod:`embedlog.remote`; anything else is a local
path handed to :func:`embedlog.log.open`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from . import log, remote
from ._client_api import Durability

__all__ = ["open"]


def open(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    durability: Durability = "none",
    create: bool = True,
    upkeep: bool | Mapping[str, Any] = True,
    adopt: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    remote_uri: str | None = None,
) -> log.Log:
    """Open the log folder ``path``: a local folder exactly as :func:`embedlog.log.open` (its
    options are documented there), or a URI (``s3://bucket/prefix``, ``file:///path``...)
    read-only -- ``read_only=True`` is required -- through a private local cache made in
    ``cache_dir`` (default: the system's temporary folder) and removed on close; see
    :mod:`embedlog.remote`. ``remote_uri``: a local folder's tiered storage
    (:mod:`embedlog.tiering`).
    """
    if remote.is_uri(path):
        assert isinstance(path, str)
        if remote_uri is not None:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError("remote_uri is the tiered storage of a local folder; "
                                       f"{path!r} is already remote")
        return remote.open_remote(path, read_only=read_only, cache_dir=cache_dir, adopt=adopt)
    if cache_dir is not None:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError("cache_dir is only for a remote log (a URI)")
    return log.open(path, read_only=read_only, durability=durability, create=create,
                    upkeep=upkeep, adopt=adopt, remote_uri=remote_uri)
