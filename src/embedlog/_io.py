"""The one door to the file system for every mutation embedlog makes.

Every write, truncate, fsync, directory fsync, rename, unlink and mkdir goes through the active
:class:`FileSystem` backend, so that a test can swap in a recording backend, capture the exact
sequence of mutations and replay the states a power loss could leave behind. Reads (``os.pread``,
``mmap``) are not routed through here: they never change what is on disk.

Rules kept by callers (checked by the crash explorer in ``tests/``):

* a file's data is durable only after :func:`fsync` of that file returns;
* a created, renamed or unlinked name is durable only after :func:`fsync_dir` of its parent;
* small metadata files are replaced whole with :func:`write_atomic` (tmp, fsync, rename, dir fsync).

Files are created ``0o640`` and directories ``0o750`` (the umask may only narrow this), and files
are opened with ``O_NOFOLLOW`` so a symlink planted in the log directory is never written through.

Only regular files are ever opened, for writing here and for reading through
:func:`open_regular` / :func:`read_regular`: every open adds ``O_NONBLOCK | O_NOFOLLOW`` (so a
FIFO planted in place of a file cannot block the open, and a symlink is refused) and checks
``fstat`` for ``S_ISREG``; a FIFO, socket, device, directory or symlink where a file belongs is
damage, reported as :class:`~embedlog.errors.CorruptionError` naming the path and what was found.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import CorruptionError, StorageError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "SAFETY",
    "FileSystem",
    "Safety",
    "atomic_file",
    "backend",
    "close",
    "fsync",
    "fsync_dir",
    "mark",
    "mkdir",
    "open_file",
    "open_regular",
    "pwrite",
    "read_regular",
    "regular_size",
    "rename",
    "rmdir",
    "set_mtime",
    "storage_error",
    "truncate",
    "unlink",
    "use_backend",
    "write",
    "write_atomic",
]

FILE_MODE = 0o640
DIR_MODE = 0o750
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOT_REGULAR_ERRNOS = frozenset({_errno.ELOOP, _errno.EISDIR, _errno.ENXIO, _errno.ENODEV,
                                 _errno.ENOTDIR, _errno.EOPNOTSUPP})


@dataclass
class Safety:
    """Durability steps that tests may switch off one at a time to prove the crash checker
    notices (mutation testing of the harness). Production code never changes these."""

    dir_fsync: bool = True
    fsync_before_rename: bool = True
    fsync_before_ack: bool = True
    verify_crc: bool = True
    truncate_torn_tail: bool = True
    atomic_checkpoint: bool = True


SAFETY = Safety()


def storage_error(exc: OSError, what: str, path: str | None) -> StorageError:
    r"""``exc`` as a :class:`~embedlog.errors.StorageError` saying which operation failed on
    which path (for readers that map their own ``OSError``\ s the same way)."""
    err = StorageError(exc.errno or _errno.EIO, f"{what} failed: {exc.strerror or exc}", path)
    err.__cause__ = exc
    return err


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(path: str, mode: int, error: type[CorruptionError]) -> CorruptionError:
    return error(f"expected a regular file, found {_kind(mode)}", path=path)


def _open_regular_fd(path: str, flags: int, mode: int, error: type[CorruptionError]) -> int:
    """``os.open`` that only ever returns a descriptor of a regular file (see the module
    docstring). ``OSError`` passes through unless the path names something that is not a
    regular file, which raises ``error``."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in _NOT_REGULAR_ERRNOS:
            try:
                st = os.lstat(path)
            except OSError:
                raise exc from None
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(path, st.st_mode, error) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode, error)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str, flags: int = os.O_RDONLY, *,
                 error: type[CorruptionError] = CorruptionError) -> int:
    """Open an existing regular file without creating anything (reads: never recorded as a
    mutation). ``FileNotFoundError`` passes through; something that is not a regular file raises
    ``error``; any other failure :class:`~embedlog.errors.StorageError`."""
    try:
        return _open_regular_fd(path, flags & ~os.O_CREAT, 0, error)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise storage_error(exc, "open", path) from exc


def read_regular(path: str, max_bytes: int, *,
                 error: type[CorruptionError] = CorruptionError) -> bytes | None:
    """At most ``max_bytes`` bytes from the start of the small regular file ``path`` (a
    checkpoint, a state file); ``None`` if it does not exist. A caller that reads one byte more
    than it accepts can tell a file that is too large."""
    try:
        fd = open_regular(path, error=error)
    except FileNotFoundError:
        return None
    try:
        parts: list[bytes] = []
        done = 0
        while done < max_bytes:
            chunk = os.read(fd, min(max_bytes - done, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            done += len(chunk)
        return b"".join(parts)
    except OSError as exc:
        raise storage_error(exc, "read", path) from exc
    finally:
        os.close(fd)


def regular_size(path: str, *, error: type[CorruptionError] = CorruptionError) -> int | None:
    """The size of the regular file ``path`` (``None`` if it does not exist), taken with
    ``fstat`` on a descriptor :func:`open_regular` opened: never a size seen through a
    symbolic link, never a FIFO's or a directory's."""
    try:
        fd = open_regular(path, error=error)
    except FileNotFoundError:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


class FileSystem:
    """The production backend: plain ``os`` calls, with ``OSError`` mapped to
    :class:`~embedlog.errors.StorageError`. Subclasses record or fail calls in tests."""

    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        """A regular file only (see the module docstring): anything else at ``path`` raises
        :class:`~embedlog.errors.CorruptionError`."""
        try:
            return _open_regular_fd(path, flags, mode, CorruptionError)
        except OSError as exc:
            raise storage_error(exc, "open", path) from exc

    def close(self, fd: int) -> None:
        try:
            os.close(fd)
        except OSError as exc:
            raise storage_error(exc, "close", None) from exc

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError as exc:
            raise storage_error(exc, "write", None) from exc

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        try:
            n = os.pwrite(fd, data, offset)
            if n == len(data) and data.__class__ is not memoryview:
                return  # all at once, as regular files take it: no view made
            view = memoryview(data).cast("B")[n:]
            offset += n
            while view:
                n = os.pwrite(fd, view, offset)
                view = view[n:]
                offset += n
        except OSError as exc:
            raise storage_error(exc, "pwrite", None) from exc

    def truncate(self, fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
        except OSError as exc:
            raise storage_error(exc, "truncate", None) from exc

    def fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            raise storage_error(exc, "fsync", None) from exc

    def fsync_dir(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
        except OSError as exc:
            raise storage_error(exc, "open directory", path) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise storage_error(exc, "fsync directory", path) from exc
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        try:
            os.replace(src, dst)
        except OSError as exc:
            raise storage_error(exc, "rename", src) from exc

    def unlink(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise storage_error(exc, "unlink", path) from exc

    def mkdir(self, path: str, mode: int = DIR_MODE) -> None:
        try:
            os.mkdir(path, mode)
        except OSError as exc:
            raise storage_error(exc, "mkdir", path) from exc

    def rmdir(self, path: str) -> None:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise storage_error(exc, "rmdir", path) from exc

    def set_mtime(self, path: str, ms: int) -> None:
        """Set the modification time of the file at ``path`` (never through a symlink)."""
        try:
            os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000), follow_symlinks=False)
        except OSError as exc:
            raise storage_error(exc, "utime", path) from exc

    def mark(self, kind: str, **info: Any) -> None:
        """An annotation for recording backends (``ack``, ``intent_retain``...); a no-op here."""


_backend: FileSystem = FileSystem()


def backend() -> FileSystem:
    """The backend in force."""
    return _backend


@contextlib.contextmanager
def use_backend(fs: FileSystem) -> Iterator[FileSystem]:
    """Route every mutation through ``fs`` inside the ``with`` block (tests only)."""
    global _backend
    previous, _backend = _backend, fs
    try:
        yield fs
    finally:
        _backend = previous


def open_file(path: str, flags: int, mode: int = FILE_MODE) -> int:
    return _backend.open(path, flags, mode)


def close(fd: int) -> None:
    _backend.close(fd)


def write(fd: int, data: bytes | bytearray | memoryview) -> None:
    _backend.write(fd, data)


def pwrite(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    _backend.pwrite(fd, data, offset)


def truncate(fd: int, size: int) -> None:
    _backend.truncate(fd, size)


def fsync(fd: int) -> None:
    _backend.fsync(fd)


def fsync_dir(path: str) -> None:
    if SAFETY.dir_fsync:
        _backend.fsync_dir(path)


def rename(src: str, dst: str) -> None:
    _backend.rename(src, dst)


def unlink(path: str) -> None:
    _backend.unlink(path)


def mkdir(path: str, mode: int = DIR_MODE) -> None:
    _backend.mkdir(path, mode)


def rmdir(path: str) -> None:
    _backend.rmdir(path)


def set_mtime(path: str, ms: int) -> None:
    _backend.set_mtime(path, ms)


def mark(kind: str, **info: Any) -> None:
    _backend.mark(kind, **info)


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, never a mix:
    write ``path.tmp``, fsync it, rename over ``path``, fsync the parent directory."""
    with atomic_file(path) as fd:
        write(fd, data)


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[int]:
    """A descriptor of a new, empty file that replaces ``path`` when the ``with`` block ends
    without an error, as :func:`write_atomic` does (for contents written piece by piece)."""
    if not SAFETY.atomic_checkpoint:
        fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            yield fd
            fsync(fd)
        finally:
            close(fd)
        return
    tmp = path + ".tmp"
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        yield fd
        if SAFETY.fsync_before_rename:
            fsync(fd)
    finally:
        close(fd)
    rename(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


