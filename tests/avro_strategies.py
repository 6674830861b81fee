"""Hypothesis strategies for Avro schemas (decoded JSON) that fastavro, avro-python (DataHub's
parser) and odf_chain all accept.

``avro_schemas()`` covers primitives in both spellings, logical types (valid, ignored and
unknown), records (nested, namespaced, dotted names, docs, defaults, orders, aliases), enums,
fixed (with decimals), arrays, maps, unions (optional, multi-member, without null, single
member), references to named types by short and full name, and the properties DataHub reads
(``native_data_type``, ``_nullable``, ``deprecated``, field-level ``logicalType``).

- ``recursive=True`` also lets a schema refer to a record that encloses it (directly, in arrays
  and maps, through optional and other unions); without it no schema is recursive, so DataHub
  always terminates on it.
- ``collision_free=True`` avoids the corners where DataHub's path encoding is not injective
  (two enums or two fixed in one union, one short name in two namespaces, dotted field names,
  ``__struct_`` names), so that every generated schema must have unique paths.
"""

from __future__ import annotations

import math
import string
from typing import Any

from hypothesis import strategies as st

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
LOGICAL = (
    ("int", "date"),
    ("int", "time-millis"),
    ("long", "time-micros"),
    ("long", "timestamp-millis"),
    ("long", "timestamp-micros"),
    ("string", "uuid"),
    ("bytes", "decimal"),
    ("long", "local-timestamp-millis"),  # unknown to avro-python: ignored
    ("int", "timestamp-millis"),  # wrong physical type: ignored by avro-python
    ("long", "date"),
    ("string", "decimal"),
    ("int", "some-custom-type"),
)
FIELD_LOGICAL = ("date", "time-millis", "timestamp-micros", "uuid", "decimal", "custom")
SHORT_NAMES = ("A", "B", "Rec", "Node", "__struct_x", "__structn_7_y")
SAFE_FIELD_NAMES = ("a", "b", "id", "value", "x_1", "Name", "f")
ODD_FIELD_NAMES = ("p.q", "__struct_f", "__structn_2_g", "with space", "a-b")
NAMESPACES = ("com.a", "org.b.c", "x")
SYMBOLS = ("A", "B", "C", "D_1", "_x", "red")

_text = st.text(alphabet=string.ascii_letters + string.digits + " .,_-é€", max_size=12)


class _Gen:
    def __init__(self, draw: Any, recursive: bool, collision_free: bool, max_depth: int) -> None:
        self.draw = draw
        self.recursive = recursive
        self.collision_free = collision_free
        self.max_depth = max_depth
        self.kinds: dict[str, str] = {}  # fullname -> record / enum / fixed (complete)
        self.symbols: dict[str, list[str]] = {}
        self.enclosing: list[str] = []  # records being defined
        self.taken: set[str] = set()
        self.counter = 0

    # ----------------------------------------------------------------- helpers

    def flag(self, p: float = 0.5) -> bool:
        return self.draw(st.floats(0, 1)) < p

    def fresh_name(self) -> tuple[str, str | None, str]:
        """(name attribute, namespace attribute or None, full name)."""
        self.counter += 1
        if self.collision_free:
            short = f"T{self.counter}"
        else:
            short = self.draw(st.sampled_from(SHORT_NAMES))
        style = self.draw(st.sampled_from(("plain", "namespace", "dotted")))
        ns = self.draw(st.sampled_from(NAMESPACES))
        if style == "namespace":
            name, namespace, full = short, ns, f"{ns}.{short}"
        elif style == "dotted":
            name, namespace, full = f"{ns}.{short}", None, f"{ns}.{short}"
        else:
            name, namespace, full = short, None, None  # full depends on the enclosing namespace
        return name, namespace, full or ""

    def full_of(self, name: str, namespace: str | None, ns: str) -> str:
        if "." in name:
            return name
        space = namespace if namespace is not None else ns
        return f"{space}.{name}" if space else name

    def ref(self, full: str, ns: str) -> str | None:
        """A reference to ``full`` that resolves from namespace ``ns``, or None."""
        if "." in full:
            space, short = full.rsplit(".", 1)
            if space == ns and self.flag():
                return short
            return full
        return full if not ns else None

    def props(self, allow_native: bool = True) -> dict:
        out: dict[str, Any] = {}
        if self.flag(0.15) and allow_native:
            out["native_data_type"] = self.draw(_text)
        if self.flag(0.1):
            out["_nullable"] = self.draw(st.booleans())
        if self.flag(0.1):
            out["deprecated"] = self.draw(st.one_of(_text, st.booleans()))
        if self.flag(0.1):
            out["custom"] = self.draw(st.integers(0, 9))
        return out

    def doc(self, out: dict) -> None:
        if self.flag(0.3):
            out["doc"] = self.draw(_text)

    # ----------------------------------------------------------------- schemas

    def schema(self, depth: int, ns: str, in_union: bool = False, used: set | None = None) -> Any:
        """A schema; inside a union, ``used`` holds the member keys already taken."""
        choices = ["primitive", "primitive", "logical", "enum", "fixed", "ref"]
        if self.recursive and self.enclosing:
            choices += ["ref", "ref"]
        if depth < self.max_depth:
            choices += ["record", "record", "array", "map"]
            if not in_union:
                choices += ["union", "union", "optional", "optional"]
        while True:
            kind = self.draw(st.sampled_from(choices))
            made = self.make(kind, depth, ns, in_union, used)
            if made is not None:
                return made

    def member_ok(self, key: str, used: set | None) -> bool:
        return used is None or key not in used

    def make(self, kind: str, depth: int, ns: str, in_union: bool, used: set | None) -> Any:
        if kind == "primitive":
            t = self.draw(st.sampled_from(PRIMITIVES))
            if not self.member_ok(t, used):
                return None
            if used is not None:
                used.add(t)
            props = self.props()
            if props or self.flag(0.2):
                return {"type": t, **props}
            return t
        if kind == "logical":
            physical, logical = self.draw(st.sampled_from(LOGICAL))
            if not self.member_ok(physical, used):
                return None
            if used is not None:
                used.add(physical)
            out: dict[str, Any] = {"type": physical, "logicalType": logical, **self.props()}
            if logical == "decimal":
                precision = self.draw(st.integers(1, 20))
                out["precision"] = precision
                if self.flag():
                    out["scale"] = self.draw(st.integers(0, precision))
            return out
        if kind == "ref":
            pool = [f for f in self.kinds if self.member_ok(f, used)]
            if self.recursive and self.enclosing:
                back = [f for f in self.enclosing if self.member_ok(f, used)]
                pool = back if back and self.flag(0.5) else pool + back
            if used is not None and self.collision_free:
                pool = [f for f in pool if self.kind_of(f) not in used]
            refs = [(f, r) for f in pool if (r := self.ref(f, ns)) is not None]
            if not refs:
                return None
            full, ref = self.draw(st.sampled_from(refs))
            if used is not None:
                used.add(full)
                if self.collision_free and self.kind_of(full) != "record":
                    used.add(self.kind_of(full))
            return ref
        if kind in ("enum", "fixed", "record"):
            if used is not None and self.collision_free and kind in used:
                return None
            name, namespace, full = self.fresh_name()
            full = full or self.full_of(name, namespace, ns)
            if full in self.taken or full.rsplit(".", 1)[-1] in PRIMITIVES:
                return None
            self.taken.add(full)
            if used is not None:
                used.add(full)
                if self.collision_free and kind != "record":
                    used.add(kind)
            out = {"type": kind, "name": name}
            if namespace is not None:
                out["namespace"] = namespace
            if kind == "enum":
                symbols = self.draw(
                    st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=4, unique=True)
                )
                out["symbols"] = symbols
                self.doc(out)
                if self.flag(0.2):
                    out["default"] = self.draw(st.sampled_from(symbols))
                out.update(self.props())
                self.symbols[full] = symbols
            elif kind == "fixed":
                size = self.draw(st.integers(0, 16))
                out["size"] = size
                if size >= 2 and self.flag(0.3):
                    out["logicalType"] = "decimal"
                    most = math.floor(math.log10(2) * (8 * size - 1))
                    out["precision"] = self.draw(st.integers(1, most))
                if self.flag(0.2):
                    out["doc"] = self.draw(_text)  # avro-python drops it; so does DataHub
                out.update(self.props())
            else:
                self.doc(out)
                out.update(self.props())
                child_ns = full.rsplit(".", 1)[0] if "." in full else ""
                self.enclosing.append(full)
                out["fields"] = self.fields(depth, child_ns)
                self.enclosing.pop()
            self.kinds[full] = kind
            return out
        if kind in ("array", "map"):
            if not self.member_ok(kind, used):
                return None
            if used is not None:
                used.add(kind)
            inner = self.schema(depth + 1, ns)
            out = {"type": kind, ("items" if kind == "array" else "values"): inner}
            out.update(self.props())
            if self.flag(0.1):
                out["doc"] = self.draw(_text)  # dropped by avro-python
            return out
        if kind == "optional":
            member = self.schema(depth + 1, ns, in_union=True, used={"null"})
            return ["null", member] if self.flag() else [member, "null"]
        # a general union
        size = self.draw(st.integers(0, 4))
        members_used: set = set()
        members = [
            self.schema(depth + 1, ns, in_union=True, used=members_used) for _ in range(size)
        ]
        if "null" not in members_used and self.flag(0.3) and size != 1:
            members.insert(self.draw(st.integers(0, len(members))), "null")
        return members

    def kind_of(self, full: str) -> str:
        return self.kinds.get(full, "record")

    def fields(self, depth: int, ns: str) -> list[dict]:
        pool = SAFE_FIELD_NAMES if self.collision_free else SAFE_FIELD_NAMES + ODD_FIELD_NAMES
        names = self.draw(st.lists(st.sampled_from(pool), max_size=4, unique=True))
        out = []
        for name in names:
            field: dict[str, Any] = {"name": name, "type": self.schema(depth + 1, ns)}
            self.doc(field)
            if self.flag(0.3) and field["type"] != []:  # nothing matches an empty union
                field["default"] = self.default(field["type"], ns)
            if self.flag(0.1):
                field["order"] = self.draw(st.sampled_from(("ascending", "descending", "ignore")))
            if self.flag(0.1):
                field["aliases"] = ["old_" + name.replace(".", "_")]
            if self.flag(0.1):
                field["logicalType"] = self.draw(st.sampled_from(FIELD_LOGICAL))
            field.update(self.props())
            out.append(field)
        return out

    def default(self, schema: Any, ns: str) -> Any:
        """A default value of the right JSON shape (for a union: of its first member)."""
        if isinstance(schema, list):
            return self.default(schema[0], ns) if schema else None
        t = schema if isinstance(schema, str) else schema["type"]
        if t not in PRIMITIVES and t not in ("array", "map", "record", "enum", "fixed"):
            full = t if "." in t else (f"{ns}.{t}" if ns else t)
            t = self.kinds.get(full, "record")
            if t == "enum":
                return self.draw(st.sampled_from(self.symbols[full]))
        if t == "enum":
            return self.draw(st.sampled_from(schema["symbols"]))
        return {
            "null": None,
            "boolean": self.draw(st.booleans()),
            "int": self.draw(st.integers(-5, 5)),
            "long": self.draw(st.integers(-(2**40), 2**40)),
            "float": self.draw(st.floats(-1e6, 1e6)),
            "double": self.draw(
                st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-9, 9))
            ),
            "bytes": "\u0000\u00ff",
            "string": self.draw(_text),
            "array": [],
            "map": {},
            "record": {},
            "fixed": "",
        }[t]


@st.composite
def avro_schemas(
    draw: Any, *, recursive: bool = False, collision_free: bool = False, max_depth: int = 3
) -> Any:
    """A decoded Avro schema (mostly records; sometimes a top-level union, array, primitive...)."""
    gen = _Gen(draw, recursive, collision_free, max_depth)
    top = draw(st.sampled_from(("record", "record", "record", "any")))
    if top == "record":
        while True:
            made = gen.make("record", 0, "", False, None)
            if made is not None:
                return made
    return gen.schema(0, "")


@st.composite
def recursive_chains(draw: Any, max_records: int = 4) -> dict:
    """Records nested in a chain, each referring back to its enclosing records (directly, in
    arrays and maps, rarely through an optional union): the shapes where DataHub forgets a
    record after the first back-reference and expands it again (sometimes finitely)."""
    count = draw(st.integers(1, max_records))
    names = [f"R{i}" for i in range(count)]

    def build(i: int) -> dict:
        kinds = draw(
            st.lists(
                st.sampled_from(("leaf", "back", "back", "array", "map", "optional", "child")),
                min_size=1,
                max_size=4,
            )
        )
        fields: list[dict] = []
        has_child = False
        for j, kind in enumerate(kinds):
            back = draw(st.sampled_from(names[: i + 1]))
            if kind == "child" and not has_child and i + 1 < count:
                has_child = True
                ftype: Any = build(i + 1)
            elif kind == "array":
                ftype = {"type": "array", "items": back}
            elif kind == "map":
                ftype = {"type": "map", "values": back}
            elif kind == "optional" and draw(st.booleans()):
                ftype = ["null", back]
            elif kind in ("back", "optional"):
                ftype = back
            else:
                ftype = "int"
            fields.append({"name": f"f{j}", "type": ftype})
        return {"type": "record", "name": names[i], "fields": fields}

    return build(0)
