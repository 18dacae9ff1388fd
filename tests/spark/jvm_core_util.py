"""Helpers of the JVM reader core tests: the JVM reader's jar (skipping when javac or pyspark's
jars are missing), run ``embedlog.Dump`` on many specs in one JVM, and read the same
ranges through embedlog's own read-only Python reader, both as comparable rows."""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
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
    """What embedlog's read-only reader gives for ``spec`` (modes records and count), an
    error as {"error": "CorruptBatchError" | "OffsetOutOfRangeError" | ...}."""
    _, topic, partition, start, end, mode = spec
    try:
        rows = [row_of(r) for r in log.read(topic, partition, start, end_offset=end)]
    except embedlog.CorruptionError as e:
        return {"error": type(e).__name__, "corrupt": True, "message": str(e)}
    except embedlog.OffsetOutOfRangeError as e:
        return {"error": "OffsetOutOfRangeError", "message": str(e)}
    return {"count": len(rows)} if mode == "count" else {"records": rows}


def open_view(path: str | os.PathLike[str]) -> embedlog.Log:
    return embedlog.open(os.fspath(path), read_only=True)  # type: ignore[no-any-return]
