"""The local read-through cache of a remote log: a private folder, filled once, removed on close.

Layout: ``tempfile.mkdtemp`` (mode 0700, inside ``cache_dir`` when given, else the system's
temporary folder) receives the files :func:`embedlog.remote.listing.plan` kept, under the same
relative names::

    <cache>/embedlog.json ...                      root files: fetched at open
    <cache>/<topic>-<partition>/                   made (empty) at open
    <cache>/<topic>-<partition>/<segment files>    fetched on the partition's first use

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
from ..errors import CorruptionError, InvalidArgumentError
from ..naming import LOG_SUFFIX, REMOTE_MANIFEST
from ..tiering.remote_manifest import Manifest, parse
from . import fetch
from .listing import Plan, RemoteFile, plan, published

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["create", "fetch_partition", "fill", "remove"]


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


def fill(fs: pafs.FileSystem, root: str, cache: str) -> Plan:
    """Fetch the root files of ``root`` into ``cache`` and make every partition folder (empty:
    :func:`fetch_partition` fills it); return the plan, whose partition files are still to
    fetch."""
    found = plan(fs, root)
    for f in found.root_files:
        fetch.copy(fs, _remote(root, f), _paths.join(cache, *f.names), f.size)
    for folder in found.partitions:
        _paths.folder(cache, folder)
    return found


def fetch_partition(fs: pafs.FileSystem, root: str, cache: str,
                    files: list[RemoteFile]) -> Manifest | None:
    """Fetch one partition folder's files (indexes before the segments they index); on any
    error remove what this call fetched, so a later call starts over. In a tiered log's
    remote (a partition folder with ``embedlog.remote-manifest``) only the published segments
    are fetched; the manifest is returned."""
    manifest = _remote_manifest(fs, root, files)
    if manifest is not None:
        files = published(files, manifest)
    made: list[str] = []
    try:
        for f in sorted(files, key=lambda f: f.names[-1].endswith(LOG_SUFFIX)):
            local = _paths.join(cache, *f.names)
            made.append(local)
            fetch.copy(fs, _remote(root, f), local, f.size)
    except BaseException:
        for local in made:
            if os.path.lexists(local):
                _io.unlink(local)
        raise
    return manifest


def _remote_manifest(fs: pafs.FileSystem, root: str, files: list[RemoteFile]
                     ) -> Manifest | None:
    """The partition's ``embedlog.remote-manifest`` (read within its listed size), if any."""
    for f in files:
        if f.names[-1] == REMOTE_MANIFEST:
            path = _remote(root, f)
            with fs.open_input_stream(path) as stream:
                raw = bytes(stream.read(f.size + 1))
            if len(raw) != f.size:
                raise CorruptionError(f"remote manifest has {len(raw)} bytes; its listing "
                                      f"reported {f.size}", path=path)
            return parse(raw, path=path)
    return None


def _remote(root: str, f: RemoteFile) -> str:
    return "/".join((root.rstrip("/"), *f.names))


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
