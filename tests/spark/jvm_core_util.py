"""Helpers of the JVM reader core tests: the JVM reader's jar (skipping when javac or pyspark's
jars are missing), run ``embedlog.Dump`` on many specs in one JVM, and read the same
ranges through embedlog's own read-only Python reader, both as comparable rows."""

from __future__ import annotations

import base64
import glob
import json
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import embedlog

JAVA_SRC = Path(__file__).resolve().parents[2] / "src" / "embedlog" / "spark" / "java"
CODEC_JARS = ("zstd-jni-*.jar", "lz4-java-*.jar", "snappy-java-*.jar")

Spec = tuple[str, str, int, int, int, str]
"""(log dir, topic, partition, start, end, mode): one line of Dump's input."""
Row = dict[str, Any]
Result = dict[str, Any]
"""{"records": [rows]}, {"count": n}, {"logStart": n} or {"error": class, "message": text}."""


def pyspark_jars() -> str | None:
    """pyspark's jars folder, None when pyspark is not installed."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    return jars if os.path.isdir(jars) else None


def core_classpath() -> str | None:
    """The run classpath of the JVM reader (its jar, built by :func:`embedlog.spark.jvm.jar_path`,
    and the codec jars pyspark ships), or None when javac, java or pyspark's jars are missing."""
    from embedlog.spark import jvm

    jars = pyspark_jars()
    if jars is None or shutil.which("java") is None:
        return None
    codec = [j for pattern in CODEC_JARS for j in glob.glob(os.path.join(jars, pattern))]
    jar = jvm.jar_path()
    if len(codec) != len(CODEC_JARS) or jar is None:
        return None
    return os.pathsep.join([jar, *codec])


def run_dump(classpath: str, specs: Sequence[tuple[object, ...]]) -> list[Result]:
    """One result per spec (a :data:`Spec`, maybe with a 7th field ``dense``), from one JVM."""
    text = "".join("\t".join(str(f) for f in s) + "\n" for s in specs)
    done = subprocess.run(["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp",
                           classpath, "embedlog.Dump"], input=text.encode(),
                          capture_output=True, check=True, timeout=600)
    results: list[Result] = []
    rows: list[Row] = []
    for line in done.stdout.decode().splitlines():
        obj = json.loads(line)
        if "offset" in obj:
            rows.append(obj)
            continue
        if "end" in obj:
            assert obj["end"] == len(rows)
            results.append({"records": rows})
        else:
            results.append(obj)
        rows = []
    assert len(results) == len(specs), done.stderr.decode()
    return results


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def row_of(r: embedlog.Record) -> Row:
    """A Python record as Dump prints it."""
    return {"offset": r.offset, "timestamp": r.timestamp, "timestampType": r.timestamp_type,
            "key": _b64(r.key), "value": _b64(r.value),
            "headers": [[k, _b64(v)] for k, v in r.headers]}


def python_result(log: embedlog.Log, spec: Spec) -> Result:
    """What embedlog's read-only reader gives for ``spec`` (modes records and count, also
    prefixed ``committed-``: the read_committed rows of Spark's Python reader), an error as
    {"error": "CorruptBatchError" | "OffsetOutOfRangeError" | ...}; a transaction without its
    marker in the range as {"error": "FallbackException"} (the JVM leaves it to Python)."""
    _, topic, partition, start, end, mode = spec
    committed = mode.startswith("committed-")
    mode = mode.removeprefix("committed-")
    try:
        rows = (_committed_rows(log, topic, partition, start, end) if committed else
                [row_of(r) for r in log.read(topic, partition, start, end_offset=end)])
    except embedlog.CorruptionError as e:
        return {"error": type(e).__name__, "corrupt": True, "message": str(e)}
    except embedlog.OffsetOutOfRangeError as e:
        return {"error": "OffsetOutOfRangeError", "message": str(e)}
    except _OpenTransaction:
        return {"error": "FallbackException"}
    return {"count": len(rows)} if mode == "count" else {"records": rows}


class _OpenTransaction(Exception):
    pass


def _committed_rows(log: embedlog.Log, topic: str, partition: int, start: int, end: int
                    ) -> list[Row]:
    """The rows of ``[start, end)`` Spark's Python reader gives under read_committed
    (``spark/scan.py`` ``_committed``: ``CommittedFilter`` through ``committed_batches``)."""
    from embedlog.arrow.isolation import committed_batches
    from embedlog.transactions import CommittedFilter

    if start >= end:
        return []
    flt = CommittedFilter[Any]()
    source = log.read_batches(topic, partition, start, None, control=True)
    rows = [row_of(r) for b in committed_batches(source, end, flt) for r in b.records()
            if start <= r.offset < end]
    if flt.stable is not None and flt.stable < end:
        raise _OpenTransaction
    return rows


def open_view(path: str | os.PathLike[str]) -> embedlog.Log:
    return embedlog.open(os.fspath(path), read_only=True)  # type: ignore[no-any-return]


def damage(data: bytearray, rng: random.Random) -> str:
    """Damage ``data`` in place as the corruption corpus does: a bit flip, a zeroed run, a
    cut, or a garbage tail; returns the kind."""
    kind = rng.choice(["flip", "flip", "flip", "zero", "truncate", "garbage"])
    i = rng.randrange(len(data))
    if kind == "flip":
        data[i] ^= 1 << rng.randrange(8)
    elif kind == "zero":
        n = min(rng.randint(1, 20), len(data) - i)
        data[i : i + n] = bytes(n)
    elif kind == "truncate":
        del data[i:]
    else:
        data += rng.randbytes(rng.randint(1, 80))
    return kind


def damaged_copies(base: Path, work: Path, topics: list[str], n: int, seed: int
                    ) -> list[tuple[str, str]]:
    """``n`` copies of the log at ``base``, each with one damaged segment or index file."""
    rng = random.Random(seed)
    out = []
    for t in range(n):
        root = work / str(t)
        shutil.copytree(base, root)
        topic = rng.choice(topics)
        folder = root / f"{topic}-0"
        files = sorted(f for f in os.listdir(folder)
                       if f.endswith(".log") or (f.endswith(".index") and rng.random() < 0.2))
        path = folder / rng.choice(files)
        data = bytearray(path.read_bytes())
        if data:
            damage(data, rng)
            path.write_bytes(bytes(data))
        out.append((str(root), topic))
    return out


def verdicts(specs: Sequence[Spec], got: Sequence[Result]) -> dict[str, int]:
    """Dump's results for ``specs`` of damaged logs against the Python reader's, counted:
    wherever Python raises CorruptBatchError the JVM raises CorruptBatchException (or
    UnsupportedFormatException: "corrupt"), where Python leaves a read_committed range
    undecided so does the JVM ("undecided"), elsewhere the results are equal ("same")."""
    out = {"corrupt": 0, "undecided": 0, "same": 0}
    for spec, jvm in zip(specs, got, strict=True):
        with open_view(spec[0]) as view:
            py = python_result(view, spec)
        if py.get("corrupt"):
            assert jvm.get("error") in ("CorruptBatchException", "UnsupportedFormatException"), (
                spec, py, jvm)
            out["corrupt"] += 1
        elif py.get("error") == "FallbackException":
            assert jvm.get("error") == "FallbackException", (spec, jvm)
            out["undecided"] += 1
        else:
            assert jvm == py, spec
            out["same"] += 1
    return out


def dump_while(classpath: str, specs: Sequence[tuple[object, ...]],
               append: Callable[[], None]) -> list[Result]:
    """:func:`run_dump` of ``specs`` while a thread calls ``append`` over and over."""
    import threading

    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            append()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        return run_dump(classpath, specs)
    finally:
        stop.set()
        thread.join()
