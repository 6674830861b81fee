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
Each path is a file, a directory (its files, not its subdirectories) or a glob (``*``, ``?``,
``[...]`` in any component; a directory it matches stands for its files). Names starting with
``.`` or ``_`` (``_SUCCESS``, Spark's hidden files) and ``.crc`` files are skipped when listing a
directory or matching a glob, as Spark skips them; a file named explicitly is always read, as
is an existing file whose name merely contains glob characters (``f[1].csv``). Files
are taken in argument order, each directory's and glob's files sorted by name, each file once.
Paths are local paths or ``file://`` URIs; other pyarrow.fs URIs (``s3://``, ``gs://``,
``hdfs://``) are listed, hashed and (for Avro) read through :mod:`pyarrow.fs`, and handed to
Spark's readers as given, so Spark must know the scheme too. ``InputFile.uri`` keeps a URI as it
was given (files found under it are appended, percent-encoded); local paths become
``file:///...`` URIs.

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

import fnmatch
import functools
import glob as _glob
import io
import operator
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import blake3
import fastavro
import fastavro.read
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors.exceptions.base import PySparkException
from pyspark.sql import DataFrame, SparkSession, types as st

from odf_chain import errors as _errors
from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    SchemaError,
    StorageError,
)
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.schema._json import canonical, loads
from odf_chain.schema.convert import avro_to_arrow

if TYPE_CHECKING:
    from odf_chain.dataset import Dataset
    from odf_chain.lineage.recorder import LineageRecorder
    from odf_chain.spark.writer import IngestResult
    from odf_chain.state import DatasetState

__all__ = [
    "FORMATS",
    "MAX_SPARK_NESTING",
    "FileIngest",
    "InputFile",
    "SkippedInput",
    "SourceFrame",
    "file_name",
    "ingest_files",
    "odf_error",
    "read_input",
    "spark_errors",
]

FORMATS = ("avro", "csv", "json", "parquet")
MAX_SPARK_NESTING = 100
"""Deepest nesting (structs, lists, maps) accepted in an Avro input's Spark schema: Spark
serialises schemas recursively (in Python and on the JVM) and fails unpredictably far deeper."""

_DEFAULT_OPTIONS: dict[str, dict[str, str]] = {
    "csv": {"header": "true", "inferSchema": "true", "mode": "FAILFAST"},
    "json": {"mode": "FAILFAST"},
    "parquet": {},
}
_GLOB_SPECIAL = re.compile(r"([\\\[\]*?{}])")
_MESSAGE_LIMIT = 2000


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


def file_name(uri: str) -> str:
    """A file's name: its URI's last component, decoded."""
    return unquote(uri.rstrip("/").rsplit("/", 1)[-1]) or uri


@dataclass(frozen=True, eq=False)
class SourceFrame:
    """What :func:`read_input` returns: the DataFrame, the files it reads (in order) and, for
    Avro inputs, the writer schema JSON text as found in the first file's header."""

    df: DataFrame
    inputs: tuple[InputFile, ...]
    avro_schema: str | None = None


# --------------------------------------------------------------------------------------------
# finding the files


@dataclass(frozen=True, slots=True)
class _Located:
    uri: str
    fs: pafs.FileSystem
    path: str  # the path inside fs

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def spark_path(self) -> str:
        # Spark globs every path it is given: escape the glob characters of a concrete file.
        # Hadoop paths are not percent-encoded, so local files are named by their plain path.
        raw = f"file://{self.path}" if self.is_local else self.uri
        return escape_glob(raw)


def escape_glob(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped: Spark globs every path it reads."""
    return _GLOB_SPECIAL.sub(r"\\\1", path)


def _skipped(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith(".crc")


def _magic_index(parts: list[str]) -> int:
    return next((i for i, part in enumerate(parts) if _glob.has_magic(part)), len(parts))


def _anchor(spec: str) -> tuple[pafs.FileSystem, str, str | None, list[str]]:
    """Where matching starts for one input argument: (filesystem, the path in it before the
    first component with a glob character, that path's URI as given (None for a local path),
    the components left to match)."""
    if spec.startswith("file:"):
        rest = spec[len("file:") :]
        if rest.startswith("//"):
            host, sep, tail = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise OdfChainError(f"input {spec}: file URIs of other hosts are not supported")
            rest = sep + tail
        if not rest.startswith("/"):
            raise OdfChainError(f"input {spec}: a file URI needs an absolute path")
        parts = rest.rstrip("/").split("/")
        i = _magic_index(parts)
        prefix = spec[: len(spec) - len(rest)]
        base = "/".join(parts[:i])
        return pafs.LocalFileSystem(), unquote(base) or "/", prefix + base, _parts(parts[i:])
    if "://" not in spec:
        parts = os.path.abspath(spec).split("/")
        i = _magic_index(parts)
        return pafs.LocalFileSystem(), "/".join(parts[:i]) or "/", None, parts[i:]
    scheme, _, rest = spec.partition("://")
    parts = rest.rstrip("/").split("/")
    i = max(_magic_index(parts), 1)  # the first component is the authority (host, bucket)
    base_uri = f"{scheme}://" + "/".join(parts[:i])
    try:
        fs, base = pafs.FileSystem.from_uri(base_uri)
    except (OSError, ValueError) as e:
        raise OdfChainError(f"input {spec}: not a path or a known URI ({e})") from None
    return fs, base, base_uri, _parts(parts[i:])


def _parts(raw: list[str]) -> list[str]:
    return [unquote(p) for p in raw if p]


def _info(fs: pafs.FileSystem, path: str, spec: str) -> pafs.FileInfo:
    try:
        return fs.get_file_info(path)
    except OSError as e:
        raise StorageError(f"input {spec}: {e}") from None


def _list_dir(fs: pafs.FileSystem, path: str, spec: str) -> list[pafs.FileInfo]:
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError as e:
        raise StorageError(f"input {spec}: cannot list {path}: {e}") from None
    return sorted(infos, key=lambda i: i.base_name)


def _expand_one(spec: str) -> list[_Located]:
    fs, base, base_uri, rest = _anchor(spec)
    literal = "/".join([base.rstrip("/"), *rest])
    if rest and _info(fs, literal, spec).type != pafs.FileType.NotFound:
        # an existing name that merely contains glob characters ("f[1].csv") is taken as it is
        base, rest = literal, []
        base_uri = None if base_uri is None else spec

    def uri_of(rel: list[str]) -> str:
        if base_uri is None:
            return Path(base, *rel).as_uri()
        if not rel:
            return base_uri
        return base_uri.rstrip("/") + "/" + "/".join(quote(r) for r in rel)

    def join(path: str, name: str) -> str:
        return path.rstrip("/") + "/" + name

    # Walk the components left, listing a directory for each one with a glob character.
    candidates: list[tuple[str, list[str]]] = [(base, [])]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        matched: list[tuple[str, list[str]]] = []
        for path, rel in candidates:
            if not _glob.has_magic(part):
                matched.append((join(path, part), [*rel, part]))
                continue
            for info in _list_dir(fs, path, spec):
                name = info.base_name
                if not fnmatch.fnmatchcase(name, part) or (_skipped(name) and not _skipped(part)):
                    continue
                if last or info.type == pafs.FileType.Directory:
                    matched.append((info.path, [*rel, name]))
        candidates = matched

    out: list[_Located] = []
    for path, rel in candidates:
        info = _info(fs, path, spec)
        if info.type == pafs.FileType.File:
            out.append(_Located(uri_of(rel), fs, path))
        elif info.type == pafs.FileType.Directory:
            for entry in _list_dir(fs, path, spec):
                if entry.type == pafs.FileType.File and not _skipped(entry.base_name):
                    out.append(_Located(uri_of([*rel, entry.base_name]), fs, entry.path))
            if not out and not rest:
                raise NotFoundError(f"input {spec}: the directory holds no input files")
        elif not rest:
            raise NotFoundError(f"input {spec} does not exist")
    if not out:
        raise NotFoundError(f"input {spec}: no files match")
    return out


def expand_inputs(paths: Iterable[str]) -> list[str]:
    """The input files ``paths`` name (globs expanded, folders listed), as URIs; a missing
    input raises :class:`NotFoundError` naming it. Reads listings only: callers check inputs
    with it before starting Spark."""
    return [located.uri for located in _expand(paths)]


def _expand(paths: Iterable[str]) -> list[_Located]:
    if isinstance(paths, str | bytes | os.PathLike):
        raise OdfChainError("read_input takes a list of paths, not a single path")
    out: list[_Located] = []
    seen: set[tuple[str, str]] = set()
    for spec in paths:
        spec = os.fspath(spec)
        if not spec:
            raise OdfChainError("an input path is empty")
        for located in _expand_one(spec):
            key = (located.fs.type_name, located.path)
            if key not in seen:
                seen.add(key)
                out.append(located)
    if not out:
        raise NotFoundError("no input paths given")
    return out


# --------------------------------------------------------------------------------------------
# the probe job: hash every file (and read Avro headers, check Parquet footers) on executors


def _open(fs: pafs.FileSystem, path: str):
    if isinstance(fs, pafs.LocalFileSystem):
        return open(path, "rb")
    return fs.open_input_file(path)


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
# Avro: Spark schema from the writer schema, records -> tuples on executors


_SIMPLE_TYPES: dict[pa.DataType, type[st.DataType]] = {
    pa.null(): st.NullType,
    pa.bool_(): st.BooleanType,
    pa.int32(): st.IntegerType,
    pa.int64(): st.LongType,
    pa.float32(): st.FloatType,
    pa.float64(): st.DoubleType,
    pa.string(): st.StringType,
    pa.binary(): st.BinaryType,
    pa.date32(): st.DateType,
    pa.time32("ms"): st.IntegerType,  # time-millis: milliseconds after midnight
    pa.time64("us"): st.LongType,  # time-micros: microseconds after midnight
}


def _spark_type(t: pa.DataType, where: str, depth: int) -> st.DataType:
    """The Spark type of an Arrow type that ``avro_to_arrow`` produces (see the module doc).

    Not pyspark's ``from_arrow_type``: that maps time64 to ``TimeType`` (which Spark cannot
    write to Parquet), has no time32, and takes nanosecond timestamps as microsecond ones."""
    if depth > MAX_SPARK_NESTING:
        raise SchemaError(
            f"field {where}: the schema nests deeper than {MAX_SPARK_NESTING} levels, "
            "more than Spark schemas can reliably hold"
        )
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]()
    if pa.types.is_fixed_size_binary(t):
        return st.BinaryType()
    if pa.types.is_dictionary(t):  # enums
        return _spark_type(t.value_type, where, depth)
    if pa.types.is_timestamp(t):
        if t.unit == "ns":  # timestamp-nanos: Spark timestamps hold microseconds
            return st.LongType()
        return st.TimestampType() if t.tz is not None else st.TimestampNTZType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaError(
                f"field {where}: decimal({t.precision}, {t.scale}) has more digits than Spark "
                "decimals hold (38)"
            )
        return st.DecimalType(t.precision, t.scale)
    if pa.types.is_struct(t):
        return st.StructType(
            [
                st.StructField(
                    f.name,
                    _spark_type(f.type, f"{where}.{f.name}", depth + 1),
                    nullable=f.nullable,
                )
                for f in t
            ]
        )
    if pa.types.is_list(t):
        item = t.value_field
        return st.ArrayType(
            _spark_type(item.type, f"{where}.[item]", depth + 1),
            containsNull=item.nullable,
        )
    if pa.types.is_map(t):
        value = t.item_field
        return st.MapType(
            st.StringType(),
            _spark_type(value.type, f"{where}.[value]", depth + 1),
            valueContainsNull=value.nullable,
        )
    raise SchemaError(f"field {where}: Arrow type {t} has no Spark equivalent")  # pragma: no cover


def _spark_schema(avro_schema: str, uri: str) -> st.StructType:
    try:
        arrow = avro_to_arrow(avro_schema)
        return st.StructType(
            [st.StructField(f.name, _spark_type(f.type, f.name, 1), f.nullable) for f in arrow]
        )
    except SchemaError as e:
        raise SchemaError(f"{uri}: {e}") from None


def _time_millis(t: Any) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + t.microsecond // 1000


def _time_micros(t: Any) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


# fastavro converts a logical type when "<underlying type>-<logical type>" is one of its readers;
# these are the conversions whose Python values Spark cannot take as they are.
_LOGICAL_FIXES: dict[str, Callable[[Any], Any]] = {
    "string-uuid": str,
    "int-time-millis": _time_millis,
    "long-time-micros": _time_micros,
}

Convert = Callable[[Any], Any] | None  # None: the value is fine as fastavro returns it


def _converter(schema: Any) -> Convert:
    """How to turn what fastavro returns for a (parsed, expanded) Avro schema into what Spark
    takes for the matching type; None when it already is. Spark takes records as dicts, so a
    record is rebuilt only when one of its fields needs converting."""
    if isinstance(schema, list):  # a union: avro_to_arrow allows one non-null member at most
        members = [m for m in schema if m != "null"]
        inner = _converter(members[0]) if members else None
        if inner is None:
            return None
        if len(members) < len(schema):
            return lambda v: None if v is None else inner(v)
        return inner
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, dict | list):
        return _converter(kind)
    logical = schema.get("logicalType")
    if isinstance(logical, str) and f"{kind}-{logical}" in fastavro.read.LOGICAL_READERS:
        return _LOGICAL_FIXES.get(f"{kind}-{logical}")
    if kind in ("record", "error"):
        fields = [(f["name"], _converter(f["type"])) for f in schema["fields"]]
        if all(c is None for _, c in fields):
            return None

        def record(rec: dict) -> dict:
            return {n: rec[n] if c is None else c(rec[n]) for n, c in fields}

        return record
    if kind == "array":
        item = _converter(schema["items"])
        return None if item is None else (lambda xs: [item(x) for x in xs])
    if kind == "map":
        value = _converter(schema["values"])
        return None if value is None else (lambda m: {k: value(v) for k, v in m.items()})
    return None


def _row_builder(schema_text: str) -> Callable[[dict], tuple]:
    """A function from one fastavro record (a dict) to the tuple of the DataFrame row."""
    parsed = fastavro.parse_schema(loads(schema_text, what="the Avro schema"), expand=True)
    fields = [(f["name"], _converter(f["type"])) for f in parsed["fields"]]
    names = [n for n, _ in fields]
    if all(c is None for _, c in fields):
        if len(names) == 1:
            name = names[0]
            return lambda rec: (rec[name],)
        return operator.itemgetter(*names)  # type: ignore[return-value]
    return lambda rec: tuple(rec[n] if c is None else c(rec[n]) for n, c in fields)


class _HashingReader(io.RawIOBase):
    """A read-only stream that hashes what passes through it."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._hasher = blake3.blake3()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self._hasher.update(data)
        self.size += n
        return n

    def multihash(self) -> str:
        return Multihash(BLAKE3, self._hasher.digest()).to_multibase()


def _read_avro_files(
    schema_text: str, items: Iterator[tuple[str, pafs.FileSystem, str, int, str]]
) -> Iterator[tuple]:
    """Runs in a task: the rows of the task's Avro file(s), as tuples. Each file is hashed as it
    is read, and must still be the file that was listed."""
    row = _row_builder(schema_text)
    for uri, fs, path, size, expected in items:
        try:
            with _open(fs, path) as raw:
                stream = _HashingReader(raw)
                buffered = io.BufferedReader(stream, 1 << 16)
                for record in fastavro.reader(buffered):
                    yield row(record)
                buffered.read()  # the rest of the file, for the hash
        except OdfChainError:
            raise
        except FileNotFoundError as e:
            raise NotFoundError(f"{uri}: the Avro input file disappeared: {e}") from None
        except Exception as e:  # fastavro's errors are not one hierarchy
            raise FormatError(
                f"{uri}: cannot read Avro records ({type(e).__name__}: {e})"
            ) from None
        found = stream.multihash()
        if found != expected or stream.size != size:
            raise IntegrityError(
                f"{uri}: the Avro input file changed after it was listed: expected {expected} "
                f"({size} bytes), read {found} ({stream.size} bytes)"
            )


def _read_avro(
    spark: SparkSession, files: list[_Located], probes: list[tuple]
) -> tuple[DataFrame, str]:
    texts = [p[4] for p in probes]
    first = texts[0]
    key = canonical(loads(first, what=f"the Avro schema of {files[0].uri}"))
    for located, text in zip(files[1:], texts[1:], strict=True):
        if (
            text != first
            and canonical(loads(text, what=f"the Avro schema of {located.uri}")) != key
        ):
            raise SchemaError(
                f"Avro inputs must share one writer schema: {files[0].uri} and {located.uri} "
                "have different ones"
            )
    schema = _spark_schema(first, files[0].uri)
    items = [(f.uri, f.fs, f.path, p[2], p[3]) for f, p in zip(files, probes, strict=True)]

    rdd = spark.sparkContext.parallelize(items, len(items))
    rdd = rdd.mapPartitions(functools.partial(_read_avro_files, first))
    return spark.createDataFrame(rdd, schema, verifySchema=False), first


# --------------------------------------------------------------------------------------------
# errors raised on executors


_WORKER_ERROR = re.compile(r"odf_chain\.errors\.(\w+): ([^\n]*)")
_FAILED_READ = re.compile(r"\[FAILED_READ_FILE[\w.]*\] [^\n]*? reading file (\S+?)\.?\s+SQLSTATE")
_CAUSE = re.compile(r"Caused by: [\w.$]+: ([^\n]*)")


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
        causes = _CAUSE.findall(text)
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


# --------------------------------------------------------------------------------------------
# ingesting files, each content once


@dataclass(frozen=True, slots=True)
class SkippedInput:
    """An input file :func:`ingest_files` left out: its content is already in the dataset (at
    block ``block``, read then from ``same_as``), or ``block`` is None and an earlier input of
    the same call, ``same_as``, has the same bytes."""

    file: InputFile
    block: int | None
    same_as: str


@dataclass(frozen=True)
class FileIngest:
    """What :func:`ingest_files` did: the files it ingested, those it skipped, and the write's
    result (None when every file was skipped: nothing was read or appended)."""

    inputs: tuple[InputFile, ...]
    skipped: tuple[SkippedInput, ...]
    result: IngestResult | None


def ingest_files(
    spark: SparkSession,
    dataset: str | Path | Dataset,
    paths: list[str],
    fmt: str,
    *,
    options: dict | None = None,
    allow_duplicates: bool = False,
    event_time: str | None = None,
    job_name: str = "odf-chain ingest",
    create: bool = False,
    **write_options: Any,
) -> FileIngest:
    """Ingest input files into ``dataset``, each content once: what ``odf-chain ingest`` does.

    The files are listed and hashed (:func:`read_input`'s first step); those whose content
    hash the dataset already records as an ingested input (``replay.ingested_inputs``), and
    repeats of a content within this call, are skipped before Spark reads any row; the rest
    are read and appended by :func:`odf_chain.spark.write` with their stated lineage, each
    file (URI, size, BLAKE3 hash) recorded as the source of every AddData.
    ``allow_duplicates`` ingests every file given. ``write_options`` go to ``write``
    (``hash``, ``truncate_timestamps``, ``transaction``, ...).

    Another writer may ingest the same files meanwhile: when blocks appended after the lookup
    name one of them, nothing is appended and :class:`ConflictError` says so (run it again:
    they are then skipped).
    """
    from odf_chain.dataset import Dataset
    from odf_chain.replay import ingested_inputs
    from odf_chain.spark.workers import use_this_python
    from odf_chain.spark.writer import write

    _check_format(fmt, options)
    use_this_python(spark)
    files = _expand(paths)
    target: str | Path | Dataset = dataset
    if not isinstance(target, Dataset):
        try:
            target = Dataset.open(target)
        except NotFoundError:
            if not create:
                raise
    base = target.refresh().head if isinstance(target, Dataset) else None  # None: write creates it
    known = (
        {}
        if allow_duplicates or not isinstance(target, Dataset)
        else ingested_inputs(target.storage, base)
    )
    probes = _run_probe(spark, files, fmt)

    kept: list[tuple[_Located, tuple]] = []
    skipped: list[SkippedInput] = []
    first_of: dict[str, str] = {}  # content hash -> the first input of this call holding it
    for located, probe in zip(files, probes, strict=True):
        item = InputFile(probe[1], probe[2], probe[3])
        recorded = known.get(item.blake3)
        if recorded is not None:
            skipped.append(SkippedInput(item, recorded.sequence_number, recorded.uri))
        elif not allow_duplicates and item.blake3 in first_of:
            skipped.append(SkippedInput(item, None, first_of[item.blake3]))
        else:
            first_of.setdefault(item.blake3, item.uri)
            kept.append((located, probe))
    if not kept:
        return FileIngest((), tuple(skipped), None)

    frame = _read_probed(spark, [k[0] for k in kept], [k[1] for k in kept], fmt, options)

    def not_ingested_meanwhile(written: Dataset, state: DatasetState) -> None:
        if allow_duplicates or base is None or state.head == base:
            return  # (base None: a new dataset, whose first head move expects no head at all)
        meanwhile = ingested_inputs(written.storage, state.head, since=base)
        clash = [i for i in frame.inputs if i.blake3 in meanwhile]
        if clash:
            block = min(meanwhile[i.blake3].sequence_number for i in clash)
            raise ConflictError(
                f"{written.location}: another writer ingested {len(clash)} of these input "
                f"files meanwhile (from block {block}: {_names(clash)}); nothing was appended: "
                "run it again and they will be skipped"
            )

    def rows_from_every_file(per_file: dict[str, int]) -> None:
        if fmt in ("csv", "json"):  # a Parquet or Avro file without rows says so itself
            _refuse_rowless(kept, per_file, fmt, options)

    result = write(
        frame.df,
        target,
        event_time=event_time,
        create=create,
        avro_schema=frame.avro_schema,
        lineage=ingest_lineage(frame, job_name),
        source={
            "format": fmt,
            "inputs": [{"uri": i.uri, "size": i.size, "hash": i.blake3} for i in frame.inputs],
        },
        _check_state=not_ingested_meanwhile,
        _input=f"input {_names(frame.inputs)}",
        _check_rows=rows_from_every_file,
        **write_options,
    )
    return FileIngest(frame.inputs, tuple(skipped), result)


_HEADER_BYTES = 1 << 20  # a header-only file longer than this is not taken as one


def _file_key(uri: str) -> str:
    """A file's URI as Spark's ``input_file_name`` and :func:`_expand` both spell it, decoded
    (``file:/x``, ``file:///x`` -> ``/x``)."""
    text = unquote(uri)
    if text.startswith("file:"):
        text = "/" + text[len("file:") :].lstrip("/")
    return text


def _refuse_rowless(
    kept: list[tuple[_Located, tuple]], per_file: dict[str, int], fmt: str, options: dict | None
) -> None:
    """Refuse text inputs that hold bytes but gave no rows (a file in another format, the wrong
    options), before anything is written; a file that is explicitly empty passes: no bytes, only
    blank lines, or (CSV with a header) a header line alone."""
    read = {_file_key(name) for name, rows in per_file.items() if rows}
    rowless = [
        (located, probe)
        for located, probe in kept
        if probe[2] and _file_key(located.uri) not in read and _file_key(probe[1]) not in read
    ]
    opts = {**_DEFAULT_OPTIONS[fmt], **{k: _option(v) for k, v in (options or {}).items()}}
    header = fmt == "csv" and opts.get("header", "false").lower() == "true"
    encoding = opts.get("encoding", opts.get("charset", "utf-8"))
    refused = [
        InputFile(probe[1], probe[2], probe[3])
        for located, probe in rowless
        if not _explicitly_empty(located, header, encoding)
    ]
    if refused:
        size = sum(f.size for f in refused)
        raise FormatError(
            f"input {_names(refused)}: no rows read as {fmt} from {size} bytes; is the input "
            f"in the format given (--format {fmt})? nothing was ingested"
        )


def _explicitly_empty(located: _Located, header: bool, encoding: str) -> bool:
    """Does the file hold no data by its content: text of blank lines, plus one line if it
    starts with a header? (Read on the driver, only for the files that gave no rows.)"""
    try:
        with _open(located.fs, located.path) as fh:
            data = fh.read(_HEADER_BYTES + 1)
    except OSError:
        return False
    if len(data) > _HEADER_BYTES or (
        b"\x00" in data and encoding.lower().replace("-", "") == "utf8"
    ):
        return False
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return False
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) <= (1 if header else 0)


def _names(files: Iterable[InputFile], limit: int = 5) -> str:
    names = [f.name for f in files]
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------------------------
# lineage of an ingest


def ingest_lineage(frame: SourceFrame, job_name: str) -> LineageRecorder:
    """The field lineage of ingesting ``frame`` as it is: every column copied from the column of
    the same name in each input file, the files pinned by their content hashes (as listed).

    Stated, not captured: the plan of an Avro read is an RDD round trip that capture could
    only call opaque, and the files were already hashed when they were listed. The column taken
    as the event time keeps its name (the vocabulary names it), so it too is a copy.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from odf_chain.events import FieldOperation, InputField
    from odf_chain.lineage.recorder import LineageRecorder
    from odf_chain.schema.convert import AVRO_SCHEMA_KEY
    from odf_chain.schema.evolution import ITEM, KEY, VALUE
    from odf_chain.schema.paths import field_index

    schema = to_arrow_schema(frame.df.schema, timezone="UTC")
    if frame.avro_schema is not None:
        schema = avro_to_arrow(frame.avro_schema).with_metadata(
            {AVRO_SCHEMA_KEY: frame.avro_schema.encode()}
        )
    paths = field_index(schema)
    recorder = LineageRecorder(job_name)
    names: list[str] = []
    for item in frame.inputs:
        base = unquote(item.uri.rstrip("/").rsplit("/", 1)[-1]) or "input"
        name, n = base, 1
        while name in names:  # two files of one name in different folders
            n += 1
            name = f"{base} ({n})"
        recorder.external_input(name, item.uri, content_hash=Multihash.from_multibase(item.blake3))
        names.append(name)
    # every field, nested ones too, so that lineage asked of ``location.lat`` reaches the files
    structural = {ITEM, KEY, VALUE}
    top = set(frame.df.columns)
    done: set[str] = set()
    for name_path, source_path in sorted(paths.items(), key=lambda item: item[0]):
        dotted = ".".join(part for part in name_path if part not in structural)
        if name_path[0] not in top or dotted in done:  # a map's values: the map's own name
            continue
        done.add(dotted)
        recorder.record(
            FieldOperation(
                f"read {dotted}",
                tuple(InputField(name, source_path) for name in names),
                (dotted,),
                description=f"field {dotted!r} as read from the input files",
            )
        )
    return recorder
