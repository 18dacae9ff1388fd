"""Spark on a cluster: a standalone master and two workers started from pyspark's own launcher
(``bin/spark-class``) on this machine, separate executor processes reading a log with
``format("embedlog")`` -- from a local path and from an S3 endpoint (moto's server on
127.0.0.1) -- as a batch query and as a stream; every row equals embedlog's own reader's."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import embedlog
from embedlog.spark.jvm import jar_path
from s3_endpoint import moto_s3, upload

pytestmark = [pytest.mark.slow, pytest.mark.spark]

APP = pathlib.Path(__file__).with_name("standalone_app.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the Spark daemon exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


def _spark_class() -> str:
    import pyspark

    launcher = pathlib.Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not launcher.exists():
        pytest.skip("pyspark has no bin/spark-class")
    return str(launcher)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[dict[str, Any]]:
    """``spark://127.0.0.1:<port>`` of a master with two workers (one core each)."""
    pytest.importorskip("pyarrow")
    from embedlog.spark.session import java_available

    if not java_available():
        pytest.skip("Java is not installed (Spark needs Java 17 or 21)")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(tmp_path / "logs"), "SPARK_WORKER_DIR": str(tmp_path / "work")}
    launcher = _spark_class()
    port, procs = _free_port(), []
    try:
        procs.append(subprocess.Popen(
            [launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(_free_port())],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))
        _wait_port(port, procs[0])
        for _ in range(2):
            worker_port = _free_port()
            procs.append(subprocess.Popen(
                [launcher, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--port", str(worker_port), "--webui-port", str(_free_port()), "--cores", "1",
                 "--memory", "1g", f"spark://127.0.0.1:{port}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))
            _wait_port(worker_port, procs[-1])
        yield {"master": f"spark://127.0.0.1:{port}", "env": env}
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _expected(path: pathlib.Path) -> list[list[Any]]:
    with embedlog.open(path, read_only=True) as log:
        return _expected_of(log)


def _expected_of(log: embedlog.Log) -> list[list[Any]]:
    rows = []
    for topic in log.topics():
        for partition in range(log.partition_count(topic)):
            rows += [[topic, partition, r.offset, r.key.hex() if r.key else None,
                      r.value.hex()] for r in log.read(topic, partition)]
    return sorted(rows)


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as endpoint:
        yield endpoint


def test_a_standalone_cluster_reads_what_embedlog_reads(
        s3_endpoint: str, cluster: dict[str, Any], tmp_path: pathlib.Path) -> None:
    path = tmp_path / "log"
    with embedlog.open(path) as log:
        log.create_topic("events", partitions=3, config={"segment.bytes": 16 * 1024})
        log.create_topic("profiles", config={"cleanup.policy": "compact"})
        for i in range(0, 3000, 100):
            log.append_batch("events", [b"e%05d" % (i + j) for j in range(100)],
                             keys=[b"u%d" % ((i + j) % 17) for j in range(100)])
        log.append_batch("profiles", [b"p%d" % i for i in range(50)],
                         keys=[b"k%d" % (i % 7) for i in range(50)])
    uri = upload(s3_endpoint, path, "cluster/log")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    app = subprocess.run(
        [sys.executable, str(APP), cluster["master"], str(scratch), str(path), uri],
        env={**cluster["env"], **{k: v for k, v in os.environ.items() if k.startswith("AWS_")}},
        capture_output=True, text=True, timeout=600)
    assert app.returncode == 0, app.stderr[-4000:]
    got = json.loads(app.stdout.strip().splitlines()[-1])
    want = _expected(path)
    assert len(want) == 3050
    with embedlog.open(uri, read_only=True) as remote:
        assert _expected_of(remote) == want
    for source in (str(path), uri):
        read = got["reads"][source]
        assert read["batch"] == want, source
        assert read["stream"] == want, source
        assert read["count"] == len(want), source
        # the JVM reader answers for the format on the cluster too (a URI's tasks inside it
        # are the Python reader's)
        assert read["jvm"] is (jar_path(build=False) is not None), source
        # The tasks ran in executor processes of the workers, not in the application's.
        assert read["pids"] and got["driver_pid"] not in read["pids"]
    shutil.rmtree(scratch)
