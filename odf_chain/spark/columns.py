"""The columns of a write: the DataFrame as it will be stored (system columns, the event time, user
columns laid out as the schema in force), types adopted from the schema in force, and the
checks on names made before Spark runs any job.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema.widening import Narrowing, adopt_schema
from odf_chain.spark.arrow_tasks import arrow_schema_of
from odf_chain.state import Vocabulary


def _quoted(name: str) -> str:
    """A column name as Spark's column parser reads it literally (dots, backticks and all)."""
    return "`" + name.replace("`", "``") + "`"


def _user_columns(rest: list[str], in_force: pa.Schema | None, system: set[str]) -> list:
    """User columns laid out like the schema in force: its columns in its order (a nullable
    one the input lacks becomes nulls of its type), then new columns. Writing the same data in
    another column order, or without an optional column, is then no schema change."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    if in_force is None:
        return [F.col(_quoted(c)) for c in rest]
    present = set(rest)
    columns = []
    for f in in_force:
        if f.name in system:
            continue
        if f.name in present:
            columns.append(F.col(_quoted(f.name)))
        elif f.nullable:
            try:
                spark_type = from_arrow_type(f.type)
            except Exception:  # no Spark type for it: leave it out, the evolution check decides
                continue
            columns.append(F.lit(None).cast(spark_type).alias(f.name))
    known = set(in_force.names)
    columns += [F.col(_quoted(c)) for c in rest if c not in known]
    return columns


def _adopt_declared_types(
    df, in_force: pa.Schema | None, vocab: Vocabulary, event_time: str | None
) -> tuple[Any, list[Narrowing]]:
    """``df`` with each column whose type widens into the type the schema in force declares
    (int into long, float into double, member by member inside structs, arrays and maps) cast
    to it, so the write adopts the schema in force instead of changing it; and the fields of
    any other type, which the write refuses (:func:`refuse_narrowing`) once the count has
    found rows, before any file or block. :mod:`odf_chain.schema.widening` decides, for
    Dataset.write as well."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructType

    if in_force is None:
        return df, []
    skip = {*vocab.system_columns, vocab.event_time_column, event_time}
    declared = set(in_force.names)
    stored = []
    for f in df.schema.fields:
        if f.name in skip or f.name not in declared:
            continue
        with contextlib.suppress(SchemaError):  # no Arrow form: the writer says so, later
            stored.append(arrow_schema_of(StructType([f])).field(0))
    adopted, narrowed = adopt_schema(pa.schema(stored), in_force)
    casts = {
        a.name: from_arrow_type(a.type)
        for a, given in zip(adopted, stored, strict=True)
        if not a.type.equals(given.type)
    }
    if not casts:
        return df, narrowed
    return df.select(
        *[
            F.col(_quoted(c)).cast(casts[c]).alias(c) if c in casts else F.col(_quoted(c))
            for c in df.columns
        ]
    ), narrowed


def _names_only(schema) -> pa.Schema:
    """The names and nesting of a Spark schema as an Arrow schema, for the new-column check
    (which needs no more, and so runs on the DataFrame's schema before any Spark job).

    Structs, arrays and maps keep their shape; every leaf becomes a binary placeholder, so no
    Spark type (UDTs, intervals, variants) can make the conversion fail.
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    def convert(t) -> pa.DataType:
        if isinstance(t, StructType):
            return pa.struct([pa.field(f.name, convert(f.dataType)) for f in t.fields])
        if isinstance(t, ArrayType):
            return pa.list_(convert(t.elementType))
        if isinstance(t, MapType):
            return pa.map_(convert(t.keyType), convert(t.valueType))
        return pa.binary()

    return pa.schema([pa.field(f.name, convert(f.dataType)) for f in schema.fields])


def _refuse_duplicate_columns(df) -> None:
    """A dataset's columns have one name each (a join's ``select("*")`` can give two)."""
    seen: dict[str, str] = {}
    for name in df.columns:
        twin = seen.setdefault(name.lower(), name)  # Spark resolves names case-insensitively
        if twin is not name:
            raise SchemaError(
                f"the DataFrame has two columns named {twin!r} and {name!r}; a dataset's columns "
                "need distinct names (select or rename them after the join)"
            )


def _with_system_columns(
    df,
    vocab: Vocabulary,
    system_time: datetime,
    in_force: pa.Schema | None,
):
    """The DataFrame as it will be stored, minus the offsets (added per partition later).

    The event time is the column the vocabulary names, under its own name (a write given
    ``event_time=`` has made it the vocabulary's, see :func:`write`), a timestamp. A date is
    its day's midnight in UTC (Spark's cast takes the session zone's: another instant), or
    stays a date where the dataset declares one; text is cast, and text the cast cannot read
    fails the write, naming it (without ANSI mode the cast makes it null); other types are
    cast as Spark casts them. An input without it gets the transaction's system time there.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, StringType, TimestampType

    reserved = vocab.spark_clashes(df.columns)
    if reserved:
        raise SchemaError(
            f"column(s) {', '.join(reserved)} are reserved for ODF system columns; rename them"
        )
    time_literal = F.lit(system_time).cast("timestamp")
    column = vocab.event_time_column
    if column in df.columns:
        kind = df.schema[column].dataType
        event = F.col(_quoted(column))
        declared = None if in_force is None or column not in in_force.names else in_force
        if isinstance(kind, DateType):
            if declared is None or not pa.types.is_date(declared.field(column).type):
                event = F.timestamp_seconds(F.unix_date(event) * 86400)
        elif isinstance(kind, StringType):
            cast = event.cast("timestamp")
            unread = F.concat(
                F.lit(f"event time column {column!r}: "), event, F.lit(" is not a time Spark reads")
            )
            event = F.when(event.isNotNull() & cast.isNull(), F.raise_error(unread)).otherwise(cast)
        elif not isinstance(kind, TimestampType):
            event = event.cast("timestamp")
        event = event.alias(column)
        rest = [c for c in df.columns if c != column]
    else:
        event = time_literal.alias(column)
        rest = list(df.columns)
    return df.select(
        F.lit(0).cast("int").alias(vocab.operation_type_column),
        time_literal.alias(vocab.system_time_column),
        event,
        *_user_columns(rest, in_force, {*vocab.system_columns, column}),
    )
