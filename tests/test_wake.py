"""Wake-ups across processes (embedlog._wake): a consumer of a read-only open blocked in
``poll(timeout)`` / ``getone()`` is woken by inotify when another process appends, falls back to
timed checks where inotify cannot be had, follows partition folders created or replaced after
its watches started, never watches outside the log folder, and refuses in a fork() child."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import gc
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import InheritedLogError, LogClosedError, TopicPartition, _wake
from embedlog._wake import Armed, WakeSource
from embedlog.aio import AsyncConsumer

pytestmark = pytest.mark.timeout(120)
linux = pytest.mark.skipif(_wake._libc() is None, reason="needs inotify (Linux)")
TP0 = TopicPartition("t", 0)

WRITER = textwrap.dedent("""
    import sys, time, embedlog
    with embedlog.open(sys.argv[1]) as log:
        print("ready", flush=True)
        for line in sys.stdin:
            *recreate, value = line.split()
            time.sleep(0.3)  # the reader is blocked by now
            if recreate:
                log.delete_topic("t")
                time.sleep(0.3)
                log.create_topic("t")
                time.sleep(0.3)
            log.append("t", value.encode(), partition=0)
            print("sent", flush=True)
""")


class Writer:
    """A writer process: each :meth:`send` appends one record to ``t``-0 after 0.3 s (first
    deleting and creating ``t`` again for ``"recreate <value>"``)."""

    def __init__(self, path: pathlib.Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.readline() == "ready"

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def send(self, value: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(value + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


@pytest.fixture
def writer(log_dir: pathlib.Path) -> Iterator[Writer]:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
    w = Writer(log_dir)
    try:
        yield w
    finally:
        w.close()


def blocked_poll(consumer: embedlog.Consumer, writer: Writer, value: str) -> list[Any]:
    """Have ``writer`` append ``value`` while ``consumer`` blocks in ``poll(timeout=10)``;
    the records, checked to have come well before the timeout."""
    writer.send(value)
    t0 = time.monotonic()
    records = consumer.poll(timeout=10)
    assert time.monotonic() - t0 < 5, "woken only by the timeout"
    assert writer.readline() == "sent"
    return records


def watched_inodes(fd: int) -> set[int]:
    """The inodes an inotify descriptor of this process watches (``/proc/self/fdinfo``)."""
    out = set()
    for line in pathlib.Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("inotify"):
            fields = dict(f.split(":", 1) for f in line.split()[1:])
            out.add(int(fields["ino"], 16))
    return out


# ---------------------------------------------------------------------- the consumers


@linux
def test_sync_poll_is_woken_by_another_process(log_dir: pathlib.Path, writer: Writer) -> None:
    with embedlog.open(log_dir, read_only=True) as ro, ro.consumer("t") as consumer:
        assert consumer.poll(timeout=0) == []
        for i in range(3):
            records = blocked_poll(consumer, writer, f"v{i}")
            assert [(r.offset, r.value) for r in records] == [(i, f"v{i}".encode())]
        waker = consumer._fetcher.waker
        assert waker is not None and not waker.timed and waker.wakes >= 3
        fd = waker.fd
        assert fd is not None
        # only the log folder and the folder being read
        assert watched_inodes(fd) == {log_dir.stat().st_ino, (log_dir / "t-0").stat().st_ino}
    assert waker.closed and waker.fd is None  # closed with the consumer


@linux
def test_a_topic_deleted_and_created_again_by_the_writer(log_dir: pathlib.Path,
                                                         writer: Writer) -> None:
    with embedlog.open(log_dir, read_only=True) as ro, ro.consumer("t") as consumer:
        assert [r.value for r in blocked_poll(consumer, writer, "before")] == [b"before"]
        records = blocked_poll(consumer, writer, "recreate after")
        assert [(r.offset, r.value) for r in records] == [(0, b"after")]
        waker = consumer._fetcher.waker
        assert waker is not None and waker.fd is not None and not waker.timed
        new = (log_dir / "t-0").stat().st_ino
        assert watched_inodes(waker.fd) == {log_dir.stat().st_ino, new}  # not the old one
        records = blocked_poll(consumer, writer, "again")
        assert [(r.offset, r.value) for r in records] == [(1, b"again")]


@linux
@pytest.mark.asyncio
async def test_async_getone_is_woken_on_the_loop(log_dir: pathlib.Path, writer: Writer) -> None:
    with embedlog.open(log_dir, read_only=True) as ro:
        async with AsyncConsumer(ro, "t") as consumer:
            assert await consumer.getmany(timeout_ms=0) == {}
            sync = consumer._started()
            polls: list[float] = []
            real_poll = sync.poll

            def counting_poll(timeout: float = 0.0, max_records: int | None = None) -> Any:
                polls.append(timeout)
                return real_poll(timeout, max_records)

            sync.poll = counting_poll  # type: ignore[method-assign]
            for i in range(3):
                timer = asyncio.create_task(asyncio.sleep(0.05))
                writer.send(f"a{i}")
                record = await asyncio.wait_for(consumer.getone(), 10)
                assert (record.offset, record.value) == (i, f"a{i}".encode())
                assert writer.readline() == "sent"
                assert timer.done()  # the loop ran its timers while getone waited (0.3 s)
            assert polls and set(polls) == {0.0}  # the worker only looked, never waited
            waker = sync._fetcher.waker
            assert waker is not None and not waker.timed and waker.fd is not None
        assert waker.closed and waker.fd is None


@pytest.mark.asyncio
async def test_forced_fallback_uses_timed_checks(log_dir: pathlib.Path, writer: Writer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDLOG_NO_INOTIFY", "1")
    with embedlog.open(log_dir, read_only=True) as ro:
        with ro.consumer("t") as consumer:
            consumer.poll(timeout=0)
            assert [r.value for r in blocked_poll(consumer, writer, "s")] == [b"s"]
            waker = consumer._fetcher.waker
            assert waker is not None and waker.timed and waker.fd is None and waker.wakes == 0
            assert "EMBEDLOG_NO_INOTIFY" in (waker.why_timed or "")
        async with AsyncConsumer(ro, "t", auto_offset_reset="latest") as aconsumer:
            assert await aconsumer.getmany(timeout_ms=0) == {}
            writer.send("a")
            record = await asyncio.wait_for(aconsumer.getone(), 10)
            assert (record.offset, record.value) == (1, b"a")
            assert writer.readline() == "sent"
            assert aconsumer._started()._fetcher.waker.timed  # type: ignore[union-attr]


class _Refusing:
    """The C library, except that one inotify call fails with ``err``."""

    def __init__(self, libc: Any, call: str, err: int) -> None:
        self._libc = libc
        self._call, self._err = call, err

    def __getattr__(self, name: str) -> Any:
        if name != self._call:
            return getattr(self._libc, name)

        def refuse(*args: Any) -> int:
            ctypes.set_errno(self._err)
            return -1
        return refuse


@linux
@pytest.mark.parametrize(("call", "err"), [("inotify_add_watch", errno.ENOSPC),
                                           ("inotify_add_watch", errno.EMFILE),
                                           ("inotify_init1", errno.EMFILE)])
def test_exhausted_inotify_limits_fall_back(log_dir: pathlib.Path, writer: Writer,
                                            monkeypatch: pytest.MonkeyPatch, call: str,
                                            err: int) -> None:
    libc = _wake._libc()
    monkeypatch.setattr(_wake, "_libc", lambda: _Refusing(libc, call, err))
    with embedlog.open(log_dir, read_only=True) as ro, ro.consumer("t") as consumer:
        consumer.poll(timeout=0)
        assert [r.value for r in blocked_poll(consumer, writer, "x")] == [b"x"]
        waker = consumer._fetcher.waker
        assert waker is not None and waker.timed and waker.fd is None
        assert os.strerror(err) in (waker.why_timed or "")


@linux
def test_a_consumer_dropped_without_close_leaves_no_inotify_descriptor(
        log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
    with embedlog.open(log_dir, read_only=True) as ro:
        consumer = ro.consumer("t")
        assert consumer.poll(timeout=0.05) == []  # waited: the source is armed
        fd = consumer._fetcher.waker.fd  # type: ignore[union-attr]
        assert fd is not None and os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        del consumer
        gc.collect()
        assert not os.path.exists(f"/proc/self/fd/{fd}") or os.readlink(
            f"/proc/self/fd/{fd}") != "anon_inode:inotify"


@linux
def test_close_from_another_thread_ends_a_blocked_poll(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
    with embedlog.open(log_dir, read_only=True) as ro:
        consumer = ro.consumer("t")
        got: list[Any] = []
        waiting = threading.Thread(target=lambda: got.append(consumer.poll(timeout=30)))
        waiting.start()
        while consumer._fetcher.waker is None or consumer._fetcher.waker.fd is None:
            time.sleep(0.01)
        consumer.close()
        waiting.join(10)
        assert not waiting.is_alive() and got == [[]]
        assert consumer._fetcher.waker.closed and consumer._fetcher.waker.fd is None


@linux
@pytest.mark.asyncio
async def test_stop_ends_a_getmany_waiting_on_the_loop(log_dir: pathlib.Path) -> None:
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
    with embedlog.open(log_dir, read_only=True) as ro:
        consumer = AsyncConsumer(ro, "t")
        await consumer.start()
        waiting = asyncio.create_task(consumer.getmany(timeout_ms=30_000))
        waker = consumer._started()._fetcher.waker
        assert waker is not None
        while not waker._waiters:  # the getmany waits on the loop
            await asyncio.sleep(0.01)
        await asyncio.wait_for(consumer.stop(), 10)
        # a getmany running through stop() ends empty or says the consumer stopped
        with contextlib.suppress(LogClosedError):
            assert await asyncio.wait_for(waiting, 10) == {}
        assert consumer._sync is not None
        assert consumer._sync.closed and consumer._sync._fetcher.waker.fd is None  # type: ignore


# ---------------------------------------------------------------------- folders


@contextlib.contextmanager
def wake_source(root: pathlib.Path) -> Iterator[WakeSource]:
    waker = WakeSource(str(root))
    try:
        yield waker
    finally:
        waker.close()


def arm_ready(waker: WakeSource, names: list[str]) -> None:
    """Arm until nothing new is watched (a new watch asks for one more look first)."""
    assert waker.arm(names) is Armed.RECHECK
    assert waker.arm(names) is Armed.READY


@linux
def test_a_partition_folder_created_after_the_watch_starts(tmp_path: pathlib.Path) -> None:
    with wake_source(tmp_path) as waker:
        arm_ready(waker, ["t-0"])  # missing: the log folder's watch sees it come
        fd = waker.fd
        assert fd is not None and watched_inodes(fd) == {tmp_path.stat().st_ino}
        (tmp_path / "other-0").mkdir()
        (tmp_path / "embedlog.json").write_bytes(b"{}")
        assert not waker.drain()  # not the folder waited for
        (tmp_path / "other-1").mkdir()
        threading.Timer(0.2, (tmp_path / "t-0").mkdir).start()
        waker.wait(10)  # other-1 does not end the wait, t-0 does
        assert (tmp_path / "t-0").is_dir() and waker.wakes == 1
        arm_ready(waker, ["t-0"])
        assert watched_inodes(fd) == {tmp_path.stat().st_ino, (tmp_path / "t-0").stat().st_ino}
        (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(b"x")
        waker.wait(10)
        assert waker.wakes == 2


@linux
def test_a_replaced_partition_folder_is_watched_again(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "t-0"
    root = tmp_path.stat().st_ino
    with wake_source(tmp_path) as waker:
        folder.mkdir()
        arm_ready(waker, ["t-0"])
        fd = waker.fd
        assert fd is not None and watched_inodes(fd) == {root, folder.stat().st_ino}
        shutil.rmtree(folder)
        assert waker.drain()  # the log folder saw it go
        assert waker.arm(["t-0"]) is Armed.READY and watched_inodes(fd) == {root}
        folder.mkdir()
        assert waker.drain()
        arm_ready(waker, ["t-0"])
        (folder / "00000000000000000000.log").write_bytes(b"x")
        assert waker.drain()
        # replaced between two arms: the new folder is watched, the old one no longer
        folder.rename(tmp_path / "t-0.old")
        folder.mkdir()
        arm_ready(waker, ["t-0"])
        assert watched_inodes(fd) == {root, folder.stat().st_ino}
        assert waker.drain()  # the log folder's events of the swap
        (tmp_path / "t-0.old" / "00000000000000000000.log").write_bytes(b"y")
        assert not waker.drain()  # the old folder says nothing any more
        (folder / "00000000000000000000.log").write_bytes(b"z")
        assert waker.drain()
        # moved away (Kafka's -delete rename): dropped, not followed elsewhere
        folder.rename(tmp_path / "t-0.deleted")
        assert waker.drain()
        assert watched_inodes(fd) == {root} and not waker.timed


@linux
def test_a_link_where_a_partition_folder_belongs_is_never_watched(tmp_path: pathlib.Path
                                                                   ) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "log"
    root.mkdir()
    (root / "t-0").symlink_to(outside)
    with wake_source(root) as waker:
        assert waker.arm(["t-0"]) is Armed.TIMED
        assert waker.fd is None and "t-0" in (waker.why_timed or "")
        (outside / "x").write_bytes(b"x")
        assert not waker.drain()


@linux
def test_the_log_folder_going_away_falls_back(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "log"
    root.mkdir()
    with wake_source(root) as waker:
        arm_ready(waker, ["t-0"])
        root.rename(tmp_path / "elsewhere")
        assert waker.drain()
        assert waker.timed and waker.fd is None and waker.arm(["t-0"]) is Armed.TIMED


# ---------------------------------------------------------------------- fork


@linux
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_fork_child_refuses_and_leaves_the_parents_wake_ups(log_dir: pathlib.Path,
                                                                writer: Writer) -> None:
    with embedlog.open(log_dir, read_only=True) as ro, ro.consumer("t") as consumer:
        consumer.poll(timeout=0)
        waker = consumer._fetcher.waker
        assert waker is not None
        consumer._fetcher.arm(consumer._fetches.values())
        assert waker.fd is not None
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                try:
                    consumer.poll(timeout=0)
                except InheritedLogError:
                    code = 0 if waker.fd is None else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        records = blocked_poll(consumer, writer, "after-fork")
        assert [r.value for r in records] == [b"after-fork"]
        assert waker.wakes >= 1 and not waker.timed


# ---------------------------------------------------------------------- the event queue

_NAMES = ["t-0", "t-1", "u-0", "embedlog.json", ""]
_MASKS = [_wake.IN_MODIFY, _wake.IN_CREATE, _wake.IN_DELETE, _wake.IN_MOVED_TO,
          _wake.IN_CLOSE_WRITE, _wake.IN_DELETE_SELF, _wake.IN_MOVE_SELF, _wake.IN_IGNORED,
          _wake.IN_Q_OVERFLOW]
_event = st.tuples(st.sampled_from([-1, 1, 2, 3, 9]), st.sampled_from(_MASKS),
                   st.sampled_from(_NAMES))


def encode(events: list[tuple[int, int, str]]) -> bytes:
    """``struct inotify_event`` records as the kernel packs them (names NUL-padded to 16)."""
    out = b""
    for wd, mask, name in events:
        raw = name.encode()
        padded = raw + b"\0" * (-len(raw) % 16 or (16 if raw else 0))
        out += _wake._EVENT.pack(wd, mask, 0, len(padded)) + padded
    return out


def reading(*names: str) -> WakeSource:
    """A source (no descriptor) whose log folder is wd 1 and ``names`` wd 2, 3..."""
    waker = WakeSource("/nonexistent/log")
    waker._names = {"": 1} | {name: wd for wd, name in enumerate(names, 2)}
    waker._wds = {wd: name for name, wd in waker._names.items()}
    waker._wanted = frozenset(names)
    return waker


@given(st.lists(_event, max_size=12))
@settings(max_examples=300, deadline=None)
def test_events_count_only_changes_of_folders_being_read(
        events: list[tuple[int, int, str]]) -> None:
    """wd 1 is the log folder, 2 and 3 partition folders being read (t-0, t-1), 9 unknown."""
    waker = reading("t-0", "t-1")
    expected, known, timed = False, {1, 2, 3}, False
    for wd, mask, name in events:  # the model
        if mask & _wake.IN_Q_OVERFLOW:
            expected = True
        elif wd not in known:
            continue
        elif mask & (_wake.IN_DELETE_SELF | _wake.IN_MOVE_SELF | _wake.IN_IGNORED):
            known.discard(wd)
            expected = True
            if wd == 1:
                timed = True
                break
        elif wd != 1 or name in ("t-0", "t-1"):
            expected = True
    got = waker._events(encode(events))
    assert got == expected and waker.timed == timed
    if not timed:
        assert set(waker._wds) == known and set(waker._names.values()) == known


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_bytes_in_the_queue_are_read_without_error(data: bytes) -> None:
    waker = reading("t-0")
    assert waker._events(data) in (True, False)
    assert set(waker._wds) <= {1, 2}
