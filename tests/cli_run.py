"""The ``odf-chain`` and ``chain-verify`` commands run in this process, answered as a
subprocess would answer: a :class:`subprocess.CompletedProcess` with the exit code, stdout and
stderr.

A command run as ``python -m odf_chain.cli`` is ``sys.exit(main())``; what a separate process
adds is ~1.5 s of interpreter and import start-up (the slow part of the CLI tests). This runs
that same ``main`` and gives back what the process would have shown:

- the exit code ``main`` returns, or that of a ``SystemExit`` (argparse's usage errors and
  ``--version``);
- stdout and stderr as the process writes them: UTF-8 with ``backslashreplace`` (the CLI's own
  ``_tolerant_stdout``), decoded as ``subprocess.run(text=True)`` decodes;
- an exception that escapes ``main`` as the interpreter reports it: a traceback on stderr and
  exit 1 (so "no Traceback" and exit-code assertions fail as they would on a process);
- warnings as a fresh interpreter shows them (the default filters), written to stderr.

Tests whose subject is the process itself (the installed entry point, Spark's output of a JVM
the command starts, a crash) keep real subprocesses: tests/test_cli.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """``os.environ`` exactly ``env`` (as a child given ``env=`` sees it), restored after."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _as_written(text: str) -> str:
    """What a UTF-8 stream with ``errors="backslashreplace"`` writes, read back as
    ``text=True`` reads it (universal newlines)."""
    written = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return written.replace("\r\n", "\n").replace("\r", "\n")


def run_main(
    argv: Sequence[str | Path],
    *,
    entry: str = "odf-chain",
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    spark=None,
) -> subprocess.CompletedProcess[str]:
    """``odf-chain ARGV`` (or ``chain-verify ARGV``) run by its ``main`` in this process.

    A command that starts Spark gets ``spark`` (the shared session, left running); without
    it, starting Spark is an error of the test (a refusal expected before Spark that did not
    come): it fails the run instead of stopping the shared session."""
    from odf_chain import cli
    from odf_chain.spark.session import QuietSession

    class Shared(QuietSession):
        def stop(self, *, failed: bool) -> bool:
            return False  # the shared session outlives the command; it logged nothing here

    def session(master: str) -> QuietSession:
        if spark is None:
            raise RuntimeError("the command started Spark in the test process")
        return Shared(spark, os.devnull)

    main: Callable[[Sequence[str] | None], int] = (
        cli.main if entry == "odf-chain" else cli.chain_verify_main
    )
    args = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    started, cli._spark_session = cli._spark_session, session
    try:
        code, caught = _call(main, args, env, cwd, out, err)
    finally:
        cli._spark_session = started
    for w in caught:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    return subprocess.CompletedProcess(
        [entry, *args], code, _as_written(out.getvalue()), _as_written(err.getvalue())
    )


def _call(main, args, env, cwd, out, err) -> tuple[int, list[warnings.WarningMessage]]:
    """``main(args)`` with the process's environment, directory, streams and warning filters;
    its exit code and the warnings it gave."""
    with (
        _environment(env),
        contextlib.chdir(cwd or os.getcwd()),
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        # a fresh interpreter's filters: DeprecationWarning and friends are not shown
        warnings.resetwarnings()
        warnings.simplefilter("default")
        quiet = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
        for category in quiet:
            warnings.filterwarnings("ignore", category=category)
        try:
            code = main(args)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message"): the message on stderr, exit 1
                print(exc.code, file=err)
                code = 1
        except Exception:  # escaped main: the interpreter prints it and exits 1
            err.write(traceback.format_exc())
            code = 1
    return code, caught


def run_ingest(
    spark, argv: Sequence[str | Path], *, cwd: Path | str | None = None
) -> subprocess.CompletedProcess[str]:
    """``odf-chain ingest ARGV`` run by ``main`` in this process on the tests' shared
    SparkSession (``--master`` is then that session's): the command's own session start and
    stop are what a separate process is for (tests/test_cli.py keeps those), and each costs a
    JVM (~15 s). Everything else (refusals before Spark, the ingest call, what is printed) is
    the command's."""
    return run_main(["ingest", *argv], cwd=cwd, spark=spark)
