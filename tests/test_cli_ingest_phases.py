"""``odf-chain ingest`` on a terminal names its phases as they start, and shows none of Spark's
stage bars (the CLI's session turns Spark's console progress off); off a terminal it prints
only its report, as before. The terminal is a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from odf_chain.cli.common import terminal_phases
from odf_chain.dataset import Dataset


def test_phases_are_printed_on_a_terminal_only() -> None:
    assert terminal_phases(io.StringIO()) is None
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as terminal:
        phase = terminal_phases(terminal)
        assert phase is not None
        phase("counting rows")
    shown = ""
    while "\n" not in shown:  # a pseudo-terminal may hand the line over in pieces
        ready, _, _ = select.select([leader], [], [], 10.0)
        assert ready, f"the phase line never ended: {shown!r}"
        shown += os.read(leader, 1024).decode()
    os.close(leader)
    assert re.fullmatch(r" +\d+\.\ds  counting rows\r\n", shown), shown


def _read_all(fd: int, process: subprocess.Popen) -> bytes:
    out = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other end closed (Linux: EIO)
                break
            if not chunk:
                break
            out += chunk
        elif process.poll() is not None:
            break
    return out


@pytest.mark.spark  # the command starts its own local Spark
def test_an_ingest_on_a_terminal_names_its_phases_and_no_stage_bars(tmp_path: Path) -> None:
    rows = "\n".join(f"{i},station-{i % 7},{i * 0.5}" for i in range(2000))
    (tmp_path / "in.csv").write_text("id,station,value\n" + rows + "\n")
    leader, follower = pty.openpty()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    command = ["ingest", "ds", "in.csv", "--format", "csv", "--create", "--master", "local[2]"]
    process = subprocess.Popen(
        [sys.executable, "-m", "odf_chain.cli", *command],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=tmp_path,
        env=env,
    )
    os.close(follower)
    shown = _read_all(leader, process).decode("utf-8", "replace")
    stdout = process.stdout.read().decode()
    assert process.wait(timeout=600) == 0, shown
    os.close(leader)
    assert "[Stage" not in shown, shown
    phases = [re.sub(r"^ *\d+\.\ds  ", "", line) for line in shown.splitlines() if line.strip()]
    assert phases == [
        "starting Spark",
        "reading and hashing 1 input file",
        "counting rows",
        "sizing slices for 2,000 rows",
        "writing 1 slice",
        "committing blocks",
    ], shown
    # stdout, a pipe, gets the report alone, as off a terminal
    assert stdout.splitlines()[0] == "ingested   2,000 rows from 1 input file"
    assert Dataset.open(tmp_path / "ds").state.num_records == 2000
