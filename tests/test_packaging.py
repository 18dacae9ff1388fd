"""Packaging: the build backend compiles the codec core when it can and installs without it.

A wheel is built from the project with ``CC=false`` (a compiler that always fails): the build
must succeed without the extension, and the installed package must import and report the
pure-Python codec. A wheel built with the machine's compiler must carry the core and report
``"c"``. Both are installed into throwaway virtual environments, never into the running one.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
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


def _wheel_and_report(work: str, env: dict[str, str]) -> tuple[list[str], str]:
    """(core files in the wheel, what the installed package reports)."""
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "--disable-pip-version-check"]
    out = os.path.join(work, "wheels")
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", out, _project_copy(work)],
                   check=True, env=env, cwd=work)
    (wheel,) = glob.glob(os.path.join(out, "*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("pyspark_embedlog/") for n in names)
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
