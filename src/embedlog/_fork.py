"""``fork()``: an open :class:`~embedlog.Log` is not usable in a child process.

sqlite3's rule for a connection. A child shares the parent's open file descriptions: the
writer lock's ``flock`` (a ``LOCK_UN`` from the child would release the parent's lock), the
segments' write offsets, the producer's open batches. So every open log is registered here,
and in a child (``os.register_at_fork(after_in_child=...)``, no cost on the hot paths) each is
told it was inherited; from then on it refuses every call with
:class:`~embedlog.errors.InheritedLogError`, and its ``close()`` unlocks, flushes, trims and
writes nothing.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

from .errors import InheritedLogError

__all__ = ["ForkGuard", "inherited_error", "track"]


class _Inheritable(Protocol):
    def _on_fork_child(self) -> None: ...


_OPEN: weakref.WeakSet[_Inheritable] = weakref.WeakSet()


def track(obj: _Inheritable) -> None:
    """Tell ``obj`` (``_on_fork_child()``) when this process forks and it lands in a child."""
    _OPEN.add(obj)


def _in_child() -> None:
    for obj in list(_OPEN):
        obj._on_fork_child()
    _OPEN.clear()


def inherited_error(path: str, owner_pid: int) -> InheritedLogError:
    """The error every call on an inherited log raises."""
    return InheritedLogError(
        f"the log at {path} was opened by process {owner_pid or 'another process'} and "
        "inherited through fork(); a log is not usable across fork(): open it again in this "
        "process"
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)


class ForkGuard:
    """What a tracked object knows about forks: the process that opened it, and whether it is
    a child's inherited copy (then :meth:`_check_not_inherited` raises)."""

    path: str
    _inherited = False
    _pid = 0

    def _track_forks(self) -> None:
        self._pid = os.getpid()
        track(self)

    def _on_fork_child(self) -> None:
        self._inherited = True

    def _inherited_error(self) -> InheritedLogError:
        return inherited_error(self.path, self._pid)

    def _check_not_inherited(self) -> None:
        if self._inherited:
            raise self._inherited_error()
