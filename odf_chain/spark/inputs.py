"""The inputs of an ingest: files read into a Spark DataFrame, with their content hashes.

:func:`read_input` expands the paths it is given into a sorted list of files, hashes every file
in a Spark job (one task per file, nothing read on the driver), and returns a
:class:`SourceFrame`: the DataFrame, the files read (URI, size, BLAKE3 multihash: what an AddData
records as its source) and, for Avro, the writer schema.

Formats
-------
``csv``, ``json`` (JSON lines) and ``parquet`` are read by Spark's own readers. ``csv`` defaults
to ``header=true, inferSchema=true``; ``csv`` and ``json`` default to ``mode=FAILFAST``, so that
a malformed line fails the ingest instead of becoming nulls (Spark's default is ``PERMISSIVE``);
``options`` override any default.

``avro`` is read with fastavro (spark-avro is not available offline), distributed: one task per
file, each task decoding its file's records into tuples. Every Avro file of one input must have
the same writer schema (compared as JSON, formatting aside; the headers are read by the hashing
job, on executors); the DataFrame's schema is
``avro_to_arrow(writer schema)`` mapped to Spark types, and the writer schema text is returned as
``SourceFrame.avro_schema`` so that the dataset keeps Avro-convention field paths. Values become
what Spark expects: records -> structs, arrays, maps, enums -> strings, fixed and bytes ->
binary, ``uuid`` -> string, ``date`` -> date, ``timestamp-millis/-micros`` -> timestamps (UTC),
``local-timestamp-millis/-micros`` -> timestamps without zone, ``decimal(p, s)`` -> decimals.
Where Spark has no exact type, the column keeps the Avro underlying type, as the Avro spec says
readers may (and as Spark itself reads Parquet nanosecond timestamps with ``nanosAsLong``):
``time-millis`` -> int (milliseconds after midnight), ``time-micros`` -> long (microseconds),
``timestamp-nanos`` and ``local-timestamp-nanos`` -> long (nanoseconds since the epoch). Refused
with :class:`SchemaError` (at :func:`read_input`): what ``avro_to_arrow`` refuses, decimals of
more than 38 digits, and schemas nesting deeper than :data:`MAX_SPARK_NESTING` levels.

Paths
-----
See :mod:`odf_chain.spark.input_paths`.

Errors, and when they surface
-----------------------------
At :func:`read_input`: an unknown format (:class:`OdfChainError`), a path that matches nothing
(:class:`NotFoundError`), a file that cannot be opened (:class:`StorageError`), an Avro file
whose header cannot be read or that uses an unknown codec, a Parquet file whose footer cannot be
read, Avro files with different writer schemas (:class:`FormatError` / :class:`SchemaError`,
naming the file(s)), and whatever Spark's readers detect while inferring a schema (wrapped in
:class:`FormatError`).

Later, when an action runs (a write, a collect, a count; note that a count of CSV or JSON rows
does not parse their columns): malformed content further into a file. Spark reports it as its
own exception (a ``PythonException`` or ``Py4JJavaError``). For Avro its text holds the worker's
``odf_chain.errors.FormatError: <uri>: ...`` (or ``IntegrityError`` when a file changed after it
was hashed: each Avro file is hashed again as its records are read); for Spark's readers it holds
``[FAILED_READ_FILE...] ... reading file <uri>``. Run the action inside :func:`spark_errors` (or
pass the exception to :func:`odf_error`) to get an :class:`OdfChainError` naming the file.

On a cluster, executors import this module: odf_chain must be installed where they run (or
shipped with ``spark.submit.pyFiles``), and every input path must be readable from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import fastavro
import fastavro.read
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors.exceptions.base import PySparkException
from pyspark.sql import DataFrame, SparkSession

from odf_chain.errors import FormatError, NotFoundError, OdfChainError
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.spark.avro_input import _read_avro
from odf_chain.spark.errors import _ERROR_KINDS, _short, spark_errors
from odf_chain.spark.input_paths import _expand, _Located, _open, file_name

FORMATS = ("avro", "csv", "json", "parquet")

_DEFAULT_OPTIONS: dict[str, dict[str, str]] = {
    "csv": {"header": "true", "inferSchema": "true", "mode": "FAILFAST"},
    "json": {"mode": "FAILFAST"},
    "parquet": {},
}


@dataclass(frozen=True, slots=True)
class InputFile:
    """One file read by an ingest: where it is, its size in bytes, and the BLAKE3 multihash
    (multibase text) of its content at the time it was listed."""

    uri: str
    size: int
    blake3: str

    @property
    def name(self) -> str:
        return file_name(self.uri)


@dataclass(frozen=True, eq=False)
class SourceFrame:
    """What :func:`read_input` returns: the DataFrame, the files it reads (in order) and, for
    Avro inputs, the writer schema JSON text as found in the first file's header."""

    df: DataFrame
    inputs: tuple[InputFile, ...]
    avro_schema: str | None = None


# --------------------------------------------------------------------------------------------
# the probe job: hash every file (and read Avro headers, check Parquet footers) on executors


def _probe(item: tuple[str, pafs.FileSystem, str, str]) -> tuple:
    """Runs in a task: ("ok", uri, size, multihash, avro schema text | None) or
    ("error", kind, message) for the driver to raise."""
    uri, fs, path, fmt = item
    try:
        with _open(fs, path) as fh:
            header = None
            if fmt == "avro":
                header = _avro_header(fh, uri)
                fh.seek(0)
            elif fmt == "parquet":
                _check_parquet(fh, uri)
                fh.seek(0)
            else:
                _check_not_binary(fh.read(len(_PARQUET_MAGIC)), uri, fmt)
                fh.seek(0)
            digest, size = Multihash.digest_stream(BLAKE3, fh)
    except FileNotFoundError as e:
        return ("error", "NotFoundError", f"input file {uri} does not exist: {e}")
    except OdfChainError as e:
        return ("error", type(e).__name__, str(e))
    except OSError as e:
        return ("error", "StorageError", f"cannot read input file {uri}: {e}")
    return ("ok", uri, size, digest.to_multibase(), header)


_PARQUET_MAGIC, _AVRO_MAGIC = b"PAR1", b"Obj\x01"


def _check_not_binary(head: bytes, uri: str, fmt: str) -> None:
    """Refuse a Parquet or Avro file given as text (``csv``, ``json``), by its magic bytes:
    Spark reads such a file as CSV without complaint more often than not, into no rows (the
    file is one "header" line) or into rows of garbage."""
    for magic, kind in ((_PARQUET_MAGIC, "parquet"), (_AVRO_MAGIC, "avro")):
        if head.startswith(magic):
            raise FormatError(
                f"input {file_name(uri)}: a {kind.capitalize()} file (it starts with "
                f"{magic.decode()!r}), not {fmt}; nothing was ingested: give its format "
                f"(--format {kind})"
            )


def _avro_header(fh: Any, uri: str) -> str:
    try:
        reader = fastavro.reader(fh)
        text = reader.metadata["avro.schema"]
        codec = reader.codec
    except Exception as e:  # fastavro's errors are not one hierarchy
        raise FormatError(f"{uri}: not a readable Avro file ({type(e).__name__}: {e})") from None
    if codec not in fastavro.read.BLOCK_READERS:
        raise FormatError(f"{uri}: Avro codec {codec!r} is not supported by fastavro")
    return text if isinstance(text, str) else bytes(text).decode("utf-8")


def _check_parquet(fh: Any, uri: str) -> None:
    try:
        pq.ParquetFile(fh).metadata  # noqa: B018 (reads the footer)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise FormatError(f"{uri}: not a readable Parquet file ({e})") from None


def _run_probe(spark: SparkSession, files: list[_Located], fmt: str) -> list[tuple]:
    sc = spark.sparkContext
    items = [(f.uri, f.fs, f.path, fmt) for f in files]
    previous = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"odf_chain: hashing {len(items)} {fmt} input file(s)")
    try:
        with spark_errors():
            results = sc.parallelize(items, len(items)).map(_probe).collect()
    finally:
        sc.setLocalProperty("spark.job.description", previous)  # type: ignore[arg-type]
    for result in results:
        if result[0] == "error":
            raise _ERROR_KINDS.get(result[1], OdfChainError)(result[2])
    return results


# --------------------------------------------------------------------------------------------
# Spark's own readers


def _name_file(message: str, files: list[_Located]) -> str:
    named = [f.uri for f in files if f.path in message or f.uri in message]
    if len(named) == 1:
        return named[0]
    if len(files) == 1:
        return files[0].uri
    return f"one of {len(files)} files ({files[0].uri}, ...)"


def _read_with_spark(
    spark: SparkSession, files: list[_Located], fmt: str, options: dict | None
) -> DataFrame:
    opts = {**_DEFAULT_OPTIONS[fmt], **{k: _option(v) for k, v in (options or {}).items()}}
    try:
        return spark.read.format(fmt).options(**opts).load([f.spark_path() for f in files])
    except (PySparkException, Py4JError) as e:
        message = _short(str(e))
        where = _name_file(message, files)
        if "PATH_NOT_FOUND" in message:
            raise NotFoundError(f"{fmt} input {where}: {message}") from None
        raise FormatError(f"{fmt} input {where}: {message}") from None


def _option(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------------------------


def read_input(
    spark: SparkSession, paths: list[str], fmt: str, *, options: dict | None = None
) -> SourceFrame:
    """Read input files into a DataFrame (see the module doc for formats, paths and errors).

    Runs one Spark job at once (hashing the files, one task per file; Spark's readers may run
    more to infer a schema); the rows themselves are read when an action runs on ``df``.
    ``options`` are Spark reader options for csv, json and parquet; Avro takes none.
    """
    _check_format(fmt, options)
    files = _expand(paths)
    return _read_probed(spark, files, _run_probe(spark, files, fmt), fmt, options)


def _check_format(fmt: str, options: dict | None) -> None:
    if fmt not in FORMATS:
        raise OdfChainError(f"unknown input format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "avro" and options:
        raise OdfChainError(f"Avro inputs take no options (got {', '.join(map(str, options))})")


def _read_probed(
    spark: SparkSession, files: list[_Located], probes: list[tuple], fmt: str, options: dict | None
) -> SourceFrame:
    """The DataFrame of files already listed and hashed (``probes``, one per file)."""
    inputs = tuple(InputFile(p[1], p[2], p[3]) for p in probes)
    if fmt == "avro":
        df, schema_text = _read_avro(spark, files, probes)
        return SourceFrame(df, inputs, schema_text)
    return SourceFrame(_read_with_spark(spark, files, fmt, options), inputs, None)
