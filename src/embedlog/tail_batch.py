"""The reservation of a partition's tail: what :meth:`Partition.reserve
<embedlog.partition.Partition.reserve>` holds (an :class:`~embedlog.batch_writer.OpenBatch`)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["TailBatch"]


class TailBatch(Protocol):
    """Records whose offsets a writer reserved at the partition's tail (:meth:`Partition.reserve
    <embedlog.partition.Partition.reserve>`): ``open_at(base)`` when the reservation starts (its
    first record gets offset ``base``; ``open`` from then until ``write`` takes its records),
    ``write()`` when it is released (append through ``append_encoded``); both under the
    partition's lock. ``waited``: its writers wait for the group commit
    (:meth:`Partition.sync_through <embedlog.partition.Partition.sync_through>`), so its write
    does not fsync by itself (in ``fsync`` mode an append would, holding the lock).

    Invariant: a batch that is ``open`` is the partition's reservation (an interrupt that cuts
    ``open_at`` or ``write`` short leaves it reserved while it is open), so the next settle or
    round writes every record it took."""

    waited: bool
    open: bool

    def open_at(self, base: int) -> None: ...

    def write(self) -> None: ...
