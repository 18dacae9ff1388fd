"""Wake-ups for consumers of a read-only open: the writer is another process, so nothing in this
process is told when it appends. :class:`WakeSource` tells them.

**inotify** (Linux, through ``ctypes``): one instance per source (``inotify_init1`` with
``IN_NONBLOCK | IN_CLOEXEC``), a watch per partition folder being read (``IN_MODIFY``,
``IN_CLOSE_WRITE``, ``IN_CREATE``, ``IN_MOVED_TO`` for what the writer does inside it;
``IN_DELETE_SELF``, ``IN_MOVE_SELF`` for the folder itself; ``IN_ONLYDIR | IN_DONT_FOLLOW``: a
symbolic link or a file where the folder belongs is never watched through), and one on the log
folder for entries created, moved or deleted there -- of which only those named like a folder
being read count (a partition folder created late, deleted, replaced; a deleted folder's own
``IN_DELETE_SELF`` comes only once nobody holds a file in it, and this process may). Watches
are only ever added on the log folder and on ``<log folder>/<name>`` for names that passed
:func:`embedlog._paths.join`. Each :meth:`WakeSource.arm` watches every folder again by name:
the kernel hands back the same watch for the same folder, a new one for a folder that replaced
it (the old one is then removed), ``ENOENT`` for a missing one (left to the log folder's
watch); a folder moved away is unwatched (``IN_MOVE_SELF``).

The event queue only says *something changed*: the caller re-reads the partitions
(``Partition.refresh``) after dropping the queued events (:meth:`WakeSource.drain`), so a
change after the drop leaves the descriptor readable and the next wait returns at once; a wait
reads the events that arrive and returns on the first that counts. A watch added now cannot
report what changed before it: :meth:`WakeSource.arm` says so (``RECHECK``) and the caller
looks once more.

**Timed checks** (the fallback, ``TIMED``): the waiter wakes every :data:`POLL_S` to re-read,
as before. Used when inotify cannot see the writer or cannot be had: not Linux, no
``inotify_init1`` in the C library, ``EMBEDLOG_NO_INOTIFY=1``, a network or FUSE file system
(inotify reports only this machine's changes: ``statfs`` ``f_type``), ``inotify_init1``
refused (``EMFILE``: ``fs.inotify.max_user_instances``), a watch refused (``ENOSPC``:
``fs.inotify.max_user_watches``; ``EMFILE``, ``ENOMEM``, ``EACCES``...), or the log folder's
own watch lost. A source that falls back stays timed (its descriptor is closed at once).

**Lifecycle.** The descriptors are made on the first :meth:`WakeSource.arm`, closed by
:meth:`WakeSource.close` (a wait in another thread is ended first: an ``eventfd`` rings it and
the waiter closes on its way out) and, in a ``fork()`` child, at once (:mod:`embedlog._fork`):
the inotify instance is one open file description for parent and child, and a child reading
its events would steal the parent's wake-ups. Every call in the child raises
:class:`~embedlog.errors.InheritedLogError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import errno
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Final

from . import _fork, _paths

__all__ = ["POLL_S", "Armed", "WakeSource"]

POLL_S: Final = 0.010
"""Interval of the timed checks (the fallback)."""

IN_MODIFY: Final = 0x2
IN_CLOSE_WRITE: Final = 0x8
IN_MOVED_FROM: Final = 0x40
IN_MOVED_TO: Final = 0x80
IN_CREATE: Final = 0x100
IN_DELETE: Final = 0x200
IN_DELETE_SELF: Final = 0x400
IN_MOVE_SELF: Final = 0x800
IN_Q_OVERFLOW: Final = 0x4000
IN_IGNORED: Final = 0x8000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
_GONE: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
FOLDER_MASK: Final = (IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF
                      | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
ROOT_MASK: Final = (IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF
                    | IN_MOVE_SELF | IN_ONLYDIR)
_EVENT: Final = struct.Struct("iIII")
"""``struct inotify_event`` without its name: wd, mask, cookie, len (the padded name's)."""
_READ_BYTES: Final = 64 * 1024
_ROOT: Final = ""
"""The key of the log folder's own watch."""

REMOTE_FS: Final = frozenset({
    0x6969,  # NFS
    0x517B, 0xFF534D42, 0xFE534D42,  # SMB, CIFS, SMB2
    0x65735546,  # FUSE (sshfs, s3fs, virtiofs...)
    0x01021997,  # 9P
    0x00C36400, 0x5346414F, 0x0BD00BD0, 0x01161970, 0x7461636F,  # Ceph, AFS, Lustre, GFS2, OCFS2
})
"""``statfs`` ``f_type`` of file systems where another machine may be the writer."""


class Armed(enum.Enum):
    """What :meth:`WakeSource.arm` leaves the caller to do."""

    READY = "ready"
    """Wait for the descriptor (:attr:`WakeSource.fd`) to become readable."""
    RECHECK = "recheck"
    """A watch was added now: look at the partitions once more before waiting."""
    TIMED = "timed"
    """Timed checks: re-read every :data:`POLL_S`."""


def _libc() -> ctypes.CDLL | None:
    """The C library, if it has inotify (Linux) and it is not turned off."""
    if not sys.platform.startswith("linux") or os.environ.get("EMBEDLOG_NO_INOTIFY") == "1":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        init, add, rm = libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch
    except (OSError, AttributeError):
        return None
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
    rm.argtypes, rm.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def _remote(libc: ctypes.CDLL, path: str) -> bool:
    """Whether ``path`` is on a file system of :data:`REMOTE_FS` (``f_type`` is the first
    field of ``struct statfs`` on every Linux ABI; unknown counts as local)."""
    buf = ctypes.create_string_buffer(512)
    try:
        if libc.statfs(os.fsencode(path), buf) != 0:
            return False
    except AttributeError:
        return False
    f_type = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    return f_type in REMOTE_FS


class WakeSource(_fork.ForkGuard):
    """Wake-ups for changes in partition folders of the log folder ``root``; see the module
    notes. Used by one waiting thread at a time; :meth:`close` may come from another."""

    def __init__(self, root: str) -> None:
        self.path = root
        self._lock = threading.Lock()
        self._libc: ctypes.CDLL | None = None
        self._fd: int | None = None
        self._bell: int | None = None
        self._timed = False
        self._closed = False
        self._waiters = 0
        self._stop = threading.Event()
        self._names: dict[str, int] = {}  # folder name (_ROOT: the log folder) -> wd
        self._wds: dict[int, str] = {}
        self._wanted: frozenset[str] = frozenset()
        self.wakes = 0
        """Events that ended a wait (read by tests and benchmarks)."""
        self.why_timed: str | None = None
        """Why the source fell back to timed checks (``None`` while it has not)."""
        self._track_forks()

    @property
    def fd(self) -> int | None:
        """The inotify descriptor (``None`` before the first arm, timed, or closed)."""
        return self._fd

    @property
    def timed(self) -> bool:
        """Whether the source fell back to timed checks (for good)."""
        return self._timed

    # ------------------------------------------------------------------ watches

    def arm(self, names: Iterable[str]) -> Armed:
        """Watch the log folder and the folders ``<root>/<name>`` (again: see the module
        notes); drop the watches of folders no longer named."""
        self._check_not_inherited()
        wanted = frozenset(names)
        with self._lock:
            if self._closed or self._timed or (self._fd is None and not self._open()):
                return Armed.TIMED
            self._wanted = wanted
            for name in self._names.keys() - wanted - {_ROOT}:
                self._unwatch(name)
            added = _ROOT not in self._names and self._watch(_ROOT, self.path, ROOT_MASK)
            for name in sorted(wanted):
                if self._timed:
                    break
                added |= self._watch(name, _paths.join(self.path, name), FOLDER_MASK)
            if self._timed:
                return Armed.TIMED
            return Armed.RECHECK if added else Armed.READY

    def _open(self) -> bool:
        libc = _libc()
        if libc is None:
            self._fall_back("inotify is not available here (or EMBEDLOG_NO_INOTIFY=1)")
            return False
        if _remote(libc, self.path):
            self._fall_back("a network file system: inotify sees only this machine's writes")
            return False
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            self._fall_back(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
            return False
        self._fd, self._libc = fd, libc
        self._bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return True

    def _watch(self, name: str, path: str, mask: int) -> bool:
        """(Re)watch one folder; ``True`` if the watch is new. A missing partition folder is
        left to the log folder's watch; anything else the kernel refuses turns the source
        timed."""
        assert self._fd is not None and self._libc is not None
        wd: int = self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        err = ctypes.get_errno() if wd < 0 else 0
        old = self._names.get(name)
        if old is not None and old != wd:
            self._unwatch(name)  # gone or replaced
        if wd < 0:
            if err != errno.ENOENT or name == _ROOT:
                self._fall_back(f"inotify_add_watch {path}: {os.strerror(err)}")
            return False
        self._names[name], self._wds[wd] = wd, name
        return old != wd

    def _unwatch(self, name: str) -> None:
        wd = self._names.pop(name)
        self._wds.pop(wd, None)
        if self._fd is not None and self._libc is not None:
            self._libc.inotify_rm_watch(self._fd, wd)  # EINVAL if already gone: fine

    def _fall_back(self, why: str) -> None:
        self._timed, self.why_timed = True, why
        self._release()

    # ------------------------------------------------------------------ events

    def drain(self) -> bool:
        """Read and drop the queued events; ``True`` if one of them was a change of a watched
        folder (or a queue overflow). Folders gone are forgotten, to be watched again."""
        self._check_not_inherited()
        with self._lock:
            changed = False
            while self._fd is not None:  # closed by a fall-back inside _events
                try:
                    data = os.read(self._fd, _READ_BYTES)
                except BlockingIOError:
                    break
                changed |= self._events(data)
            return changed

    def _events(self, data: bytes) -> bool:
        changed = False
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, pos)
            name = data[pos + _EVENT.size:pos + _EVENT.size + size].rstrip(b"\0")
            pos += _EVENT.size + size
            which = self._wds.get(wd)
            if mask & IN_Q_OVERFLOW:
                changed = True
            elif which is None:
                continue
            elif mask & _GONE:
                if mask & IN_MOVE_SELF:
                    self._unwatch(which)  # it now watches the folder elsewhere
                else:
                    self._names.pop(which, None)
                    self._wds.pop(wd, None)
                if which == _ROOT:
                    self._fall_back("the log folder was moved or deleted")
                    return True
                changed = True
            elif which != _ROOT or os.fsdecode(name) in self._wanted:
                changed = True
        return changed

    # ------------------------------------------------------------------ waiting

    def wait(self, timeout: float) -> None:
        """Block until an event that counts arrives or the source is closed, at most
        ``timeout`` seconds (timed: at most :data:`POLL_S`). The caller armed it first."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._waiting() as fds:
            if fds is None:
                self._stop.wait(min(timeout, POLL_S))
            elif fds:
                poller = select.poll()  # not select(): descriptors above 1023 are fine
                for fd in fds:
                    poller.register(fd, select.POLLIN)
                while (left := deadline - time.monotonic()) > 0:
                    ready = {fd for fd, _ in poller.poll(left * 1000)}
                    if not ready or fds[1] in ready or self._counted():
                        break  # timed out, closed, or a change that counts

    async def wait_async(self, timeout: float) -> None:
        """:meth:`wait` on the running event loop (``add_reader``: no thread, no timer);
        returns at once when timed (the caller re-reads on its own schedule)."""
        loop = asyncio.get_running_loop()
        with self._waiting() as fds:
            if not fds:
                return
            ready: asyncio.Future[None] = loop.create_future()

            def readable(fd: int) -> None:
                if not ready.done() and (fd == fds[1] or self._counted()):
                    ready.set_result(None)

            for fd in fds:
                loop.add_reader(fd, readable, fd)
            try:
                await asyncio.wait([ready], timeout=max(0.0, timeout))
            finally:
                for fd in fds:
                    loop.remove_reader(fd)

    def _counted(self) -> bool:
        """Inside a wait: drain; whether an event that counts was among them."""
        if self.drain():
            self.wakes += 1
            return True
        return False

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[tuple[int, ...] | None]:
        """A wait: (inotify descriptor, bell), ``()`` when there is nothing to wait for
        (closed, not armed), ``None`` when timed. A :meth:`close` meanwhile rings the bell
        and leaves the descriptors to be closed here, once no wait uses them."""
        self._check_not_inherited()
        with self._lock:
            fds: tuple[int, ...] | None = ()
            if self._closed:
                pass
            elif self._timed:
                fds = None
            elif self._fd is not None and self._bell is not None:
                fds = (self._fd, self._bell)
            if fds != ():
                self._waiters += 1
        if fds == ():
            yield fds
            return
        try:
            yield fds
        finally:
            with self._lock:
                self._waiters -= 1
                if (self._closed or self._timed) and not self._waiters:
                    self._release()

    def close(self) -> None:
        """Close the descriptors (after ending a wait in another thread). Idempotent."""
        with self._lock:
            self._closed = True
            self._stop.set()
            self._release()

    @property
    def closed(self) -> bool:
        return self._closed

    def __del__(self) -> None:  # a consumer dropped without close(): no descriptor leaks
        with contextlib.suppress(Exception):
            self.close()

    def _release(self) -> None:
        """Close the descriptors (closed or timed for good) -- or, while a wait uses them,
        ring the bell: the last waiter closes them on its way out (a descriptor number is
        never closed under a ``poll``, which could then watch another file)."""
        if self._waiters and self._bell is not None:
            os.eventfd_write(self._bell, 1)
            return
        fd, bell, self._fd, self._bell = self._fd, self._bell, None, None
        self._names.clear()
        self._wds.clear()
        for d in (fd, bell):
            if d is not None:
                with contextlib.suppress(OSError):
                    os.close(d)

    def _on_fork_child(self) -> None:
        """In a child: close this process's copies now (no lock: the thread holding it in the
        parent does not exist here)."""
        super()._on_fork_child()
        self._closed, self._waiters = True, 0  # the parent's waiters are not in this process
        self._release()  # closes: ringing the shared bell would wake the parent for good

