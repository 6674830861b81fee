"""Arrow schemas -> DataHub v2 field paths, the way DataHub shows lakehouse tables.

DataHub's Hive, Glue, Delta Lake, Unity Catalog (and Redshift) sources do not look at Arrow or
Parquet: they take each column's *Hive type string* (``bigint``, ``decimal(10,2)``,
``struct<a:int,b:array<string>>``, ...) and hand it to
``datahub.utilities.hive_schema_to_avro.get_schema_fields_for_hive_column``, which turns it into a
throw-away Avro schema and runs its Avro converter over it. So the paths a Spark/Parquet table
gets in DataHub follow from two steps, and this module does both:

1. Arrow type -> the Hive type string Spark shows for the column (``DataType.catalogString``;
   see :func:`arrow_hive_type` for the table);
2. Hive type string -> the fields DataHub builds from it.

The resulting convention::

    id     int64                      [version=2.0].[type=long].id
    price  decimal(10,2)              [version=2.0].[type=bytes].price
    s      struct<a:int32>            [version=2.0].[type=struct].[type=struct].s
                                      [version=2.0].[type=struct].[type=struct].s.[type=int].a
    tags   list<string>               [version=2.0].[type=struct].[type=array].[type=string].tags
    m      map<string, struct<x:..>>  [version=2.0].[type=struct].[type=map].[type=struct].m
                                      [version=2.0].[type=struct].[type=map].[type=struct].m.[type=..].x

A primitive column is one entry ``[type=<avro type>].<name>``; a complex column is wrapped once
in ``[type=struct]`` (DataHub's throw-away record) and then typed by its chain of
``[type=array]``/``[type=map]`` tokens ending in the element's token; members of a struct (also
of a struct reached through list items and map values) follow under their parent's path. Map
keys never get entries (Avro maps have string keys).

DataHub quirks this module reproduces on purpose (the URNs must be the ones DataHub shows):

- the token is the *Avro* type DataHub maps the Hive type to, not the Hive type: ``tinyint``,
  ``smallint``, ``int``, ``date`` and ``timestamp`` all give ``[type=int]``, ``bigint`` gives
  ``[type=long]``, ``decimal(p,s)`` gives ``[type=bytes]``, ``binary`` gives ``[type=string]``;
- Hive types it does not know become ``[type=null]`` with DataHub type ``null``: Spark's
  ``timestamp_ntz`` (an Arrow timestamp without a time zone), ``void``, ``time(p)`` and the
  ``interval`` types;
- a name is rendered as DataHub's Avro layer renders it: in a complex column's name and in every
  member name, only the text after the last ``.`` survives (Avro namespace stripping:
  ``a.b`` shows as ``b``); member names are also stripped of surrounding whitespace and of one
  pair of enclosing backticks (its Hive-type parser does that). A primitive column's name is
  used verbatim;
- nullability: DataHub's Hive path cannot know it (Hive type strings carry none), so it marks
  every primitive nullable and every complex field with the caller's ``default_nullable``. We take
  Arrow's own nullability for every entry instead: the field the entry represents (for a
  list/map column, the column itself). DataHub and we agree wherever Arrow says nullable.
- doc: DataHub puts the column comment on the column's first entry only; we take the Arrow
  field's ``doc`` (or, failing that, ``comment``) metadata, for columns and members alike.

Where DataHub gives up instead, we do not:

- DataHub's Hive-type parser cannot handle member names containing ``,`` or ``:`` or unbalanced
  brackets, empty member names, or empty structs (``struct<>``): it logs a warning and emits a
  single bare ``<column name>`` path (no version token, no nested fields). We emit the v2 paths
  it would have produced had it parsed the type.
- DataHub silently drops a struct member whose rendered name repeats an earlier one. A name
  repeated in an Arrow struct or schema, or two fields that render to the same v2 path, raise
  :class:`SchemaError` instead (paths must be unique, and a field must not vanish).

Everything is iterative (explicit stacks): a schema nested thousands of levels deep is fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema.fields import VERSION_TOKEN, FieldInfo

__all__ = [
    "arrow_field_index",
    "arrow_field_paths",
    "arrow_fields",
    "arrow_hive_type",
]

NamePath = tuple[str, ...]

ITEM, KEY, VALUE = "[item]", "[key]", "[value]"

# Hive type (as DataHub parses it) -> (Avro type token in the path, DataHub type class).
_HIVE_LEAF = {
    "boolean": ("boolean", "boolean"),
    "tinyint": ("int", "number"),
    "smallint": ("int", "number"),
    "int": ("int", "number"),
    "bigint": ("long", "number"),
    "float": ("float", "number"),
    "double": ("double", "number"),
    "string": ("string", "string"),
    "binary": ("string", "string"),
    "date": ("int", "date"),
    "timestamp": ("int", "time"),
}
_NULL_LEAF = ("null", "null")

# pyarrow grew these later than the pyarrow>=14 this package supports.
_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)
_is_binary_view = getattr(pa.types, "is_binary_view", lambda t: False)
_is_list_view = getattr(pa.types, "is_list_view", lambda t: False)
_is_large_list_view = getattr(pa.types, "is_large_list_view", lambda t: False)
_is_run_end_encoded = getattr(pa.types, "is_run_end_encoded", lambda t: False)

_INT_HIVE = {
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    # Spark's Parquet reader widens unsigned integers to the next signed type, and uint64 to
    # decimal(20,0) (SPARK-34817).
    pa.uint8(): "smallint",
    pa.uint16(): "int",
    pa.uint32(): "bigint",
    pa.uint64(): "decimal(20,0)",
}
_TIME_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 6}  # Spark's TIME goes to microseconds


def unwrap_encoding(t: pa.DataType) -> pa.DataType:
    """The logical type behind an encoding: dictionary -> values, run-end encoded -> values,
    extension -> storage."""
    while True:
        if pa.types.is_dictionary(t) or _is_run_end_encoded(t):
            t = t.value_type
        elif isinstance(t, pa.BaseExtensionType):
            t = t.storage_type
        else:
            return t


def is_list_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or _is_list_view(t)
        or _is_large_list_view(t)
    )


def _leaf_hive(t: pa.DataType) -> str | None:
    """The Hive type string Spark shows for a non-nested Arrow type (None: no mapping)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return _INT_HIVE[t]
    if pa.types.is_float16(t):
        return "float"  # Spark has no half float; the value fits a float exactly
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return "string"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or _is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_time(t):
        return f"time({_TIME_PRECISION[t.unit]})"
    if pa.types.is_duration(t):
        return "interval day to second"  # Spark's DayTimeIntervalType <-> Arrow duration
    if pa.types.is_interval(t):
        return "interval"  # Spark's CalendarIntervalType <-> Arrow month_day_nano_interval
    if pa.types.is_null(t):
        return "void"
    return None


@dataclass(slots=True, eq=False)
class _Node:
    """One Arrow field in the tree being walked."""

    name: str  # the Arrow name, or "[item]"/"[key]"/"[value]"
    arrow_field: pa.Field
    name_path: NamePath
    kind: str = "leaf"  # leaf | struct | list | map
    type: pa.DataType | None = None  # after unwrapping encodings
    children: list[_Node] = field(default_factory=list)
    hive: str = ""
    token: str = ""  # Avro token for leaves: int, long, string, ...
    dh_type: str = ""


def _dotted(name_path: NamePath) -> str:
    return ".".join(name_path)


def _expand(roots: list[_Node]) -> list[_Node]:
    """Fill in kinds and children of the whole tree (iteratively); returns every node, each
    parent before its children."""
    order: list[_Node] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        order.append(node)
        t = unwrap_encoding(node.arrow_field.type)
        node.type = t
        if pa.types.is_struct(t):
            node.kind = "struct"
            seen: set[str] = set()
            for i in range(t.num_fields):
                child = t.field(i)
                if child.name in seen:
                    raise SchemaError(
                        f"field {_dotted((*node.name_path, child.name))}: the name "
                        f"{child.name!r} appears twice in struct {_dotted(node.name_path)}"
                    )
                seen.add(child.name)
                node.children.append(_Node(child.name, child, (*node.name_path, child.name)))
        elif is_list_like(t):
            node.kind = "list"
            node.children.append(_Node(ITEM, t.value_field, (*node.name_path, ITEM)))
        elif pa.types.is_map(t):
            node.kind = "map"
            node.children.append(_Node(KEY, t.key_field, (*node.name_path, KEY)))
            node.children.append(_Node(VALUE, t.item_field, (*node.name_path, VALUE)))
        else:
            hive = _leaf_hive(t)
            if hive is None:
                raise SchemaError(
                    f"field {_dotted(node.name_path)}: Arrow type {node.arrow_field.type} has no "
                    "Hive/Spark type and so no v2 field path"
                )
            node.hive = hive
            token, dh = _HIVE_LEAF.get(hive, _NULL_LEAF)
            if hive.startswith("decimal("):
                token, dh = "bytes", "number"
            node.token, node.dh_type = token, dh
        stack.extend(reversed(node.children))
    # Hive strings bottom-up: children come after their parent in ``order``.
    for node in reversed(order):
        if node.kind == "struct":
            members = ",".join(f"{c.name}:{c.hive}" for c in node.children)
            node.hive = f"struct<{members}>"
            node.token, node.dh_type = "struct", "record"
        elif node.kind == "list":
            node.hive = f"array<{node.children[0].hive}>"
            node.token, node.dh_type = "array", "array"
        elif node.kind == "map":
            node.hive = f"map<{node.children[0].hive},{node.children[1].hive}>"
            node.token, node.dh_type = "map", "map"
    return order


def _chain(node: _Node) -> str:
    """The type tokens of a field: ``[type=array].[type=map].[type=struct]`` and the like."""
    tokens = []
    while True:
        tokens.append(f"[type={node.token}]")
        if node.kind == "list":
            node = node.children[0]
        elif node.kind == "map":
            node = node.children[1]
        else:
            return ".".join(tokens)


def _strip_namespace(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _member_name(name: str) -> str:
    """A struct member's name as DataHub renders it (Hive-type parsing, then Avro naming)."""
    name = name.strip()
    if len(name) >= 2 and name[0] == "`" and name[-1] == "`":
        name = name[1:-1]
    return _strip_namespace(name)


def _doc(f: pa.Field) -> str | None:
    meta = f.metadata or {}
    for key in (b"doc", b"comment"):
        raw = meta.get(key)
        if raw:
            return raw.decode("utf-8", errors="replace")
    return None


def _walk(schema: pa.Schema) -> tuple[list[FieldInfo], dict[NamePath, str]]:
    seen: set[str] = set()
    roots = []
    for f in schema:
        if f.name in seen:
            raise SchemaError(f"field {f.name}: the column name appears twice in the schema")
        seen.add(f.name)
        roots.append(_Node(f.name, f, (f.name,)))
    _expand(roots)

    entries: list[FieldInfo] = []
    index: dict[NamePath, str] = {}
    owner: dict[str, NamePath] = {}

    def emit(node: _Node, path: str) -> None:
        other = owner.setdefault(path, node.name_path)
        if other != node.name_path:
            raise SchemaError(
                f"field {_dotted(node.name_path)}: its v2 path {path} is also the path of field "
                f"{_dotted(other)} (DataHub keeps only the text after the last '.' of a name)"
            )
        entries.append(
            FieldInfo(
                path=path,
                type=node.dh_type,
                native_type=node.hive,
                nullable=node.arrow_field.nullable,
                doc=_doc(node.arrow_field),
            )
        )

    # (node, v2 path of the entry that represents it, does the node have an entry of its own,
    # does it lie inside a map key)
    stack: list[tuple[_Node, str, bool, bool]] = []
    for root in reversed(roots):
        if root.kind == "leaf":
            path = f"{VERSION_TOKEN}.[type={root.token}].{root.name}"
        else:
            path = f"{VERSION_TOKEN}.[type=struct].{_chain(root)}.{_strip_namespace(root.name)}"
        stack.append((root, path, True, False))
    while stack:
        node, path, has_entry, in_key = stack.pop()
        if has_entry:
            emit(node, path)
        index[node.name_path] = path
        pending = []
        if node.kind == "struct" and not in_key:
            for child in node.children:
                child_path = f"{path}.{_chain(child)}.{_member_name(child.name)}"
                pending.append((child, child_path, True, False))
        elif node.kind == "map":
            key, value = node.children
            pending.append((key, path, False, True))
            pending.append((value, path, False, in_key))
        else:
            pending.extend((child, path, False, in_key) for child in node.children)
        stack.extend(reversed(pending))
    return entries, index


def arrow_hive_type(t: pa.DataType) -> str:
    """The Hive type string Spark shows for an Arrow type (its ``catalogString``).

    ======================================================  =====================================
    Arrow                                                   Hive / Spark
    ======================================================  =====================================
    bool                                                    boolean
    int8, int16, int32, int64                               tinyint, smallint, int, bigint
    uint8, uint16, uint32, uint64                           smallint, int, bigint, decimal(20,0)
    float16, float32, float64                               float, float, double
    decimal32/64/128/256(p, s)                              decimal(p,s)
    string, large_string, string_view                       string
    binary, large_binary, binary_view, fixed_size_binary    binary
    date32, date64                                          date
    timestamp(unit, tz=<any>) / timestamp(unit)             timestamp / timestamp_ntz
    time32(s|ms), time64(us|ns)                             time(0|3), time(6)
    duration(unit)                                          interval day to second
    month_day_nano_interval                                 interval
    null                                                    void
    struct<a: T, ...>                                       struct<a:T,...>
    list, large_list, fixed_size_list, list_view (+large)   array<T>
    map<K, V>                                               map<K,V>
    dictionary<_, V>, run_end_encoded<_, V>, extension      as V / the storage type
    ======================================================  =====================================

    Unions have no Hive type: :class:`SchemaError`.
    """
    order = _expand([_Node("", pa.field("", t), ())])
    return order[0].hive


def arrow_fields(schema: pa.Schema) -> list[FieldInfo]:
    """The schema's v2 fields in DataHub's order (columns in order, each followed by its
    members), with DataHub's type class and native (Hive) type, Arrow's nullability, and the
    Arrow field's doc."""
    return _walk(schema)[0]


def arrow_field_paths(schema: pa.Schema) -> list[str]:
    """The schema's v2 field paths, in DataHub's order."""
    return [f.path for f in arrow_fields(schema)]


def arrow_field_index(schema: pa.Schema) -> dict[NamePath, str]:
    """Map every field's name path to the v2 path of the entry that represents it.

    Name paths start at the column name and go through child names, list items as ``[item]``,
    map keys and values as ``[key]`` and ``[value]`` (as ``odf_chain.schema.evolution`` walks
    them). List items and map keys/values have no entry of their own, and nothing inside a map
    key does: they map to the path of the list or map field that contains them. Members of a
    struct reached through list items or map values have their own paths.
    """
    return _walk(schema)[1]
