"""A recording :class:`~embedlog._io.FileSystem`: performs every call on disk *and* logs it.

The trace is a list of :class:`Op` in call order. Files and directories are tracked as inodes
(small integers), so a rename or an unlink is a change to a directory's entries, and the data of
an inode stays addressable after its name moved. Inode 0 is the recorded root folder.

Op kinds and fields::

    create    dir, name, inode        a new file's directory entry (open with O_CREAT)
    mkdir     dir, name, inode        a new directory's entry
    rename    dir, name -> name2      (same directory only; embedlog never moves across folders)
    unlink    dir, name
    rmdir     dir, name
    write     inode, offset, data     write/pwrite (a file grows with zeros up to ``offset``)
    truncate  inode, size
    fsync     inode                   the file's data (not its name) is durable
    fsync_dir inode                   the directory's entries are durable
    mark      info                    an annotation from ``_io.mark`` (acks, intents)

The backend refuses to guess: a file that appears on disk without having been created through
it means some code mutated the log directory behind ``_io``, which the test reports.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from embedlog import _io

__all__ = ["BaseImage", "Op", "RecordingFS", "UntrackedMutation"]

DATA_OPS = frozenset({"write", "truncate"})
DIR_OPS = frozenset({"create", "mkdir", "rename", "unlink", "rmdir"})


class UntrackedMutation(AssertionError):
    """A file changed on disk without going through the ``_io`` door."""


@dataclass(frozen=True, slots=True)
class Op:
    kind: str
    inode: int = -1
    dir: int = -1
    name: str = ""
    name2: str = ""
    offset: int = 0
    size: int = 0
    data: bytes = b""
    info: dict[str, Any] = field(default_factory=dict)
    path: str = ""  # relative path at record time, for messages only

    def __str__(self) -> str:
        if self.kind == "mark":
            return f"mark {self.info}"
        if self.kind == "write":
            return f"write {self.path} @{self.offset} +{len(self.data)}"
        if self.kind == "truncate":
            return f"truncate {self.path} ->{self.size}"
        if self.kind == "rename":
            return f"rename {self.path} -> {self.name2}"
        return f"{self.kind} {self.path}"


@dataclass
class BaseImage:
    """The durable starting point of a trace: the root's tree when recording began."""

    entries: dict[int, dict[str, int]]  # directory inode -> {name: inode}
    data: dict[int, bytes]  # file inode -> contents
    dirs: set[int]


class RecordingFS(_io.FileSystem):
    """Performs each call through the production backend and appends an :class:`Op`."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.ops: list[Op] = []
        self._lock = threading.RLock()
        self._inodes: dict[str, int] = {}  # live relative path -> inode
        self._fds: dict[int, int] = {}
        self._next = 0
        self.base = self._scan()

    # ------------------------------------------------------------------ bookkeeping

    def _new_inode(self) -> int:
        self._next += 1
        return self._next

    def _scan(self) -> BaseImage:
        entries: dict[int, dict[str, int]] = {0: {}}
        data: dict[int, bytes] = {}
        dirs = {0}
        self._inodes[""] = 0
        for top, subdirs, files in os.walk(self.root):
            rel_top = os.path.relpath(top, self.root)
            rel_top = "" if rel_top == "." else rel_top
            parent = self._inodes[rel_top]
            for name in sorted(subdirs):
                ino = self._new_inode()
                self._inodes[os.path.join(rel_top, name)] = ino
                entries[parent][name] = ino
                entries[ino] = {}
                dirs.add(ino)
            for name in sorted(files):
                ino = self._new_inode()
                self._inodes[os.path.join(rel_top, name)] = ino
                entries[parent][name] = ino
                with open(os.path.join(top, name), "rb") as f:
                    data[ino] = f.read()
        return BaseImage(entries, data, dirs)

    def _rel(self, path: str) -> str:
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel.startswith(".."):
            raise UntrackedMutation(f"{path} is outside the recorded root {self.root}")
        return "" if rel == "." else rel

    def _parent(self, rel: str) -> tuple[int, str]:
        head, name = os.path.split(rel)
        if head not in self._inodes:
            raise UntrackedMutation(f"parent of {rel} is unknown to the recorder")
        return self._inodes[head], name

    def _emit(self, op: Op) -> None:
        self.ops.append(op)

    # ------------------------------------------------------------------ FileSystem

    def open(self, path: str, flags: int, mode: int = _io.FILE_MODE) -> int:
        with self._lock:
            rel = self._rel(path)
            known = rel in self._inodes
            if not known and os.path.lexists(path):
                raise UntrackedMutation(f"{rel} exists but was never created through _io")
            fd = super().open(path, flags, mode)
            if not known:
                if not flags & os.O_CREAT:  # pragma: no cover - the open above would have failed
                    raise UntrackedMutation(f"{rel} opened without O_CREAT but unknown")
                ino = self._new_inode()
                parent, name = self._parent(rel)
                self._inodes[rel] = ino
                self._emit(Op("create", inode=ino, dir=parent, name=name, path=rel))
            ino = self._inodes[rel]
            if known and flags & os.O_TRUNC:
                self._emit(Op("truncate", inode=ino, size=0, path=rel))
            self._fds[fd] = ino
            return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
            super().close(fd)

    def _path_of(self, ino: int) -> str:
        for rel, i in self._inodes.items():
            if i == ino:
                return rel
        return f"<inode {ino}>"

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        with self._lock:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
            super().write(fd, data)
            self._data_op(fd, offset, data)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        with self._lock:
            super().pwrite(fd, data, offset)
            self._data_op(fd, offset, data)

    def _data_op(self, fd: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        ino = self._fds[fd]
        self._emit(Op("write", inode=ino, offset=offset, data=bytes(data), path=self._path_of(ino)))

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            super().truncate(fd, size)
            ino = self._fds[fd]
            self._emit(Op("truncate", inode=ino, size=size, path=self._path_of(ino)))

    def fsync(self, fd: int) -> None:
        with self._lock:
            super().fsync(fd)
            ino = self._fds[fd]
            self._emit(Op("fsync", inode=ino, path=self._path_of(ino)))

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            super().fsync_dir(path)
            rel = self._rel(path)
            self._emit(Op("fsync_dir", inode=self._inodes[rel], path=rel))

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            rsrc, rdst = self._rel(src), self._rel(dst)
            sdir, sname = self._parent(rsrc)
            ddir, dname = self._parent(rdst)
            if sdir != ddir:
                raise UntrackedMutation(f"rename across directories: {rsrc} -> {rdst}")
            super().rename(src, dst)
            ino = self._inodes.pop(rsrc)
            self._inodes[rdst] = ino
            self._emit(Op("rename", inode=ino, dir=sdir, name=sname, name2=dname, path=rsrc))

    def unlink(self, path: str) -> None:
        with self._lock:
            rel = self._rel(path)
            super().unlink(path)
            if rel in self._inodes:
                parent, name = self._parent(rel)
                self._inodes.pop(rel)
                self._emit(Op("unlink", dir=parent, name=name, path=rel))

    def mkdir(self, path: str, mode: int = _io.DIR_MODE) -> None:
        with self._lock:
            rel = self._rel(path)
            super().mkdir(path, mode)
            parent, name = self._parent(rel)
            ino = self._new_inode()
            self._inodes[rel] = ino
            self._emit(Op("mkdir", inode=ino, dir=parent, name=name, path=rel))

    def rmdir(self, path: str) -> None:
        with self._lock:
            rel = self._rel(path)
            super().rmdir(path)
            if rel in self._inodes:
                parent, name = self._parent(rel)
                self._inodes.pop(rel)
                self._emit(Op("rmdir", dir=parent, name=name, path=rel))

    def mark(self, kind: str, **info: Any) -> None:
        with self._lock:
            self._emit(Op("mark", info={"kind": kind, **info}))
