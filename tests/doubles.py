"""Test doubles for embedlog's one door to the file system (:mod:`embedlog._io`).

:class:`ScriptedFS` is the production backend plus a script: it records every call (reads of
the door included: a read-only ``open``, ``close``), counts the mutating ones, and runs the
rules a test adds before the call reaches the disk::

    with _io.use_backend(ScriptedFS()) as fs:          # record only
        ...
    fs.calls                                            # every call, in order (:class:`Call`)
    fs.count("fsync", suffix=".log")                    # how many fsyncs of a .log file
    fs.fail("truncate", code=errno.ENOSPC)              # the first truncate fails
    fs.fail(nth=5, persistent=True)                     # the 5th mutation and all later fail
    fs.crash_at(12)                                     # process death at the 12th mutation
    fs.before("pwrite", hook)                           # run hook(call) first (gates, probes)
    ScriptedFS(sync=False)                              # fsyncs are no-ops (killed-process tests)
    fs.before("mark", hook, match=...)                  # react to an ``_io.mark`` annotation

Semantics every test relies on:

* a call is recorded (and counted, if it mutates) *before* any rule runs, so a failed or
  crashed call is in :attr:`ScriptedFS.calls` and in :attr:`ScriptedFS.mutations`;
* a *mutation* is write, pwrite, truncate, fsync, fsync_dir, rename, unlink, mkdir, rmdir, and
  an ``open`` with any of O_WRONLY, O_RDWR, O_CREAT, O_TRUNC; ``close`` and ``mark`` are not;
* a rule's ``nth`` counts only the calls the rule matches, from when it was added;
* rules run outside the double's lock (a hook may block until another thread moves on);
* :meth:`ScriptedFS.mark` annotations (acks, intents) are kept in :attr:`ScriptedFS.marks`.

The crash explorer's recorder, which tracks inodes to replay power losses, is
:class:`reliability.recording.RecordingFS`; it is a different tool (it models the disk).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import embedlog
from embedlog import _io

__all__ = ["MUTATING_OPS", "Call", "Crash", "Injected", "Rule", "ScriptedFS"]

MUTATING_OPS = frozenset(
    {"write", "pwrite", "truncate", "fsync", "fsync_dir", "rename", "unlink", "mkdir", "rmdir"}
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC


class Crash(BaseException):
    """A simulated process death: raised in place of the mutation it stops at. A
    ``BaseException``, so no ``except Exception`` in the code under test swallows it."""


class Injected(embedlog.StorageError):
    """An I/O error raised where a real disk would have failed."""


@dataclass(frozen=True)
class Call:
    """One call through the door. ``path`` is the file's path, for calls on a descriptor the
    path it was opened under; ``dst`` is a rename's target; ``info`` a mark's annotation."""

    op: str
    path: str | None = None
    flags: int = 0
    offset: int | None = None
    size: int | None = None
    data: bytes = b""
    dst: str | None = None
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def mutating(self) -> bool:
        return self.op in MUTATING_OPS or (self.op == "open" and bool(self.flags & _WRITE_FLAGS))

    @property
    def name(self) -> str:
        """The file's base name ("" if the call names no file)."""
        return os.path.basename(self.path or "")


@dataclass
class Rule:
    """Runs ``action(call)`` on the ``nth`` call it matches (and, if ``persistent``, every later
    one). ``ops`` None matches every mutation; ``seen`` counts matches, ``fired`` runs."""

    ops: Collection[str] | None
    match: Callable[[Call], bool] | None
    nth: int
    persistent: bool
    action: Callable[[Call], None]
    armed: bool = True
    seen: int = 0
    fired: int = 0

    def disarm(self) -> None:
        """The disk works again: this rule never runs from now on."""
        self.armed = False

    def _due(self, call: Call) -> bool:
        if not self.armed:
            return False
        if self.ops is None:
            if not call.mutating:
                return False
        elif call.op not in self.ops:
            return False
        if self.match is not None and not self.match(call):
            return False
        self.seen += 1
        if self.seen == self.nth or (self.persistent and self.seen > self.nth):
            self.fired += 1
            return True
        return False


def _ops(op: str | Collection[str] | None) -> Collection[str] | None:
    return (op,) if isinstance(op, str) else op


class ScriptedFS(_io.FileSystem):
    """The production backend that records calls and runs scripted rules first."""

    def __init__(self, *, sync: bool = True, keep_calls: bool = True) -> None:
        self.sync = sync
        self.keep_calls = keep_calls  # False: long-running children (calls and marks not kept)
        self.calls: list[Call] = []
        self.marks: list[dict[str, Any]] = []
        self.mutations = 0
        self.rules: list[Rule] = []
        self._paths: dict[int, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ script

    def before(
        self,
        op: str | Collection[str] | None,
        action: Callable[[Call], None],
        *,
        nth: int = 1,
        persistent: bool = True,
        match: Callable[[Call], bool] | None = None,
    ) -> Rule:
        """Run ``action(call)`` before the matching calls (by default every one); an exception
        it raises replaces the call. ``op`` None: every mutation."""
        rule = Rule(_ops(op), match, nth, persistent, action)
        with self._lock:
            self.rules.append(rule)
        return rule

    def fail(
        self,
        op: str | Collection[str] | None = None,
        *,
        nth: int = 1,
        persistent: bool = False,
        code: int = 5,  # EIO
        error: Callable[[Call], BaseException] | None = None,
        match: Callable[[Call], bool] | None = None,
    ) -> Rule:
        """Fail the ``nth`` matching call (``persistent``: and every later one) with an
        :class:`Injected` error of errno ``code``, or with ``error(call)``."""

        def action(call: Call) -> None:
            if error is not None:
                raise error(call)
            raise Injected(code, f"{call.op} failed: {os.strerror(code)} (injected)", call.path)

        return self.before(op, action, nth=nth, persistent=persistent, match=match)

    def crash_at(self, n: int) -> Rule:
        """The process dies at its ``n``-th mutation: the ``n - 1`` before it happened (they are
        in the page cache), nothing from the ``n``-th on does."""
        return self.fail(None, nth=n, persistent=True, error=lambda call: Crash(n))

    def count(self, op: str | None = None, *, suffix: str = "") -> int:
        """Calls recorded so far (``op`` None: mutations), optionally only on files whose path
        ends with ``suffix``."""
        with self._lock:
            return sum(
                1
                for c in self.calls
                if (c.mutating if op is None else c.op == op)
                and (c.path or "").endswith(suffix)
            )

    # ------------------------------------------------------------------ plumbing

    def _enter(self, call: Call) -> None:
        with self._lock:
            if self.keep_calls:
                self.calls.append(call)
            if call.mutating:
                self.mutations += 1
            due = [rule for rule in self.rules if rule._due(call)]
        for rule in due:
            rule.action(call)

    def _path_of(self, fd: int) -> str | None:
        """The path ``fd`` was opened under; for a descriptor opened before this backend was
        installed, the kernel's name for it (Linux), else None."""
        path = self._paths.get(fd)
        if path is None:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return None
        return path

    # ------------------------------------------------------------------ FileSystem

    def open(self, path: str, flags: int, mode: int = _io.FILE_MODE) -> int:
        self._enter(Call("open", os.fspath(path), flags=flags))
        fd = super().open(path, flags, mode)
        with self._lock:
            self._paths[fd] = os.fspath(path)
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            path = self._paths.pop(fd, None)
        self._enter(Call("close", path or self._path_of(fd)))
        super().close(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        self._enter(Call("write", self._path_of(fd), data=bytes(data)))
        super().write(fd, data)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        self._enter(Call("pwrite", self._path_of(fd), offset=offset, data=bytes(data)))
        super().pwrite(fd, data, offset)

    def truncate(self, fd: int, size: int) -> None:
        self._enter(Call("truncate", self._path_of(fd), size=size))
        super().truncate(fd, size)

    def fsync(self, fd: int) -> None:
        self._enter(Call("fsync", self._path_of(fd)))
        if self.sync:
            super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self._enter(Call("fsync_dir", os.fspath(path)))
        if self.sync:
            super().fsync_dir(path)

    def rename(self, src: str, dst: str) -> None:
        self._enter(Call("rename", os.fspath(src), dst=os.fspath(dst)))
        super().rename(src, dst)

    def unlink(self, path: str) -> None:
        self._enter(Call("unlink", os.fspath(path)))
        super().unlink(path)

    def mkdir(self, path: str, mode: int = _io.DIR_MODE) -> None:
        self._enter(Call("mkdir", os.fspath(path)))
        super().mkdir(path, mode)

    def rmdir(self, path: str) -> None:
        self._enter(Call("rmdir", os.fspath(path)))
        super().rmdir(path)

    def mark(self, kind: str, **info: Any) -> None:
        annotation = {"kind": kind, **info}
        call = Call("mark", info=annotation)
        with self._lock:
            if self.keep_calls:
                self.marks.append(annotation)
            due = [rule for rule in self.rules if rule.ops is not None and rule._due(call)]
        for rule in due:
            rule.action(call)
