"""A dataset's field paths: which convention applies, and how to find a field's path.

A schema carrying an Avro writer schema in its metadata (data ingested from Avro) keeps the
Avro convention, as DataHub shows Kafka/Avro datasets; every other schema follows the lakehouse
convention DataHub uses for Hive/Glue/Delta tables. For an Avro dataset whose Arrow schema has
moved on from the writer schema (system columns added, a column added by evolution), the Avro
schema is regenerated under the writer's own record name, so existing paths keep their tokens.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from odf_chain.schema.arrow_paths import arrow_field_index, arrow_fields
from odf_chain.schema.avro_terms import AVRO_SCHEMA_KEY
from odf_chain.schema.fields import FieldInfo
from odf_chain.schema.names import ITEM, KEY, VALUE, NamePath, children

_TOKEN = re.compile(r"\[[^\]]*\]\.?")
_STRUCTURAL = {ITEM, KEY, VALUE}


def avro_writer_schema(schema: pa.Schema) -> Any | None:
    """The Avro writer schema a dataset was ingested with, if any (parsed JSON)."""
    raw = (schema.metadata or {}).get(AVRO_SCHEMA_KEY)
    return None if raw is None else json.loads(raw)


def as_avro(schema: pa.Schema) -> Any:
    """The Avro schema whose paths a dataset with an Avro writer schema shows."""
    # the converters (tens of milliseconds to import) load only when such a dataset is met
    from odf_chain.schema.convert import arrow_to_avro

    writer = avro_writer_schema(schema)
    if isinstance(writer, dict) and writer.get("type") == "record":
        name = str(writer.get("name", "Record"))
        namespace = writer.get("namespace")
        if "." in name:
            namespace, name = name.rsplit(".", 1)
        return arrow_to_avro(schema, name=name, namespace=namespace)
    return arrow_to_avro(schema)


def schema_fields(schema: pa.Schema) -> list[FieldInfo]:
    """The schema's v2 fields, in the convention that applies to it."""
    if (schema.metadata or {}).get(AVRO_SCHEMA_KEY) is not None:
        from odf_chain.schema.avro_paths import avro_fields

        return avro_fields(as_avro(schema))
    return arrow_fields(schema)


def field_paths(schema: pa.Schema) -> list[str]:
    return [f.path for f in schema_fields(schema)]


def v1_path(v2_path: str) -> str:
    """The dotted name path inside a v2 path (v2 minus its bracketed tokens), as DataHub's v1."""
    return _TOKEN.sub("", v2_path).strip(".")


def field_index(schema: pa.Schema) -> dict[NamePath, str]:
    """Map each field's name path (``("a", "b")``, list items as ``"[item]"``) to its v2 path.

    Lakehouse schemas use the exact index of :mod:`arrow_paths`. For Avro ones the field is
    found by its v1 name; the first path listed for a name wins (for a union, the union's own).
    """
    if (schema.metadata or {}).get(AVRO_SCHEMA_KEY) is None:
        return arrow_field_index(schema)
    by_v1: dict[str, str] = {}
    for f in schema_fields(schema):
        by_v1.setdefault(v1_path(f.path), f.path)
    index: dict[NamePath, str] = {}
    stack: list[tuple[NamePath, pa.DataType]] = [((f.name,), f.type) for f in schema]
    while stack:
        path, arrow_type = stack.pop()
        dotted = ".".join(p for p in path if p not in _STRUCTURAL)
        if dotted in by_v1:
            index[path] = by_v1[dotted]
        for name, child in children(arrow_type) or ():
            stack.append(((*path, name), child.type))
    return index
