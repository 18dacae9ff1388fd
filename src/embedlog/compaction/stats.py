"""What a compaction did, summed over its passes and partitions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["CompactionStats"]


@dataclass(slots=True)
class CompactionStats:
    """Counters of one or more cleaning passes (``+`` adds them up; ``map_*`` take the max).

    Batches read from the cleaned range end up ``copied`` (byte for byte), ``rebuilt`` (some
    records dropped or a delete horizon set), ``emptied`` (every record dropped, the 61-byte
    header kept for a producer's state or the end of the range) or ``removed``.
    """

    partitions: int = 0
    passes: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    batches_copied: int = 0
    batches_rebuilt: int = 0
    batches_emptied: int = 0
    batches_removed: int = 0
    segments_read: int = 0
    segments_written: int = 0
    map_entries: int = 0
    map_bytes: int = 0
    elapsed_s: float = 0.0

    def __add__(self, other: CompactionStats) -> CompactionStats:
        out = CompactionStats()
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(out, f.name, max(a, b) if f.name.startswith("map_") else a + b)
        return out

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_retained
