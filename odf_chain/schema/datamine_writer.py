"""Arrow -> DataMine document: the writer behind
:func:`odf_chain.schema.datamine.arrow_to_datamine`.

Apart from the reader because it is the other direction of the same mapping (described in
:mod:`odf_chain.schema.datamine`), sharing only the vocabulary of
:mod:`odf_chain.schema.datamine_vocab`. Like the reader it walks with explicit stacks, never
recursing per nesting level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import loads
from odf_chain.schema.datamine_vocab import (
    CONSTRAINTS,
    DEFAULT_KEY,
    FIELD_ID_KEY,
    ID_KEY,
    LIST_PREFIX,
    META,
    PRIMITIVE_TYPES,
    REF,
    SCHEMA_KEY,
    STRUCT,
    TABLE_KEY,
    TYPE_KEY,
    VERSION_KEY,
    base_name,
    canonical_type,
    fail,
    is_int,
    split_type,
)

# --------------------------------------------------------------------------------------------
# Arrow -> document


_LIST_TYPES = tuple(
    getattr(pa.types, name)
    for name in ("is_list", "is_large_list", "is_list_view", "is_large_list_view")
    if hasattr(pa.types, name)
)


def _arrow_primitive(t: pa.DataType) -> str | None:
    checks = (
        ("BYTE", ("is_int8",)),
        ("BOOL", ("is_boolean",)),
        ("INT16", ("is_int16",)),
        ("INT32", ("is_int32",)),
        ("INT64", ("is_int64",)),
        ("FLOAT", ("is_float32",)),
        ("DOUBLE", ("is_float64",)),
        ("STRING", ("is_string", "is_large_string", "is_string_view")),
        ("BINARY", ("is_binary", "is_large_binary", "is_binary_view")),
    )
    for name, predicates in checks:
        for predicate in predicates:
            check = getattr(pa.types, predicate, None)
            if check is not None and check(t):
                return name
    return None


@dataclass(slots=True)
class _Out:
    """A fields list being written: a table's or an inline STRUCT's."""

    table: str
    prefix: str
    fields: list[pa.Field]
    out: list[dict[str, Any]]
    emit: tuple[str, Any] | None = None  # (table name, version) when this node is a table
    i: int = 0
    last_id: int | None = None
    derived_id: int | None = None


class DocumentWriter:
    def __init__(
        self, schema: pa.Schema, table: str, schema_name: str | None, struct_tables: bool
    ) -> None:
        self.schema = schema
        self.table = table
        self.struct_tables = struct_tables
        meta = self._metadata(schema.metadata, table, None)
        recorded = meta.get(SCHEMA_KEY)
        self.schema_name = schema_name or (recorded if isinstance(recorded, str) else table)
        self.version = meta.get(VERSION_KEY)
        # table name -> (struct type, version) of the tables emitted for group types
        self.registry: dict[str, tuple[pa.DataType, Any]] = {}
        self.tables: list[dict[str, Any]] = []

    def run(self) -> dict[str, Any]:
        stack = [_Out(self.table, "", list(self.schema), [], emit=(self.table, self.version))]
        while stack:
            node = stack[-1]
            if node.i == len(node.fields):
                stack.pop()
                if node.emit is not None:
                    entry: dict[str, Any] = {"table": node.emit[0]}
                    if node.emit[1] is not None:
                        entry["version"] = node.emit[1]
                    entry["fields"] = node.out
                    self.tables.append(entry)
                continue
            f = node.fields[node.i]
            node.i += 1
            child = self._field(node, f)
            if child is not None:
                stack.append(child)
        return {"schema": self.schema_name, "table_list": self.tables}

    @staticmethod
    def _metadata(raw: Mapping[bytes, bytes] | None, table: str, label: str | None) -> dict:
        out: dict[str, Any] = {}
        for key, value in (raw or {}).items():
            try:
                k, v = key.decode("utf-8"), value.decode("utf-8")
            except UnicodeDecodeError:
                continue  # not ours
            if k.startswith(META):
                try:
                    out[k] = loads(v, what=f"metadata {k}")
                except SchemaError:
                    fail(table, label, f"metadata {k} is not JSON text: {v!r}")
            else:
                out[k] = v
        return out

    def _field(self, node: _Out, f: pa.Field) -> _Out | None:
        label = node.prefix + f.name
        meta = self._metadata(f.metadata, node.table, label)
        constraints: dict[str, Any] = {}
        for c in CONSTRAINTS:
            if META + c in meta:
                value = meta[META + c]
                if not isinstance(value, bool):
                    fail(node.table, label, f"metadata {META + c} must be true or false")
                constraints[c] = value
        derived = constraints.get("isDerived") is True
        if not f.nullable:
            constraints["isRequired"] = True
        elif constraints.get("isRequired") is True:
            del constraints["isRequired"]  # made optional since (allowed by the evolution rules)
        fid = self._id(node, meta, derived, label)

        t, depth, holder = f.type, 0, f
        while True:
            if any(check(t) for check in _LIST_TYPES):
                depth += 1
                holder = t.value_field
                t = t.value_type
            elif pa.types.is_dictionary(t):
                t = t.value_type
            else:
                break
        child = None
        base = _arrow_primitive(t)
        if base is None:
            if not pa.types.is_struct(t):
                fail(
                    node.table,
                    label,
                    f"Arrow type {f.type} has no DataMine equivalent (DataMine has "
                    f"{', '.join(PRIMITIVE_TYPES)}, STRUCT and List:<type>)",
                )
            struct_meta = (
                meta if holder is f else self._metadata(holder.metadata, node.table, label)
            )
            ref = self._claim(struct_meta.get(TABLE_KEY), t, struct_meta.get(VERSION_KEY))
            if ref is None and self.struct_tables:
                ref = self._claim(self._fresh(f"{node.table}_{label.replace('.', '_')}"), t, None)
            if ref is not None:
                base, new = ref
                if new:
                    child = _Out(base, "", list(t), [], emit=(base, struct_meta.get(VERSION_KEY)))
            else:
                base = STRUCT
                child = _Out(node.table, label + ".", list(t), [])
        canonical = LIST_PREFIX * depth + base
        spelled = meta.get(TYPE_KEY)
        spelled_ok = isinstance(spelled, str) and canonical_type(spelled) == canonical
        out: dict[str, Any] = {
            "id": fid,
            "name": f.name,
            "type": spelled if spelled_ok else canonical,
        }
        if DEFAULT_KEY in meta:
            out["default"] = meta[DEFAULT_KEY]
        for c in CONSTRAINTS:
            if c in constraints:
                out[c] = constraints[c]
        if base == STRUCT and child is not None:
            out["fields"] = child.out
        node.out.append(out)
        return child

    def _id(self, node: _Out, meta: dict[str, Any], derived: bool, label: str) -> int:
        parquet = meta.get(FIELD_ID_KEY)
        if parquet is not None:
            if not re.fullmatch(r"-?[0-9]+", parquet):
                fail(node.table, label, f"{FIELD_ID_KEY} is not an integer: {parquet!r}")
            parquet = int(parquet)
        own = meta.get(ID_KEY)
        if own is not None and not is_int(own):
            fail(node.table, label, f"metadata {ID_KEY} is not an integer: {own!r}")
        fid = (
            (own if own is not None else parquet)
            if derived
            else (parquet if parquet is not None else own)
        )
        if derived:
            if fid is None:
                fid = node.derived_id if node.derived_id is not None else 0
            if node.derived_id is None:
                node.derived_id = fid
        else:
            if fid is None:
                fid = 1 if node.last_id is None else node.last_id + 1
            node.last_id = fid
        return fid

    def _usable(self, name: Any) -> bool:
        return (
            isinstance(name, str)
            and bool(name)
            and name == name.strip()
            and name != self.table
            and base_name(name)[0] == REF
            and split_type(name)[0] == 0
        )

    def _claim(self, name: Any, t: pa.DataType, version: Any) -> tuple[str, bool] | None:
        """Use table ``name`` for struct ``t``: (name, newly emitted) or None if it cannot be."""
        if not self._usable(name):
            return None
        known = self.registry.get(name)
        if known is None:
            self.registry[name] = (t, version)
            return name, True
        if known[1] == version and known[0].equals(t, check_metadata=True):
            return name, False
        return None

    def _fresh(self, name: str) -> str:
        candidate, n = name, 1
        while candidate in self.registry or candidate == self.table:
            n += 1
            candidate = f"{name}_{n}"
        return candidate
