"""A dataset's field paths: which convention applies, and how to find a field's path.

A schema carrying an Avro writer schema in its metadata (data ingested from Avro) keeps the
Avro convention, as DataHub shows Kafka/Avro datasets; every other schema follows the lakehouse
convention DataHub uses for Hive/Glue/Delta tables.
"""

from __future__ import annotations

import re

import pyarrow as pa

from odf_chain.schema.fields import FieldInfo

NamePath = tuple[str, ...]

AVRO_SCHEMA_KEY = b"odf_chain.avro.schema"
_TOKEN = re.compile(r"\[[^\]]*\]\.?")
_STRUCTURAL = {"[item]", "[key]", "[value]"}


def avro_writer_schema(schema: pa.Schema) -> str | None:
    """The Avro writer schema a dataset was ingested with, if any."""
    raw = (schema.metadata or {}).get(AVRO_SCHEMA_KEY)
    return None if raw is None else raw.decode("utf-8")


def schema_fields(schema: pa.Schema) -> list[FieldInfo]:
    """The schema's v2 fields, in the convention that applies to it."""
    from odf_chain.schema.arrow_paths import arrow_fields
    from odf_chain.schema.avro_paths import avro_fields
    from odf_chain.schema.convert import arrow_to_avro

    if avro_writer_schema(schema) is not None:
        return avro_fields(arrow_to_avro(schema))
    return arrow_fields(schema)


def field_paths(schema: pa.Schema) -> list[str]:
    return [f.path for f in schema_fields(schema)]


def v1_path(v2_path: str) -> str:
    """The dotted name path inside a v2 path (v2 minus its bracketed tokens), as DataHub's v1."""
    return _TOKEN.sub("", v2_path).strip(".")


def field_index(schema: pa.Schema) -> dict[NamePath, str]:
    """Map each field's name path (``("a", "b")``, list items as ``"[item]"``) to its v2 path.

    The first path listed for a name wins: for an Avro union that is the path of the union
    itself, for everything else the field's only path.
    """
    by_v1: dict[str, str] = {}
    for f in schema_fields(schema):
        by_v1.setdefault(v1_path(f.path), f.path)
    index: dict[NamePath, str] = {}
    stack: list[tuple[NamePath, pa.DataType]] = [((f.name,), f.type) for f in schema]
    from odf_chain.schema.evolution import children

    while stack:
        path, arrow_type = stack.pop()
        dotted = ".".join(p for p in path if p not in _STRUCTURAL)
        if dotted in by_v1:
            index[path] = by_v1[dotted]
        for name, child in children(arrow_type) or ():
            stack.append(((*path, name), child.type))
    return index
