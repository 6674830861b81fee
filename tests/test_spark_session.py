"""The command line's Spark session helpers, without starting Spark: the Java check and the
relay that keeps Spark's stderr in a log file and shows only its progress bar."""

from __future__ import annotations

import io
import os
import stat
import threading
from pathlib import Path

import pytest

from odf_chain.errors import OdfChainError
from odf_chain.spark.session import SparkStartError, _Relay, find_java


def test_a_broken_java_home_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(SparkStartError, match=r"JAVA_HOME=.*jdk has no bin/java") as caught:
        find_java()
    assert isinstance(caught.value, OdfChainError)  # the CLI's one line, exit 2


def test_no_java_anywhere_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkStartError, match="no java on PATH and JAVA_HOME is not set"):
        find_java()


def test_java_home_and_path_are_found(tmp_path: Path, monkeypatch) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert find_java() == str(java)
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(java.parent))
    assert find_java() == str(java)


class _Terminal(io.BytesIO):
    def isatty(self) -> bool:
        return True


def test_the_relay_logs_everything_and_shows_only_the_progress_bar(tmp_path: Path) -> None:
    log_path = tmp_path / "spark.log"
    read_end, write_end = os.pipe()
    terminal = _Terminal()
    with log_path.open("wb") as log:
        relay = _Relay(read_end, log, terminal)
        thread = threading.Thread(target=relay.run)
        thread.start()
        # what a failing job prints, in pieces cut anywhere (as a pipe delivers them)
        stream = (
            b"WARNING: Using incubator modules: jdk.incubator.vector\n"
            b"\r[Stage 0:>                 (0 + 2) / 4]"
            b"\r[Stage 0:=====>           (2 + 2) / 4]"
            b"26/11/24 21:30:36 ERROR Executor: Exception in task 1.0\n"
            b"\tat org.apache.spark.Something(Something.scala:1)\n"
            b"\r                                        \r"
            b"PAR1\x15\x04\x15\x00 binary record\n"
        )
        for start in range(0, len(stream), 7):
            os.write(write_end, stream[start : start + 7])
        os.close(write_end)
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert log_path.read_bytes() == stream  # everything, byte for byte
    shown = terminal.getvalue()
    assert shown == (
        b"\r[Stage 0:>                 (0 + 2) / 4]"
        b"\r[Stage 0:=====>           (2 + 2) / 4]"
        b"\r                                        "
    )


class _Stopped:
    """Stands in for the SparkSession, whose stop() is not what is tested here."""

    def stop(self) -> None:
        pass


@pytest.mark.parametrize(
    ("failed", "logged", "kept"),
    [
        (True, b"26/11/24 21:30:36 ERROR Executor: Exception in task 0.0\n", True),
        (True, b'Traceback (most recent call last):\n  File "worker.py"\n', True),
        (True, b"26/11/24 21:30:36 WARN NativeCodeLoader: Unable to load\n", False),
        (False, b"26/11/24 21:30:36 ERROR Executor: Exception in task 0.0\n", False),
    ],
)
def test_the_log_is_kept_only_when_a_failure_may_be_explained_there(
    tmp_path: Path, failed: bool, logged: bytes, kept: bool
) -> None:
    from odf_chain.spark.session import QuietSession

    log = tmp_path / "spark.log"
    log.write_bytes(b"Using Spark's default log4j profile\n" + b"x" * (3 << 20) + b"\n" + logged)
    assert QuietSession(_Stopped(), str(log)).stop(failed=failed) is kept
    assert log.exists() is kept
