"""Bad input and security (issue 7, item 7; reliability.md sections 3.4-3.7, G11-G13).

* invalid topic names are rejected before any file-system call;
* symlinks planted in the log folder are never written through;
* created files and folders respect the umask and are never world-writable;
* names read from files (member ids in a group's ``state.json``) or passed as arguments (client
  ids, group names) never become paths unchecked; symlinked group folders are never followed, and
  a FIFO among the group files is an error, not a hang;
* a second writer is refused at once; a killed writer's lock is released; the lock survives
  the holder opening and closing the lock file again (the ``fcntl`` pitfall ``flock`` avoids).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
import embedlog.groups
from embedlog import _io, _paths

from .recording import RecordingFS
from .workloads import scratch_dir

BAD_NAMES = ["", ".", "..", "../x", "../../etc", "a/b", "/abs", "a\x00b", "x" * 250, "ünï",
             "a b", "t\n", "a\\b", "名前", "x-0/../../y", " ", "t:1", "a*"]


def _fresh_log() -> tuple[str, str]:
    root = scratch_dir()
    path = os.path.join(root, "log")
    with embedlog.open(path) as log:
        log.create_topic("ok")
    return root, path


def _listing(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, subdirs, files in os.walk(root) for n in subdirs + files)


def _calls(log: embedlog.Log, name: str) -> list[Callable[[], object]]:
    return [
        lambda: log.create_topic(name),
        lambda: log.append(name, b"v"),
        lambda: log.append_batch(name, [b"v"]),
        lambda: list(log.read(name, 0)),
        lambda: log.delete_topic(name),
        lambda: log.alter_topic(name, {"retention.ms": 1}),
        lambda: log.end_offset(name, 0),
        lambda: log.roll(name, 0),
        lambda: log.compact(name),
    ]


def _assert_rejected_without_touching(name: str) -> None:
    root, path = _fresh_log()
    before = _listing(root)
    with embedlog.open(path) as log:
        fs = RecordingFS(root)
        with _io.use_backend(fs):
            for call in _calls(log, name):
                mutations_before = len(fs.ops)
                with pytest.raises(embedlog.UsageError):
                    call()
                assert len(fs.ops) == mutations_before, (name, fs.ops[mutations_before:])
    after = _listing(root)
    assert [p for p in after if p not in before and not p.endswith(".kafka_cleanshutdown")] == []


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_topic_name_is_rejected_before_any_file_call(name: str) -> None:
    _assert_rejected_without_touching(name)


def test_249_characters_is_the_longest_name() -> None:
    _, path = _fresh_log()
    with embedlog.open(path) as log:
        log.create_topic("y" * 249)
        assert log.append("y" * 249, b"v").offset == 0


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=260))
def test_any_text_is_either_a_valid_name_or_rejected(name: str) -> None:
    valid = (0 < len(name) <= 249 and name not in (".", "..")
             and all(c.isascii() and (c.isalnum() or c in "._-") for c in name))
    try:
        embedlog.naming.validate_topic(name)
    except embedlog.InvalidTopicError:
        assert not valid
    else:
        assert valid
        assert os.path.basename(embedlog.naming.partition_dir_name(name, 0)) == name + "-0"


# ---------------------------------------------------------------------- symlinks

VICTIM = b"victim data that must never change\n"


@pytest.mark.parametrize("planted", [
    "t-0/00000000000000000000.log",
    "t-0/00000000000000000000.index",
    "t-0/00000000000000000000.timeindex",
    "t-0/embedlog.segments.tmp",
    "embedlog.json.tmp",
    "recovery-point-offset-checkpoint",
    "recovery-point-offset-checkpoint.tmp",
    "log-start-offset-checkpoint.tmp",
    ".lock",
    "t-0",
])
def test_planted_symlink_is_not_followed_out_of_the_log(planted: str) -> None:
    root = scratch_dir()
    path = os.path.join(root, "log")
    with embedlog.open(path) as log:
        log.create_topic("t")
        log.append("t", b"before")
    outside = os.path.join(root, "outside")
    os.mkdir(outside)
    victim = os.path.join(outside, "victim")
    with open(victim, "wb") as f:
        f.write(VICTIM)
    target = os.path.join(path, planted)
    if planted == "t-0":
        os.rename(target, target + ".real")
        os.symlink(outside, target)
    else:
        if os.path.lexists(target):
            os.unlink(target)
        os.symlink(victim, target)
    os.unlink(os.path.join(path, ".kafka_cleanshutdown"))  # recovery rewrites the segments
    try:
        with embedlog.open(path, durability="fsync") as log:
            log.append("t", b"after" * 100)
            log.roll("t", 0)
            log.delete_records("t", 0, 1)
    except embedlog.EmbedlogError:
        pass  # refusing is fine; writing through the link is not
    with open(victim, "rb") as f:
        assert f.read() == VICTIM
    assert sorted(os.listdir(outside)) == ["victim"]


def test_deleting_a_topic_never_empties_a_folder_linked_in_while_the_log_was_open() -> None:
    """A partition folder replaced by a symbolic link after the open: delete_topic refuses it
    (StorageError, ELOOP) instead of listing the link's target and unlinking what is there."""
    root = scratch_dir()
    path, outside = os.path.join(root, "log"), os.path.join(root, "outside")
    os.mkdir(outside)
    victim = os.path.join(outside, "victim")
    with open(victim, "wb") as f:
        f.write(VICTIM)
    with embedlog.open(path) as log:
        log.create_topic("t", partitions=2)
        log.append("t", b"kept", partition=1)
        folder = os.path.join(path, "t-1")
        os.rename(folder, os.path.join(root, "moved"))
        os.symlink(outside, folder)
        with pytest.raises(embedlog.StorageError, match="symbolic link"):
            log.delete_topic("t")
    with open(victim, "rb") as f:
        assert f.read() == VICTIM
    assert sorted(os.listdir(outside)) == ["victim"]
    assert os.path.islink(os.path.join(path, "t-1"))  # left as it was
    assert sorted(os.listdir(os.path.join(root, "moved")))  # the real folder, untouched


def test_log_root_that_is_a_symlink_is_refused() -> None:
    root = scratch_dir()
    real = os.path.join(root, "real")
    with embedlog.open(real) as log:
        log.create_topic("t")
    os.symlink(real, os.path.join(root, "link"))
    with pytest.raises(embedlog.UsageError):
        embedlog.open(os.path.join(root, "link"))


# ---------------------------------------------------------------------- permissions


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_created_files_respect_the_umask_and_are_never_world_writable(umask: int) -> None:
    root = scratch_dir()
    path = os.path.join(root, "log")
    old = os.umask(umask)
    try:
        with embedlog.open(path, durability="fsync") as log:
            log.create_topic("t", 2, config={"segment.bytes": 200, "cleanup.policy": "compact"})
            for i in range(20):
                log.append("t", b"v%d" % i, key=b"k%d" % (i % 3))
            log.compact("t")
            consumer = log.consumer(group="g")
            consumer.assign([embedlog.TopicPartition("t", 0)])
            consumer.commit({embedlog.TopicPartition("t", 0): 3})
            consumer.close()
    finally:
        os.umask(old)
    seen = 0
    for d, subdirs, files in os.walk(path):
        for name in subdirs + files:
            mode = stat.S_IMODE(os.lstat(os.path.join(d, name)).st_mode)
            assert not mode & 0o002, (name, oct(mode))
            assert not mode & umask, (name, oct(mode), oct(umask))
            limit = 0o750 if name in subdirs else 0o640
            assert not mode & ~limit, (name, oct(mode))
            seen += 1
    assert seen > 10


# ---------------------------------------------------------------------- the writer lock

HOLDER = textwrap.dedent(
    """
    import os, sys, embedlog
    log = embedlog.open(sys.argv[1])
    # Opening and closing the lock file again must not drop the lock (it would with fcntl).
    os.close(os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDONLY))
    print("READY", flush=True)
    sys.stdin.read()
    """
)


def _holder(path: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


def test_second_writer_is_refused_at_once_and_a_killed_writers_lock_is_freed() -> None:
    _, path = _fresh_log()
    proc = _holder(path)
    try:
        # The holder keeps the lock until it is killed below, so an open that waited for the
        # lock would never return: returning at all is proof it was refused without waiting.
        # The join timeout is only a watchdog that turns such a hang into a failure.
        outcomes: list[BaseException | None] = []

        def second_writer() -> None:
            for _ in range(5):
                try:
                    embedlog.open(path).close()
                    outcomes.append(None)
                except BaseException as exc:
                    outcomes.append(exc)

        attempt = threading.Thread(target=second_writer, daemon=True)
        attempt.start()
        attempt.join(120)
        assert not attempt.is_alive(), "a second writer waited for the lock"
        assert [type(e) for e in outcomes] == [embedlog.WriterLockedError] * 5
        with embedlog.open(path, read_only=True) as reader:
            assert reader.topics() == ["ok"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with embedlog.open(path) as log:  # the kernel released the dead holder's flock
        assert log.append("ok", b"v").offset == 0


def test_second_open_in_the_same_process_is_refused() -> None:
    _, path = _fresh_log()
    with embedlog.open(path), pytest.raises(embedlog.WriterLockedError):
        embedlog.open(path)


# ---------------------------------------------------------------------- names read from files


def _group_log() -> tuple[str, str, str]:
    """A log with topic ``t``, a group ``g`` and a sibling folder ``outside`` with a victim."""
    root, path = _fresh_log()
    with embedlog.open(path) as log:
        log.create_topic("t")
        log.append("t", b"v")
        consumer = log.consumer("t", group="g")
        consumer.poll()
        consumer.commit()
        consumer.close()
    assert os.path.isfile(os.path.join(path, "__groups", "g", "offsets"))
    outside = os.path.join(root, "outside")
    os.mkdir(outside)
    with open(os.path.join(outside, "victim"), "wb") as f:
        f.write(VICTIM)
    return root, path, outside


def _use_group(log: embedlog.Log, **kwargs: object) -> None:
    consumer = log.consumer("t", group="g", **kwargs)
    try:
        consumer.poll()
        consumer.commit()
    finally:
        consumer.close()


def _tree(folder: str) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for d, subdirs, files in os.walk(folder):
        for name in subdirs + files:
            p = os.path.join(d, name)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, folder)] = f.read()
            else:
                out[os.path.relpath(p, folder)] = None
    return out


@pytest.mark.parametrize("member", ["../../t-0/00000000000000000000.log", "../lock", "/abs",
                                    "..", "a\x00b", "x" * 300, "名前"])
def test_a_member_id_read_from_state_json_never_becomes_a_path(member: str) -> None:
    _, path, _ = _group_log()
    state = os.path.join(path, "__groups", "g", "state.json")
    with open(state, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "generation": 3, "assignor": "range",
                   "members": {member: ["t"]}}, f)
    segment = os.path.join(path, "t-0", "00000000000000000000.log")
    with open(segment, "rb") as f:
        before = f.read()
    # A read-only consumer evicting the "dead" member once unlinked the segment file.
    with (embedlog.open(path, read_only=True) as log,
          pytest.raises(embedlog.CorruptCheckpointError, match="member id")):
        _use_group(log)
    with open(segment, "rb") as f:
        assert f.read() == before


@pytest.mark.parametrize("doc", [{"members": {"m": ["../x"]}}, {"members": {"m": "t"}},
                                 {"assignor": "../evil"}, {"generation": "7"},
                                 {"members": []}])
def test_a_malformed_group_state_is_a_checkpoint_error(doc: dict[str, object]) -> None:
    _, path, _ = _group_log()
    state = os.path.join(path, "__groups", "g", "state.json")
    full = {"version": 1, "generation": 3, "assignor": "range", "members": {}}
    full.update(doc)
    with open(state, "w", encoding="utf-8") as f:
        json.dump(full, f)
    with pytest.raises(embedlog.CorruptCheckpointError):
        embedlog.groups.GroupState.read(state)


@pytest.mark.parametrize("client_id", ["/tmp/escape", "../x", "a/b", "", ".", "..", "a\x00b",
                                       "x" * 217, "ünï", 7])
def test_an_invalid_client_id_is_refused_before_any_file_is_created(client_id: object) -> None:
    root, path, _ = _group_log()
    before = _listing(root)
    with embedlog.open(path, read_only=True) as log, pytest.raises(embedlog.InvalidConfigError):
        _use_group(log, client_id=client_id)
    assert _listing(root) == before


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=260))
def test_any_text_is_either_a_safe_path_component_or_refused(name: str) -> None:
    valid = (0 < len(name) <= 249 and name not in (".", "..")
             and all(c.isascii() and (c.isalnum() or c in "._-") for c in name))
    try:
        _paths.component(name, "name", embedlog.InvalidConfigError)
    except embedlog.InvalidConfigError:
        assert not valid
    else:
        assert valid
        joined = os.path.normpath(os.path.join("/root/dir", name))
        assert os.path.dirname(joined) == "/root/dir"


@pytest.mark.parametrize("planted", ["__groups", "__groups/g", "__groups/g/members",
                                     "__groups/g/leases"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_symlinked_group_folder_is_never_followed(planted: str, read_only: bool) -> None:
    _, path, outside = _group_log()
    target = os.path.join(path, planted)
    shutil.rmtree(target)
    os.symlink(outside, target)
    before = _tree(outside)
    with (embedlog.open(path, read_only=read_only) as log,
          pytest.raises(embedlog.CorruptionError, match="symbolic link")):
        _use_group(log)
    assert _tree(outside) == before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("planted", ["__groups/g/state.json", "__groups/g/offsets",
                                     "__groups/g/lock"])
def test_a_fifo_among_the_group_files_is_an_error_not_a_hang(planted: str) -> None:
    _, path, _ = _group_log()
    target = os.path.join(path, planted)
    os.unlink(target)
    os.mkfifo(target)
    with (embedlog.open(path, read_only=True) as log,
          pytest.raises(embedlog.CorruptionError, match="FIFO")):
        _use_group(log)
