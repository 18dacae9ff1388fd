"""Names that become paths: one check for a path component, one way to reach folders under a root.

Every name embedlog turns into a path -- a group name or client id passed as an argument, a member
id or topic read from ``state.json``, a topic read from ``embedlog.json`` -- is untrusted. Before it
touches the file system it must pass :func:`component`:

* a ``str`` of 1 to :data:`MAX_COMPONENT` characters of ``[a-zA-Z0-9._-]`` (Kafka's topic
  charset), so no separator, no NUL, nothing outside ASCII;
* neither ``.`` nor ``..``.

Such a name can only ever name an entry *inside* the folder it is joined to. The folders along the
way must be real folders too: :func:`folder` walks from a root that the caller trusts, checking
each component with ``lstat`` and creating the missing ones durably through :mod:`embedlog._io`; a
symbolic link (or a file) where a folder belongs is damage
(:class:`~embedlog.errors.CorruptionError`), never followed -- so nothing outside the log folder is
ever created, written or deleted through a planted link. Files inside are opened with
``O_NOFOLLOW`` by :mod:`embedlog._io`. :func:`existing_folder` is the read side of the same walk
(a command that only looks, such as ``embedlog groups``, must not follow a link either).

Besides checked names, :func:`join` accepts the fixed folder names of :data:`FIXED_NAMES`
(``lost+found``), which are constants of :mod:`embedlog.naming`, never input.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Final

from . import _io
from .errors import CorruptionError, EmbedlogError, StorageError
from .naming import LOST_FOUND_DIR

__all__ = ["FIXED_NAMES", "MAX_COMPONENT", "component", "existing_folder", "folder", "join"]

MAX_COMPONENT: Final = 249
"""Kafka's limit for a topic name, applied to every name embedlog joins to a path."""

_COMPONENT_RE: Final = re.compile(r"[a-zA-Z0-9._-]+\Z")

FIXED_NAMES: Final = frozenset({LOST_FOUND_DIR})
"""Folder names outside the component charset that :func:`join` accepts: constants, not input."""


def component(name: object, what: str, error: type[EmbedlogError]) -> str:
    """``name`` if it is a safe single path component (see the module docstring), else raise
    ``error`` (a usage error for an argument, a corruption error for a name read from a file)
    saying which ``what`` was refused."""
    if not isinstance(name, str):
        raise error(f"{what} must be a str, not {type(name).__name__}")
    if not 0 < len(name) <= MAX_COMPONENT:
        raise error(f"{what} {name[:40]!r}... must be 1 to {MAX_COMPONENT} characters"
                    if name else f"{what} is empty")
    if name in (".", "..") or not _COMPONENT_RE.match(name):
        raise error(f"{what} {name!r} must be made of [a-zA-Z0-9._-] and not be . or ..")
    return name


def join(root: str, *names: str) -> str:
    """``root/names...`` for names that already passed :func:`component` or are
    :data:`FIXED_NAMES` (asserted)."""
    for name in names:
        assert name in FIXED_NAMES or (_COMPONENT_RE.match(name) and name not in (".", "..")), name
    return os.path.join(root, *names)


def folder(root: str, *names: str, create: bool = True) -> str:
    """The folder ``root/names...``: every component below ``root`` must be a real folder (not a
    symbolic link, not a file), else :class:`~embedlog.errors.CorruptionError`; missing ones
    are created (``create``) with a durable directory entry, or the path is returned as is."""
    path = root
    for i, name in enumerate(names):
        path = join(path, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return join(path, *names[i + 1:])
            _mkdir(path)
            continue
        except OSError as exc:
            raise _io.storage_error(exc, "stat", path) from exc
        if not stat.S_ISDIR(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise CorruptionError(f"expected a folder, found {kind}", path=path)
    return path


def existing_folder(root: str, *names: str) -> str | None:
    """The folder ``root/names...`` if it exists, ``None`` if it does not; checked as
    :func:`folder` checks it (a symbolic link or a file on the way is a
    :class:`~embedlog.errors.CorruptionError`), and never created."""
    path = folder(root, *names, create=False)
    return path if os.path.lexists(path) else None


def _mkdir(path: str) -> None:
    try:
        _io.mkdir(path)
    except StorageError as exc:
        if exc.errno != errno.EEXIST:
            raise
        if not os.path.isdir(path) or os.path.islink(path):  # a racing creator planted a link
            raise CorruptionError("expected a folder, found a symbolic link or a file",
                                  path=path) from exc
        return
    _io.fsync_dir(os.path.dirname(path))
