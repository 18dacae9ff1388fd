"""A log folder's tiered storage: where its remote is, each partition's :class:`Tier`, the
tiering round the upkeep thread runs, and the private read cache.

The remote URI is a log option (``embedlog.open(path, remote_uri="s3://...")``). A writer
records it in the root file ``embedlog.tiering`` (layout: ``{"version": 1, "remote_uri":
"<uri>"}``, replaced atomically), so a later read-only open of the folder (and the command
line's reading commands) finds the remote without being told. A writer uploads to the remote
and deletes from it, so it never takes the folder's word for where that is: the folder is
untrusted input, and a planted ``embedlog.tiering`` must not send segments to, or delete
from, a place its owner never named. A writer open of a folder that records a remote must
be given that URI (``remote_uri=``; ``embedlog --remote-uri`` on the command line), and
refuses to open otherwise; a different URI moves the log's remote and is recorded.
Credentials belong in the environment (``AWS_ACCESS_KEY_ID``...), not in the URI, which is
stored in clear.

:meth:`RemoteLogManager.run` is one tiering round (Kafka's ``RLMTask``): the topic table
(``embedlog.json``) is copied to the remote root when it changed, then for every partition of a
topic with ``remote.storage.enable=true`` its sealed segments are uploaded
(:func:`.upload.upload`) and the local ones past the local retention deleted
(:func:`.upload.expire_local`). Reads of tiered segments fetch them into one private cache
folder per open log (``tempfile.mkdtemp``), removed by :meth:`RemoteLogManager.close`.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterable
from typing import Final

from .. import _io
from .._json import load_untrusted
from ..errors import CorruptCheckpointError, UsageError
from ..naming import METADATA_FILE, TIERING_FILE
from ..partition import Partition
from .store import RemoteStore, open_store
from .tier import Tier
from .upload import expire_local, tier_of, upload

__all__ = ["RemoteLogManager", "read_uri"]

_MAX_ROOT_FILE: Final = 64 * 1024
_MAX_METADATA: Final = 16 << 20


def read_uri(root: str) -> str | None:
    """The remote URI recorded in ``root``'s ``embedlog.tiering``, if there is one."""
    path = os.path.join(root, TIERING_FILE)
    raw = _io.read_regular(path, _MAX_ROOT_FILE + 1, error=CorruptCheckpointError)
    if raw is None:
        return None

    def malformed(why: str | None = None) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            "malformed tiering file: " + (f"{why}; " if why else "")
            + 'expected {"version": 1, "remote_uri": "<scheme>://..."}', path=path)

    doc = load_untrusted(raw, limit=_MAX_ROOT_FILE, fail=malformed)
    uri = doc.get("remote_uri") if isinstance(doc, dict) and doc.get("version") == 1 else None
    if not isinstance(uri, str) or "://" not in uri:
        raise malformed()
    return uri


class RemoteLogManager:
    """The tiered storage of the log folder ``root`` on ``store``."""

    def __init__(self, root: str, store: RemoteStore, *, writable: bool) -> None:
        self.root = root
        self.store = store
        self.writable = writable
        self._lock = threading.Lock()
        self._round = threading.Lock()  # one tiering round at a time
        self._cache: str | None = None
        self._owner = os.getpid()
        self._metadata_sent: bytes | None = None

    @classmethod
    def open(cls, root: str, remote_uri: str | None, *, writable: bool
             ) -> RemoteLogManager | None:
        """The manager of ``root`` (``remote_uri``, else the recorded one for a reader), or
        None when the folder is not tiered. A writer given a URI records it; a writer not
        given one of a folder that records one raises :class:`~embedlog.errors.UsageError`
        (see the module notes)."""
        if remote_uri is not None and not isinstance(remote_uri, str):
            raise UsageError(f"remote_uri must be a str, not {type(remote_uri).__name__}")
        recorded = read_uri(root) if os.path.isdir(root) else None
        if writable and not remote_uri and recorded is not None:
            raise UsageError(
                f"this log's tiered storage is recorded as {recorded!r} "
                f"({os.path.join(root, TIERING_FILE)}); a writer uploads there and deletes "
                "from there, so it must be named by the caller, not only by a file in the "
                f"folder: open with remote_uri={recorded!r} (command line: embedlog "
                "--remote-uri URI ...) if that is this log's remote")
        uri = remote_uri or recorded
        if uri is None:
            return None
        store = open_store(uri)
        if writable and uri != recorded:
            _io.write_atomic(os.path.join(root, TIERING_FILE),
                             json.dumps({"version": 1, "remote_uri": uri}).encode())
        return cls(root, store, writable=writable)

    def cache(self) -> str:
        """The private folder of fetched segments (made on first use)."""
        with self._lock:
            if self._cache is None:
                self._cache = tempfile.mkdtemp(prefix="embedlog-tiered-")
            return self._cache

    def tier_for(self, p: Partition) -> Tier:
        return Tier(self.store, p.directory, os.path.basename(p.directory), self.cache,
                    writable=self.writable)

    def run(self, partitions: Iterable[Partition], now: int) -> tuple[int, dict[str, int]]:
        """One tiering round; returns the segments uploaded and the local segments deleted
        per ``"topic-partition"``."""
        uploaded, deleted = 0, {}
        with self._round:
            self._send_metadata()
            for p in partitions:  # no segments: closed, its topic deleted since the listing
                if tier_of(p) is not None and p.config.remote_storage_enable and p.segments:
                    uploaded += upload(p)
                    count = expire_local(p, now)
                    if count:
                        deleted[f"{p.topic}-{p.partition}"] = count
        return uploaded, deleted

    def paused(self) -> threading.Lock:
        """Held: no tiering round runs (a topic's remote data is being deleted, then the topic:
        a round must not upload its segments again in between)."""
        return self._round

    def _send_metadata(self) -> None:
        raw = _io.read_regular(os.path.join(self.root, METADATA_FILE), _MAX_METADATA,
                               error=CorruptCheckpointError)
        if raw is not None and raw != self._metadata_sent:
            self.store.put_bytes((METADATA_FILE,), raw)
            self._metadata_sent = raw

    def close(self, partitions: Iterable[Partition]) -> None:
        """Close the fetched segments and remove the cache (only in the process that made
        it)."""
        for p in partitions:
            tier = tier_of(p)
            if tier is not None:
                tier.close()
        with self._lock:
            if self._cache is not None:
                _remove_cache(self._cache, self._owner)
                self._cache = None


def _remove_cache(cache: str, owner_pid: int) -> None:
    """Delete the cache folder: its partition folders' files, the folders, then itself (only
    in the process that made it; nothing else is ever in it)."""
    if os.getpid() != owner_pid or not os.path.isdir(cache):
        return
    for name in os.listdir(cache):
        folder = os.path.join(cache, name)
        for entry in os.listdir(folder):
            _io.unlink(os.path.join(folder, entry))
        _io.rmdir(folder)
    _io.rmdir(cache)
