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

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field as dc_field
from typing import Any, NoReturn

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import dumps, loads

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


class DataMineWarning(UserWarning):
    """A DataMine document that is valid but not as the seed recommends (naming convention,
    names differing only in case, a default on a required field)."""


#: Canonical primitive type names and their Arrow types.
PRIMITIVE_TYPES: dict[str, pa.DataType] = {
    "BYTE": pa.int8(),
    "BOOL": pa.bool_(),
    "INT16": pa.int16(),
    "INT32": pa.int32(),
    "INT64": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(),
    "BINARY": pa.binary(),
}
# Upper-cased spelling -> canonical name: both of the seed's spellings ("Byte (BYTE)", ...).
_TYPE_NAMES: dict[str, str] = {
    **{name: name for name in PRIMITIVE_TYPES},
    "BOOLEAN": "BOOL",
    "SHORT": "INT16",
    "INTEGER": "INT32",
    "LONG": "INT64",
}
_STRUCT = "STRUCT"
_LIST = "List:"

#: The constraints, in the seed's order (also the order they are written back in).
CONSTRAINTS = ("isRequired", "isAscSortKey", "isDesSortKey", "isFrequentlyUsed", "isDerived")
#: The seed's recommended naming pattern (footnote 1); names outside it are warned about.
NAME_PATTERN = re.compile(r"[a-zA-Z][a-zA-Z0-9_]*")
_PATTERN_TEXT = "'^[a-zA-Z][a-zA-Z0-9_]*$'"  # as the seed writes it (matched with fullmatch)

_FIELD_KEYS = frozenset({"id", "name", "type", "default", "constraints", "fields", *CONSTRAINTS})
_TABLE_KEYS = frozenset({"table", "fields", "version"})
_SCHEMA_KEYS = frozenset({"schema", "name", "table_list"})

FIELD_ID_KEY = "PARQUET:field_id"
_META = "datamine."
_ID = _META + "id"
_TYPE = _META + "type"
_TABLE = _META + "table"
_VERSION = _META + "version"
_DEFAULT = _META + "default"
_SCHEMA = _META + "schema"
LIST_ITEM_NAME = "element"
_MAX_ID = 2**31 - 1  # Parquet field ids are int32

_PRIM, _INLINE, _REF = 0, 1, 2


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
        return _Parser(_load(doc)).run()
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
        doc = _Writer(schema, table, schema_name, struct_tables).run()
        parse_datamine(doc)
    except RecursionError:
        raise SchemaError(f"DataMine table {table!r}: schema is nested too deeply") from None
    return doc


# --------------------------------------------------------------------------------------------
# helpers


def _where(table: str, field: str | None) -> str:
    return f"DataMine table {table!r}" + (f", field {field!r}" if field is not None else "")


def _fail(table: str, field: str | None, message: str) -> NoReturn:
    raise SchemaError(f"{_where(table, field)}: {message}")


def _warn(table: str, field: str | None, message: str) -> None:
    warnings.warn(f"{_where(table, field)}: {message}", DataMineWarning, stacklevel=5)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def _load(doc: Any) -> Mapping[str, Any]:
    if isinstance(doc, str | bytes | bytearray):  # at any depth, duplicate keys refused
        doc = loads(doc, what="DataMine document", object_pairs_hook=_no_duplicate_keys)
    if not isinstance(doc, Mapping):
        raise SchemaError(
            f"a DataMine document is a JSON object with 'schema' and 'table_list', "
            f"got {type(doc).__name__}"
        )
    return doc


def _split_type(spelled: str) -> tuple[int, str]:
    """``List:`` prefixes (any case, whitespace around parts ignored) and the base type."""
    depth, rest = 0, spelled.strip()
    while rest[: len(_LIST)].lower() == _LIST.lower():
        depth += 1
        rest = rest[len(_LIST) :].strip()
    return depth, rest


def _base_name(base: str) -> tuple[int, str]:
    """(kind, canonical name) of a base type; kind _REF means "a table name, if one exists"."""
    upper = base.upper()
    if upper in _TYPE_NAMES:
        return _PRIM, _TYPE_NAMES[upper]
    if upper == _STRUCT:
        return _INLINE, _STRUCT
    return _REF, base


def _canonical_type(spelled: str) -> str:
    depth, base = _split_type(spelled)
    return _LIST * depth + _base_name(base)[1]


_TYPE_HELP = (
    "expected one of BYTE, BOOL (Boolean), INT16 (Short), INT32 (Integer), INT64 (Long), FLOAT, "
    "DOUBLE, STRING, BINARY, STRUCT (with 'fields'), List:<type> or the name of a table"
)


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
    kind: int  # _PRIM, _INLINE or _REF
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
            metadata = {_SCHEMA: dumps(self.name), _TABLE: dumps(name)}
            if version is not None:
                metadata[_VERSION] = dumps(version)
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
        unknown = sorted(map(str, set(doc) - _SCHEMA_KEYS))
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
                f"{where}: name {name!r} is outside the recommended pattern {_PATTERN_TEXT}",
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
                _fail(tname, None, "duplicate table name")
            seen.add(tname)
            unknown = sorted(map(str, set(table) - _TABLE_KEYS))
            if unknown:
                _fail(
                    tname,
                    None,
                    f"unknown key(s) {', '.join(map(repr, unknown))} "
                    "(expected 'table', 'fields' and optionally 'version')",
                )
            if "fields" not in table:
                _fail(tname, None, "missing 'fields'")
            version = table.get("version")
            if version is not None and not (_is_int(version) and version >= 0):
                _fail(tname, None, f"'version' must be a non-negative integer, got {version!r}")
            if not NAME_PATTERN.fullmatch(tname):
                _warn(tname, None, f"name outside the recommended pattern {_PATTERN_TEXT}")
            out.append((tname, version, table["fields"]))
        return out

    # -- one fields list

    def _read_fields(self, node: _Node) -> None:
        table = node.table
        owner = node.prefix[:-1] or None  # the inline STRUCT field, or None for the table
        raw = node.raw
        if not isinstance(raw, list):
            _fail(table, owner, "'fields' must be a list of fields")
        if not raw:
            _fail(table, owner, "'fields' is empty (a table or STRUCT needs at least one field)")
        names: dict[str, str] = {}
        folded: dict[str, str] = {}
        last: tuple[int, str] | None = None  # the last stored field's id and label
        derived_id: tuple[int, str] | None = None
        stored_ids: dict[int, str] = {}
        sort_key: str | None = None
        for i, f in enumerate(raw):
            label = f"{node.prefix}fields[{i}]"
            if not isinstance(f, Mapping):
                _fail(table, label, f"a field must be an object, got {type(f).__name__}")
            name = f.get("name")
            if isinstance(name, str) and name:
                label = node.prefix + name
            unknown = sorted(map(str, set(f) - _FIELD_KEYS))
            if unknown:
                _fail(
                    table,
                    label,
                    f"unknown key(s) {', '.join(map(repr, unknown))} (expected id, name, type, "
                    f"default, fields, constraints or one of {', '.join(CONSTRAINTS)})",
                )
            for key in ("id", "name", "type"):
                if key not in f:
                    _fail(table, label, f"missing {key!r}")
            if not isinstance(name, str) or not name:
                _fail(table, label, f"'name' must be a non-empty string, got {name!r}")
            fid = f["id"]
            if not _is_int(fid) or not 0 <= fid <= _MAX_ID:
                _fail(table, label, f"'id' must be an integer from 0 to {_MAX_ID}, got {fid!r}")
            constraints = _read_constraints(f, table, label)
            required = constraints.get("isRequired", False)
            derived = constraints.get("isDerived", False)
            spelled = f["type"]
            if not isinstance(spelled, str):
                _fail(table, label, f"'type' must be a string, got {spelled!r}")
            depth, base = _split_type(spelled)
            if not base:
                _fail(table, label, f"type {spelled!r} has no element type; {_TYPE_HELP}")
            kind, base = _base_name(base)
            child = -1
            if kind == _REF:
                if base not in self.table_nodes:
                    _fail(table, label, f"unknown type {spelled!r}; {_TYPE_HELP}")
                child = self.table_nodes[base]
            if kind == _INLINE:
                if "fields" not in f:
                    _fail(table, label, f"type {spelled!r} needs the struct's 'fields'")
                child = len(self.nodes)
                self.nodes.append(_Node(table, label + ".", f["fields"]))
            elif "fields" in f:
                _fail(table, label, f"'fields' is only allowed with a STRUCT type, not {spelled!r}")
            default = None
            if "default" in f:
                try:
                    default = dumps(f["default"])
                except (TypeError, ValueError) as exc:
                    _fail(table, label, f"'default' is not a JSON value: {exc}")
                if required:
                    _warn(table, label, "a default on a required field (defaults are for optional)")

            # the seed's rules
            if name in names:
                _fail(table, label, f"duplicate field name (also {names[name]})")
            names[name] = f"fields[{i}]"
            other = folded.setdefault(name.lower(), name)
            if other != name:
                _warn(table, label, f"name differs only in case from field {other!r}")
            if not NAME_PATTERN.fullmatch(name):
                _warn(table, label, f"name outside the recommended pattern {_PATTERN_TEXT}")
            if derived:
                if required:
                    _fail(table, label, "a derived field must be optional, but isRequired is true")
                if kind != _PRIM or depth:
                    _fail(table, label, f"a derived field must be primitive, not {spelled!r}")
                if derived_id is None:
                    derived_id = (fid, label)
                elif fid != derived_id[0]:
                    _fail(
                        table,
                        label,
                        f"derived fields share one id: {derived_id[1]!r} has {derived_id[0]}, "
                        f"this one {fid}",
                    )
            else:
                if last is not None and fid <= last[0]:
                    _fail(
                        table,
                        label,
                        f"id {fid} does not increase (field {last[1]!r} before it has id "
                        f"{last[0]}); ids increase from field to field, derived fields excepted",
                    )
                last = (fid, label)
                stored_ids[fid] = label
            if constraints.get("isAscSortKey") or constraints.get("isDesSortKey"):
                if constraints.get("isAscSortKey") and constraints.get("isDesSortKey"):
                    _fail(table, label, "both isAscSortKey and isDesSortKey: pick one order")
                if sort_key is not None:
                    _fail(
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
            _fail(
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
                while i < len(specs) and specs[i].kind == _PRIM:
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
                    _fail(
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
            metadata[_ID] = dumps(spec.id)
        else:
            metadata[FIELD_ID_KEY] = str(spec.id)
        if spec.spelled != _LIST * spec.depth + spec.base:
            metadata[_TYPE] = dumps(spec.spelled)
        struct_metadata: dict[str, str] = {}
        if spec.kind == _PRIM:
            t = PRIMITIVE_TYPES[spec.base]
        else:
            t = pa.struct(self.nodes[spec.child].arrow)
            if spec.kind == _REF:
                struct_metadata[_TABLE] = dumps(spec.base)
                if self.versions[spec.base] is not None:
                    struct_metadata[_VERSION] = dumps(self.versions[spec.base])
        if spec.depth:
            t = pa.list_(pa.field(LIST_ITEM_NAME, t, True, struct_metadata or None))
            for _ in range(spec.depth - 1):
                t = pa.list_(pa.field(LIST_ITEM_NAME, t))
        else:
            metadata.update(struct_metadata)
        if spec.default is not None:
            metadata[_DEFAULT] = spec.default
        for constraint, value in spec.constraints.items():
            metadata[_META + constraint] = dumps(value)
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
            _fail(table, label, "'constraints' must be an object or a list of constraint names")
        for c, value in items:
            if c not in CONSTRAINTS:
                _fail(
                    table,
                    label,
                    f"unknown constraint {c!r} (expected one of {', '.join(CONSTRAINTS)})",
                )
            if c in given and given[c] != value:
                _fail(table, label, f"constraint {c} is given twice, as {given[c]!r} and {value!r}")
            given[c] = value
    for c, value in given.items():
        if not isinstance(value, bool):
            _fail(table, label, f"constraint {c} must be true or false, got {value!r}")
    return {c: given[c] for c in CONSTRAINTS if c in given}


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


class _Writer:
    def __init__(
        self, schema: pa.Schema, table: str, schema_name: str | None, struct_tables: bool
    ) -> None:
        self.schema = schema
        self.table = table
        self.struct_tables = struct_tables
        meta = self._metadata(schema.metadata, table, None)
        recorded = meta.get(_SCHEMA)
        self.schema_name = schema_name or (recorded if isinstance(recorded, str) else table)
        self.version = meta.get(_VERSION)
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
            if k.startswith(_META):
                try:
                    out[k] = loads(v, what=f"metadata {k}")
                except SchemaError:
                    _fail(table, label, f"metadata {k} is not JSON text: {v!r}")
            else:
                out[k] = v
        return out

    def _field(self, node: _Out, f: pa.Field) -> _Out | None:
        label = node.prefix + f.name
        meta = self._metadata(f.metadata, node.table, label)
        constraints: dict[str, Any] = {}
        for c in CONSTRAINTS:
            if _META + c in meta:
                value = meta[_META + c]
                if not isinstance(value, bool):
                    _fail(node.table, label, f"metadata {_META + c} must be true or false")
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
                _fail(
                    node.table,
                    label,
                    f"Arrow type {f.type} has no DataMine equivalent (DataMine has "
                    f"{', '.join(PRIMITIVE_TYPES)}, STRUCT and List:<type>)",
                )
            struct_meta = (
                meta if holder is f else self._metadata(holder.metadata, node.table, label)
            )
            ref = self._claim(struct_meta.get(_TABLE), t, struct_meta.get(_VERSION))
            if ref is None and self.struct_tables:
                ref = self._claim(self._fresh(f"{node.table}_{label.replace('.', '_')}"), t, None)
            if ref is not None:
                base, new = ref
                if new:
                    child = _Out(base, "", list(t), [], emit=(base, struct_meta.get(_VERSION)))
            else:
                base = _STRUCT
                child = _Out(node.table, label + ".", list(t), [])
        canonical = _LIST * depth + base
        spelled = meta.get(_TYPE)
        spelled_ok = isinstance(spelled, str) and _canonical_type(spelled) == canonical
        out: dict[str, Any] = {
            "id": fid,
            "name": f.name,
            "type": spelled if spelled_ok else canonical,
        }
        if _DEFAULT in meta:
            out["default"] = meta[_DEFAULT]
        for c in CONSTRAINTS:
            if c in constraints:
                out[c] = constraints[c]
        if base == _STRUCT and child is not None:
            out["fields"] = child.out
        node.out.append(out)
        return child

    def _id(self, node: _Out, meta: dict[str, Any], derived: bool, label: str) -> int:
        parquet = meta.get(FIELD_ID_KEY)
        if parquet is not None:
            if not re.fullmatch(r"-?[0-9]+", parquet):
                _fail(node.table, label, f"{FIELD_ID_KEY} is not an integer: {parquet!r}")
            parquet = int(parquet)
        own = meta.get(_ID)
        if own is not None and not _is_int(own):
            _fail(node.table, label, f"metadata {_ID} is not an integer: {own!r}")
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
            and _base_name(name)[0] == _REF
            and _split_type(name)[0] == 0
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
