"""Packaging: the build backend compiles the codec core when it can and installs without it.

A wheel is built from the project with ``CC=false`` (a compiler that always fails): the build
must succeed without the extension, and the installed package must import and report the
pure-Python codec. A wheel built with the machine's compiler must carry the core and report
``"c"``. Both are installed into throwaway virtual environments, never into the running one.
The sdist must carry every C source and header of the cores (a wheel built from it has the
core), and no wheel carries C sources.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project_copy(work: str) -> str:
    """The files a build reads, without anything a previous build left (build/, a core
    built in place)."""
    dst = os.path.join(work, "project")
    os.makedirs(dst)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if os.path.exists(os.path.join(ROOT, name)):
            shutil.copy(os.path.join(ROOT, name), dst)
    shutil.copytree(os.path.join(ROOT, "src"), os.path.join(dst, "src"),
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.egg-info"))
    return dst


def _venv(work: str) -> list[str]:
    """pip of a fresh virtual environment under ``work`` (seeing the running one's packages)."""
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    return [os.path.join(venv, "bin", "python"), "-m", "pip", "--disable-pip-version-check"]


def _wheel_and_report(work: str, env: dict[str, str],
                      source: str | None = None) -> tuple[list[str], str]:
    """(core files in the wheel, what the installed package reports); the wheel built from
    ``source`` (an sdist) or from a copy of the project."""
    venv = os.path.join(work, "venv")
    pip = _venv(work)
    out = os.path.join(work, "wheels")
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", out, source or _project_copy(work)],
                   check=True, env=env, cwd=work)
    (wheel,) = glob.glob(os.path.join(out, "*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("pyspark_embedlog/") for n in names)
    assert not [n for n in names if n.endswith((".c", ".h"))]
    # the JVM reader's sources, compiled on first use (embedlog.spark.jvm)
    assert "embedlog/spark/java/embedlog/DefaultSource.java" in names
    subprocess.run([*pip, "install", "-q", "--no-deps", wheel], check=True, cwd=work)
    report = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c",
         "import embedlog; print(embedlog.__file__); print(embedlog.codec_implementation())"],
        check=True, capture_output=True, text=True, cwd=work,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EMBEDLOG_PURE")},
    ).stdout.split()
    assert report[0].startswith(venv)  # the wheel's copy, not a checkout's
    core = [n for n in names if n.startswith("embedlog/segment/_ccodec.")]
    return core, report[1]


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["false", None])
def test_wheel_with_and_without_a_compiler(compiler: str | None) -> None:
    if compiler is None and shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if compiler is not None:
        env["CC"] = compiler
    with tempfile.TemporaryDirectory(prefix="embedlog-pkg-") as work:
        core, reported = _wheel_and_report(work, env)
    if compiler == "false":
        assert core == ["embedlog/segment/_ccodec.pyi"]
        assert reported == "python"
    else:
        assert len(core) == 2 and any(n.endswith(".so") for n in core)
        assert reported == "c"


def _sdist(work: str) -> str:
    """An sdist of a copy of the project (setuptools as pyproject.toml asks, in a venv)."""
    pip = _venv(os.path.join(work, "sdist"))
    subprocess.run([*pip, "install", "-q", "setuptools>=77"], check=True, cwd=work)
    out = os.path.join(work, "dist")
    project = _project_copy(work)
    subprocess.run([pip[0], "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_sdist(sys.argv[1])", out], check=True, cwd=project)
    (sdist,) = glob.glob(os.path.join(out, "*.tar.gz"))
    return sdist


@pytest.mark.slow
def test_sdist_carries_the_c_sources() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="embedlog-sdist-") as work:
        sdist = _sdist(work)
        with tarfile.open(sdist) as t:
            names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        core, reported = _wheel_and_report(work, env, sdist)
    sources = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "src", "embedlog",
                                                                         "**", "*.[ch]"),
                                                           recursive=True)}
    assert sources and sources <= names
    assert len(core) == 2 and any(n.endswith(".so") for n in core)
    assert reported == "c"
