"""The JVM side of the ``embedlog`` Spark source: build it, and name it to a session.

Spark's Python data sources hand every row from a Python worker to the JVM and copy it into a
row there; a scan of the log can go no faster than that row path. The classes under
``embedlog/spark/java/embedlog/`` (package ``embedlog``) read planned tasks in the executor JVM
instead, straight from the segment files into Spark's column vectors. They ship as sources and
are compiled once per machine against the installed pyspark's own jars (``javac``, Java 17):
:func:`jar_path` builds ``embedlog-spark-<digest>.jar`` in a cache folder, keyed by the digest of
the sources and the pyspark version, so an upgrade of either builds a new jar.

How Spark finds it: ``format("embedlog")`` first looks for a JVM class ``embedlog.DefaultSource``
(Spark's ``<format>.DefaultSource`` rule) and only then for a Python data source of that name.
With the jar on the classpath (``spark.jars``, which :func:`embedlog.spark.local_session` sets),
the JVM class answers; it wraps the Python source of the same name, which still plans the tasks,
checks the options, and runs streams and writes. Without it, the Python source does everything,
as before. ``.option("jvmReader", "false")`` keeps a query on the Python reader.

Cache folder: ``$EMBEDLOG_CACHE_DIR`` or ``$XDG_CACHE_HOME/embedlog`` or ``~/.cache/embedlog``.
The jar is written under a temporary name and renamed into place, so concurrent builds are
harmless. Each build also removes the jars of other digests that nothing has read or written
for :data:`STALE_AFTER_S` (the builds of sources or Spark versions no longer installed; one
still in use has been read within that time, and one removed by mistake is only built again).
``EMBEDLOG_SPARK_JVM=0`` turns the JVM reader off for sessions built by
:func:`embedlog.spark.local_session`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

__all__ = ["JVM_ENV", "STALE_AFTER_S", "jar_path", "java_sources", "jvm_enabled"]

JVM_ENV = "EMBEDLOG_SPARK_JVM"
"""Environment variable: ``0`` keeps :func:`embedlog.spark.local_session` sessions on the Python
reader (no jar on the classpath)."""

_LOG = logging.getLogger(__name__)
_SOURCES = Path(__file__).with_name("java") / "embedlog"
_BUILD_TIMEOUT_S = 300
_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_JAR_NAME = re.compile(r"embedlog-spark-[0-9a-f]{16}\.jar")

STALE_AFTER_S = 30 * 24 * 3600
"""Seconds since a cached jar of another digest was last read or written, after which a build
removes it."""


def jvm_enabled() -> bool:
    """Whether sessions built by embedlog get the JVM reader (``EMBEDLOG_SPARK_JVM`` is not
    ``0``/``false``/``no``/``off``)."""
    return os.environ.get(JVM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def java_sources() -> list[Path]:
    """The ``.java`` files of the JVM reader, sorted."""
    return sorted(_SOURCES.glob("*.java"))


def jar_path(*, build: bool = True) -> str | None:
    """The JVM reader's jar for the installed pyspark: built on first use (``javac`` must be on
    ``PATH`` or in ``$JAVA_HOME/bin``), ``None`` when it cannot be (no ``javac``, no pyspark,
    a failed build: logged as a warning) or, with ``build=False``, when not built yet."""
    sources = java_sources()
    spark_jars = _spark_jars()
    if not sources or spark_jars is None:
        return None
    target = _cache_dir() / f"embedlog-spark-{_digest(sources, spark_jars)}.jar"
    if target.is_file():
        return str(target)
    javac = _javac()
    if not build or javac is None:
        return None
    try:
        _build(javac, sources, spark_jars, target)
    except (OSError, subprocess.SubprocessError) as exc:
        _LOG.warning("embedlog: the JVM reader was not built (%s); Spark reads through the "
                     "Python data source", exc)
        return None
    _prune(target)
    return str(target)


def _prune(keep: Path) -> None:
    """Remove the stale jars beside ``keep`` (see the module notes): only regular files whose
    whole name is a jar name of this module, never through a link; errors are ignored (another
    process may prune or use the folder at the same time)."""
    cutoff = time.time() - STALE_AFTER_S
    try:
        names = os.listdir(keep.parent)
    except OSError:
        return
    for name in names:
        if name == keep.name or not _JAR_NAME.fullmatch(name):
            continue
        path = keep.parent / name
        try:
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and max(st.st_atime, st.st_mtime) < cutoff:
                path.unlink()
        except OSError:
            continue


def _spark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    return jars if jars.is_dir() else None


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "javac"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("javac")


def _cache_dir() -> Path:
    explicit = os.environ.get("EMBEDLOG_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "embedlog"


def _digest(sources: list[Path], spark_jars: Path) -> str:
    """Sources and the Spark build they compile against (the names of its jars)."""
    h = hashlib.sha256()
    for src in sources:
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    for jar in sorted(p.name for p in spark_jars.glob("*.jar")):
        h.update(jar.encode() + b"\0")
    return h.hexdigest()[:16]


def _build(javac: str, sources: list[Path], spark_jars: Path, target: Path) -> None:
    """``javac`` into a temporary folder, then a jar with fixed entry times renamed into
    ``target`` (an existing jar of the same digest is the same build)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embedlog-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [javac, "--release", "17", "-encoding", "UTF-8", "-nowarn",
               "-cp", str(spark_jars / "*"), "-d", str(classes), *map(str, sources)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise subprocess.SubprocessError(f"javac failed: {done.stderr.strip()[-2000:]}")
        fd, partial = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
        os.close(fd)
        try:
            _write_jar(classes, Path(partial))
            os.replace(partial, target)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)


def _write_jar(classes: Path, out: Path) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as jar:
        manifest = zipfile.ZipInfo("META-INF/MANIFEST.MF", _FIXED_ZIP_TIME)
        jar.writestr(manifest, "Manifest-Version: 1.0\r\nCreated-By: embedlog\r\n\r\n")
        for cls in sorted(classes.rglob("*.class")):
            info = zipfile.ZipInfo(cls.relative_to(classes).as_posix(), _FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            jar.writestr(info, cls.read_bytes())
