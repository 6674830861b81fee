"""The multiset digest of a table's rows: pinned against an encoder written here from the
format's description (values from ``to_pylist``, hashed with blake3 directly), and its
properties checked on generated tables: order, chunking and encoding do not matter, a value,
a multiplicity, a name or a type does; NaN payloads and the sign of zero do not, null at any
level does."""

from __future__ import annotations

import math
import struct
from collections import Counter
from decimal import Decimal
from itertools import pairwise

import blake3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings, strategies as st

from odf_chain.errors import SchemaError
from odf_chain.row_digest import digest_text, multiset_digest, row_keys

# ---------------------------------------------------------------------------------------------
# Generated columns: an Arrow type and a strategy for its Python values (None included)

FORMAT = b"odf_chain.row_digest/1\x00"
KEY_CONTEXT = "odf_chain 2025 row_digest/1 row key"


def _opt(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | values


_INTS = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(max_size=4)
_STRUCT = pa.struct([("a", pa.int64()), ("b", pa.string())])
_MAP = pa.map_(pa.string(), pa.int64())
_NESTED = pa.struct([("m", _MAP), ("l", pa.list_(pa.list_(pa.float64())))])


def _dict_values(ints, text):
    return st.fixed_dictionaries({"a": _opt(ints), "b": _opt(text)})


def _map_values(text, ints):
    return st.lists(st.tuples(text, _opt(ints)), max_size=3, unique_by=lambda kv: kv[0])


# name -> (type, broad values, few values: to make equal rows likely)
SPECS: dict[str, tuple[pa.DataType, st.SearchStrategy, st.SearchStrategy]] = {
    "i64": (pa.int64(), _INTS, st.integers(-2, 2)),
    "i32": (pa.int32(), st.integers(-(2**31), 2**31 - 1), st.integers(-2, 2)),
    "u8": (pa.uint8(), st.integers(0, 255), st.integers(0, 2)),
    "f64": (pa.float64(), st.floats(), st.sampled_from([0.0, -0.0, math.nan, 1.5, math.inf])),
    "f32": (pa.float32(), st.floats(width=32), st.sampled_from([0.0, -0.0, math.nan, -1.0])),
    "bool": (pa.bool_(), st.booleans(), st.booleans()),
    "str": (pa.string(), _TEXT, st.text("ab", max_size=2)),
    "bin": (pa.binary(), st.binary(max_size=4), st.binary(max_size=1)),
    "fsb": (pa.binary(2), st.binary(min_size=2, max_size=2), st.sampled_from([b"\0\0", b"ab"])),
    "ts": (pa.timestamp("ms", "UTC"), _INTS, st.integers(-1, 1)),
    "ts_naive": (pa.timestamp("us"), _INTS, st.integers(-1, 1)),
    "date": (pa.date32(), st.integers(-(10**6), 10**6), st.integers(-1, 1)),
    "dec": (
        pa.decimal128(10, 2),
        st.decimals(min_value=-(10**8) + 1, max_value=10**8 - 1, places=2, allow_nan=False),
        st.sampled_from([Decimal("0.00"), Decimal("-0.01"), Decimal("1.00")]),
    ),
    "dec256": (
        pa.decimal256(60, 3),
        st.decimals(min_value=-(10**56) + 1, max_value=10**56 - 1, places=3, allow_nan=False),
        st.sampled_from([Decimal("0.000"), Decimal("-1.000")]),
    ),
    "struct": (_STRUCT, _dict_values(_INTS, _TEXT), _dict_values(st.integers(0, 1), st.just("x"))),
    "list": (
        pa.list_(pa.string()),
        st.lists(_opt(_TEXT), max_size=3),
        st.lists(_opt(st.text("a", max_size=2)), max_size=2),
    ),
    "list_struct": (
        pa.list_(_STRUCT),
        st.lists(_opt(_dict_values(_INTS, _TEXT)), max_size=2),
        st.lists(_opt(_dict_values(st.just(1), st.just(""))), max_size=2),
    ),
    "map": (_MAP, _map_values(_TEXT, _INTS), _map_values(st.sampled_from("ab"), st.just(0))),
    "nested": (
        _NESTED,
        st.fixed_dictionaries(
            {
                "m": _opt(_map_values(_TEXT, _INTS)),
                "l": _opt(st.lists(_opt(st.lists(_opt(st.floats()), max_size=2)), max_size=2)),
            }
        ),
        st.fixed_dictionaries(
            {
                "m": _opt(_map_values(st.just("k"), st.just(1))),
                "l": _opt(st.lists(_opt(st.lists(_opt(st.just(-0.0)), max_size=1)), max_size=1)),
            }
        ),
    ),
}


@st.composite
def tables(
    draw, *, names: list[str] | None = None, few: bool = False, min_rows: int = 0, max_rows: int = 8
):
    """A table of some SPECS columns (each named after its spec; ``names`` if given) and rows
    of their broad values, or of ``few`` values each."""
    if names is None:
        names = draw(st.lists(st.sampled_from(sorted(SPECS)), min_size=1, max_size=4, unique=True))
    n = draw(st.integers(min_rows, max_rows))
    columns = {}
    for name in names:
        t, broad, narrow = SPECS[name]
        values = draw(st.lists(_opt(narrow if few else broad), min_size=n, max_size=n))
        columns[name] = pa.array(values, t)
    return pa.table(columns)


@st.composite
def rechunked(draw, table: pa.Table) -> pa.Table:
    """The same rows, cut into chunks at drawn places."""
    cuts = sorted(draw(st.lists(st.integers(0, table.num_rows), max_size=3)))
    bounds = [0, *cuts, table.num_rows]
    return pa.concat_tables([table.slice(a, b - a) for a, b in pairwise(bounds)])


def pylist(column: pa.Array | pa.ChunkedArray) -> list:
    """Python values, timestamps and dates as their integers (Python's datetime stops at year
    9999, the generated ones do not)."""
    t = column.type
    if pa.types.is_timestamp(t):
        column = column.cast(pa.int64())
    elif pa.types.is_date32(t):
        column = column.cast(pa.int32())
    return column.to_pylist()


def norm(value, t: pa.DataType):
    """A hashable form of a Python value in which equal values are equal: NaNs one value, -0.0
    as 0.0, a map's entries in no order."""
    if value is None:
        return ("null",)
    if pa.types.is_floating(t):
        return ("nan",) if math.isnan(value) else ("f", value + 0.0)
    if pa.types.is_struct(t):
        return ("s", tuple(norm(value[f.name], f.type) for f in t))
    if pa.types.is_map(t):
        entries = (repr((norm(k, t.key_type), norm(v, t.item_type))) for k, v in value)
        return ("m", tuple(sorted(entries)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ("l", tuple(norm(e, t.value_type) for e in value))
    return ("v", value)


def norm_rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    types = [table.schema.field(c).type for c in columns]
    values = [pylist(table.column(c)) for c in columns]
    if not columns:
        return [() for _ in range(table.num_rows)]
    return [tuple(map(norm, row, types)) for row in zip(*values, strict=True)]


# ---------------------------------------------------------------------------------------------
# The format, written out here from its description

_CANONICAL = {
    "i64": "int64",
    "i32": "int32",
    "u8": "uint8",
    "f64": "float64",
    "f32": "float32",
    "bool": "bool",
    "str": "utf8",
    "bin": "binary",
    "fsb": "fixed_binary(2)",
    "ts": 'timestamp(ms,"UTC")',
    "ts_naive": "timestamp(us)",
    "date": "date32",
    "dec": "decimal(10,2)",
    "dec256": "decimal(60,3)",
    "struct": 'struct<"a":int64,"b":utf8>',
    "list": "list<utf8>",
    "list_struct": 'list<struct<"a":int64,"b":utf8>>',
    "map": "map<utf8,int64>",
    "nested": 'struct<"m":map<utf8,int64>,"l":list<list<float64>>>',
}
_U64 = struct.Struct("<Q")


def _float_bits(value: float, t: pa.DataType) -> bytes:
    fmt = {16: "<e", 32: "<f", 64: "<d"}[t.bit_width]
    if math.isnan(value):
        return {16: b"\x00\x7e", 32: b"\x00\x00\xc0\x7f", 64: b"\0\0\0\0\0\0\xf8\x7f"}[t.bit_width]
    return struct.pack(fmt, value + 0.0)


def _int_bytes(value: int, t: pa.DataType) -> bytes:
    return value.to_bytes(t.bit_width // 8, "little", signed=not pa.types.is_unsigned_integer(t))


def encode(value, t: pa.DataType) -> bytes:
    """One value's encoding (timestamps and dates given as their integers)."""
    if pa.types.is_struct(t):
        if value is None:
            return b"\x00"
        return b"\x01" + b"".join(encode(value[f.name], f.type) for f in t)
    if pa.types.is_map(t) or pa.types.is_list(t):
        if value is None:
            return b"\x00" + bytes(8)
        if pa.types.is_map(t):
            items = sorted(
                b"\x01" + encode(k, t.key_type) + encode(v, t.item_type) for k, v in value
            )
        else:
            items = [encode(e, t.value_type) for e in value]
        return b"\x01" + _U64.pack(len(items)) + b"".join(items)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        if value is None:
            return b"\x00" + bytes(8)
        raw = value.encode() if isinstance(value, str) else value
        return b"\x01" + _U64.pack(len(raw)) + raw
    width = {pa.types.is_decimal(t): 32, pa.types.is_boolean(t): 1}.get(True)
    if width is None:
        width = t.byte_width if pa.types.is_fixed_size_binary(t) else t.bit_width // 8
    if value is None:
        return b"\x00" + bytes(width)
    if pa.types.is_boolean(t):
        return b"\x01" + bytes([value])
    if pa.types.is_floating(t):
        return b"\x01" + _float_bits(value, t)
    if pa.types.is_decimal(t):
        sign, digits, exponent = value.as_tuple()  # exact, unlike arithmetic (28 digits)
        assert exponent == -t.scale
        unscaled = (-1) ** sign * int("".join(map(str, digits)))
        return b"\x01" + unscaled.to_bytes(32, "little", signed=True)
    if pa.types.is_fixed_size_binary(t):
        return b"\x01" + value
    return b"\x01" + _int_bytes(value, t)


def reference_digest(table: pa.Table) -> bytes:
    names = table.column_names
    schema = _U64.pack(len(names))
    for name in names:
        for text in (name, _CANONICAL[name]):
            schema += _U64.pack(len(text.encode())) + text.encode()
    key = blake3.blake3(schema, derive_key_context=KEY_CONTEXT).digest()
    columns = []
    for name in names:
        t = table.schema.field(name).type
        as_int = {pa.types.is_timestamp(t): pa.int64(), pa.types.is_date32(t): pa.int32()}
        columns.append((pylist(table.column(name)), as_int.get(True, t)))
    rows = []
    for i in range(table.num_rows):
        encoded = b"".join(encode(values[i], t) for values, t in columns)
        rows.append(blake3.blake3(encoded, key=key).digest())
    hasher = blake3.blake3(FORMAT + schema + _U64.pack(table.num_rows))
    hasher.update(b"".join(sorted(rows)))
    return hasher.digest()


@settings(max_examples=150, deadline=None)
@given(tables())
def test_digest_is_the_format_as_described(table: pa.Table) -> None:
    assert multiset_digest(table, table.column_names) == reference_digest(table)


def test_digest_text_is_a_blake3_multihash() -> None:
    table = pa.table({"i64": [1, 2]})
    digest = multiset_digest(table, ["i64"])
    assert digest_text(digest) == "f1e20" + digest.hex()
    assert digest_text(digest) == "f1e20" + reference_digest(table).hex()


# ---------------------------------------------------------------------------------------------
# Properties


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_digest_ignores_row_order_and_chunking(data) -> None:
    table = data.draw(tables())
    order = data.draw(st.permutations(range(table.num_rows)))
    shuffled = data.draw(rechunked(table.take(pa.array(order, pa.int64()))))
    assert multiset_digest(shuffled, table.column_names) == multiset_digest(
        table, table.column_names
    )


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_the_digest_fed_a_batch_at_a_time_is_the_whole_tables(data) -> None:
    """What ``verify --deep`` computes reading a slice a row group at a time (only the rows'
    keys kept) is the digest of the whole table, and the format as described."""
    from odf_chain.row_digest import MultisetDigest

    table = data.draw(tables())
    cuts = sorted(data.draw(st.lists(st.integers(0, table.num_rows), max_size=4)))
    digest = MultisetDigest(table.schema, table.column_names)
    for start, end in zip([0, *cuts], [*cuts, table.num_rows], strict=True):
        for batch in table.slice(start, end - start).to_batches():
            digest.update(batch)
    assert digest.digest() == reference_digest(table)


@settings(max_examples=200, deadline=None)
@given(tables(few=True, max_rows=10))
def test_keys_are_equal_exactly_when_rows_are(table: pa.Table) -> None:
    """Few distinct values per column, so that equal rows are common: two rows share a key if
    and only if their values are equal (NaNs, signed zeros and map order aside)."""
    keys = [bytes(k) for k in row_keys(table, table.column_names)]
    rows = norm_rows(table, table.column_names)
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (keys[i] == keys[j]) == (rows[i] == rows[j]), (rows[i], rows[j])


@settings(max_examples=150, deadline=None)
@given(tables(few=True, max_rows=10), st.data())
def test_digest_changes_with_the_multiset(table: pa.Table, data) -> None:
    """A digest is equal exactly when the multisets of rows are: drop a row, duplicate one,
    replace one by another of the (narrow) generated values."""
    columns = table.column_names
    other = data.draw(tables(names=columns, few=True, max_rows=10))
    same = Counter(norm_rows(table, columns)) == Counter(norm_rows(other, columns))
    assert (multiset_digest(table, columns) == multiset_digest(other, columns)) == same


@settings(max_examples=100, deadline=None)
@given(tables(min_rows=1), st.data())
def test_one_changed_value_changes_the_digest(table: pa.Table, data) -> None:
    name = data.draw(st.sampled_from(table.column_names))
    row = data.draw(st.integers(0, table.num_rows - 1))
    t, broad, _ = SPECS[name]
    values = pylist(table.column(name))
    replaced = pa.array([*values[:row], data.draw(_opt(broad)), *values[row + 1 :]], t)
    changed = table.set_column(table.column_names.index(name), name, replaced)
    assume(norm_rows(changed, [name])[row] != norm_rows(table, [name])[row])
    assert multiset_digest(changed, table.column_names) != multiset_digest(
        table, table.column_names
    )


@settings(max_examples=100, deadline=None)
@given(tables(min_rows=1), st.data())
def test_a_duplicated_or_dropped_row_changes_the_digest(table: pa.Table, data) -> None:
    row = data.draw(st.integers(0, table.num_rows - 1))
    columns = table.column_names
    duplicated = pa.concat_tables([table, table.slice(row, 1)])
    dropped = pa.concat_tables([table.slice(0, row), table.slice(row + 1)])
    digests = {multiset_digest(t, columns) for t in (table, duplicated, dropped)}
    assert len(digests) == 3


@settings(max_examples=100, deadline=None)
@given(tables(), st.data())
def test_a_renamed_column_changes_the_digest(table: pa.Table, data) -> None:
    new_name = data.draw(st.text(max_size=3).filter(lambda s: s not in table.column_names))
    renamed = table.rename_columns([new_name, *table.column_names[1:]])
    assert multiset_digest(renamed, renamed.column_names) != multiset_digest(
        table, table.column_names
    )
    # also with no rows: the header alone tells them apart
    assert multiset_digest(renamed.slice(0, 0), renamed.column_names) != multiset_digest(
        table.slice(0, 0), table.column_names
    )


@settings(max_examples=100, deadline=None)
@given(tables(min_rows=1), st.data())
def test_a_slice_has_the_keys_of_its_rows(table: pa.Table, data) -> None:
    """Offsets of sliced arrays (struct children, list values, string offsets) are honoured."""
    start = data.draw(st.integers(0, table.num_rows))
    length = data.draw(st.integers(0, table.num_rows - start))
    columns = table.column_names
    sliced = row_keys(table.slice(start, length), columns)
    np.testing.assert_array_equal(sliced, row_keys(table, columns)[start : start + length])
    rebuilt = pa.table(
        {
            c: pa.array(pylist(table.column(c))[start : start + length], table.schema.field(c).type)
            for c in columns
        }
    )
    np.testing.assert_array_equal(sliced, row_keys(rebuilt, columns))


def test_column_order_matters() -> None:
    table = pa.table({"a": [1], "b": [1]})
    assert multiset_digest(table, ["a", "b"]) != multiset_digest(table, ["b", "a"])


def test_length_prefixes_keep_strings_apart() -> None:
    a = pa.table({"x": ["ab"], "y": ["c"], "l": [["a", "b"]]})
    b = pa.table({"x": ["a"], "y": ["bc"], "l": [["ab"]]})
    keys_a, keys_b = row_keys(a, ["x", "y"]), row_keys(b, ["x", "y"])
    assert bytes(keys_a[0]) != bytes(keys_b[0])
    assert bytes(row_keys(a, ["l"])[0]) != bytes(row_keys(b, ["l"])[0])


# ---------------------------------------------------------------------------------------------
# Floats


def _from_bits(bits: list[int], dtype) -> pa.Array:
    return pa.array(np.array(bits, dtype=dtype[1]).view(dtype[0]))


@pytest.mark.parametrize(
    ("dtype", "nans", "neg_zero"),
    [
        (
            (np.float64, np.uint64),
            [0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001],
            0x8000000000000000,
        ),
        ((np.float32, np.uint32), [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC12345], 0x80000000),
        ((np.float16, np.uint16), [0x7E00, 0xFE00, 0x7C01], 0x8000),
    ],
)
def test_nans_are_one_value_and_zero_has_no_sign(dtype, nans, neg_zero) -> None:
    canonical = _from_bits([nans[0]] * len(nans) + [0], dtype)
    assert np.isnan(canonical.to_numpy()[0])
    other = _from_bits([*nans[::-1], neg_zero], dtype)
    assert np.signbit(other.to_numpy()[-1])  # really -0.0
    a, b = pa.table({"x": canonical}), pa.table({"x": other})
    np.testing.assert_array_equal(row_keys(a, ["x"]), row_keys(b, ["x"]))
    assert multiset_digest(a, ["x"]) == multiset_digest(b, ["x"])
    # inside a list and a struct, too
    nested_a = pa.table({"l": pa.ListArray.from_arrays([0, len(canonical)], canonical)})
    nested_b = pa.table({"l": pa.ListArray.from_arrays([0, len(other)], other)})
    assert multiset_digest(nested_a, ["l"]) == multiset_digest(nested_b, ["l"])


def test_nan_zero_infinity_and_null_are_all_different() -> None:
    table = pa.table({"x": pa.array([math.nan, 0.0, math.inf, -math.inf, None, 1.0])})
    keys = {bytes(k) for k in row_keys(table, ["x"])}
    assert len(keys) == table.num_rows


# ---------------------------------------------------------------------------------------------
# Encodings and types


@settings(max_examples=100, deadline=None)
@given(st.lists(_opt(st.text("abc", max_size=2)), max_size=12), st.data())
def test_dictionary_encoding_is_invisible(values, data) -> None:
    plain = pa.table({"s": pa.array(values, pa.string())})
    # chunks encoded separately have different dictionaries
    encoded = data.draw(rechunked(plain))
    encoded = pa.table(
        {
            "s": pa.chunked_array(
                [c.dictionary_encode() for c in encoded.column("s").chunks],
                pa.dictionary(pa.int32(), pa.string()),
            )
        }
    )
    assert pa.types.is_dictionary(encoded.schema.field("s").type)
    np.testing.assert_array_equal(row_keys(encoded, ["s"]), row_keys(plain, ["s"]))
    assert multiset_digest(encoded, ["s"]) == multiset_digest(plain, ["s"])


def test_a_dictionary_inside_a_struct_is_its_values() -> None:
    values = pa.array(["x", None, "y", "x"])
    plain = pa.StructArray.from_arrays([values], ["s"])
    encoded = pa.StructArray.from_arrays([values.dictionary_encode()], ["s"])
    np.testing.assert_array_equal(
        row_keys(pa.table({"c": encoded}), ["c"]), row_keys(pa.table({"c": plain}), ["c"])
    )


def _pair(values: list, a: pa.DataType, b: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """The same Python values as an array of each type."""
    first, second = pa.array(values, a), pa.array(values, b)
    assert first.type == a and second.type == b
    return first, second


_INTS_LIST = [[1], None, [], [2, None]]
_SAME_VALUES = {
    "string and large_string": _pair(["a", None, ""], pa.string(), pa.large_string()),
    "string and string_view": _pair(["a", None, ""], pa.string(), pa.string_view()),
    "binary and large_binary": _pair([b"a", None], pa.binary(), pa.large_binary()),
    "list and large_list": _pair(_INTS_LIST, pa.list_(pa.int64()), pa.large_list(pa.int64())),
    "list and list_view": _pair(_INTS_LIST, pa.list_(pa.int64()), pa.list_view(pa.int64())),
    "list item names": _pair(
        _INTS_LIST, pa.list_(pa.int64()), pa.list_(pa.field("element", pa.int64()))
    ),
    "decimal128 and decimal256": _pair(
        [Decimal("1.5"), Decimal("-2.5"), None], pa.decimal128(9, 1), pa.decimal256(9, 1)
    ),
    "nullable and required field": _pair(
        [{"a": 1}, None],
        pa.struct([pa.field("a", pa.int64())]),
        pa.struct([pa.field("a", pa.int64(), nullable=False)]),
    ),
}


@pytest.mark.parametrize(("a", "b"), _SAME_VALUES.values(), ids=list(_SAME_VALUES))
def test_encodings_of_one_logical_type_digest_alike(a: pa.Array, b: pa.Array) -> None:
    np.testing.assert_array_equal(
        row_keys(pa.table({"c": a}), ["c"]), row_keys(pa.table({"c": b}), ["c"])
    )
    assert multiset_digest(pa.table({"c": a}), ["c"]) == multiset_digest(pa.table({"c": b}), ["c"])


_OTHER_TYPES = {
    "int64 and int32": _pair([1, 2], pa.int64(), pa.int32()),
    "int64 and uint64": _pair([1, 2], pa.int64(), pa.uint64()),
    "int32 and date32": _pair([1, 2], pa.int32(), pa.date32()),
    "string and binary": _pair(["a"], pa.string(), pa.binary()),
    "float64 and float32": _pair([1.5], pa.float64(), pa.float32()),
    "timestamp units": _pair([0, 1], pa.timestamp("ms"), pa.timestamp("us")),
    "timestamp time zones": _pair(
        [0, 1], pa.timestamp("ms", "UTC"), pa.timestamp("ms", "Europe/Paris")
    ),
    "timestamp with and without zone": _pair([0, 1], pa.timestamp("ms", "UTC"), pa.timestamp("ms")),
    "decimal scales": _pair([Decimal(1)], pa.decimal128(9, 1), pa.decimal128(9, 2)),
    "decimal precisions": _pair([Decimal(1)], pa.decimal128(9, 1), pa.decimal128(10, 1)),
    "list and fixed_size_list": _pair([[1, 2]], pa.list_(pa.int64()), pa.list_(pa.int64(), 2)),
    "list item types": _pair([[1, 2]], pa.list_(pa.int64()), pa.list_(pa.int32())),
    "struct field names": (
        pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
        pa.array([{"b": 1}], pa.struct([("b", pa.int64())])),
    ),
}


@pytest.mark.parametrize(("a", "b"), _OTHER_TYPES.values(), ids=list(_OTHER_TYPES))
def test_another_type_changes_the_digest_and_the_keys(a: pa.Array, b: pa.Array) -> None:
    """Whatever the values: the same integers as int64 and int32, as ms and us."""
    table, other = pa.table({"c": a}), pa.table({"c": b})
    assert multiset_digest(table, ["c"]) != multiset_digest(other, ["c"])
    assert multiset_digest(table.slice(0, 0), ["c"]) != multiset_digest(other.slice(0, 0), ["c"])
    assert bytes(row_keys(table, ["c"])[0]) != bytes(row_keys(other, ["c"])[0])


def test_run_end_encoding_and_extension_types_are_their_values() -> None:
    import pyarrow.compute as pc

    plain = pa.array([1, 1, None, 2, 2, 2])
    assert multiset_digest(pa.table({"c": pc.run_end_encode(plain)}), ["c"]) == multiset_digest(
        pa.table({"c": plain}), ["c"]
    )
    uuid = pa.array([b"0123456789abcdef", None], pa.binary(16))
    ext = pa.ExtensionArray.from_storage(pa.uuid(), uuid)
    assert multiset_digest(pa.table({"c": ext}), ["c"]) == multiset_digest(
        pa.table({"c": uuid}), ["c"]
    )


def test_a_column_named_twice_or_missing_is_refused_by_name() -> None:
    """A slice file can repeat a column name; the digest says so instead of a KeyError."""
    twice = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(SchemaError, match=r"column 'a': 2 columns so named"):
        multiset_digest(twice, ["a"])
    with pytest.raises(SchemaError, match=r"column 'b': no columns so named"):
        multiset_digest(pa.table({"a": [1]}), ["b"])


def test_a_type_without_an_encoding_is_refused() -> None:
    union = pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1])])
    with pytest.raises(SchemaError, match=r"column 'u': .*union"):
        multiset_digest(pa.table({"u": union}), ["u"])


# ---------------------------------------------------------------------------------------------
# Nulls and nesting


def _distinct_keys(values: list, t: pa.DataType) -> None:
    keys = [bytes(k) for k in row_keys(pa.table({"c": pa.array(values, t)}), ["c"])]
    assert len(set(keys)) == len(values), values


def test_null_struct_and_struct_of_nulls_differ() -> None:
    _distinct_keys(
        [None, {"a": None, "b": None}, {"a": 0, "b": None}, {"a": None, "b": ""}], _STRUCT
    )


def test_null_list_empty_list_and_list_of_null_differ() -> None:
    _distinct_keys([None, [], [None], [None, None], [""], ["", ""]], pa.list_(pa.string()))


def test_null_map_empty_map_and_null_value_differ() -> None:
    _distinct_keys([None, [], [("a", None)], [("a", 0)], [("a", 0), ("b", None)]], _MAP)


def test_map_entry_order_does_not_matter() -> None:
    a = pa.table({"m": pa.array([[("a", 1), ("b", 2)], [("z", None), ("y", 0)]], _MAP)})
    b = pa.table({"m": pa.array([[("b", 2), ("a", 1)], [("y", 0), ("z", None)]], _MAP)})
    np.testing.assert_array_equal(row_keys(a, ["m"]), row_keys(b, ["m"]))


def test_values_under_nulls_do_not_count() -> None:
    """Arrow leaves whatever it likes under a null: a null list may even span values."""
    values = pa.array([1, 2, 3, 4, 5])
    spans = pa.ListArray.from_arrays(
        pa.array([0, 2, 4, 5], pa.int32()), values, mask=pa.array([False, True, False])
    )
    empty = pa.ListArray.from_arrays(
        pa.array([0, 2, 2, 3], pa.int32()), pa.array([1, 2, 5]), mask=pa.array([False, True, False])
    )
    assert spans.to_pylist() == empty.to_pylist() == [[1, 2], None, [5]]
    np.testing.assert_array_equal(
        row_keys(pa.table({"l": spans}), ["l"]), row_keys(pa.table({"l": empty}), ["l"])
    )
    child_a, child_b = pa.array([7, 8]), pa.array([7, 9])
    mask = pa.array([False, True])
    struct_a = pa.StructArray.from_arrays([child_a], ["x"], mask=mask)
    struct_b = pa.StructArray.from_arrays([child_b], ["x"], mask=mask)
    assert struct_a.to_pylist() == struct_b.to_pylist() == [{"x": 7}, None]
    np.testing.assert_array_equal(
        row_keys(pa.table({"s": struct_a}), ["s"]), row_keys(pa.table({"s": struct_b}), ["s"])
    )
    validity = pa.array([True, False]).buffers()[1]
    ints = pa.Array.from_buffers(
        pa.int64(), 2, [validity, pa.py_buffer(np.array([1, 99], np.int64))]
    )
    assert ints.to_pylist() == [1, None]
    np.testing.assert_array_equal(
        row_keys(pa.table({"i": ints}), ["i"]),
        row_keys(pa.table({"i": pa.array([1, None])}), ["i"]),
    )


def test_no_columns_and_no_rows() -> None:
    table = pa.table({"a": [1, 2, 3]})
    assert row_keys(table, []).shape == (3, 32)
    assert len({bytes(k) for k in row_keys(table, [])}) == 1
    assert multiset_digest(table, []) != multiset_digest(table.slice(0, 2), [])
    assert row_keys(table.slice(0, 0), ["a"]).shape == (0, 32)
    empty_chunks = pa.table({"a": pa.chunked_array([], pa.int64())})
    assert multiset_digest(empty_chunks, ["a"]) == multiset_digest(table.slice(0, 0), ["a"])
