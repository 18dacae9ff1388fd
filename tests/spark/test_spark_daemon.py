"""``embedlog.spark.daemon``: the executors' Python daemon imports the reader and freezes its
heap before forking workers; ``local_session`` uses it, and reads through it are unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from embedlog.spark.daemon import READER_MODULES
from embedlog.spark.session import DAEMON_MODULE

_PROBE = """
import gc, json, sys
from embedlog.spark.daemon import preload
before = [m for m in sys.argv[1:] if m in sys.modules]
ok = preload(["daemon", *sys.argv[1:2]])
print(json.dumps({"ok": ok, "frozen": gc.get_freeze_count(), "before": before,
                  "loaded": sorted(m for m in sys.argv[1:] if m in sys.modules)}))
"""


def _preload(*argv: str) -> dict[str, Any]:
    """``preload`` in a fresh interpreter (it freezes the heap of the process it runs in)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run([sys.executable, "-c", _PROBE, *argv], check=True, env=env,
                         capture_output=True, text=True, timeout=120).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def test_preload_imports_the_worker_and_reader_modules_and_freezes_the_heap() -> None:
    got = _preload("pyspark.worker", *READER_MODULES)
    assert got["ok"] is True
    assert got["frozen"] > 10_000  # pyspark, pyarrow, numpy and embedlog's objects
    assert "pyspark.worker" not in got["before"]  # imported by preload, not by embedlog
    assert set(got["loaded"]) == {"pyspark.worker", *READER_MODULES}


def test_preload_imports_only_pyspark_worker_modules_and_survives_a_missing_one() -> None:
    assert _preload("json.tool")["loaded"] == []  # not a pyspark module: left to the worker
    got = _preload("pyspark.no_such_worker_module")
    assert got["ok"] is False
    assert got["frozen"] > 0  # the reader modules were still imported and frozen


@pytest.mark.spark
def test_local_session_workers_come_from_the_daemon(spark: Any, tmp_path: Any) -> None:
    assert spark.conf.get("spark.python.daemon.module") == DAEMON_MODULE

    def probe(_: Any) -> list[tuple[bool, int]]:
        import gc
        import sys

        return [("embedlog.spark.scan" in sys.modules, gc.get_freeze_count())]

    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(probe).collect()
    assert len(seen) == 2
    assert all(loaded and frozen > 0 for loaded, frozen in seen)
