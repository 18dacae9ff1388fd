"""The remote store of a tiered log: whole-object puts, bounded gets, deletes, over pyarrow.fs.

A :class:`RemoteStore` is one folder on a :class:`pyarrow.fs.FileSystem` (``s3://``,
``file://``, ``gs://``, ``hdfs://``: any URI :func:`pyarrow.fs.FileSystem.from_uri`
understands). Objects are addressed by checked path components below that folder
(:func:`embedlog._paths.component`), never by a raw string.

Invariants:

* a put is atomic: the object appears whole or not at all. An object store's PUT is; on a
  local file system (``file://``) the bytes go to ``<name>.tmp`` first, then a rename;
* every put and delete is announced through the fault-injection seam of local mutations,
  ``_io.mark("remote_put" | "remote_delete", ...)`` *before* it runs, so the crash tests
  (tests/reliability) stop a writer at any remote step exactly as at any local one;
* a get reads at most the caller's bound (:class:`~embedlog.errors.CorruptionError` beyond).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from .. import _io, _paths
from ..errors import CorruptionError, StorageError, UsageError
from ..naming import TMP_SUFFIX

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["CHUNK", "RemoteStore", "filesystem", "open_store", "remote_error"]

CHUNK: Final = 1 << 20
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def open_store(uri: str) -> RemoteStore:
    """The store at ``uri``; a URI pyarrow cannot open is a :class:`UsageError`."""
    fs, root = filesystem(uri, "tiered storage")
    return RemoteStore(fs, root, uri)


def filesystem(uri: str, purpose: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system and path for ``uri``; without pyarrow (the ``arrow`` extra), or
    for a URI it cannot open, a :class:`UsageError` naming ``purpose``."""
    try:
        import pyarrow.fs as pafs
    except ImportError as exc:
        raise UsageError(f"{purpose} needs pyarrow (pip install 'embedlog[arrow]')") from exc
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:
        raise UsageError(f"cannot open {uri!r}: {exc}") from exc
    return fs, root


class RemoteStore:
    """The folder ``root`` on ``fs`` (``uri`` names it in messages)."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.uri = uri
        self.local = fs.type_name == "local"

    def path(self, names: tuple[str, ...]) -> str:
        """The remote path of ``names`` (each a checked component)."""
        for name in names:
            _paths.component(name, "remote object name", CorruptionError)
        return "/".join((self.root, *names))

    def put_file(self, names: tuple[str, ...], local: str) -> tuple[int, int]:
        """Copy the local regular file ``local`` to ``names``; returns ``(size, crc32)`` of
        the bytes copied."""
        fd = _io.open_regular(local)
        try:
            return self._put(names, lambda: os.read(fd, CHUNK))
        finally:
            os.close(fd)

    def put_bytes(self, names: tuple[str, ...], data: bytes) -> None:
        """Store ``data`` as ``names``."""
        chunks = iter((data, b""))
        self._put(names, lambda: next(chunks))

    def _put(self, names: tuple[str, ...], read: object) -> tuple[int, int]:
        target = self.path(names)
        _io.mark("remote_put", path="/".join(names))
        staged = target + TMP_SUFFIX if self.local else target
        size = crc = 0
        try:
            if self.local:
                self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(staged) as out:
                while chunk := read():  # type: ignore[operator]
                    out.write(chunk)
                    size += len(chunk)
                    crc = zlib.crc32(chunk, crc)
            if self.local:
                self.fs.move(staged, target)
        except OSError as exc:
            raise remote_error(exc, "put", target) from exc
        return size, crc

    def get(self, names: tuple[str, ...], limit: int) -> bytes | None:
        """The object ``names`` (None if there is none), refused beyond ``limit`` bytes."""
        target = self.path(names)
        try:
            with self.fs.open_input_stream(target) as stream:
                data = bytes(stream.read(limit + 1))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if _missing(exc):
                return None
            raise remote_error(exc, "get", target) from exc
        if len(data) > limit:
            raise CorruptionError(f"remote object is larger than {limit} bytes", path=target)
        return data

    def get_file(self, names: tuple[str, ...], local: str, size: int) -> int:
        """Copy the object ``names`` (published at ``size`` bytes) to the new local file
        ``local``, never more bytes than that; returns the CRC-32 of the bytes copied. A
        different size is :class:`~embedlog.errors.CorruptionError`."""
        target = self.path(names)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
        fd = _io.open_file(local, flags)
        done = crc = 0
        try:
            with self.fs.open_input_stream(target) as stream:
                while chunk := stream.read(min(CHUNK, size - done + 1)):
                    done += len(chunk)
                    if done > size:
                        break
                    crc = zlib.crc32(chunk, crc)
                    _io.write(fd, chunk)
        except OSError as exc:
            raise remote_error(exc, "get", target) from exc
        finally:
            _io.close(fd)
        if done != size:
            raise CorruptionError(f"remote object is not the {size} bytes published",
                                  path=target)
        return crc

    def get_range(self, names: tuple[str, ...], size: int, start: int, end: int,
                  chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
        """``(position, bytes)`` chunks (at most ``chunk`` bytes each: an object store's ranged
        GET each) of ``[start, end)`` of the object ``names``, published at ``size`` bytes. An
        object of another size, or one that ends early, is
        :class:`~embedlog.errors.CorruptionError`."""
        target = self.path(names)
        try:
            with self.fs.open_input_file(target) as f:
                if f.size() != size:
                    raise CorruptionError(f"remote object is {f.size()} bytes, not the {size} "
                                          "published", path=target)
                position = start
                while position < end:
                    got = f.read_at(min(chunk, end - position), position)
                    if not got:
                        raise CorruptionError("remote object ended early", path=target,
                                              position=position)
                    yield position, bytes(got)
                    position += len(got)
        except OSError as exc:
            raise remote_error(exc, "get", target) from exc

    def delete(self, names: tuple[str, ...]) -> None:
        """Delete the object ``names``; one already gone is fine."""
        target = self.path(names)
        _io.mark("remote_delete", path="/".join(names))
        try:
            self.fs.delete_file(target)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not _missing(exc):
                raise remote_error(exc, "delete", target) from exc

    def listing(self, folder: str) -> dict[str, int]:
        """``{name: size}`` of the objects directly in ``folder`` (empty if there is none)."""
        import pyarrow.fs as pafs

        base = self.path((folder,))
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        except OSError as exc:
            raise remote_error(exc, "list", base) from exc
        return {str(i.base_name): int(i.size or 0) for i in infos
                if i.type == pafs.FileType.File and not str(i.base_name).endswith(TMP_SUFFIX)}


def _missing(exc: OSError) -> bool:
    text = str(exc)
    return "NoSuchKey" in text or "Path does not exist" in text or "not found" in text.lower()


def remote_error(exc: OSError, what: str, path: str) -> StorageError:
    """A remote store's failure (pyarrow raises ``OSError``) as embedlog's ``StorageError``."""
    return StorageError(exc.errno or 5, f"remote {what} failed: {exc}", path)
