"""What of a remote log folder is fetched: one listing, every name checked, every size bounded.

The remote folder is untrusted input, like a local one. It is listed once, recursively; every
key is split into its path components relative to the folder, and a component that is empty,
``.`` or ``..`` (a listing that would climb out) is a :class:`~embedlog.errors.CorruptionError`.
Only the files a read-only log reads are kept, each recognised by :mod:`embedlog.naming`::

    <root>/embedlog.json, Kafka's root checkpoints, meta.properties     (root files)
    <root>/<topic>-<partition>/<20 digits>.log|.index|.timeindex|.txnindex[.swap]
    <root>/<topic>-<partition>/embedlog.segments
    <root>/<topic>-<partition>/embedlog.remote-manifest   (a tiered log's remote)

Everything else (``__groups/``, ``lost+found/``, producer snapshots, a broker's
``leader-epoch-checkpoint``, deeper folders) is left on the remote. Each kept name passes
:func:`embedlog._paths.component` before it can become a local path, and each size the listing
reports is bounded before a byte is fetched: :data:`SMALL_FILE_MAX` for root files and manifests,
:data:`INDEX_MAX` for index files, :data:`SEGMENT_MAX` (Kafka's ``segment.bytes`` is an int32)
for ``.log`` files. Every fetch then checks the size again (a whole copy never takes more bytes
than listed, a ranged read checks the object's size: :mod:`embedlog.tiering.store`). The root
files are fetched at open, a partition folder's index files on that partition's first use, its
``.log`` byte ranges as reads reach them (:mod:`embedlog.remote.cache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from .. import _paths
from ..errors import CorruptionError, NotALogError
from ..folder_check import KAFKA_MARKERS
from ..naming import (
    LOG_SUFFIX,
    METADATA_FILE,
    REMOTE_MANIFEST,
    ROOT_CHECKPOINTS,
    SEGMENT_MANIFEST,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    parse_partition_dir,
    parse_segment_file,
)
from ..tiering.remote_manifest import FILES, Manifest
from ..tiering.store import remote_error

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["INDEX_MAX", "SEGMENT_MAX", "SMALL_FILE_MAX", "Plan", "RemoteFile", "plan",
           "published"]

SMALL_FILE_MAX: Final = 16 << 20
"""Largest root file or ``embedlog.segments`` fetched (bytes)."""
INDEX_MAX: Final = 64 << 20
"""Largest ``.index``/``.timeindex``/``.txnindex`` fetched (Kafka's default is 10 MiB)."""
SEGMENT_MAX: Final = (1 << 31) - 1
"""Largest ``.log`` fetched: Kafka's ``segment.bytes`` is an int32."""

_ROOT_FILES: Final = frozenset((METADATA_FILE, *ROOT_CHECKPOINTS, *KAFKA_MARKERS))


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch: its checked path components below the root, its listed size (a
    tiered log's remote: the manifest's) and, when a remote manifest gives it, its CRC-32."""

    names: tuple[str, ...]
    size: int
    limit: int
    crc: int | None = None


@dataclass
class Plan:
    """What to fetch: the root files (at open) and, per partition folder (every one the listing
    shows, even without a segment), its files (on the partition's first use)."""

    root_files: list[RemoteFile] = field(default_factory=list)
    partitions: dict[str, list[RemoteFile]] = field(default_factory=dict)


def plan(fs: pafs.FileSystem, root: str) -> Plan:
    """List ``root`` on ``fs`` once and return the files a read-only log needs, sorted."""
    import pyarrow.fs as pafs

    root = root.rstrip("/")
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except FileNotFoundError as exc:
        raise NotALogError(f"no remote log folder at {root!r}") from exc
    except OSError as exc:  # the network, credentials, the service
        raise remote_error(exc, "listing", root) from exc
    found = Plan()
    for info in sorted(infos, key=lambda i: str(i.path)):
        names = _relative(root, info.path)
        in_folder = len(names) > 1 or info.type == pafs.FileType.Directory
        if in_folder and parse_partition_dir(names[0]) is not None:
            found.partitions.setdefault(
                _paths.component(names[0], "remote partition folder", CorruptionError), [])
        limit = _limit(names) if info.type == pafs.FileType.File else None
        if limit is None:
            continue
        size = info.size
        if size is None or not 0 <= size <= limit:
            raise CorruptionError(f"remote file is {size} bytes; the limit for it is {limit}",
                                  path=info.path)
        f = RemoteFile(names, size, limit)
        (found.partitions[names[0]] if len(names) == 2 else found.root_files).append(f)
    return found


def _relative(root: str, path: str) -> tuple[str, ...]:
    """``path``'s components below ``root``; a listing that climbs out is damage."""
    if not path.startswith(root + "/"):
        raise CorruptionError(f"remote listing of {root!r} returned a path outside it",
                              path=path)
    names = tuple(path[len(root) + 1:].split("/"))
    if any(n in ("", ".", "..") for n in names):
        raise CorruptionError("remote listing holds a name with an empty, '.' or '..' "
                              "component", path=path)
    return names


def _limit(names: tuple[str, ...]) -> int | None:
    """The size bound of a file the read-only log reads, ``None`` for a file left remote.
    Every name kept has passed :func:`embedlog._paths.component`."""
    if len(names) == 1:
        return SMALL_FILE_MAX if names[0] in _ROOT_FILES else None
    if len(names) != 2 or parse_partition_dir(names[0]) is None:
        return None
    name = names[1]
    if name in (SEGMENT_MANIFEST, REMOTE_MANIFEST):
        return SMALL_FILE_MAX
    parsed = parse_segment_file(name)
    if parsed is None or parsed[2] not in ("", SWAP_SUFFIX) or parsed[1] == SNAPSHOT_SUFFIX:
        return None
    _paths.component(name, "remote segment file", CorruptionError)
    return SEGMENT_MAX if parsed[1] == LOG_SUFFIX else INDEX_MAX


def published(files: list[RemoteFile], manifest: Manifest) -> list[RemoteFile]:
    """The files of a tiered log's partition folder that ``manifest`` publishes, at the size it
    gives, with its CRC-32: a segment uploaded but not published yet (or left over after its
    deletion) is garbage a reader never sees; the manifest itself is left out."""
    sizes = {(s.base, FILES[key]): file for s in manifest.segments
             for key, file in s.files.items()}
    kept = []
    for f in files:
        parsed = parse_segment_file(f.names[-1])
        if parsed is None or parsed[2]:
            continue
        listed = sizes.get((parsed[0], parsed[1]))
        if listed is not None and listed[0] == f.size:
            kept.append(replace(f, crc=listed[1]))
    return kept
