"""The cleaner's key -> latest offset map: a numpy open-addressing hash table of key digests.

Layout (Kafka's ``SkimpyOffsetMap`` has the same 24 bytes per slot)::

    lane0  uint64[slots]   first 8 bytes of the key digest (see :mod:`.digest`)
    lane1  uint64[slots]   last 8 bytes
    value  int64[slots]    latest offset seen for the key; -1 = empty slot

Slots are probed linearly from ``lane0 % slots``. The map is built once per cleaning pass. It
holds at most ``load_factor * slots`` entries (:attr:`max_entries`), which bounds the length of
probe chains; :meth:`grow` reallocates it larger (re-inserting every entry), never past its byte
budget (``slots * 24`` bytes), so a partition with few keys uses little memory.

Inserts and lookups are vectorised over many digests at once: each round handles every pending
key in one set of numpy operations; keys that lose a race for an empty slot (several keys
probing the same slot in the same round) or meet another key simply try again in the next
round, so the result does not depend on the order numpy writes in.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from . import _native

__all__ = ["SLOT_BYTES", "OffsetMap"]

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

SLOT_BYTES: Final = 24
"""Bytes per slot: a 16-byte digest and an 8-byte offset."""


def _u64(a: U64) -> U64:
    return np.ascontiguousarray(a, np.uint64)


class OffsetMap:
    """Digest -> latest offset, in at most ``budget_bytes`` bytes (starting with room for
    ``initial_entries``)."""

    def __init__(
        self, budget_bytes: int, *, load_factor: float = 0.75, initial_entries: int = 1 << 12
    ) -> None:
        if not 0.1 <= load_factor <= 0.95:
            raise ValueError(f"load_factor must be in [0.1, 0.95], not {load_factor}")
        self.budget_slots = budget_bytes // SLOT_BYTES
        if self.budget_slots < 2:
            raise ValueError(f"a budget of {budget_bytes} bytes cannot hold a key map")
        self.load_factor = load_factor
        self.size = 0
        self._allocate(min(self.budget_slots, max(16, int(initial_entries / load_factor) + 1)))

    def _allocate(self, slots: int) -> None:
        self.slots = slots
        self.max_entries = max(1, int(slots * self.load_factor))
        self._lane0 = np.zeros(slots, np.uint64)
        self._lane1 = np.zeros(slots, np.uint64)
        self._value = np.full(slots, -1, np.int64)
        self._slots = np.uint64(slots)

    def slots_for(self, entries: int) -> int:
        """Slots a table holding ``entries`` entries needs (ignoring the budget)."""
        return int(entries / self.load_factor) + 1

    def grow(self, entries: int, *, max_bytes: int | None = None) -> bool:
        """Make room for ``entries`` entries in all (re-inserting what is there), within the
        budget and ``max_bytes``; False if that is not possible (nothing changes then)."""
        if entries <= self.max_entries:
            return True
        limit = self.budget_slots
        if max_bytes is not None:
            limit = min(limit, max_bytes // SLOT_BYTES)
        slots = min(limit, max(self.slots_for(entries), 2 * self.slots))
        if int(slots * self.load_factor) < entries:
            return False
        full = self._value >= 0
        lane0, lane1, value = self._lane0[full], self._lane1[full], self._value[full]
        self._allocate(slots)
        self.size = 0
        self.put(lane0, lane1, value)
        return True

    @property
    def nbytes(self) -> int:
        """Bytes held by the table."""
        return self._lane0.nbytes + self._lane1.nbytes + self._value.nbytes

    def arrays(self) -> tuple[U64, U64, I64]:
        """The table's arrays (lane0, lane1, value), for the compiled walk to read or fill; it
        keeps :attr:`size` true through the caller."""
        return self._lane0, self._lane1, self._value

    @property
    def room(self) -> int:
        """Entries that can still be added."""
        return self.max_entries - self.size

    def _home(self, lane0: U64) -> I64:
        return (lane0 % self._slots).astype(np.int64)

    def put(self, lane0: U64, lane1: U64, offsets: I64) -> None:
        """Record ``offsets[i]`` for digest ``(lane0[i], lane1[i])`` unless the map already holds
        a larger offset for it. The caller guarantees room for every distinct new digest
        (``len(offsets) <= room`` is sufficient); ``ValueError`` otherwise."""
        n = len(offsets)
        if n > self.room:
            raise ValueError(f"{n} digests may not fit: room for {self.room}")
        if n == 0:
            return
        core = _native.CORE
        if core is not None:
            self.size += core.put(self._lane0, self._lane1, self._value, _u64(lane0),
                                  _u64(lane1), np.ascontiguousarray(offsets, np.int64))
            return
        slot = self._home(lane0)
        pending = np.arange(n, dtype=np.int64)
        value = self._value
        while pending.size:
            s = slot[pending]
            current = value[s]
            empty = current < 0
            retry: list[I64] = []
            if empty.any():
                claim, where = pending[empty], s[empty]
                value[where] = -2 - claim  # a tag only this claimant can recognise
                won = value[where] == -2 - claim
                winners, won_at = claim[won], where[won]
                self._lane0[won_at] = lane0[winners]
                self._lane1[won_at] = lane1[winners]
                value[won_at] = offsets[winners]
                self.size += len(winners)
                retry.append(claim[~won])  # same slot again: now held by someone
            taken = ~empty
            if taken.any():
                who, where = pending[taken], s[taken]
                same = (self._lane0[where] == lane0[who]) & (self._lane1[where] == lane1[who])
                if same.any():
                    np.maximum.at(value, where[same], offsets[who[same]])
                moved = who[~same]
                slot[moved] = (where[~same] + 1) % self.slots
                retry.append(moved)
            pending = np.concatenate(retry) if len(retry) > 1 else retry[0]

    def get(self, lane0: U64, lane1: U64) -> I64:
        """The offset recorded for each digest, -1 where there is none."""
        n = len(lane0)
        out = np.full(n, -1, np.int64)
        if n == 0 or self.size == 0:
            return out
        core = _native.CORE
        if core is not None:
            core.get(self._lane0, self._lane1, self._value, _u64(lane0), _u64(lane1), out)
            return out
        slot = self._home(lane0)
        pending = np.arange(n, dtype=np.int64)
        while pending.size:
            s = slot[pending]
            current = self._value[s]
            occupied = current >= 0
            who, where = pending[occupied], s[occupied]
            same = (self._lane0[where] == lane0[who]) & (self._lane1[where] == lane1[who])
            out[who[same]] = current[occupied][same]
            moved = who[~same]
            slot[moved] = (where[~same] + 1) % self.slots
            pending = moved
        return out

    def latest_offsets(self) -> I64:
        """Every recorded offset, sorted: in a section whose keys were all put in the map, a
        record is the latest for its key exactly when its offset is in this array."""
        values = self._value[self._value >= 0]
        values.sort()
        return values

    def clear(self) -> None:
        """Forget every entry (the table keeps its size)."""
        self._value.fill(-1)
        self.size = 0
