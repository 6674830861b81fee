"""DataMine IDL (``../shared/seeds/datamine-idl.txt``) <-> Arrow schemas.

A DataMine document is the seed's JSON form::

    {"schema": "attribution",
     "table_list": [
       {"table": "attribution_result_rule", "version": 2,          # version is optional
        "fields": [
          {"id": 1, "name": "run_num", "type": "Byte", "isRequired": true, "isAscSortKey": true},
          {"id": 0, "name": "note", "type": "String", "default": "\\"Unknown\\"",
           "isDerived": true}]},
       {"table": "attribution_result",
        "fields": [
          {"id": 3, "name": "rules", "type": "List:attribution_result_rule"}]}]}

What is accepted (each choice follows the seed; where the seed is loose, the loose reading):

* The schema's name under ``schema`` (the JSON section) or ``name`` (the element section); a
  ``schema`` object holding ``name`` and ``table_list`` is unwrapped; a bare table object
  (``table`` + ``fields``) is a one-table schema named after its table.
* Constraints as flat keys on the field (the seed's JSON form and example) and/or inside a
  ``constraints`` object (the element section), either ``{"isRequired": true}`` or a list of
  constraint names. Values are booleans; a constraint given both ways must agree.
* Types, case-insensitively, in both of the seed's spellings: ``BYTE``/``Byte``, ``BOOL``/
  ``Boolean``, ``INT16``/``Short``, ``INT32``/``Integer``, ``INT64``/``Long``, ``FLOAT``,
  ``DOUBLE``, ``STRING``, ``BINARY``; collections as ``List:<type>`` (nestable, any case of
  ``List:``); group types either by the name of another table of the document (the seed's
  ``List:attribution_result_rule``, ``provider_user_id (STRUCT)``) or inline as ``"type":
  "STRUCT"`` (or ``List:STRUCT``) with the struct's own ``fields`` on the field.

The seed's rules, checked in every fields list (a table or an inline STRUCT); each failure is a
:class:`~odf_chain.errors.SchemaError` naming the table and the field:

* ``id`` increases from field to field (strictly), except for derived fields, which all share one
  id (the seed: "all derived fields have the same id (e.g., 0)") that no stored field may use;
* at most one sort key (``isAscSortKey`` or ``isDesSortKey``, not both on one field);
* a derived field is optional and primitive;
* field names are unique; every type is known; required keys are present; unknown keys are
  refused (a misspelt constraint must not pass silently); references between tables must not
  form a cycle.

Names outside the seed's recommended pattern ``^[a-zA-Z][a-zA-Z0-9_]*$`` (schema, table and
field names), names differing only in case, and a default on a required field (the seed: a
default is for optional fields) are :class:`DataMineWarning` s, not errors.

Arrow mapping: BYTE int8, BOOL bool, INT16 int16, INT32 int32, INT64 int64, FLOAT float32,
DOUBLE float64, STRING string, BINARY binary, STRUCT struct, ``List:X`` list<element: X> (the
item is named ``element``, as Parquet's compliant list layout and Spark name it, so a schema
survives a Parquet file unchanged); ``isRequired`` makes the field non-nullable. Kept in field
metadata, values as JSON text:

* ``PARQUET:field_id`` - the field id, which pyarrow's Parquet writer stores as the column's
  field id. Derived fields are not stored physically and share one id, so theirs goes to
  ``datamine.id`` instead (a reader resolving columns by id must not confuse them);
* ``datamine.<constraint>`` for every constraint the document gives, ``datamine.default``;
* ``datamine.type`` - the type as spelt, when not canonical (``Integer``, ``list:short``);
* ``datamine.table`` / ``datamine.version`` on the struct field of a group type that names a
  table (for ``List:X`` that is the list's element field);
* schema metadata ``datamine.schema``, ``datamine.table`` and ``datamine.version``.

:func:`arrow_to_datamine` reads all of that back, so document -> Arrow -> document and Arrow ->
document -> Arrow are lossless (constraints come back as flat keys, the seed's JSON form). For
other Arrow schemas: large/view string, binary and list variants and dictionary encoding map
like their plain types; ids are assigned in order where absent; list item nullability is not
expressible in DataMine (items come back nullable); types with no DataMine equivalent (unsigned
and decimal numbers, temporal types, maps, fixed-size types, ...) are a SchemaError naming the
field. Structs are written inline unless they carry a table name (or ``struct_tables=True``):
JSON text nests three levels per STRUCT level, so the standard library's ``json`` cannot write
an inline STRUCT nested a few hundred levels deep (reading one works: documents, and JSON values
in them, are read and written at any depth by :mod:`odf_chain.schema._json`), while the table
form stays flat.

Nothing here recurses per nesting level: deep documents and schemas are walked with explicit
stacks.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field as dc_field
from typing import Any

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import dumps
from odf_chain.schema.datamine_vocab import (
    CONSTRAINTS,
    DEFAULT_KEY,
    FIELD_ID_KEY,
    FIELD_KEYS,
    ID_KEY,
    INLINE,
    LIST_ITEM_NAME,
    LIST_PREFIX,
    MAX_ID,
    META,
    NAME_PATTERN,
    PATTERN_TEXT,
    PRIM,
    PRIMITIVE_TYPES,
    REF,
    SCHEMA_KEY,
    SCHEMA_KEYS,
    TABLE_KEY,
    TABLE_KEYS,
    TYPE_HELP,
    TYPE_KEY,
    VERSION_KEY,
    DataMineWarning,
    base_name,
    fail,
    is_int,
    load_document,
    split_type,
    warn,
)
from odf_chain.schema.datamine_writer import DocumentWriter

__all__ = [
    "CONSTRAINTS",
    "NAME_PATTERN",
    "PRIMITIVE_TYPES",
    "DataMineSchema",
    "DataMineWarning",
    "arrow_to_datamine",
    "datamine_to_arrow",
    "parse_datamine",
]


# --------------------------------------------------------------------------------------------
# public API


@dataclass(frozen=True, slots=True)
class DataMineSchema:
    """A parsed DataMine document: the schema's name and, in document order, each table's name,
    version (None when the document gives none) and Arrow schema."""

    name: str
    tables: tuple[tuple[str, int | None, pa.Schema], ...]

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.tables)

    def table(self, name: str) -> pa.Schema:
        """The Arrow schema of table ``name``."""
        return self._entry(name)[2]

    def version(self, name: str) -> int | None:
        """The version of table ``name`` (None when the document gives none)."""
        return self._entry(name)[1]

    def _entry(self, name: str) -> tuple[str, int | None, pa.Schema]:
        for entry in self.tables:
            if entry[0] == name:
                return entry
        raise SchemaError(
            f"DataMine schema {self.name!r} has no table {name!r} "
            f"(tables: {', '.join(self.table_names)})"
        )


def parse_datamine(doc: str | bytes | Mapping[str, Any]) -> DataMineSchema:
    """Parse and check a DataMine document (JSON text or the decoded object).

    Raises :class:`SchemaError` naming the table and field for a malformed document or one
    that breaks the seed's rules; warns :class:`DataMineWarning` for names outside the
    recommended pattern.
    """
    try:
        return _Parser(load_document(doc)).run()
    except RecursionError:  # a safety net: nothing here recurses per level, but values may
        raise SchemaError("DataMine document is nested too deeply") from None


def datamine_to_arrow(doc: str | bytes | Mapping[str, Any], table: str | None = None) -> pa.Schema:
    """The Arrow schema of one table of a DataMine document.

    ``table`` may be omitted when the document has a single table; otherwise it is required
    (the error lists the table names).
    """
    parsed = parse_datamine(doc)
    if table is None:
        if len(parsed.tables) != 1:
            raise SchemaError(
                f"DataMine schema {parsed.name!r} has {len(parsed.tables)} tables "
                f"({', '.join(parsed.table_names)}); say which one (table=...)"
            )
        return parsed.tables[0][2]
    return parsed.table(table)


def arrow_to_datamine(
    schema: pa.Schema,
    table: str,
    schema_name: str | None = None,
    *,
    struct_tables: bool = False,
) -> dict[str, Any]:
    """The DataMine document (JSON form, as a dict) describing ``schema`` as table ``table``.

    ``schema_name`` defaults to the name recorded by :func:`datamine_to_arrow`, else ``table``.
    Structs that came from a table reference become that table again (listed before the tables
    that use it); other structs are written inline (``"type": "STRUCT"`` with ``fields``), or,
    with ``struct_tables=True``, as tables of their own named ``<table>_<field path>``: that
    form stays flat in JSON text however deep the nesting. The result is checked like any
    parsed document.
    """
    if not isinstance(schema, pa.Schema):
        raise SchemaError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
    if not isinstance(table, str) or not table:
        raise SchemaError(f"DataMine table name must be a non-empty string, got {table!r}")
    try:
        doc = DocumentWriter(schema, table, schema_name, struct_tables).run()
        parse_datamine(doc)
    except RecursionError:
        raise SchemaError(f"DataMine table {table!r}: schema is nested too deeply") from None
    return doc


# --------------------------------------------------------------------------------------------
# document -> Arrow


@dataclass(slots=True)
class _Spec:
    """One field of a fields list, checked and normalised."""

    label: str
    name: str
    id: int
    required: bool
    derived: bool
    depth: int  # number of List: levels
    kind: int  # PRIM, INLINE or REF
    base: str  # canonical primitive name, "STRUCT" or a table name
    child: int  # node index of the struct's fields (inline struct or referenced table)
    spelled: str
    default: str | None  # JSON text
    constraints: dict[str, bool]


@dataclass(slots=True)
class _Node:
    """A fields list: a table's (prefix "") or an inline STRUCT's (prefix "<field path>.")."""

    table: str
    prefix: str
    raw: Any
    specs: list[_Spec] = dc_field(default_factory=list)
    arrow: list[pa.Field] = dc_field(default_factory=list)


class _Parser:
    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        self.name = ""
        self.nodes: list[_Node] = []
        self.table_nodes: dict[str, int] = {}
        self.versions: dict[str, int | None] = {}

    def run(self) -> DataMineSchema:
        tables = self._read_schema()
        for name, version, fields in tables:
            self.table_nodes[name] = len(self.nodes)
            self.versions[name] = version
            self.nodes.append(_Node(name, "", fields))
        i = 0
        while i < len(self.nodes):  # inline STRUCTs append their nodes as they are found
            self._read_fields(self.nodes[i])
            i += 1
        self._build()
        out = []
        for name, version, _ in tables:
            metadata = {SCHEMA_KEY: dumps(self.name), TABLE_KEY: dumps(name)}
            if version is not None:
                metadata[VERSION_KEY] = dumps(version)
            out.append(
                (name, version, pa.schema(self.nodes[self.table_nodes[name]].arrow, metadata))
            )
        return DataMineSchema(self.name, tuple(out))

    # -- the document and its tables

    def _read_schema(self) -> list[tuple[str, int | None, Any]]:
        doc = self.doc
        if "table_list" not in doc and isinstance(doc.get("schema"), Mapping):
            doc = doc["schema"]  # {"schema": {"name": ..., "table_list": [...]}}
        if "table_list" not in doc and "table" in doc and "fields" in doc:
            doc = {"schema": doc["table"], "table_list": [doc]}  # a bare table
        unknown = sorted(map(str, set(doc) - SCHEMA_KEYS))
        label = doc.get("schema", doc.get("name"))
        where = f"DataMine schema {label!r}" if isinstance(label, str) else "DataMine document"
        if unknown:
            raise SchemaError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                "(expected 'schema' and 'table_list')"
            )
        names = [doc[key] for key in ("schema", "name") if key in doc]
        if not names:
            raise SchemaError(f"{where}: missing the schema name ('schema')")
        if len(names) == 2 and names[0] != names[1]:
            raise SchemaError(f"{where}: 'schema' and 'name' disagree ({names[0]!r}, {names[1]!r})")
        name = names[0]
        if not isinstance(name, str) or not name:
            raise SchemaError(f"{where}: the schema name must be a non-empty string, got {name!r}")
        self.name = name
        where = f"DataMine schema {name!r}"
        if not NAME_PATTERN.fullmatch(name):
            warnings.warn(
                f"{where}: name {name!r} is outside the recommended pattern {PATTERN_TEXT}",
                DataMineWarning,
                stacklevel=4,
            )
        if "table_list" not in doc:
            raise SchemaError(f"{where}: missing 'table_list'")
        table_list = doc["table_list"]
        if not isinstance(table_list, list):
            raise SchemaError(f"{where}: 'table_list' must be a list of tables")
        if not table_list:
            raise SchemaError(f"{where}: 'table_list' is empty")
        out: list[tuple[str, int | None, Any]] = []
        seen: set[str] = set()
        for i, table in enumerate(table_list):
            if not isinstance(table, Mapping):
                raise SchemaError(f"{where}: table_list[{i}] must be an object")
            tname = table.get("table")
            if "table" not in table:
                raise SchemaError(f"{where}: table_list[{i}] is missing its name ('table')")
            if not isinstance(tname, str) or not tname:
                raise SchemaError(
                    f"{where}: table_list[{i}]: the table name must be a non-empty string, "
                    f"got {tname!r}"
                )
            if tname in seen:
                fail(tname, None, "duplicate table name")
            seen.add(tname)
            unknown = sorted(map(str, set(table) - TABLE_KEYS))
            if unknown:
                fail(
                    tname,
                    None,
                    f"unknown key(s) {', '.join(map(repr, unknown))} "
                    "(expected 'table', 'fields' and optionally 'version')",
                )
            if "fields" not in table:
                fail(tname, None, "missing 'fields'")
            version = table.get("version")
            if version is not None and not (is_int(version) and version >= 0):
                fail(tname, None, f"'version' must be a non-negative integer, got {version!r}")
            if not NAME_PATTERN.fullmatch(tname):
                warn(tname, None, f"name outside the recommended pattern {PATTERN_TEXT}")
            out.append((tname, version, table["fields"]))
        return out

    # -- one fields list

    def _read_fields(self, node: _Node) -> None:
        table = node.table
        owner = node.prefix[:-1] or None  # the inline STRUCT field, or None for the table
        raw = node.raw
        if not isinstance(raw, list):
            fail(table, owner, "'fields' must be a list of fields")
        if not raw:
            fail(table, owner, "'fields' is empty (a table or STRUCT needs at least one field)")
        names: dict[str, str] = {}
        folded: dict[str, str] = {}
        last: tuple[int, str] | None = None  # the last stored field's id and label
        derived_id: tuple[int, str] | None = None
        stored_ids: dict[int, str] = {}
        sort_key: str | None = None
        for i, f in enumerate(raw):
            label = f"{node.prefix}fields[{i}]"
            if not isinstance(f, Mapping):
                fail(table, label, f"a field must be an object, got {type(f).__name__}")
            name = f.get("name")
            if isinstance(name, str) and name:
                label = node.prefix + name
            unknown = sorted(map(str, set(f) - FIELD_KEYS))
            if unknown:
                fail(
                    table,
                    label,
                    f"unknown key(s) {', '.join(map(repr, unknown))} (expected id, name, type, "
                    f"default, fields, constraints or one of {', '.join(CONSTRAINTS)})",
                )
            for key in ("id", "name", "type"):
                if key not in f:
                    fail(table, label, f"missing {key!r}")
            if not isinstance(name, str) or not name:
                fail(table, label, f"'name' must be a non-empty string, got {name!r}")
            fid = f["id"]
            if not is_int(fid) or not 0 <= fid <= MAX_ID:
                fail(table, label, f"'id' must be an integer from 0 to {MAX_ID}, got {fid!r}")
            constraints = _read_constraints(f, table, label)
            required = constraints.get("isRequired", False)
            derived = constraints.get("isDerived", False)
            spelled = f["type"]
            if not isinstance(spelled, str):
                fail(table, label, f"'type' must be a string, got {spelled!r}")
            depth, base = split_type(spelled)
            if not base:
                fail(table, label, f"type {spelled!r} has no element type; {TYPE_HELP}")
            kind, base = base_name(base)
            child = -1
            if kind == REF:
                if base not in self.table_nodes:
                    fail(table, label, f"unknown type {spelled!r}; {TYPE_HELP}")
                child = self.table_nodes[base]
            if kind == INLINE:
                if "fields" not in f:
                    fail(table, label, f"type {spelled!r} needs the struct's 'fields'")
                child = len(self.nodes)
                self.nodes.append(_Node(table, label + ".", f["fields"]))
            elif "fields" in f:
                fail(table, label, f"'fields' is only allowed with a STRUCT type, not {spelled!r}")
            default = None
            if "default" in f:
                try:
                    default = dumps(f["default"])
                except (TypeError, ValueError) as exc:
                    fail(table, label, f"'default' is not a JSON value: {exc}")
                if required:
                    warn(table, label, "a default on a required field (defaults are for optional)")

            # the seed's rules
            if name in names:
                fail(table, label, f"duplicate field name (also {names[name]})")
            names[name] = f"fields[{i}]"
            other = folded.setdefault(name.lower(), name)
            if other != name:
                warn(table, label, f"name differs only in case from field {other!r}")
            if not NAME_PATTERN.fullmatch(name):
                warn(table, label, f"name outside the recommended pattern {PATTERN_TEXT}")
            if derived:
                if required:
                    fail(table, label, "a derived field must be optional, but isRequired is true")
                if kind != PRIM or depth:
                    fail(table, label, f"a derived field must be primitive, not {spelled!r}")
                if derived_id is None:
                    derived_id = (fid, label)
                elif fid != derived_id[0]:
                    fail(
                        table,
                        label,
                        f"derived fields share one id: {derived_id[1]!r} has {derived_id[0]}, "
                        f"this one {fid}",
                    )
            else:
                if last is not None and fid <= last[0]:
                    fail(
                        table,
                        label,
                        f"id {fid} does not increase (field {last[1]!r} before it has id "
                        f"{last[0]}); ids increase from field to field, derived fields excepted",
                    )
                last = (fid, label)
                stored_ids[fid] = label
            if constraints.get("isAscSortKey") or constraints.get("isDesSortKey"):
                if constraints.get("isAscSortKey") and constraints.get("isDesSortKey"):
                    fail(table, label, "both isAscSortKey and isDesSortKey: pick one order")
                if sort_key is not None:
                    fail(
                        table,
                        label,
                        f"a second sort key ({sort_key!r} is one already); a table has at most "
                        "one sort key",
                    )
                sort_key = label
            node.specs.append(
                _Spec(
                    label=label,
                    name=name,
                    id=fid,
                    required=required,
                    derived=derived,
                    depth=depth,
                    kind=kind,
                    base=base,
                    child=child,
                    spelled=spelled,
                    default=default,
                    constraints=constraints,
                )
            )
        if derived_id is not None and derived_id[0] in stored_ids:
            fail(
                table,
                derived_id[1],
                f"derived fields' id {derived_id[0]} is also the id of stored field "
                f"{stored_ids[derived_id[0]]!r}",
            )

    # -- Arrow types, children first

    def _build(self) -> None:
        state = [0] * len(self.nodes)  # 0 unseen, 1 on the stack, 2 built
        order: list[int] = []
        for root in range(len(self.nodes)):
            if state[root]:
                continue
            state[root] = 1
            stack = [[root, 0]]
            while stack:
                frame = stack[-1]
                specs = self.nodes[frame[0]].specs
                i = frame[1]
                while i < len(specs) and specs[i].kind == PRIM:
                    i += 1
                if i == len(specs):
                    stack.pop()
                    state[frame[0]] = 2
                    order.append(frame[0])
                    continue
                frame[1] = i + 1
                child = specs[i].child
                if state[child] == 0:
                    state[child] = 1
                    stack.append([child, 0])
                elif state[child] == 1:
                    start = next(k for k, fr in enumerate(stack) if fr[0] == child)
                    cycle: list[str] = []
                    for fr in stack[start:]:
                        table = self.nodes[fr[0]].table
                        if not cycle or cycle[-1] != table:
                            cycle.append(table)
                    cycle.append(specs[i].base)
                    node = self.nodes[frame[0]]
                    fail(
                        node.table,
                        specs[i].label,
                        f"recursive reference to table {specs[i].base!r} ({' -> '.join(cycle)})",
                    )
        for index in order:
            node = self.nodes[index]
            node.arrow = [self._arrow_field(spec) for spec in node.specs]

    def _arrow_field(self, spec: _Spec) -> pa.Field:
        metadata: dict[str, str] = {}
        if spec.derived:
            metadata[ID_KEY] = dumps(spec.id)
        else:
            metadata[FIELD_ID_KEY] = str(spec.id)
        if spec.spelled != LIST_PREFIX * spec.depth + spec.base:
            metadata[TYPE_KEY] = dumps(spec.spelled)
        struct_metadata: dict[str, str] = {}
        if spec.kind == PRIM:
            t = PRIMITIVE_TYPES[spec.base]
        else:
            t = pa.struct(self.nodes[spec.child].arrow)
            if spec.kind == REF:
                struct_metadata[TABLE_KEY] = dumps(spec.base)
                if self.versions[spec.base] is not None:
                    struct_metadata[VERSION_KEY] = dumps(self.versions[spec.base])
        if spec.depth:
            t = pa.list_(pa.field(LIST_ITEM_NAME, t, True, struct_metadata or None))
            for _ in range(spec.depth - 1):
                t = pa.list_(pa.field(LIST_ITEM_NAME, t))
        else:
            metadata.update(struct_metadata)
        if spec.default is not None:
            metadata[DEFAULT_KEY] = spec.default
        for constraint, value in spec.constraints.items():
            metadata[META + constraint] = dumps(value)
        return pa.field(spec.name, t, not spec.required, metadata)


def _read_constraints(f: Mapping[str, Any], table: str, label: str) -> dict[str, bool]:
    given: dict[str, Any] = {c: f[c] for c in CONSTRAINTS if c in f}
    if "constraints" in f:
        block = f["constraints"]
        if isinstance(block, Mapping):
            items = list(block.items())
        elif isinstance(block, list):
            items = [(c, True) for c in block]
        else:
            fail(table, label, "'constraints' must be an object or a list of constraint names")
        for c, value in items:
            if c not in CONSTRAINTS:
                fail(
                    table,
                    label,
                    f"unknown constraint {c!r} (expected one of {', '.join(CONSTRAINTS)})",
                )
            if c in given and given[c] != value:
                fail(table, label, f"constraint {c} is given twice, as {given[c]!r} and {value!r}")
            given[c] = value
    for c, value in given.items():
        if not isinstance(value, bool):
            fail(table, label, f"constraint {c} must be true or false, got {value!r}")
    return {c: given[c] for c in CONSTRAINTS if c in given}
