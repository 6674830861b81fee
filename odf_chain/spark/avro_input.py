"""Avro inputs read with fastavro, distributed: the Spark schema from the writer schema, and
records turned into rows in the tasks, each file hashed again as it is read
(:mod:`odf_chain.spark.inputs` says which Avro types become which Spark types).

Executors import this module: odf_chain must be installed where they run.
"""

from __future__ import annotations

import functools
import io
import operator
from collections.abc import Callable, Iterator
from typing import Any

import blake3
import fastavro
import fastavro.read
import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession, types as st

from odf_chain.errors import FormatError, IntegrityError, NotFoundError, OdfChainError, SchemaError
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.schema._json import canonical, loads
from odf_chain.schema.convert import avro_to_arrow
from odf_chain.spark.input_paths import _Located, _open

MAX_SPARK_NESTING = 100
"""Deepest nesting (structs, lists, maps) accepted in an Avro input's Spark schema: Spark
serialises schemas recursively (in Python and on the JVM) and fails unpredictably far deeper."""


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
