"""Consumer groups: committed offsets, membership, assignment and partition leases.

Everything lives in its own folder of the log directory (names in :mod:`embedlog.naming`),
outside the single-writer data lock, so any open of the log -- including ``read_only=True``
opens in other processes -- can join a group and commit::

    <log dir>/__groups/<group>/
      lock                       flock held while membership or committed offsets change
      state.json                 generation, assignor, members and their topics
      offsets                    committed offsets (Kafka checkpoint text; next offset to read)
      members/<member id>        flock'ed by each live member; its heartbeat, session timeout
      leases/<topic>-<partition> flock'ed by the member consuming that partition

``__groups`` cannot be mistaken for a ``<topic>-<partition>`` folder (it has no ``-<n>``).
Every name that becomes a path is checked by :func:`embedlog._paths.component` first: group
names and client ids (arguments), member ids and topics (read from ``state.json``) follow the
topic-name rule (``[a-zA-Z0-9._-]``, 1-249 characters, not ``.`` or ``..``); the folders on the
way must be real folders, never symbolic links.
"""

from __future__ import annotations

import contextlib
import os

from .. import _paths
from .._platform import FileLock
from ..errors import CorruptCheckpointError, InvalidConfigError
from ..naming import GROUP_LOCK_FILE, GROUPS_DIR
from .assignors import ASSIGNORS, range_assign, round_robin_assign
from .membership import GroupState, Membership, live_members
from .offsets import OffsetStore

__all__ = [
    "ASSIGNORS",
    "GROUPS_DIR",
    "FileLock",
    "GroupState",
    "Membership",
    "OffsetStore",
    "forget_topic",
    "group_directory",
    "group_names",
    "live_members",
    "range_assign",
    "round_robin_assign",
]


def group_directory(log_path: str, group: str, *, create: bool = True) -> str:
    """``<log_path>/__groups/<group>``, created if needed (``create``), after validating
    ``group``; ``__groups`` and the group folder must be real folders, not symbolic links
    (:class:`~embedlog.errors.CorruptionError`), so no group file is ever written outside the
    log folder."""
    _paths.component(group, "group name", InvalidConfigError)
    return _paths.folder(log_path, GROUPS_DIR, group, create=create)


def forget_topic(log_path: str, topic: str) -> None:
    """Drop ``topic``'s committed offsets from every group of the log (the topic was deleted),
    as Kafka's group coordinator drops the offsets of deleted partitions: a topic created
    again under the name is a new one, its consumers start by ``auto_offset_reset``."""
    for group in group_names(log_path):
        directory = group_directory(log_path, group, create=False)
        # a damaged offsets file is left as it is: its readers refuse it
        with contextlib.suppress(CorruptCheckpointError):
            OffsetStore(directory, os.path.join(directory, GROUP_LOCK_FILE)).forget(topic)


def group_names(log_path: str) -> list[str]:
    """The groups stored in ``<log_path>/__groups``: its real folders whose names are group
    names. ``__groups`` must be a real folder (:class:`~embedlog.errors.CorruptionError`); a
    symbolic link inside is not a group and is never followed."""
    root = _paths.existing_folder(log_path, GROUPS_DIR)
    if root is None:
        return []
    with os.scandir(root) as entries:
        found = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    return sorted(name for name in found if _is_group_name(name))


def _is_group_name(name: str) -> bool:
    try:
        _paths.component(name, "group name", InvalidConfigError)
    except InvalidConfigError:
        return False
    return True
