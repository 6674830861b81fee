"""DataHub v2 field paths (and DataHub's per-field facts) from an Avro schema.

:func:`avro_fields` returns, in DataHub's order, one :class:`FieldInfo` per path that DataHub's
own converter (``avro_schema_to_mce_fields`` in ``acryl-datahub``) emits for the same schema:
the path, DataHub's type class (``string``, ``number``, ``record``, ...), ``nativeDataType``,
``nullable``, ``description`` and ``isPartOfKey``. :func:`avro_field_paths` returns just the
paths. The rules are DataHub's, warts included (see ``docs/field-paths.md``):

- records appear by short name (``[type=E]`` for ``some.event.E``), enum and fixed as
  ``[type=enum]`` / ``[type=fixed]``, logical types by their physical type (``[type=int]`` for a
  date) while the type class follows the logical type (``date``, ``time``, ``number``);
- a union of null and one other type collapses to that type and makes the field nullable; any
  other union emits one path for the union and one per non-null member; arrays and maps add a
  token and no path of their own;
- a record is not expanded again below itself (recursion ends at a record already on the path);
- a top-level non-record schema has paths too; key schemas carry ``[key=True]``;
- ``nativeDataType`` is what DataHub puts there: the field's own name for a field whose type is
  not a union, the member's type for a union member, and a schema's ``native_data_type``
  property when present; ``description`` is the field's doc (else the record's or enum's doc),
  plus DataHub's ``Field default value:`` suffix and ``DEPRECATED`` prefix.

Where this module deliberately differs from DataHub:

- **Recursion DataHub never finishes.** DataHub checks for recursion only when it meets a
  record directly, not through an optional union (``["null", "Node"]``), and it forgets an
  enclosing record after the first back-reference to it, so a second one (``{a: R, b: R}``
  inside ``R``) expands ``R`` again. Either way it recurses until Python's recursion limit and
  then returns no fields at all (or, with branching, effectively never returns). We run
  DataHub's procedure exactly and detect, exactly, when it would not terminate (a record
  expansion that repeats an enclosing expansion of the same record with the same set of
  records DataHub believes it is inside: from there DataHub repeats itself forever). For such
  a schema we apply the rule DataHub intends everywhere: a record already being expanded on
  the current path is emitted but not expanded again. Where DataHub does terminate we match it
  exactly, including the extra level that its forgetting adds in some mutually recursive
  schemas.
- **Depth.** DataHub's converter is recursive and returns no fields beyond roughly 150-200
  nested records; ours is iterative (JSON too deep for ``json.loads`` is decoded without
  recursion). Schemas nesting deeper than :data:`MAX_NESTING` (1000) levels are refused with
  :class:`SchemaError`, as by ``avro_to_arrow``: fastavro's compiled parser recurses in C and
  would crash the process on a small thread stack a few thousand levels down. Schemas
  expanding to more than :data:`MAX_FIELDS` paths (possible when a named type is reused at
  every level) are refused rather than ground through.
- **``"type": "error"``** records (protocol error types) make DataHub fail an assertion and
  return nothing; we treat them as records (type ``record``).
- **Validation.** DataHub parses with avro-python and ``validate_names=False``; we validate with
  fastavro plus our own checks, which name the offending field: invalid JSON, unknown or
  redefined named types, primitive type names used as names, duplicate field names, bad enums
  (symbols, duplicates, default), bad fixed sizes, unions holding unions or the same type twice,
  decimal precision/scale, non-string names and namespaces, and defaults that do not match the
  field's type. Names themselves are not checked against Avro's pattern, as in DataHub. Name
  resolution follows the Avro specification (as fastavro does); avro-python differs only for an
  explicit empty namespace inside a namespaced record.

DataHub's encoding is not injective in a few corners, and we reproduce it: two enums (or two
fixed types) in one union both become ``[type=enum]`` (``[type=fixed]``); two records with the
same short name in different namespaces in one union share ``[type=Name]``; field names are
cut at their last dot (``a.b`` and ``b`` collide); names starting with ``__struct_`` become
``struct``. Everything else yields unique paths.

The input is JSON text, or the already-decoded JSON (a dict for a named or complex type, a list
for a union; a primitive is the JSON string ``'"string"'``).
"""

from __future__ import annotations

from typing import Any

from odf_chain.errors import SchemaError
from odf_chain.schema._json import MAX_NESTING, show
from odf_chain.schema.avro_compile import (
    LOGICAL_CLASS,
    MISSING,
    TYPE_CLASS,
    Field,
    Node,
    compile_schema,
    decode_schema,
)
from odf_chain.schema.fields import KEY_TOKEN, VERSION_TOKEN, FieldInfo

__all__ = ["MAX_FIELDS", "MAX_NESTING", "avro_field_paths", "avro_fields"]

# MAX_NESTING (odf_chain.schema._json's, shared with convert): schemas nesting deeper than this
# many levels (records, arrays, maps, unions) are refused.

#: Schemas expanding to more than this many field paths are refused.
MAX_FIELDS = 1_000_000


class _Diverges(Exception):
    """DataHub's procedure would not terminate on this schema."""


def avro_fields(schema: str | dict | list, is_key_schema: bool = False) -> list[FieldInfo]:
    """Every v2 field path of an Avro schema with DataHub's facts about it, in DataHub's order.

    Raises :class:`SchemaError` for a malformed schema, naming the offending field or type.
    """
    return _convert(schema, is_key_schema, paths_only=False)[0]


def avro_field_paths(schema: str | dict | list, is_key_schema: bool = False) -> list[str]:
    """Every v2 field path of an Avro schema, in DataHub's order (see :func:`avro_fields`)."""
    return _convert(schema, is_key_schema, paths_only=True)[0]


def _convert(schema: Any, is_key_schema: bool, paths_only: bool) -> tuple[list, bool]:
    """The fields (or paths), and whether DataHub's own procedure would never terminate."""
    root = compile_schema(decode_schema(schema))
    try:
        return _walk(root, bool(is_key_schema), paths_only, on_path=False), False
    except _Diverges:
        return _walk(root, bool(is_key_schema), paths_only, on_path=True), True


# --------------------------------------------------------------------------- walking

_VISIT, _POP_TOKEN, _POP_FIELD, _FORGET, _DEACTIVATE = range(5)
_LEAVES = frozenset(("primitive", "enum", "fixed"))
_EMITTING = frozenset(("primitive", "enum", "fixed", "union"))


def _strip(token: str) -> str:
    return token[6:-1] if token.startswith("[type=") else token


def _type_class(act: Node, logical: Any) -> str:
    base = TYPE_CLASS[act.type_name]
    if logical is not None and isinstance(logical, str):
        return LOGICAL_CLASS.get(logical, base)
    return base


def _description(text: Any, act: Node, default: Any, merged: list[dict]) -> Any:
    if not text and act.doc:
        text = act.doc
    if default is not None:
        try:
            shown = str(default)  # what DataHub prints (Python's str of the JSON value)
        except RecursionError:
            shown = show(default)
        text = f"{text if text else ''}\nField default value: {shown}"
    deprecated = MISSING
    for props in merged:
        deprecated = props.get("deprecated", deprecated)
    if deprecated is not MISSING:
        text = f'<span style="color:red">DEPRECATED: {deprecated}</span>\n' + text if text else ""
    return text


def _field_facts(field: Field) -> tuple:
    """What DataHub says about a field, except a union-typed field's native type (which is
    the type token just before the field's name, so depends on where the field is met)."""
    ftype = field.type
    act = ftype.under or ftype
    override = act.props.get("native_data_type", MISSING)
    native = None if ftype.kind == "union" else _strip(field.token)
    logical = act.props.get("logicalType") or field.props.get("logicalType")
    doc = _description(
        field.doc if field.doc else None, act, field.default, [field.props, ftype.props, act.props]
    )
    field.cache = (override, native, _type_class(act, logical), ftype.nullable, doc)
    return field.cache


def _plain(schema: Node, act: Node, tokens: list[str], path: str, key: bool) -> FieldInfo:
    """DataHub's entry for a schema met outside any field (top-level non-records)."""
    native = act.props.get("native_data_type", MISSING)
    if native is MISSING:
        native = _strip(tokens[-2] if schema.kind == "union" else tokens[-1])
    doc = _description(None, act, None, [schema.props, schema.props, act.props])
    logical = act.props.get("logicalType")
    return FieldInfo(path, _type_class(act, logical), native, schema.nullable, doc, key)


def _walk(root: Node, key: bool, paths_only: bool, on_path: bool) -> list:
    """DataHub's traversal (``AvroToMceSchemaConverter``), with an explicit stack.

    ``seen`` is DataHub's list of records it believes it is inside; with ``on_path`` it is the
    set of records really being expanded on the current path (and records met through an
    optional union are checked too), which is the rule DataHub means to apply.
    """
    tokens = [VERSION_TOKEN]
    prefixes = [VERSION_TOKEN]
    if key:
        tokens.append(KEY_TOKEN)
        prefixes.append(f"{VERSION_TOKEN}.{KEY_TOKEN}")
    out: list = []
    fields: list[Field] = []
    seen: set[str] = set()
    active: set[tuple[str, frozenset]] = set()
    work: list[tuple[int, Any]] = [(_VISIT, root)]
    push = work.append
    pop = work.pop
    emit = out.append

    def emit_field(field: Field, prefix: str, last_token: str) -> None:
        """DataHub's entry for ``field`` met at ``prefix`` (whose last token is given)."""
        path = f"{prefix}.{field.token}"
        if paths_only:
            emit(path)
            return
        override, native, type_class, nullable, doc = field.cache or _field_facts(field)
        if override is not MISSING:
            native = override
        elif native is None:
            native = _strip(last_token)
        emit(FieldInfo(path, type_class, native, nullable, doc, key))

    while work:
        op, arg = pop()
        if op == _POP_TOKEN:
            tokens.pop()
            prefixes.pop()
            continue
        if op == _POP_FIELD:
            fields.pop()
            continue
        if op == _FORGET:
            seen.discard(arg)
            continue
        if op == _DEACTIVATE:
            active.discard(arg)
            continue

        node = arg
        kind = node.kind
        if kind == "field":
            act = node.type.under or node.type
            if act.kind in _LEAVES:
                # The common case, short-cut: a leaf (or null + a leaf) is one path.
                emit_field(node, f"{prefixes[-1]}.{act.token}", act.token)
                continue
            fields.append(node)
            push((_POP_FIELD, None))
            push((_VISIT, node.type))
            continue
        if kind in _LEAVES:
            tokens.append(node.token)
            prefixes.append(f"{prefixes[-1]}.{node.token}")
            if fields:
                emit_field(fields[-1], prefixes[-1], node.token)
            elif paths_only:
                emit(prefixes[-1])
            else:
                emit(_plain(node, node, tokens, prefixes[-1], key))
            tokens.pop()
            prefixes.pop()
            continue

        # record, union, array, map
        expand = True
        if kind == "record" and not on_path:
            if node.fullname in seen:
                expand = False
            else:
                seen.add(node.fullname)
            # DataHub forgets the record when *any* visit of it ends, even a visit that found
            # it already there: that is what lets a second back-reference expand it again.
            push((_FORGET, node.fullname))
        act = node.under or node
        tokens.append(act.token)
        prefixes.append(f"{prefixes[-1]}.{act.token}")
        push((_POP_TOKEN, None))
        akind = act.kind
        if akind in _EMITTING:
            if fields:
                emit_field(fields[-1], prefixes[-1], act.token)
            elif paths_only:
                emit(prefixes[-1])
            else:
                emit(_plain(node, act, tokens, prefixes[-1], key))
        if akind == "record":
            if on_path:
                expand = act.fullname not in seen
                if expand:
                    seen.add(act.fullname)
                    push((_FORGET, act.fullname))
            elif expand:
                state = (act.fullname, frozenset(seen))
                if state in active:
                    raise _Diverges
                active.add(state)
                push((_DEACTIVATE, state))
            if len(out) > MAX_FIELDS:
                raise SchemaError(f"the schema expands to more than {MAX_FIELDS} field paths")
            if fields:
                field = fields[-1]
                emit_field(field, prefixes[-1], act.token)
                if expand:
                    tokens.append(field.token)
                    prefixes.append(f"{prefixes[-1]}.{field.token}")
                    push((_POP_TOKEN, None))
                else:
                    continue
            elif not expand:
                continue
        for sub in reversed(act.subs):
            push((_VISIT, sub))
    return out
