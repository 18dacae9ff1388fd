"""The compiled codec core under AddressSanitizer and UndefinedBehaviorSanitizer.

The C source is compiled with ``gcc -fsanitize=address,undefined`` into a copy of the package
in a scratch directory, and a child Python (with libasan and libubsan preloaded, since the
interpreter itself is not instrumented) runs the differential tests (hypothesis batches and
their damaged copies), the codec tests, the real Kafka folders and the corruption corpus
against it. Any sanitizer report aborts the child; the test fails on a non-zero exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from .workloads import scratch_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "src", "embedlog", "segment", "_ccodec.c")
TESTS = [
    "tests/test_codec_core.py",
    "tests/test_format.py",
    "tests/test_format_kafka_python.py",
    "tests/test_kafka_fixtures.py",
    "tests/reliability/test_corruption.py",
]


def _runtime(name: str) -> str | None:
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                          text=True, check=False).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def build_sanitized(target: str) -> str:
    """Copy of src/embedlog under ``target`` with the core built under ASan/UBSan."""
    pkg = os.path.join(target, "embedlog")
    shutil.copytree(os.path.join(ROOT, "src", "embedlog"), pkg,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    out = os.path.join(pkg, "segment", "_ccodec" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        ["gcc", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
         "-fno-omit-frame-pointer", "-g", "-O1", "-shared", "-fPIC",
         "-I" + sysconfig.get_paths()["include"], SOURCE, "-o", out],
        check=True)
    return out


@pytest.mark.slow
def test_core_under_address_and_ub_sanitizers() -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    asan, ubsan = _runtime("libasan.so"), _runtime("libubsan.so")
    if asan is None or ubsan is None:
        pytest.skip("gcc has no sanitizer runtimes")
    target = scratch_dir()
    built = build_sanitized(target)
    env = dict(os.environ, PYTHONPATH=target, LD_PRELOAD=f"{asan} {ubsan}",
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    env.pop("EMBEDLOG_PURE", None)
    env.pop("EMBEDLOG_QUICK", None)
    env.setdefault("EMBEDLOG_CORRUPTION_TRIALS", "1000")  # ~4x slower under the sanitizers
    check = subprocess.run(
        [sys.executable, "-c", "from embedlog.segment import _ccodec, _native; "
         "print(_ccodec.__file__, _native.CORE is _ccodec)"],
        env=env, capture_output=True, text=True, check=False)
    assert check.stdout.split() == [built, "True"], check.stderr[-2000:]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    report = run.stdout[-3000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    assert "Sanitizer" not in run.stderr, report
