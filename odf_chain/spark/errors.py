"""Spark failures as odf_chain errors, shared by the ingest of files and the write.

An error raised in a Python worker reaches the driver as Spark's own exception, its text carrying
the worker's; :func:`odf_error` rebuilds the odf_chain error it stands for, and
:func:`_spark_failure` turns any other failed job into an :class:`IngestError` with Spark's one
telling line. Both the ingest of files (:mod:`odf_chain.spark.inputs`) and the write
(:mod:`odf_chain.spark.write_frame`) import it, so neither imports the other for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from odf_chain import errors as _errors
from odf_chain.errors import (
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    SchemaError,
    StorageError,
)

_MESSAGE_LIMIT = 2000


class IngestError(OdfChainError):
    """The Spark side of an ingest failed; nothing was appended."""


_ERROR_KINDS: dict[str, type[OdfChainError]] = {
    cls.__name__: cls
    for cls in (
        OdfChainError,
        FormatError,
        SchemaError,
        IntegrityError,
        NotFoundError,
        StorageError,
    )
}


# --------------------------------------------------------------------------------------------
# errors raised on executors


_WORKER_ERROR = re.compile(r"odf_chain\.errors\.(\w+): ([^\n]*)")
_FAILED_READ = re.compile(r"\[FAILED_READ_FILE[\w.]*\] [^\n]*? reading file (\S+?)\.?\s+SQLSTATE")
_CAUSED_BY = re.compile(r"Caused by: [\w.$]+: ([^\n]*)")


def _exception_text(exc: BaseException) -> str:
    text = str(exc)
    stack = getattr(exc, "getStackTrace", None)  # pyspark's captured JVM exceptions
    if callable(stack):
        with suppress(Exception):  # the JVM may be gone
            text += "\n" + str(stack() or "")
    return text


def odf_error(exc: BaseException) -> OdfChainError | None:
    """The :class:`OdfChainError` a Spark exception stands for, or None: the odf_chain error
    raised in a Python worker (the last one named in the exception's text), rebuilt with its
    class and message; or, when one of Spark's own readers failed on a file (``FAILED_READ_FILE``),
    a :class:`FormatError` naming that file and the innermost cause."""
    if isinstance(exc, OdfChainError):
        return exc
    text = _exception_text(exc)
    for name, message in reversed(_WORKER_ERROR.findall(text)):
        cls = getattr(_errors, name, None)
        if isinstance(cls, type) and cls in _ERROR_KINDS.values():
            return cls(message)
    failed = _FAILED_READ.search(text)
    if failed:
        causes = _CAUSED_BY.findall(text)
        detail = f": {_short(causes[-1])}" if causes else ""
        return FormatError(f"{failed.group(1)}: cannot read the input file{detail}")
    return None


@contextmanager
def spark_errors() -> Iterator[None]:
    """Re-raise a Spark exception that carries an odf_chain error (see the module doc) as that
    error; other exceptions pass unchanged."""
    try:
        yield
    except OdfChainError:
        raise
    except Exception as e:
        err = odf_error(e)
        if err is None:
            raise
        raise err from e


_PY4J_NOISE = re.compile(r"An error occurred while calling [\w.$]+\.\s*:\s*")


def _short(message: str) -> str:
    """The first part of a Spark error message, without py4j's preamble and the JVM stack."""
    for marker in ("\nJVM stacktrace:", "\n\tat ", "\n\nJVM"):
        message = message.split(marker, 1)[0]
    message = printable(_PY4J_NOISE.sub("", message).strip())
    return message if len(message) <= _MESSAGE_LIMIT else message[:_MESSAGE_LIMIT] + " ..."


def printable(message: str) -> str:
    """``message`` on one line, cut where it turns into raw bytes (Spark quotes the record it
    could not parse: a Parquet file read as CSV is binary), which would garble a terminal."""
    flat = " ".join(message.split())
    cut = next((i for i, c in enumerate(flat) if c == "\ufffd" or not c.isprintable()), None)
    if cut is None:
        return flat
    return flat[:cut].rstrip() + " <binary data: is the input in the format given?>"


def _spark_failure(step: str, exc: BaseException) -> OdfChainError:
    """The error to raise when a Spark job failed: the odf_chain error a task raised (say, a
    corrupt input file, named), else an IngestError with Spark's first line."""
    found = odf_error(exc)
    if found is not None:
        return found
    cause = _first_line(exc)
    if _MISSING_CONNECTOR.search(cause):
        cause += (
            " (this Spark has no Hadoop connector for the dataset's store: add it to the "
            "cluster's classpath, e.g. hadoop-aws for s3a://)"
        )
    return IngestError(f"Spark could not {step}: {cause}")


_MISSING_CONNECTOR = re.compile(
    r"No FileSystem for scheme|ClassNotFoundException: Class org\.apache\.hadoop\.fs\.\S+ not found"
)
# "SomeError: message", also as py4j prints a Java cause (": org.apache...SomeException: ...")
_CAUSE = re.compile(r"^\s*(?::\s*)?(?:[\w.$]+\.)?(\w+(?:Error|Exception)): (.+)$")


def _first_line(exc: BaseException) -> str:
    """What went wrong, in one line: Spark's wrappers ("An error occurred while calling
    o104.parquet.", "An exception was thrown from the Python worker") say where, not what; the
    last ``SomeError: message`` line of the text they carry does."""
    lines = str(exc).strip().splitlines()
    causes = [m.group(1) + ": " + m.group(2) for m in map(_CAUSE.match, lines) if m]
    if causes:
        return printable(causes[-1])
    return printable(lines[0]) if lines else type(exc).__name__
