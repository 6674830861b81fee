"""Type widening: which input types a write casts to the schema in force.

The evolution rules never let a column change type (:mod:`odf_chain.schema.evolution`), yet
the same column often arrives narrower than it was declared: Spark infers ``int`` for a CSV
whose numbers happen to be small, pandas gives ``float32`` where the dataset holds ``float64``.
A write then adopts the schema in force: the input is cast to the declared type, so no
SetDataSchema is appended and the rules are untouched. Only casts that keep every value
exactly are taken; anything else is refused before a file or block is written, naming the
input and the field. Both writers (:meth:`odf_chain.dataset.Dataset.write` and
:func:`odf_chain.spark.write`) ask this module, so the two agree.

A type *widens into* another when every value of the first is a value of the second:

- a signed integer into a wider signed one (int8 -> int16 -> int32 -> int64);
- an unsigned integer into a wider unsigned one, or into a signed one of more bits
  (uint32 -> int64);
- an integer of at most 16 bits into float32 (24-bit significand), of at most 32 bits into
  float64 (53 bits); int64 into float64 is not exact above 2**53, and is refused;
- a float into a wider float (float16 -> float32 -> float64);
- a decimal into one with no fewer integer digits and no fewer fractional digits
  (decimal(5, 2) -> decimal(7, 3)), an integer into a decimal with room for all its digits.

Deliberately not: ``date`` into ``timestamp`` (a date is a calendar day, not an instant: which
zone's midnight it would become is a guess, and a guess is not a cast), timestamps of another
unit or zone (the slices store what the schema declares; a finer unit can overflow), a string
into a number or the reverse (parsing is a transformation, not a widening), and anything
narrower. Structs, lists and maps widen member by member (struct members matched by name).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from odf_chain.errors import TypeChangeError
from odf_chain.schema.evolution import ITEM, KEY, VALUE

__all__ = ["Narrowing", "adopt_schema", "refuse_narrowing", "widened", "widens"]

_DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # digits of the largest signed integer
_UNSIGNED_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
_SIGNIFICAND_BITS = {16: 11, 32: 24, 64: 53}


def _float_rank(t: pa.DataType) -> int:
    return {16: 0, 32: 1, 64: 2}[t.bit_width]


def widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Does every value of leaf type ``source`` exist, exactly, in leaf type ``target``?
    (Equal types do too.)"""
    if source.equals(target):
        return True
    types = pa.types
    if types.is_integer(source):
        signed = types.is_signed_integer(source)
        bits = source.bit_width
        if types.is_signed_integer(target):
            return target.bit_width > bits
        if types.is_unsigned_integer(target):
            return not signed and target.bit_width > bits
        if types.is_floating(target):  # exact while the magnitude fits the significand
            return bits - signed <= _SIGNIFICAND_BITS[target.bit_width]
        if types.is_decimal(target):
            digits = (_DECIMAL_DIGITS if signed else _UNSIGNED_DIGITS)[bits]
            return target.precision - target.scale >= digits
        return False
    if types.is_floating(source) and types.is_floating(target):
        return _float_rank(target) > _float_rank(source)
    if types.is_decimal(source) and types.is_decimal(target):
        return (
            target.scale >= source.scale
            and target.precision - target.scale >= source.precision - source.scale
        )
    return False


@dataclass(frozen=True, slots=True)
class Narrowing:
    """A field whose input type does not widen into the type the schema in force declares."""

    path: str  # dotted name path: "n", "location.lat", "tags.[item]"
    source: pa.DataType
    target: pa.DataType

    def __str__(self) -> str:
        return f"field {self.path} is {self.source} where the dataset has {self.target}"


def _kind(t: pa.DataType) -> str | None:
    """The nested kind of a type (None for a leaf): what must match before members compare."""
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list[{t.list_size}]"
    if pa.types.is_large_list(t):
        return "large_list"
    if pa.types.is_list(t):
        return "list"
    return None


def _adopt(
    source: pa.DataType, target: pa.DataType, path: tuple[str, ...], found: list[Narrowing]
) -> pa.DataType:
    """``source`` with each member that widens into ``target``'s member of the same name taken
    as that member's type; members ``target`` lacks are kept (new fields, for the new-column
    check to judge). What neither equals nor widens is added to ``found``."""
    if source.equals(target):
        return target
    kind = _kind(source)
    if kind is None or kind != _kind(target):
        if kind is None and _kind(target) is None and widens(source, target):
            return target
        found.append(Narrowing(".".join(path), source, target))
        return source
    if kind == "struct":
        members = {target.field(i).name: target.field(i) for i in range(target.num_fields)}
        fields = []
        for i in range(source.num_fields):
            f = source.field(i)
            known = members.get(f.name)
            fields.append(
                f
                if known is None
                else f.with_type(_adopt(f.type, known.type, (*path, f.name), found))
            )
        return pa.struct(fields)
    if kind == "map":
        key = _adopt(source.key_type, target.key_type, (*path, KEY), found)
        item = _adopt(source.item_type, target.item_type, (*path, VALUE), found)
        return pa.map_(
            source.key_field.with_type(key),
            source.item_field.with_type(item),
            keys_sorted=source.keys_sorted,
        )
    item = source.value_field.with_type(
        _adopt(source.value_type, target.value_type, (*path, ITEM), found)
    )
    if kind == "large_list":
        return pa.large_list(item)
    if kind == "list":
        return pa.list_(item)
    return pa.list_(item, source.list_size)


def widened(source: pa.DataType, target: pa.DataType) -> tuple[pa.DataType, list[Narrowing]]:
    """The type to write data of ``source`` as, in a column the schema in force declares
    ``target``: ``target`` itself when every member equals or widens into it, and the fields
    (dotted paths below the column) that do not."""
    found: list[Narrowing] = []
    return _adopt(source, target, (), found), found


def adopt_schema(
    schema: pa.Schema, in_force: pa.Schema | None, *, skip: frozenset[str] | set[str] = frozenset()
) -> tuple[pa.Schema, list[Narrowing]]:
    """``schema`` (an input's user columns) with each column that widens into the schema in
    force cast to its declared type, and every field that neither equals nor widens into its
    declared type. Columns in ``skip`` (system columns) and new columns are left as they are."""
    if in_force is None:
        return schema, []
    declared = {f.name: f for f in in_force}
    found: list[Narrowing] = []
    fields = []
    for f in schema:
        known = declared.get(f.name)
        if known is None or f.name in skip:
            fields.append(f)
            continue
        before = len(found)
        adopted = _adopt(f.type, known.type, (f.name,), found)
        fields.append(f.with_type(adopted) if len(found) == before else f)
    return pa.schema(fields, metadata=schema.metadata), found


def refuse_narrowing(found: list[Narrowing], subject: str) -> None:
    """Raise :class:`TypeChangeError` for ``found`` (if any), naming ``subject`` (an input
    file, a DataFrame, a table) and each field."""
    if not found:
        return
    shown = "; ".join(map(str, found[:5])) + (
        f"; and {len(found) - 5} more" if len(found) > 5 else ""
    )
    raise TypeChangeError(
        "schema-evolution",
        f"{subject}: {shown}: a column's type never changes, and only types that hold every "
        "value exactly are cast on write (a narrower integer or float, a smaller decimal); "
        "cast the input, or write it to a new column",
    )
