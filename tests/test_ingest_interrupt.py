"""Ctrl-C during ``odf-chain ingest`` (issue 20): one line, exit 130, the dataset untouched.

A real process and a real Spark: the subject is what the process prints when the terminal's
SIGINT reaches its whole process group (the command, the JVM, Spark's Python workers) while
Spark's tasks write the slices. PySpark's own SIGINT handler made py4j log ~45 lines of
tracebacks before; see ``odf_chain.cli.ingest._interrupt_plainly``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.dataset import Dataset


def _big_csv(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("id,name,value\n")
        step = 100_000
        for start in range(0, rows, step):
            out.write("".join(f"{i},name{i % 977},{i * 0.5}\n" for i in range(start, start + step)))


@pytest.mark.spark  # a real ingest in a subprocess starts its own Spark
@pytest.mark.slow
def test_ctrl_c_while_spark_writes_is_one_line_exit_130_and_no_new_head(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"id": [0], "name": ["a"], "value": [0.0]}))
    head = ds.refresh().head
    _big_csv(tmp_path / "big.csv", 2_000_000)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    command = ["ingest", "ds", "big.csv", "--format", "csv", "--master", "local[1]"]
    process = subprocess.Popen(
        [sys.executable, "-m", "odf_chain.cli", *command],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        # the marker: a slice being written in the write job's staging folder
        deadline = time.monotonic() + 600
        while not list((root / ".staging").glob("spark-*/*")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the write job did not start"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    lines = [line for line in err.splitlines() if line.strip()]
    assert process.returncode == 130, (process.returncode, out, err)
    assert 1 <= len(lines) <= 2 and lines[-1] == "odf-chain: interrupted", err
    assert "Traceback" not in err
    reopened = Dataset.open(root)
    assert reopened.refresh().head == head
    assert not list((root / ".staging").glob("spark-*"))  # the write's staging is gone
    assert reopened.verify().problems == []
