"""The local read-through cache of a remote log: a private folder, filled as reads need it,
removed on close.

Layout: ``tempfile.mkdtemp`` (mode 0700, inside ``cache_dir`` when given, else the system's
temporary folder) receives the files :func:`embedlog.remote.listing.plan` kept, under the same
relative names::

    <cache>/embedlog.json ...                      root files: fetched whole at open
    <cache>/<topic>-<partition>/                   made (empty) at open
    <cache>/<topic>-<partition>/<base>.index ...   index files, embedlog.segments: fetched
                                                   whole on the partition's first use
    <cache>/<topic>-<partition>/<base>.log         made sparse at its listed size on the
                                                   partition's first use; byte ranges fetched
                                                   as reads reach them

Each ``.log`` (and ``.log.swap``) is a :class:`~embedlog.tiering.ranged_file.RangedFile`:
a segment opened on it fetches every byte range before it reads it
(:mod:`embedlog.segment.ondemand`), so a point read or a consumer starting near the end of a
large partition fetches its index files and a few ranges, not the partition. The listed size
bounds everything: the sparse file is made at it and never grows, a whole copy stops past it,
a ranged read of an object of another size or one that ends early is a
:class:`~embedlog.errors.CorruptionError`. A plain remote folder has no checksums of its
own: each batch's CRC, checked by every read, is the integrity check. In a tiered log's remote
the manifest's CRC-32s are checked too (an index file at once, a ``.log`` once it is all
there).

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
from ..naming import LOG_SUFFIX, REMOTE_MANIFEST, parse_segment_file
from ..tiering.ranged_file import RangedFile
from ..tiering.remote_manifest import Manifest, parse
from .listing import Plan, RemoteFile, plan, published

if TYPE_CHECKING:
    from ..tiering.store import RemoteStore

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


def fill(store: RemoteStore, cache: str) -> Plan:
    """Fetch the root files of ``store`` into ``cache`` and make every partition folder (empty:
    :func:`fetch_partition` fills it); return the plan, whose partition files are still to
    fetch."""
    found = plan(store.fs, store.root)
    for f in found.root_files:
        store.get_file(f.names, _paths.join(cache, *f.names), f.size)
    for folder in found.partitions:
        _paths.folder(cache, folder)
    return found


def fetch_partition(store: RemoteStore, cache: str, files: list[RemoteFile]
                    ) -> tuple[Manifest | None, list[RangedFile]]:
    """Fetch one partition folder's index files whole and make its ``.log`` files ranged
    (module notes); on any error remove what this call made, so a later call starts over. In
    a tiered log's remote (a partition folder with ``embedlog.remote-manifest``) only the
    published segments are taken, at the manifest's sizes and CRC-32s; the manifest is
    returned with the ranged files."""
    manifest = _remote_manifest(store, files)
    if manifest is not None:
        files = published(files, manifest)
    made: list[str] = []
    ranged: list[RangedFile] = []
    try:
        for f in files:
            local = _paths.join(cache, *f.names)
            made.append(local)
            parsed = parse_segment_file(f.names[-1])
            if parsed is not None and parsed[1] == LOG_SUFFIX:
                ranged.append(RangedFile(store, f.names, local, f.size, f.crc))
                continue
            got = store.get_file(f.names, local, f.size)
            if f.crc is not None and got != f.crc:
                raise CorruptionError("remote file does not match the CRC-32 its manifest "
                                      f"gives ({f.crc})", path=store.path(f.names))
    except BaseException:
        for r in ranged:
            r.close()
        for local in made:
            if os.path.lexists(local):
                _io.unlink(local)
        raise
    return manifest, ranged


def _remote_manifest(store: RemoteStore, files: list[RemoteFile]) -> Manifest | None:
    """The partition's ``embedlog.remote-manifest`` (read within its listed size), if any."""
    for f in files:
        if f.names[-1] == REMOTE_MANIFEST:
            path = store.path(f.names)
            raw = store.get(f.names, f.size)
            if raw is None or len(raw) != f.size:
                raise CorruptionError(f"remote manifest is not the {f.size} bytes its listing "
                                      "reported", path=path)
            return parse(raw, path=path)
    return None


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
