"""Copying one remote file into the cache, never more bytes than its listing promised.

:func:`copy` streams the remote file into a new local file (``O_CREAT | O_EXCL | O_NOFOLLOW``
through :mod:`embedlog._io`, so an existing entry is never overwritten or followed) in chunks,
and stops with :class:`~embedlog.errors.CorruptionError` as soon as the remote sends more bytes
than the listing reported; a shorter file is refused too once the stream ends. So a remote
that lies about a size can never make the cache grow beyond the bounds
:mod:`embedlog.remote.listing` checked.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from .. import _io
from ..errors import CorruptionError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["CHUNK", "copy"]

CHUNK: Final = 1 << 20


def copy(fs: pafs.FileSystem, remote: str, local: str, size: int) -> None:
    """Copy ``remote`` (listed at ``size`` bytes) to the new file ``local``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = _io.open_file(local, flags)
    except OSError as exc:
        raise _io.storage_error(exc, "create", local) from exc
    try:
        done = 0
        with fs.open_input_stream(remote) as stream:
            while True:
                chunk = stream.read(min(CHUNK, size - done + 1))
                if not chunk:
                    break
                done += len(chunk)
                if done > size:
                    raise CorruptionError(f"remote file is larger than the {size} bytes its "
                                          "listing reported", path=remote)
                _io.write(fd, chunk)
        if done != size:
            raise CorruptionError(f"remote file has {done} bytes; its listing reported {size}",
                                  path=remote)
    finally:
        _io.close(fd)
