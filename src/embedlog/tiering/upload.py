"""The writer's tiering work on one partition: upload, local retention, total retention.

The upload protocol (KIP-405's copy of a log segment), for each sealed segment not yet
published that lies wholly below the last stable offset (a segment holding the first batch of
an open transaction stays local until its marker, as in Kafka: the last stable offset is
computed from local segments), in offset order:

1. put its ``.txnindex``, ``.index``, ``.timeindex`` and ``.log`` (each a whole object; a
   crash leaves some of them: invisible garbage, overwritten when the segment is uploaded
   again after the restart);
2. put the partition's remote manifest listing it with each file's size and CRC-32 -- the
   commit point: a segment is visible only once every one of its files is complete;
3. replace the local copy of the manifest.

Local retention (:func:`expire_local`) then deletes leading local segments beyond
``local.retention.ms`` / ``local.retention.bytes`` that the manifest holds at their local
size -- never the active one, never one not published. The local ``embedlog.segments`` is
rewritten without them *before* they are unlinked (a crash between leaves files the manifest
does not vouch for, deleted again by the next run). The partition's log start stays where it
was: below the first local segment, the remote serves the reads.

Total retention (:func:`enforce_retention`) measures the remote-only segments and the local
ones together with ``retention.ms`` / ``retention.bytes``; the new log start is persisted
first, then the local segments below it are deleted, then :func:`drop_below` publishes a
manifest without the remote segments below it and only then deletes their objects. So a
crash never leaves a published segment with a missing object, nor a log start past data that
is gone without it being below the log start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from .. import _io
from ..config import LONG_MAX
from ..manifest import write_manifest
from ..naming import REMOTE_MANIFEST, segment_path
from ..partition import Partition
from ..producer_state_store import last_stable_offset
from ..retention import expired
from ..segment.segment import Segment
from .remote_manifest import FILES, Manifest, Published
from .tier import Tier

__all__ = ["drop_below", "enforce_retention", "expire_local", "preview", "retention_plan",
           "tier_of", "upload"]

log = logging.getLogger(__name__)


def tier_of(p: Partition) -> Tier | None:
    tier = p.tier
    return tier if isinstance(tier, Tier) else None


def upload(p: Partition) -> int:
    """Publish ``p``'s sealed segments not published yet, in offset order; returns how many.
    Nothing for a partition whose topic has ``remote.storage.enable=false``."""
    tier = tier_of(p)
    if tier is None or not p.writable or not p.config.remote_storage_enable:
        return 0
    tier.sync_remote()
    drop_below(p, p.start_offset)
    with p.lock:
        sealed = list(zip(p.segments[:-1], p._bases[1:], strict=False))
        stable = last_stable_offset(p)
    count = 0
    for seg, nxt in sealed:
        if nxt > stable:
            break  # an open transaction begins in it: it waits for the marker (as in Kafka)
        published = tier.manifest.segments
        if published and seg.base_offset < published[-1].next:
            continue  # published already
        if published and seg.base_offset != published[-1].next:
            log.warning("%s: segment %d does not follow the published ones (%d); "
                        "not uploaded", p.directory, seg.base_offset, published[-1].next)
            return count
        count += _publish(p, tier, seg, nxt)
    return count


def _publish(p: Partition, tier: Tier, seg: Segment, nxt: int) -> bool:
    """Upload ``seg`` (``[base, nxt)``) and publish it; False when it was not published."""
    files: dict[str, tuple[int, int]] = {}
    for key in ("txnindex", "index", "timeindex", "log"):
        local = segment_path(p.directory, seg.base_offset, FILES[key])
        names = tier.remote_names(seg.base_offset, key)
        if key == "txnindex" and not os.path.lexists(local):
            tier.store.put_bytes(names, b"")  # a Kafka segment without one: none aborted
            files[key] = (0, 0)
            continue
        files[key] = tier.store.put_file(names, local)
    entry = Published(seg.base_offset, nxt, seg.max_timestamp, files)
    with tier.lock:  # a concurrent drop_below or round may have changed the manifest
        m = tier.manifest
        start = max(m.log_start, p.start_offset)
        if (m.segments and m.segments[-1].next != seg.base_offset) or nxt <= start:
            return False  # published meanwhile, or below the log start: left as garbage
        tier.publish(Manifest(start, (*m.segments, entry)))
        return True


def expire_local(p: Partition, now: int) -> int:
    """Delete the leading local segments of ``p`` that are published and beyond the local
    retention; returns how many."""
    tier = tier_of(p)
    if tier is None or not p.config.remote_storage_enable or not p.config.delete:
        return 0
    ms, size = p.config.local_retention
    with p.lock, p.poison_on_error():
        p.check_writable()
        segs = p.segments
        doomed = expired(segs, now, ms, size)
        published = {e.base: e.size for e in tier.manifest.segments}
        count = 0
        while count < doomed and published.get(segs[count].base_offset) == segs[count].size:
            count += 1
        if not count:
            return 0
        gone, kept = segs[:count], segs[count:]
        write_manifest(p.directory, {s.base_offset: s.size for s in kept[:-1]})
        for seg in gone:
            seg.delete()
        p.segments, p._bases = kept, [s.base_offset for s in kept]
        _io.fsync_dir(p.directory)
        return count


@dataclass(frozen=True)
class _RemoteOnly:
    """A published segment no longer local, measured as retention measures a segment."""

    entry: Published
    now: int

    @property
    def base_offset(self) -> int:
        return self.entry.base

    @property
    def size(self) -> int:
        return self.entry.size

    @property
    def max_timestamp(self) -> int:
        return self.entry.max_timestamp

    def last_modified_ms(self) -> int:
        return self.now  # no timestamp: kept by time, weighed by size


def retention_plan(tier: Tier, p: Partition, now: int) -> tuple[int, int]:
    """``(segments, new log start)`` total retention deletes from a tiered partition now:
    the remote-only segments and the local ones measured together, leading ones first, never
    the active one (caller holds the partition's lock)."""
    local = list(p.segments)
    remote = [_RemoteOnly(e, now) for e in tier.manifest.segments
              if e.base < local[0].base_offset and e.next > p.start_offset]
    both: Sequence[_RemoteOnly | Segment] = [*remote, *local]
    doomed = expired(both, now, p.config.retention_ms, p.config.retention_bytes)
    return doomed, max(p.start_offset, both[doomed].base_offset)


def preview(p: Partition, now: int) -> tuple[int, int] | None:
    """What total retention would delete from a tiered partition now (None: not tiered)."""
    tier = tier_of(p)
    if tier is None or not p.segments:
        return None
    with p.lock:
        return retention_plan(tier, p, now) if p.config.delete else (0, p.start_offset)


def enforce_retention(p: Partition, now: int) -> int:
    """Total retention of a tiered partition; returns the segments deleted (remote-only and
    local ones)."""
    tier = tier_of(p)
    if tier is None:
        return p.enforce_retention(now)
    if not p.config.delete:
        return 0
    with p.lock, p.poison_on_error():
        p.check_writable()
        doomed, new_start = retention_plan(tier, p, now)
        if not doomed:
            return 0
        if new_start > p.start_offset:
            p.start_offset = new_start
            p._persist_start()
            p._delete_leading(lambda seg, nxt: nxt <= p.start_offset)
    drop_below(p, new_start)
    return doomed


def drop_below(p: Partition, start: int | None) -> int:
    """Unpublish the remote segments wholly below ``start`` (``None``: all of them, the topic
    is being deleted) -- the manifest first --, then delete their objects; returns how many
    went. Called without the partition's lock.

    A deleted topic's manifest is published empty with log start 0 and then deleted too, as
    Kafka deletes a topic's remote metadata: a topic created again under the name starts
    afresh (a crash before the deletion leaves that empty manifest, which is the same)."""
    tier = tier_of(p)
    if tier is None or not tier.writable or (
            not p.config.remote_storage_enable and not tier.manifest.segments):
        return 0
    with tier.lock:
        if not tier.synced:
            tier.sync_remote()
        m = tier.manifest
        limit = LONG_MAX if start is None else start
        gone = [e for e in m.segments if e.next <= limit]
        if start is not None and not gone and m.log_start >= limit:
            return 0
        tier.publish(Manifest(0 if start is None else max(m.log_start, start),
                              tuple(e for e in m.segments if e.next > limit)))
        for entry in gone:
            tier.evict(entry.base)
            for key in FILES:
                tier.store.delete(tier.remote_names(entry.base, key))
        if start is None:
            tier.store.delete((tier.name, REMOTE_MANIFEST))
        return len(gone)
