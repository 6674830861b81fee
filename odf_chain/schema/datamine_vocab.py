"""The DataMine vocabulary both directions share: type names and their Arrow types, the
constraints, the field metadata keys a schema keeps them under, and how a failure names its
table and field.

:mod:`odf_chain.schema.datamine` reads documents into Arrow and
:mod:`odf_chain.schema.datamine_writer` writes Arrow back as documents; each must spell a type,
a constraint or a metadata key exactly as the other does, so they are spelled once, here.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any, NoReturn

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import loads


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
STRUCT = "STRUCT"
LIST_PREFIX = "List:"

#: The constraints, in the seed's order (also the order they are written back in).
CONSTRAINTS = ("isRequired", "isAscSortKey", "isDesSortKey", "isFrequentlyUsed", "isDerived")
#: The seed's recommended naming pattern (footnote 1); names outside it are warned about.
NAME_PATTERN = re.compile(r"[a-zA-Z][a-zA-Z0-9_]*")
PATTERN_TEXT = "'^[a-zA-Z][a-zA-Z0-9_]*$'"  # as the seed writes it (matched with fullmatch)

FIELD_KEYS = frozenset({"id", "name", "type", "default", "constraints", "fields", *CONSTRAINTS})
TABLE_KEYS = frozenset({"table", "fields", "version"})
SCHEMA_KEYS = frozenset({"schema", "name", "table_list"})

FIELD_ID_KEY = "PARQUET:field_id"
META = "datamine."
ID_KEY = META + "id"
TYPE_KEY = META + "type"
TABLE_KEY = META + "table"
VERSION_KEY = META + "version"
DEFAULT_KEY = META + "default"
SCHEMA_KEY = META + "schema"
LIST_ITEM_NAME = "element"
MAX_ID = 2**31 - 1  # Parquet field ids are int32

PRIM, INLINE, REF = 0, 1, 2


# --------------------------------------------------------------------------------------------
# helpers


def _where(table: str, field: str | None) -> str:
    return f"DataMine table {table!r}" + (f", field {field!r}" if field is not None else "")


def fail(table: str, field: str | None, message: str) -> NoReturn:
    raise SchemaError(f"{_where(table, field)}: {message}")


def warn(table: str, field: str | None, message: str) -> None:
    warnings.warn(f"{_where(table, field)}: {message}", DataMineWarning, stacklevel=5)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def load_document(doc: Any) -> Mapping[str, Any]:
    if isinstance(doc, str | bytes | bytearray):  # at any depth, duplicate keys refused
        doc = loads(doc, what="DataMine document", object_pairs_hook=_no_duplicate_keys)
    if not isinstance(doc, Mapping):
        raise SchemaError(
            f"a DataMine document is a JSON object with 'schema' and 'table_list', "
            f"got {type(doc).__name__}"
        )
    return doc


def split_type(spelled: str) -> tuple[int, str]:
    """``List:`` prefixes (any case, whitespace around parts ignored) and the base type."""
    depth, rest = 0, spelled.strip()
    while rest[: len(LIST_PREFIX)].lower() == LIST_PREFIX.lower():
        depth += 1
        rest = rest[len(LIST_PREFIX) :].strip()
    return depth, rest


def base_name(base: str) -> tuple[int, str]:
    """(kind, canonical name) of a base type; kind REF means "a table name, if one exists"."""
    upper = base.upper()
    if upper in _TYPE_NAMES:
        return PRIM, _TYPE_NAMES[upper]
    if upper == STRUCT:
        return INLINE, STRUCT
    return REF, base


def canonical_type(spelled: str) -> str:
    depth, base = split_type(spelled)
    return LIST_PREFIX * depth + base_name(base)[1]


TYPE_HELP = (
    "expected one of BYTE, BOOL (Boolean), INT16 (Short), INT32 (Integer), INT64 (Long), FLOAT, "
    "DOUBLE, STRING, BINARY, STRUCT (with 'fields'), List:<type> or the name of a table"
)
