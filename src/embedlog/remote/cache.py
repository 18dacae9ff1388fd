"""The local read-through cache of a remote log: a private folder, filled once, removed on close.

Layout: ``tempfile.mkdtemp`` (mode 0700, inside ``cache_dir`` when given, else the system's
temporary folder) receives the files :func:`embedlog.remote.listing.plan` kept, under the same
relative names::

    <cache>/embedlog.json ...                      root files
    <cache>/<topic>-<partition>/<segment files>    partition folders

Every local path is built by :func:`embedlog._paths.folder` / :func:`embedlog._paths.join` from
names that passed :func:`embedlog._paths.component`, below the new folder only; nothing is
written anywhere else and the remote is only read. :func:`remove` deletes the folder's contents
bottom-up (files and folders only, never following a link) and then the folder, and only in
the process that created it (a ``fork()`` child leaves its parent's cache alone).
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import TYPE_CHECKING

from .. import _io, _paths
from ..errors import InvalidArgumentError
from . import fetch
from .listing import plan

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["create", "fill", "remove"]


def create(cache_dir: str | os.PathLike[str] | None) -> str:
    """A new private folder for one remote log's files."""
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"cache_dir must be a path, not {type(cache_dir).__name__}")
        cache_dir = os.fspath(cache_dir)
        if not os.path.isdir(cache_dir):
            raise InvalidArgumentError(f"cache_dir {cache_dir!r} is not a folder")
    return tempfile.mkdtemp(prefix="embedlog-remote-", dir=cache_dir)


def fill(fs: pafs.FileSystem, root: str, cache: str) -> int:
    """Fetch every file the read-only log needs from ``root`` into ``cache``; return the
    number of bytes fetched."""
    total = 0
    for f in plan(fs, root):
        *folders, name = f.names
        local = _paths.join(_paths.folder(cache, *folders), name)
        fetch.copy(fs, "/".join((root.rstrip("/"), *f.names)), local, f.size)
        total += f.size
    return total


def remove(cache: str, owner_pid: int) -> None:
    """Delete ``cache`` and everything in it (only in the process ``owner_pid``)."""
    if os.getpid() != owner_pid or not os.path.lexists(cache):
        return
    for top, dirs, files in os.walk(cache, topdown=False):
        for name in files + dirs:
            path = os.path.join(top, name)
            if stat.S_ISDIR(os.lstat(path).st_mode):
                _io.rmdir(path)
            else:
                _io.unlink(path)
    _io.rmdir(cache)
