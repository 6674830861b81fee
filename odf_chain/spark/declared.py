"""Step 4 of the write (:mod:`odf_chain.spark.write_frame`): the schema a write declares for the
slices it wrote, the same for both writers.
"""

from __future__ import annotations

import pyarrow as pa

from odf_chain.schema.convert import AVRO_SCHEMA_KEY, avro_to_arrow
from odf_chain.slices import own_metadata, system_fields
from odf_chain.state import DatasetState, Vocabulary


def _schema_to_declare(
    written: pa.Schema, state: DatasetState, avro_schema: str | None
) -> pa.Schema:
    """The SetDataSchema's schema for slices of ``written`` (the Arrow schema they read back
    as, without other tools' metadata): user columns declared as :func:`_declared_schema` says,
    and the dataset's own metadata (an Avro writer schema) carried over."""
    schema = _declared_schema(written, state.schema, state.vocab)
    if avro_schema is not None:
        # the writer schema's names (record names, enum symbols, docs) ride on field metadata,
        # which Spark's schema does not carry: take it from the Avro conversion
        schema = _copy_field_metadata(schema, avro_to_arrow(avro_schema))
        return schema.with_metadata({AVRO_SCHEMA_KEY: avro_schema.encode()})
    if state.schema is not None and own_metadata(state.schema):
        # a dataset keeps its field-path convention when later inputs are not Avro
        return schema.with_metadata(own_metadata(state.schema))
    return schema


def _nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_nullable(f.type)).with_nullable(True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field(t.item_field.name, _nullable(t.item_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field(t.value_field.name, _nullable(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _nullable(t.value_type)))
    return t


def _declared_schema(
    written: pa.Schema, in_force: pa.Schema | None, vocab: Vocabulary
) -> pa.Schema:
    """The schema to declare for what Spark wrote.

    Spark's nullability says more about its plan than about the data (a literal column is
    "required", a computed offset "nullable"), so it is not what gets declared. User columns are
    declared nullable, since DataMine's rules forbid new required fields and what the files hold
    then always fits; system columns as ODF defines them (offset, op and system time required).
    A column the schema in force already declares with the same type keeps that declaration, so
    an unchanged write never changes the schema, whichever writer made the files.
    """
    system = {f.name: f for f in system_fields(vocab)}
    fields = []
    for f in written:
        if f.name in system:
            declared = system[f.name] if system[f.name].type.equals(f.type) else f
        else:
            declared = f.with_type(_nullable(f.type)).with_nullable(True)
        if in_force is not None and f.name in in_force.names:
            known = in_force.field(f.name)
            if _nullable(known.type).equals(_nullable(declared.type)):
                declared = known
        fields.append(declared)
    return pa.schema(fields)


def _copy_field_metadata(schema: pa.Schema, reference: pa.Schema) -> pa.Schema:
    """``schema`` with the field metadata of same-named fields of ``reference`` (nested too)."""

    def merge(f: pa.Field, ref: pa.Field | None) -> pa.Field:
        if ref is None:
            return f
        t = f.type
        if pa.types.is_struct(t) and pa.types.is_struct(ref.type):
            names = {ref.type.field(i).name: ref.type.field(i) for i in range(ref.type.num_fields)}
            t = pa.struct([merge(c, names.get(c.name)) for c in t])
        elif pa.types.is_list(t) and pa.types.is_list(ref.type):
            t = pa.list_(merge(t.value_field, ref.type.value_field))
        elif pa.types.is_map(t) and pa.types.is_map(ref.type):
            t = pa.map_(t.key_type, merge(t.item_field, ref.type.item_field))
        out = f.with_type(t)
        return out.with_metadata(ref.metadata) if ref.metadata else out

    names = set(reference.names)
    return pa.schema(
        [merge(f, reference.field(f.name) if f.name in names else None) for f in schema],
        metadata=schema.metadata,
    )
