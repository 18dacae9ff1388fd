"""Consumer groups: committed offsets, membership, assignment and partition leases.

Everything lives in its own folder of the log directory (names in :mod:`embedlog.naming`),
outside the single-writer data lock, so any open of the log -- including ``read_only=True``
opens in other processes -- can join a group and commit::

    <log dir>/__groups/<group>/
      lock                       flock held while membership or committed offsets change
      state.json                 generation, assignor, members and their topics
      offsets                    committed offsets (Kafka checkpoint text; next offset to read)
      members/<member id>        flock'ed by each live member; its heartbeat
      leases/<topic>-<partition> flock'ed by the member consuming that partition

``__groups`` cannot be mistaken for a ``<topic>-<partition>`` folder (it has no ``-<n>``).
Group names follow the topic-name rule (``[a-zA-Z0-9._-]``, 1-249 characters).
"""

from __future__ import annotations

import os
import re

from .._io import ensure_dir
from .._platform import FileLock
from ..errors import InvalidConfigError
from ..naming import GROUPS_DIR
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
    "group_directory",
    "live_members",
    "range_assign",
    "round_robin_assign",
]

_NAME_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}\Z")


def group_directory(log_path: str, group: str) -> str:
    """``<log_path>/__groups/<group>``, created if needed, after validating ``group``."""
    if not isinstance(group, str) or not _NAME_RE.match(group) or group in (".", ".."):
        raise InvalidConfigError(
            f"group name {group!r} must be 1-249 characters of [a-zA-Z0-9._-], not . or .."
        )
    path = os.path.join(log_path, GROUPS_DIR, group)
    ensure_dir(path)
    return path
