"""Committed offsets of one consumer group: a Kafka checkpoint file.

``<group dir>/offsets`` has the format of Kafka's offset checkpoints (see
:mod:`embedlog.checkpoint`)::

    0                 version
    2                 entries
    orders 0 1042     topic partition committed-offset
    orders 1 977

A committed offset is the **next** offset to read (Kafka's convention). Commits read, merge and
replace the whole file (tmp, fsync, rename, directory fsync) while holding the group's
:class:`~embedlog._platform.FileLock`, so concurrent members in threads or processes never
lose each other's entries; readers need no lock because the file is replaced atomically.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping

from .. import checkpoint
from .._platform import FileLock
from ..errors import CorruptCheckpointError
from ..naming import GROUP_OFFSETS_FILE
from ..records import TopicPartition

__all__ = ["OffsetStore"]


class OffsetStore:
    """The ``offsets`` file of a group directory, with ``lock`` serialising writers."""

    def __init__(self, directory: str, lock_path: str) -> None:
        self.path = os.path.join(directory, GROUP_OFFSETS_FILE)
        self.lock_path = lock_path

    def read(self) -> dict[TopicPartition, int]:
        """The committed offsets; none without the file. The file is only ever replaced
        atomically, so an empty one is damage (not a group to restart from the earliest)."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return {}
        if stat.S_ISREG(st.st_mode) and st.st_size == 0:  # anything else: the reader refuses it
            raise CorruptCheckpointError("the group's offsets file is empty", path=self.path)
        return checkpoint.read_offsets(self.path)

    def committed(self, tp: TopicPartition) -> int | None:
        return self.read().get(tp)

    def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        check: Callable[[], None] | None = None,
    ) -> None:
        """Merge ``offsets`` into the file; ``check`` runs first under the lock (fencing) and
        may raise to refuse the commit."""
        with FileLock(self.lock_path):
            if check is not None:
                check()
            merged = self.read()
            merged.update(offsets)
            checkpoint.write_offsets(self.path, merged)

    def forget(self, topic: str) -> None:
        """Drop every committed offset of ``topic`` (deleted: a topic created later under its
        name starts without them), under the lock; the file is rewritten only if it had
        some."""
        with FileLock(self.lock_path):
            offsets = self.read()
            kept = {tp: o for tp, o in offsets.items() if tp.topic != topic}
            if len(kept) != len(offsets):
                checkpoint.write_offsets(self.path, kept)
