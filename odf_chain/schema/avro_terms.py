"""What both directions of :mod:`odf_chain.schema.convert` share: the field metadata keys that
carry Avro's facts through an Arrow schema, Avro's names and defaults as the spec has them, and
the stepping that converts deep schemas without Python recursion.

Kept apart so that Avro -> Arrow (:mod:`~odf_chain.schema.from_avro`) and Arrow -> Avro
(:mod:`~odf_chain.schema.convert`) read and write the same keys and judge a name or a
default the same way, without either importing the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator
from typing import Any

from odf_chain.errors import SchemaError
from odf_chain.schema._json import loads, show

AVRO_SCHEMA_KEY = b"odf_chain.avro.schema"
DOC_KEY = b"doc"
AVRO_NAME_KEY = b"odf_chain.avro.name"
AVRO_SYMBOLS_KEY = b"odf_chain.avro.symbols"
AVRO_SIZE_KEY = b"odf_chain.avro.size"
AVRO_DEFAULT_KEY = b"odf_chain.avro.default"

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A converter step is a generator that yields sub-steps and receives their results.
Step = Generator["Step", Any, Any]


def run_steps(step: Step) -> Any:
    """Drive a tree of generator steps without Python recursion."""
    stack = [step]
    value: Any = None
    while True:
        try:
            child = stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            if not stack:
                return stop.value
            value = stop.value
        else:
            stack.append(child)
            value = None


# --------------------------------------------------------------------------------------------
# deep schemas: JSON is read and written without recursion (odf_chain.schema._json), and fastavro,
# which recurses in C, is not given a schema nesting deeper than MAX_NESTING levels


def avro_children(schema: Any) -> list | None:
    """The schemas directly inside an Avro schema, for measuring its nesting the way
    :mod:`~odf_chain.schema.avro_paths` does: every record, enum, fixed, array, map and union
    (any JSON object or list in a type position, including an invalid ``{"type": {...}}``) is
    a level; a type name is not."""
    if isinstance(schema, list):
        return schema
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, dict | list):
        return [kind]
    if kind == "array":
        return [schema["items"]] if "items" in schema else []
    if kind == "map":
        return [schema["values"]] if "values" in schema else []
    if kind in ("record", "error") and isinstance(schema.get("fields"), list):
        return [f["type"] for f in schema["fields"] if isinstance(f, dict) and "type" in f]
    return []


def load_avro(schema: str | bytes | dict) -> Any:
    if isinstance(schema, dict | list):
        return schema
    if not isinstance(schema, str | bytes):
        raise SchemaError(f"an Avro schema is JSON text or a dict, not {type(schema).__name__}")
    return loads(schema, what="the Avro schema")


# --------------------------------------------------------------------------------------------
# names and defaults (shared by both directions)


def place(where: str) -> str:
    return f"field {where}" if where else "the top-level record"


def split_fullname(name: str, namespace: Any, enclosing: str) -> tuple[str, str]:
    """(full name, namespace) of a named type, per the Avro spec."""
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = enclosing if namespace is None else namespace
    if not isinstance(ns, str):
        raise SchemaError(f"namespace {show(ns)} is not a string")
    return (f"{ns}.{name}" if ns else name), ns


def valid_fullname(name: str) -> bool:
    return all(NAME.fullmatch(part) for part in name.split("."))


def default_matches(value: Any, schema: Any, lookup: Callable[[str], Any]) -> bool:
    """Does a field default fit its type, at the top level (as fastavro checks it)?"""
    if isinstance(schema, list):
        return any(default_matches(value, s, lookup) for s in schema if not isinstance(s, list))
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = lookup(schema)
        if schema is None:
            return True
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, str) and kind not in PRIMITIVES and kind not in COMPLEX:
        schema = lookup(kind)
        if not isinstance(schema, dict):
            return True
        kind = schema.get("type")
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind in ("bytes", "string", "fixed"):
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in (schema.get("symbols") or ())
    if kind == "array":
        return isinstance(value, list)
    if kind in ("map", "record", "error"):
        return isinstance(value, dict)
    return True


COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})
RESERVED = PRIMITIVES | COMPLEX | {"union"}


def max_decimal_digits(size: int) -> int:
    """The most decimal digits an Avro ``fixed`` of ``size`` bytes holds (two's complement)."""
    return len(str(2 ** (8 * size - 1) - 1)) - 1 if size > 0 else 0
