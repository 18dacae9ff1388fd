"""Group membership without a coordinator: a shared state file, heartbeats and ``flock`` leases.

Files of one group (see :mod:`embedlog.groups` for the whole layout)::

    state.json      {"version": 1, "generation": 7, "assignor": "range",
                     "members": {"<member id>": ["topic", ...], ...}}   (replaced atomically)
    members/<id>    flock'ed by its member for its lifetime; bytes 0-8: last heartbeat
                    (CLOCK_MONOTONIC ms, big-endian int64), rewritten without fsync;
                    bytes 8-16: the member's session timeout (ms, big-endian int64)
    leases/<topic>-<partition>   flock'ed by the member that consumes the partition

Protocol (every step that changes ``state.json`` holds the group lock):

* **join**: create and lock ``members/<id>``, write a heartbeat, add the member to
  ``state.json`` (generation + 1);
* **rebalance**: each member re-reads ``state.json`` when it changed and computes the
  assignment of the current members with the group's assignor (a pure function, so all members
  agree); it gives up partitions it no longer owns (releasing their leases) and takes the leases
  of its new ones; a lease still held by the previous owner is retried later -- that owner lets
  go at its next poll, after its ``on_revoke``;
* **liveness**: every heartbeat interval a member rewrites its heartbeat and probes the others:
  a member file nobody locks (the process died: the kernel dropped its ``flock``) or whose
  heartbeat is older than *that member's* session timeout (as Kafka's coordinator uses each
  member's own ``session.timeout.ms``; a file without one, or with a negative one, is measured
  by the prober's) is evicted (removed from ``state.json``, generation + 1, file unlinked);
* **leave**: remove the member from ``state.json``, unlink and unlock its file.

Safety does not depend on timing: a partition is read only by the holder of its lease, so two
members never consume one partition at once, and commits are accepted only from a listed member
holding the lease (checked under the group lock).
"""

from __future__ import annotations

import json
import math
import os
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _io, _paths
from .._json import load_untrusted
from .._platform import FileLock, is_locked
from ..errors import (
    CorruptCheckpointError,
    GroupError,
    InvalidConfigError,
    UnknownTopicError,
    UsageError,
)
from ..naming import (
    GROUP_LEASES_DIR,
    GROUP_LOCK_FILE,
    GROUP_MEMBERS_DIR,
    GROUP_STATE_FILE,
    partition_dir_name,
    validate_topic,
)
from ..records import TopicPartition
from .assignors import ASSIGNORS

__all__ = ["GroupState", "Membership", "live_members"]

_HEARTBEAT = struct.Struct(">q")
_MEMBER_FILE = struct.Struct(">qq")  # heartbeat, session timeout
_MAX_STATE_BYTES = 16 * 1024 * 1024
_MEMBER_SUFFIX = 33  # "-" and a uuid4 in hex
MAX_CLIENT_ID = _paths.MAX_COMPONENT - _MEMBER_SUFFIX


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class GroupState:
    """The content of ``state.json``."""

    generation: int = 0
    assignor: str | None = None
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str) -> GroupState:
        """The state in ``path`` (empty if missing). Member ids become file names and topics
        lease names, so both are checked as path components; anything malformed raises
        :class:`~embedlog.errors.CorruptCheckpointError`."""
        raw = _io.read_regular(path, _MAX_STATE_BYTES + 1, error=CorruptCheckpointError)
        if raw is None:
            return cls()
        doc = load_untrusted(raw, limit=_MAX_STATE_BYTES, fail=lambda why: CorruptCheckpointError(
            f"unreadable group state: {why}", path=path))
        try:
            if doc["version"] != 1:
                raise ValueError(f"version {doc['version']}")
            assignor = doc["assignor"]
            if assignor is not None and assignor not in ASSIGNORS:
                raise ValueError(f"unknown assignor {assignor!r}")
            members = {
                _paths.component(m, "member id", CorruptCheckpointError):
                    tuple(validate_topic(t) for t in _topic_list(ts))
                for m, ts in doc["members"].items()
            }
            generation = doc["generation"]
            if type(generation) is not int or not 0 <= generation < 1 << 63:
                raise ValueError(f"generation {generation!r:.40} is not in [0, 2**63)")
            return cls(generation, assignor, members)
        except CorruptCheckpointError as exc:
            raise CorruptCheckpointError(f"malformed group state: {exc.reason}",
                                         path=path) from None
        except (KeyError, TypeError, ValueError, AttributeError, UsageError) as exc:
            raise CorruptCheckpointError(f"malformed group state: {exc!r}", path=path) from exc

    def write(self, path: str) -> None:
        doc: dict[str, Any] = {
            "version": 1,
            "generation": self.generation,
            "assignor": self.assignor,
            "members": {m: list(ts) for m, ts in sorted(self.members.items())},
        }
        _io.write_atomic(path, json.dumps(doc, indent=1).encode())

    def without(self, gone: Iterable[str]) -> GroupState:
        members = {m: ts for m, ts in self.members.items() if m not in set(gone)}
        return GroupState(self.generation + 1, self.assignor if members else None, members)


def _topic_list(topics: object) -> list[object]:
    if not isinstance(topics, list):
        raise ValueError(f"a member's topics must be a list, not {type(topics).__name__}")
    return topics


def live_members(directory: str, state: GroupState) -> frozenset[str]:
    """The members of ``state`` whose process is alive: it holds its member file's lock."""
    members = _paths.join(directory, GROUP_MEMBERS_DIR)
    return frozenset(m for m in state.members if is_locked(_paths.join(members, m)))


class Membership:
    """One member's view of its group: joining, heartbeats, assignment and leases.

    Not thread-safe: owned by one :class:`~embedlog.consumer.Consumer`.
    """

    def __init__(
        self,
        directory: str,
        *,
        topics: Iterable[str],
        assignor: str,
        session_timeout_ms: int,
        partition_count: Callable[[str], int],
        client_id: str = "embedlog",
    ) -> None:
        if assignor not in ASSIGNORS:
            raise GroupError(
                f"unknown assignor {assignor!r}; expected one of {', '.join(sorted(ASSIGNORS))}"
            )
        _paths.component(client_id, "client id", InvalidConfigError)
        if len(client_id) > MAX_CLIENT_ID:
            raise InvalidConfigError(f"client id is {len(client_id)} characters; the limit is "
                                     f"{MAX_CLIENT_ID} (member ids append a 33-character suffix)")
        self.directory = directory
        self.topics = tuple(sorted(set(topics)))
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.client_id = client_id
        self._partition_count = partition_count
        self.lock_path = os.path.join(directory, GROUP_LOCK_FILE)
        self.state_path = os.path.join(directory, GROUP_STATE_FILE)
        # Real folders inside the group folder, never symbolic links (created if missing).
        self._members_dir = _paths.folder(directory, GROUP_MEMBERS_DIR)
        self._leases_dir = _paths.folder(directory, GROUP_LEASES_DIR)
        self.member_id: str | None = None
        self._member_lock: FileLock | None = None
        self.state = GroupState()
        self._stamp: tuple[int, int, int] | None = None
        self._assignment: frozenset[TopicPartition] | None = None
        self._counts: dict[str, int] = {}
        self.leases: dict[TopicPartition, FileLock] = {}

    # ------------------------------------------------------------------ join / leave

    def join(self) -> None:
        """Become a member (a new member id each time)."""
        if self.member_id is not None:
            return
        member_id = f"{self.client_id}-{uuid.uuid4().hex}"
        mine = FileLock(_paths.join(self._members_dir, member_id))
        with FileLock(self.lock_path):
            if not mine.acquire(blocking=False):
                raise GroupError(f"member file {mine.path} is locked by someone else")
            try:
                assert mine.fd is not None
                timeout = min(math.ceil(self.session_timeout_ms), (1 << 63) - 1)
                _io.pwrite(mine.fd, _MEMBER_FILE.pack(monotonic_ms(), timeout), 0)
                state = GroupState.read(self.state_path)
                state = self._evict_locked(state, self._dead(state))
                if state.members and state.assignor != self.assignor:
                    raise GroupError(
                        f"group {os.path.basename(self.directory)!r} uses the "
                        f"{state.assignor!r} assignor, not {self.assignor!r}"
                    )
                members = dict(state.members)
                members[member_id] = self.topics
                state = GroupState(state.generation + 1, self.assignor, members)
                state.write(self.state_path)
            except BaseException:
                mine.release()
                _io.unlink(mine.path)
                raise
        self.member_id, self._member_lock = member_id, mine
        self._set_state(state)

    def leave(self) -> None:
        """Stop being a member; leases must have been released by the caller."""
        member_id, mine = self.member_id, self._member_lock
        if member_id is None or mine is None:
            return
        self.member_id = self._member_lock = None
        try:
            with FileLock(self.lock_path):
                state = GroupState.read(self.state_path)
                if member_id in state.members:
                    state = state.without([member_id])
                    state.write(self.state_path)
                _io.unlink(mine.path)
        finally:
            mine.release()
        self._set_state(state)

    @property
    def in_group(self) -> bool:
        return self.member_id is not None and self.member_id in self.state.members

    # ------------------------------------------------------------------ state

    def refresh(self) -> bool:
        """Re-read ``state.json`` if its inode, mtime or size changed; ``True`` when it did.
        (A change this misses -- an inode reused within one mtime tick at the same size -- is
        read at the next heartbeat, which always re-reads the file.)"""
        try:
            st = os.lstat(self.state_path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = (0, 0, 0)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        state = GroupState.read(self.state_path)
        changed = state != self.state
        self._set_state(state)
        return changed

    def _set_state(self, state: GroupState) -> None:
        if state != self.state:
            self.state = state
            self._assignment = None

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the current membership gives this member (empty if not a member),
        over the topics' partition counts now: a topic deleted, re-created or grown changes
        it at the next call, in every member (each computes the same function of the
        members and the counts)."""
        counts = {t: self._count(t) for ts in self.state.members.values() for t in ts}
        if counts != self._counts:
            self._counts, self._assignment = counts, None
        if self._assignment is None:
            if not self.in_group:
                self._assignment = frozenset()
            else:
                assign = ASSIGNORS[self.state.assignor or self.assignor]
                result = assign(self.state.members, counts)
                assert self.member_id is not None
                self._assignment = frozenset(result.get(self.member_id, ()))
        return self._assignment

    def _count(self, topic: str) -> int:
        try:
            return self._partition_count(topic)
        except UnknownTopicError:
            return 0

    # ------------------------------------------------------------------ liveness

    def heartbeat(self) -> None:
        """Rewrite this member's heartbeat and evict members that died or went silent."""
        if self._member_lock is not None and self._member_lock.fd is not None:
            _io.pwrite(self._member_lock.fd, _HEARTBEAT.pack(monotonic_ms()), 0)
        state = GroupState.read(self.state_path)
        if self._dead(state):
            with FileLock(self.lock_path):
                state = GroupState.read(self.state_path)
                state = self._evict_locked(state, self._dead(state))
        self._set_state(state)

    def _dead(self, state: GroupState) -> list[str]:
        now = monotonic_ms()
        dead = []
        for member_id in state.members:
            if member_id == self.member_id:
                continue
            path = _paths.join(self._members_dir, member_id)
            if not is_locked(path):
                dead.append(member_id)
                continue
            raw = _io.read_regular(path, _MEMBER_FILE.size)
            if raw is None:
                dead.append(member_id)
                continue
            if len(raw) >= _HEARTBEAT.size and now - _HEARTBEAT.unpack_from(raw)[0] > (
                self._timeout_of(raw)
            ):
                dead.append(member_id)
        return dead

    def _timeout_of(self, raw: bytes) -> int:
        """The session timeout a member file states (ms; a negative one, or none -- a file an
        older version wrote -- means this member's)."""
        if len(raw) == _MEMBER_FILE.size:
            timeout: int = _MEMBER_FILE.unpack(raw)[1]
            if timeout >= 0:
                return timeout
        return self.session_timeout_ms

    def _evict_locked(self, state: GroupState, dead: list[str]) -> GroupState:
        """Remove ``dead`` members (caller holds the group lock and re-probed them)."""
        if not dead:
            return state
        state = state.without(dead)
        state.write(self.state_path)
        for member_id in dead:
            _io.unlink(_paths.join(self._members_dir, member_id))
        return state

    # ------------------------------------------------------------------ leases

    def take_lease(self, tp: TopicPartition) -> bool:
        """Lock ``tp``'s lease unless another member still holds it."""
        if tp in self.leases:
            return True
        name = partition_dir_name(tp.topic, tp.partition)  # a validated topic and partition
        lease = FileLock(_paths.join(self._leases_dir, name))
        if not lease.acquire(blocking=False):
            return False
        self.leases[tp] = lease
        return True

    def drop_lease(self, tp: TopicPartition) -> None:
        lease = self.leases.pop(tp, None)
        if lease is not None:
            lease.release()

    def check_commit(self, tps: Iterable[TopicPartition]) -> None:
        """Refuse a commit unless this member is still in the group and holds every lease
        (call under the group lock)."""
        state = GroupState.read(self.state_path)
        if self.member_id is None or self.member_id not in state.members:
            raise GroupError(
                "this consumer is no longer a member of the group (it left or was evicted "
                "after its session timed out); its partitions may be owned by another member"
            )
        lost = sorted(tp for tp in tps if tp not in self.leases)
        if lost:
            raise GroupError(
                f"cannot commit {', '.join(f'{t.topic}-{t.partition}' for t in lost)}: "
                "not assigned to this member (revoked in a rebalance)"
            )
