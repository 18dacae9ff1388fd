"""The compiled key digests and key map of the cleaner, when built.

``embedlog.compaction._ckeymap`` is compiled from ``_ckeymap.c`` with the package when a
compiler is there (see setup.py); :mod:`.digest` and :mod:`.offset_map` use it when
:data:`CORE` is set and keep their numpy code as the reference. ``EMBEDLOG_PURE=1`` turns it off
with the codec's core.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from ..segment._native import load_compiled

__all__ = ["CORE", "KeymapCore"]


class KeymapCore(Protocol):
    """The functions of the compiled key map (documented in ``_ckeymap.c``)."""

    def digests(self, buf: Any, pos: Any, lens: Any, seed0: int, seed1: int, out0: Any,
                out1: Any, /) -> None: ...

    def put(self, lane0: Any, lane1: Any, value: Any, keys0: Any, keys1: Any, offsets: Any,
            /) -> int: ...

    def get(self, lane0: Any, lane1: Any, value: Any, keys0: Any, keys1: Any, out: Any,
            /) -> None: ...

    def map_batches(self, buf: Any, table: Any, first_dirty: int, seed0: int, seed1: int,
                    lane0: Any, lane1: Any, value: Any, /) -> tuple[int, list[int]]: ...

    def filter_batches(self, buf: Any, table: Any, first_dirty: int, end_offset: int,
                       survivors: Any, lane0: Any, lane1: Any, value: Any, map_size: int,
                       seed0: int, seed1: int, out: Any,
                       /) -> tuple[list[bytes | None], int]: ...


CORE = cast("KeymapCore | None", load_compiled("embedlog.compaction._ckeymap"))
"""The compiled key map, or None (numpy reference). Read at each call, so a test may set it to
None to run the reference."""
