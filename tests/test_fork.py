"""A Log is not usable across fork(): a child that inherited a writable log gets a clear error
for every call, its close() releases nothing, and the parent's writer lock still holds against
a third process."""

from __future__ import annotations

import gc
import os
import pathlib
import subprocess
import sys

import pytest

import embedlog
from embedlog._platform import FileLock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

THIRD = """
import sys, embedlog
try:
    embedlog.open(sys.argv[1])
except embedlog.WriterLockedError:
    sys.exit(7)
sys.exit(0)
"""


def third_process_open(path: pathlib.Path) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", THIRD, str(path)], env=env,
                          timeout=60).returncode


def in_child(body: object) -> int:
    """Run ``body()`` in a fork()ed child; its exit code (0: every check passed)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = body()  # type: ignore[operator]
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_child_refuses_every_call_and_its_close_keeps_the_parents_lock(tmp_path: pathlib.Path
                                                                       ) -> None:
    path = tmp_path / "log"
    log = embedlog.open(path)
    log.create_topic("t")
    first = log.append("t", b"parent-1").offset
    producer = log.producer(linger_ms=600_000)
    producer.send("t", b"in-open-batch")  # an open batch the child must not write

    def child() -> int:
        calls = [lambda: log.append("t", b"child"), lambda: log.read("t", 0),
                 lambda: log.end_offset("t", 0), lambda: log.topics(),
                 lambda: log.producer(), lambda: log.consumer("t"), lambda: log.closed,
                 lambda: log.flush(), lambda: producer.send("t", b"child"),
                 lambda: producer.flush()]
        for i, call in enumerate(calls):
            try:
                call()
            except embedlog.InheritedLogError as exc:
                if "fork()" not in str(exc) or not isinstance(exc, embedlog.UsageError):
                    return 2
            else:
                return 10 + i
        producer.close()  # the open batch is the parent's: never written by the child
        log.close()  # releases nothing the parent holds
        log.close()
        gc.collect()
        return 0

    assert in_child(child) == 0
    assert third_process_open(path) == 7  # the parent still holds the writer lock
    producer.close()
    second = log.append("t", b"parent-2").offset
    log.close()
    with embedlog.open(path) as again:
        assert [(r.offset, r.value) for r in again.read("t", 0)] == [
            (first, b"parent-1"), (first + 1, b"in-open-batch"), (second, b"parent-2")]
    assert third_process_open(path) == 0  # closed by its owner: free


def test_a_child_that_drops_a_file_lock_does_not_unlock_it(tmp_path: pathlib.Path) -> None:
    lock = FileLock(str(tmp_path / "lock"))
    lock.acquire()

    def child_release() -> int:
        lock.release()
        return 0

    assert in_child(child_release) == 0
    other = FileLock(str(tmp_path / "lock"))
    assert not other.acquire(blocking=False)  # still held by this process
    lock.release()
    assert other.acquire(blocking=False)
    other.release()


def test_a_log_opened_in_the_child_works(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")

    def child() -> int:
        with embedlog.open(path, durability="fsync") as own:
            own.append("t", b"from-child")
        return 0

    assert in_child(child) == 0
    with embedlog.open(path) as log:
        assert [r.value for r in log.read("t", 0)] == [b"from-child"]
