"""A real standalone Spark cluster on 127.0.0.1 for the tests: a master and a worker, each a
process of its own started by pyspark's own launcher (``spark-class``), whose executors are
further JVMs with Python workers of their own. Nothing is shared with the driver but the
network and the files: what ``local[...]`` cannot show."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent


def java_missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java on PATH or JAVA_HOME): Spark needs one"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env() -> dict[str, str]:
    """The environment of the cluster's processes and of drivers that use it."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # executors run this interpreter, with odf_chain
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


class SparkCluster:
    """``start()`` a master and one worker, ``url`` to submit to, ``stop()`` both."""

    def __init__(self, cores: int = 2, memory: str = "2g") -> None:
        self.cores, self.memory = cores, memory
        self.port = self.ui_port = 0
        self._work = Path(tempfile.mkdtemp(prefix="odf-spark-worker-"))
        self._processes: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self._work / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process)
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cluster_env(),
            start_new_session=True,
        )
        self._processes.append(process)
        return process

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
            for p in sorted(self._work.glob("*.log"))
        )

    def _status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def start(self, timeout: float = 180.0) -> None:
        self.port, self.ui_port = _free_port(), _free_port()
        self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._launch(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--webui-port",
            str(_free_port()),
            "--work-dir",
            str(self._work / "work"),
            self.url,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self._processes):
                break
            try:
                if self._status().get("aliveworkers", 0) >= 1:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        log = self.log()
        self.stop()
        raise RuntimeError(f"the standalone Spark cluster did not come up:\n{log}")

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, 15)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, 9)
                    process.wait()
        self._processes.clear()
        shutil.rmtree(self._work, ignore_errors=True)


class ConnectServer:
    """A Spark Connect server (pyspark's ``start-connect-server.sh --wait``, local[2]) on
    127.0.0.1: ``url`` for ``SparkSession.builder.remote``."""

    def __init__(self) -> None:
        self.port = 0
        self._work = Path(tempfile.mkdtemp(prefix="odf-spark-connect-"))
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self._work.glob("*.log"))

    def start(self, timeout: float = 180.0) -> None:
        self.port = _free_port()
        log = open(self._work / "server.log", "wb")  # noqa: SIM115  (closed with the process)
        env = {
            **cluster_env(),
            "SPARK_LOG_DIR": str(self._work),  # not into site-packages
            "SPARK_PID_DIR": str(self._work),
        }
        self._process = subprocess.Popen(
            [
                str(SPARK_HOME / "sbin" / "start-connect-server.sh"),
                "--wait",
                "--master",
                "local[2]",
                "--conf",
                f"spark.connect.grpc.binding.port={self.port}",
                "--conf",
                "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf",
                "spark.driver.host=127.0.0.1",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.sql.session.timeZone=UTC",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        text = self.log()
        self.stop()
        raise RuntimeError(f"the Spark Connect server did not come up:\n{text}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, 15)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, 9)
                self._process.wait()
        self._process = None
        shutil.rmtree(self._work, ignore_errors=True)
