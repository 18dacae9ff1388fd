"""The compiled codec core, key map and producer lane under AddressSanitizer and UBSan.

The C sources are compiled with ``gcc -fsanitize=address,undefined`` into a copy of the package
in a scratch directory, and a child Python (with libasan and libubsan preloaded, since the
interpreter itself is not instrumented) runs the differential tests (hypothesis batches and
their damaged copies, also decoded by one call from anywhere in a larger read; point reads'
runs of records; append_batch's arguments checked by the encoder), the codec tests, the Arrow
sink's differential tests (its one pass over stored batches, whole logs read as Arrow), the
point reads answered from remembered batches, the key map's differential tests, the compaction
walks' differential tests (compiled walks, decoded columns and pure code on the same logs), the
producer lane's differential tests and the producer's tests, the real Kafka folders, the
corruption corpus and the slot builders (compiled and generated) against it. Any sanitizer
report aborts the child; the test fails on a non-zero exit.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from .workloads import scratch_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# module -> its C sources (the codec is one module built from every file of its folder)
SOURCES = {("segment", "_ccodec"): ("segment", "_ccodec_src"),
           ("compaction", "_ckeymap"): ("compaction", "_ckeymap.c"),
           ("", "_clane"): ("", "_clane.c")}
TESTS = [  # run as two halves (even and odd places) side by side
    "tests/test_keymap_core.py",
    "tests/reliability/test_corruption.py",
    "tests/test_compaction_walk.py",
    "tests/test_codec_core.py",
    "tests/test_append_batch_core.py",
    "tests/test_decode_stored.py",
    "tests/test_arrow_sink.py",
    "tests/test_producer_lane.py",
    "tests/test_producer.py",
    "tests/test_point_memo.py",
    "tests/test_point_run_core.py",
    "tests/test_format.py",
    "tests/test_format_kafka_python.py",
    "tests/test_kafka_fixtures.py",
    "tests/test_frozen.py",
]


def _runtime(name: str) -> str | None:
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                          text=True, check=False).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _c_files(folder: str, name: str) -> list[str]:
    """The C sources of one module: a file, or every .c file of a folder (at least one)."""
    path = os.path.join(ROOT, "src", "embedlog", folder, name)
    if not os.path.isdir(path):
        return [path]
    files = sorted(glob.glob(os.path.join(path, "*.c")))
    assert files, path
    return files


def build_sanitized(target: str) -> str:
    """Copy of src/embedlog under ``target`` with the compiled parts built under ASan/UBSan;
    returns the codec core's path."""
    pkg = os.path.join(target, "embedlog")
    shutil.copytree(os.path.join(ROOT, "src", "embedlog"), pkg,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for (folder, name), source in sorted(SOURCES.items()):
        out = os.path.join(pkg, folder, name + sysconfig.get_config_var("EXT_SUFFIX"))
        subprocess.run(
            ["gcc", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
             "-fno-omit-frame-pointer", "-g", "-O1", "-shared", "-fPIC",
             "-I" + sysconfig.get_paths()["include"], *_c_files(*source), "-o", out],
            check=True)
    return os.path.join(pkg, "segment", "_ccodec" + sysconfig.get_config_var("EXT_SUFFIX"))


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
    env.setdefault("EMBEDLOG_CORRUPTION_TRIALS", "450")  # ~4x slower under the sanitizers
    check = subprocess.run(
        [sys.executable, "-c", "from embedlog.segment import _ccodec, _native; "
         "from embedlog.compaction import _native as k; from embedlog import producer_lane; "
         "print(_ccodec.__file__, _native.CORE is _ccodec, k.CORE.__file__, "
         "producer_lane._COMPILED.__file__)"],
        env=env, capture_output=True, text=True, check=False)
    keymap = built.replace(os.path.join("segment", "_ccodec"), os.path.join("compaction",
                                                                           "_ckeymap"))
    lane = built.replace(os.path.join("segment", "_ccodec"), "_clane")
    assert check.stdout.split() == [built, "True", keymap, lane], check.stderr[-2000:]
    # two children, each half of the test files (the machine's two cores)
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              *TESTS[half::2]], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for half in (0, 1)]
    for run in runs:
        out, err = run.communicate()
        report = out[-3000:] + err[-3000:]
        assert run.returncode == 0, report
        assert "Sanitizer" not in err, report
