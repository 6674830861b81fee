"""The command line's SparkSession: Java checked first, Spark's own output kept in a log file.

A Spark job that fails prints its failure many times over on the JVM's stderr (log4j lines,
stack traces, the Python workers' tracebacks, raw bytes of a malformed record), before the
command can say in one line what went wrong. The command line therefore starts the JVM with
its stderr on a pipe: a thread copies everything into a log file, and forwards only Spark's
progress bar to a terminal. A failure is then one line of odf_chain's, plus where the log is.
The library never does this: a job's own SparkSession is the job's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from odf_chain.errors import OdfChainError


class SparkStartError(OdfChainError):
    """Spark could not start (no Java, a broken JAVA_HOME, a master that does not answer)."""


def find_java() -> str:
    """The ``java`` Spark's launcher will run: ``$JAVA_HOME/bin/java``, else the first on PATH.
    Checked before Spark starts, which would otherwise fail after a while with a trace."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.path.isfile(java) and os.access(java, os.X_OK):
            return java
        raise SparkStartError(
            f"JAVA_HOME={home} has no bin/java: Spark needs Java 17 or later; "
            "set JAVA_HOME to a JDK or unset it to use the java on PATH"
        )
    java = shutil.which("java")
    if java is None:
        raise SparkStartError(
            "no java on PATH and JAVA_HOME is not set: Spark needs Java 17 or later "
            "(install a JDK, e.g. openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    return java


_COMPLAINT = re.compile(rb" ERROR |Exception|Traceback \(most recent call last\)")
_BAR = re.compile(rb"(?:\[Stage [^\]\r\n]*\])+")  # one bar per running stage, side by side


@dataclass
class _Relay:
    """Copies the JVM's stderr to the log; forwards progress-bar updates to a terminal."""

    source: int
    log: IO[bytes]
    terminal: IO[bytes] | None

    def run(self) -> None:
        pending = b""
        with os.fdopen(self.source, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                self.log.write(chunk)
                self.log.flush()
                if self.terminal is not None:
                    pending = self._forward_progress(pending + chunk)

    def _forward_progress(self, data: bytes) -> bytes:
        """Spark draws its bar as ``\\r[Stage 3:>   (1 + 2) / 4]`` and clears it with spaces
        between two ``\\r``: forward those pieces, nothing else. Returns the unfinished tail."""
        pieces = data.replace(b"\n", b"\r\n").split(b"\r")
        *done, tail = pieces
        for piece in done:
            bar = _BAR.match(piece)  # a log line may follow the bar without a \r
            shown = bar.group(0) if bar else piece if piece and not piece.strip(b" ") else None
            if shown is not None:
                with contextlib.suppress(OSError):
                    self.terminal.write(b"\r" + shown)
                    self.terminal.flush()
        return b"\r" + tail if tail else b""


class _ToLog(logging.Handler):
    """Python log records (py4j's: ``logging.exception("Exception while sending command.")``
    with its traceback, when a call is interrupted or the JVM has gone) into Spark's log."""

    def __init__(self, log: IO[bytes]) -> None:
        super().__init__(logging.INFO)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self._log.write((self.format(record) + "\n").encode("utf-8", "backslashreplace"))
            self._log.flush()


@dataclass
class QuietSession:
    """A SparkSession and the file that holds everything Spark printed."""

    spark: Any  # a pyspark.sql.SparkSession
    log_path: str
    log_handler: logging.Handler | None = None  # py4j's log records, into the log

    def hint(self) -> str:
        return f"Spark's own output is in {self.log_path}"

    def stop(self, *, failed: bool) -> bool:
        """Stop Spark. The log is kept only when a failed command may find its cause there
        (Spark logged an error or a trace); True when kept. A refusal of odf_chain's own (a
        misspelt column, say) leaves nothing in it worth a second look."""
        try:
            self.spark.stop()
        finally:
            if self.log_handler is not None:
                logging.getLogger().removeHandler(self.log_handler)
        if failed and self._spark_complained():
            return True
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)
        return False

    def _spark_complained(self) -> bool:
        tail = b""
        try:
            with open(self.log_path, "rb") as log:
                while chunk := log.read(1 << 20):
                    if _COMPLAINT.search(tail + chunk):
                        return True
                    tail = chunk[-64:]
        except OSError:
            return False
        return False


@contextlib.contextmanager
def _stderr_to(fd: int) -> Iterator[None]:
    """Point this process's fd 2 at ``fd`` while a child (the JVM) is started, so it inherits
    it; this process's own stderr is back once the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _interrupt_held() -> Iterator[list[int]]:
    """Ctrl-C is held (noted in the list yielded) while the JVM starts: a KeyboardInterrupt
    before the JVM's gateway reads its stdin leaves a JVM running after this process has gone
    (it ignores SIGINT, as PySpark starts it, and holds our stdout). PySpark puts in its own
    handler once its context exists; what came before is answered when the start is done."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield held
    finally:
        if signal.getsignal(signal.SIGINT) is hold:  # PySpark did not get as far as its own
            signal.signal(signal.SIGINT, previous)


def start_quiet_session(master: str, app_name: str, conf: dict[str, str]) -> QuietSession:
    """A SparkSession whose JVM (and Python workers) write their stderr to a log file."""
    from pyspark.sql import SparkSession

    find_java()
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the relay thread owns it
        prefix="odf-chain-spark-", suffix=".log", delete=False
    )
    read_end, write_end = os.pipe()
    terminal = sys.stderr.buffer if sys.stderr.isatty() else None
    relay = _Relay(read_end, log, terminal)
    threading.Thread(target=relay.run, name="spark-stderr", daemon=True).start()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if "spark.ui.showConsoleProgress" not in conf:  # the caller's choice, else a terminal's bar
        builder = builder.config("spark.ui.showConsoleProgress", str(terminal is not None).lower())
    try:
        with _stderr_to(write_end), _interrupt_held() as held:
            spark = builder.getOrCreate()
        if held:  # Ctrl-C while the JVM started: stop it, then say so
            spark.stop()
            raise KeyboardInterrupt
    except Exception as exc:
        raise SparkStartError(
            f"Spark did not start ({type(exc).__name__}); its output is in {log.name}"
        ) from None
    finally:
        os.close(write_end)  # the JVM holds its own copy
    # py4j logs through the root logger, which prints to stderr when it has no handler
    handler = _ToLog(log)
    logging.getLogger().addHandler(handler)
    return QuietSession(spark, log.name, handler)
