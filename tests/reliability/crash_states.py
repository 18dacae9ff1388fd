"""Build the file-system states a power loss could leave after each operation of a trace.

Persistence model (conservative about data, ordered per directory about names; the default
model of reliability.md section 2.4):

* a write or truncate is durable only after ``fsync`` of its inode; before that, any *prefix* of
  the inode's pending data operations may be on disk, and the first missing one may be **torn**
  (``cut``: only its first half landed; ``zeros``/``garbage``: the size grew but the bytes did
  not; ``tailzeros``/``tailgarbage``: the first half landed, the rest did not) or **skipped**
  while every later one landed (writes reach the disk out of order);
* a create, mkdir, rename, unlink or rmdir is durable only after ``fsync_dir`` of its directory;
  before that, a *prefix* of the directory's pending operations is on disk (journaled metadata
  keeps order inside one directory; different directories are independent). ``fsync`` of a file
  does not make its name durable;
* rename is atomic.

For a crash point (after trace op ``k``) every combination of choices is enumerated when there
are at most ``max_per_point`` of them; otherwise the all-persisted and nothing-persisted extremes,
each choice varied alone against both extremes, and a seeded random sample. Images already seen
in the same trace are skipped, so each yielded :class:`CrashState` is a distinct disk image.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .recording import DATA_OPS, DIR_OPS, BaseImage, Op

__all__ = ["TORN_MODES", "CrashState", "check_image", "crash_states", "materialize", "read_tree",
           "write_image", "write_tree"]

TORN_MODES = ("cut", "zeros", "garbage", "tailzeros", "tailgarbage", "skip")

# A choice for one inode: (number of pending data ops applied, torn mode of the next one or None)
DataChoice = tuple[int, str | None]


@dataclass(frozen=True)
class CrashState:
    """One distinct image: the files (relative path -> bytes) and the folders on disk."""

    point: int  # index of the last trace op issued before the crash
    files: dict[str, bytes]
    dirs: frozenset[str]
    choice: str  # human-readable description of what was kept, for failure messages
    digest: bytes = b""  # of the image: equal digests, equal images


class _Tracker:
    """Durable contents plus pending operations, advanced one trace op at a time."""

    def __init__(self, base: BaseImage) -> None:
        self.entries = {d: dict(e) for d, e in base.entries.items()}
        self.data = {i: bytearray(b) for i, b in base.data.items()}
        self.dirs = set(base.dirs)
        self.pending_dir: dict[int, list[Op]] = {}
        self.pending_data: dict[int, list[Op]] = {}

    def advance(self, op: Op) -> None:
        if op.kind in DIR_OPS:
            self.pending_dir.setdefault(op.dir, []).append(op)
            if op.kind == "mkdir":
                self.dirs.add(op.inode)
                self.entries.setdefault(op.inode, {})
            elif op.kind == "create":
                self.data.setdefault(op.inode, bytearray())
        elif op.kind in DATA_OPS:
            self.pending_data.setdefault(op.inode, []).append(op)
        elif op.kind == "fsync":
            for pending in self.pending_data.pop(op.inode, []):
                _apply_data(self.data.setdefault(op.inode, bytearray()), pending, None)
        elif op.kind == "fsync_dir":
            for pending in self.pending_dir.pop(op.inode, []):
                _apply_dir(self.entries.setdefault(op.inode, {}), pending)


def _apply_dir(entries: dict[str, int], op: Op) -> None:
    if op.kind in ("create", "mkdir"):
        entries[op.name] = op.inode
    elif op.kind == "rename":
        ino = entries.pop(op.name, None)
        if ino is not None:
            entries[op.name2] = ino
    else:  # unlink, rmdir
        entries.pop(op.name, None)


def _garbage(n: int, seed: int) -> bytes:
    out = bytearray(hashlib.blake2b(seed.to_bytes(8, "little")).digest() * (n // 64 + 1))
    return bytes(out[:n])


def _apply_data(buf: bytearray, op: Op, torn: str | None) -> None:
    if op.kind == "truncate":
        if torn is None:
            del buf[op.size :]
            if len(buf) < op.size:
                buf.extend(bytes(op.size - len(buf)))
        return
    data = op.data
    if torn == "cut":
        data = data[: len(data) // 2]
    elif torn == "zeros":
        data = bytes(len(data))
    elif torn == "garbage":
        data = _garbage(len(data), op.offset * 7919 + len(data))
    elif torn == "tailzeros":
        half = len(data) // 2
        data = data[:half] + bytes(len(data) - half)
    elif torn == "tailgarbage":
        half = len(data) // 2
        data = data[:half] + _garbage(len(data) - half, op.offset * 104729 + len(data))
    end = op.offset + len(data)
    if len(buf) < op.offset:
        buf.extend(bytes(op.offset - len(buf)))
    buf[op.offset : end] = data


def _data_choices(ops: list[Op]) -> list[DataChoice]:
    out: list[DataChoice] = [(len(ops), None), (0, None)]
    for j in range(1, len(ops)):
        out.append((j, None))
    for j, op in enumerate(ops):
        if op.kind == "write" and op.data:
            out += [(j, mode) for mode in TORN_MODES if mode == "skip" or len(op.data) > 1]
    return out


def materialize(
    tracker: _Tracker, dir_choice: dict[int, int], data_choice: dict[int, DataChoice]
) -> tuple[dict[str, bytes], frozenset[str]]:
    """The image for one combination of choices (directories walked from the root, inode 0)."""
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    stack: list[tuple[int, str]] = [(0, "")]
    while stack:
        d, rel = stack.pop()
        entries = tracker.entries.get(d, {})
        if d in dir_choice:
            entries = dict(entries)
            for op in tracker.pending_dir[d][: dir_choice[d]]:
                _apply_dir(entries, op)
        for name, ino in entries.items():
            path = os.path.join(rel, name)
            if ino in tracker.dirs:
                dirs.add(path)
                stack.append((ino, path))
            else:
                files[path] = _file_bytes(tracker, ino, data_choice.get(ino))
    return files, frozenset(dirs)


def _file_bytes(tracker: _Tracker, ino: int, choice: DataChoice | None) -> bytes:
    durable = tracker.data.get(ino, bytearray())
    pending = tracker.pending_data.get(ino)
    if not pending:
        return bytes(durable)
    count, torn = choice if choice is not None else (len(pending), None)
    buf = bytearray(durable)
    for op in pending[:count]:
        _apply_data(buf, op, None)
    if torn is not None:
        if torn == "skip":
            for op in pending[count + 1 :]:
                _apply_data(buf, op, None)
        else:
            _apply_data(buf, pending[count], torn)
    return bytes(buf)


def _digest(files: dict[str, bytes], dirs: frozenset[str]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(dirs):
        h.update(b"D" + path.encode() + b"\0")
    for path in sorted(files):
        h.update(b"F" + path.encode() + b"\0" + len(files[path]).to_bytes(8, "little"))
        h.update(files[path])
    return h.digest()


def crash_states(
    base: BaseImage,
    ops: list[Op],
    *,
    max_per_point: int = 32,
    seed: int = 0,
    points: range | None = None,
) -> Iterator[CrashState]:
    """Yield every distinct crash state of the trace (see the module docstring)."""
    tracker = _Tracker(base)
    seen: set[bytes] = set()
    rng = random.Random(seed)
    wanted = points if points is not None else range(len(ops))
    for k, op in enumerate(ops):
        tracker.advance(op)
        if k not in wanted or op.kind == "mark":
            continue
        for dir_choice, data_choice in _combinations(tracker, max_per_point, rng):
            files, dirs = materialize(tracker, dir_choice, data_choice)
            key = _digest(files, dirs)
            if key in seen:
                continue
            seen.add(key)
            yield CrashState(k, files, dirs, _describe(tracker, dir_choice, data_choice), key)


def _combinations(
    tracker: _Tracker, cap: int, rng: random.Random
) -> Iterator[tuple[dict[int, int], dict[int, DataChoice]]]:
    dims: list[tuple[str, int, list[object]]] = []
    for d, pending in sorted(tracker.pending_dir.items()):
        if pending:
            dims.append(("dir", d, list(range(len(pending), -1, -1))))
    for ino, pending in sorted(tracker.pending_data.items()):
        if pending:
            dims.append(("data", ino, list(_data_choices(pending))))

    def split(values: tuple[object, ...]) -> tuple[dict[int, int], dict[int, DataChoice]]:
        dc: dict[int, int] = {}
        fc: dict[int, DataChoice] = {}
        for (kind, key, _), v in zip(dims, values, strict=True):
            if kind == "dir":
                dc[key] = v  # type: ignore[assignment]
            else:
                fc[key] = v  # type: ignore[assignment]
        return dc, fc

    total = 1
    for _, _, choices in dims:
        total *= len(choices)
        if total > cap:
            break
    if total <= cap:
        for values in itertools.product(*(c for _, _, c in dims)):
            yield split(values)
        return
    top = tuple(c[0] for _, _, c in dims)
    bottom = tuple(c[-1] if kind == "dir" else c[1] for kind, _, c in dims)
    yielded = 0
    for extreme in (top, bottom):
        yield split(extreme)
        yielded += 1
        for i, (_, _, choices) in enumerate(dims):
            for v in choices:
                if yielded >= cap:
                    return
                yield split((*extreme[:i], v, *extreme[i + 1 :]))
                yielded += 1
    while yielded < cap:
        yield split(tuple(rng.choice(c) for _, _, c in dims))
        yielded += 1


def _describe(tracker: _Tracker, dc: dict[int, int], fc: dict[int, DataChoice]) -> str:
    parts = []
    for d, n in dc.items():
        pending = tracker.pending_dir[d]
        if n < len(pending):
            parts.append(f"dir ops lost: {', '.join(str(op) for op in pending[n:])}")
    for ino, (n, torn) in fc.items():
        pending = tracker.pending_data[ino]
        if n < len(pending) or torn:
            what = f"{len(pending) - n} unsynced data op(s) lost" if torn is None else (
                f"data op {pending[n]} {torn}")
            parts.append(f"{pending[0].path}: {what}")
    return "; ".join(parts) or "everything issued reached the disk"


def write_image(state: CrashState, target: str) -> None:
    """Lay the image out under ``target`` (an empty folder)."""
    write_tree(state.files, state.dirs, target)


def check_image(state: CrashState, target: str, check: Callable[[str], list[str]]) -> list[str]:
    """Lay the image out under ``target`` (created, and removed afterwards) and return what
    ``check`` finds in its log folder, ``target/log``."""
    os.mkdir(target)
    try:
        write_image(state, target)
        return check(os.path.join(target, "log"))
    finally:
        shutil.rmtree(target, ignore_errors=True)


def write_tree(files: dict[str, bytes], dirs: Iterable[str], target: str) -> None:
    """Create ``dirs`` and ``files`` (relative paths) under ``target``. A file's run of zeros
    at its end is left as a hole (``truncate``), as the pre-allocated index files are on disk:
    readers that skip holes see what they would see after a real crash."""
    for rel in sorted(dirs, key=len):
        os.makedirs(os.path.join(target, rel), exist_ok=True)
    for rel, data in files.items():
        with open(os.path.join(target, rel), "wb") as f:
            f.write(memoryview(data)[:_data_end(data)])
            f.truncate(len(data))


_ZEROS = bytes(1 << 16)


def _data_end(data: bytes) -> int:
    """The length of ``data`` without its run of trailing zeros (compared a block at a time)."""
    end = len(data)
    while end >= len(_ZEROS) and data[end - len(_ZEROS):end] == _ZEROS:
        end -= len(_ZEROS)
    while end and data[end - 1] == 0:
        end -= 1
    return end


def read_tree(root: str) -> dict[str, bytes]:
    """Every file below ``root``: relative path -> bytes (what :func:`write_tree` lays out)."""
    out = {}
    for top, _, files in os.walk(root):
        for name in files:
            path = os.path.join(top, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out
