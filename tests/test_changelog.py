"""Folding a changelog ledger and diffing two answers, against a fold written here row by row
(a stack of live rows per value, values compared as Python values) and multiset counts."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from odf_chain import changelog
from odf_chain.changelog import apply_changelog, diff
from odf_chain.errors import FormatError, IntegrityError, SchemaError
from tests.test_row_digest import norm_rows, tables

SYSTEM = ("offset", "op", "system_time")


def ledger(values: pa.Table, ops: list[int], first_offset: int = 0) -> pa.Table:
    """``values`` with the system columns in front: offsets from ``first_offset``, the ops, and
    a system time that differs on every row (so only ``ignore`` makes rows equal)."""
    n = values.num_rows
    system = {
        "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
        "op": pa.array(ops, pa.int32()),
        "system_time": pa.array(range(n), pa.timestamp("ms", "UTC")),
    }
    return pa.table({**system, **{c: values.column(c) for c in values.column_names}})


def fold(table: pa.Table) -> list[int] | int:
    """Row by row: the indices of the live rows, or the offset of the first removal that finds
    nothing to remove."""
    columns = [c for c in table.column_names if c not in SYSTEM]
    live: dict[tuple, list[int]] = defaultdict(list)
    rows = norm_rows(table, columns)
    ops = table.column("op").to_pylist()
    offsets = table.column("offset").to_pylist()
    for i, (op, row) in enumerate(zip(ops, rows, strict=True)):
        if op in (0, 3):
            live[row].append(i)
        elif not live[row]:
            return offsets[i]
        else:
            live[row].pop()
    return sorted(i for stack in live.values() for i in stack)


def _apply(table: pa.Table) -> pa.Table:
    return apply_changelog(table, op_column="op", offset_column="offset", ignore=["system_time"])


@settings(max_examples=300, deadline=None)
@given(tables(few=True, max_rows=12), st.data())
def test_the_fold_agrees_with_one_row_at_a_time(values: pa.Table, data) -> None:
    ops = data.draw(
        st.lists(
            st.sampled_from([0, 0, 1, 2, 3]), min_size=values.num_rows, max_size=values.num_rows
        )
    )
    first = data.draw(st.integers(0, 1000))
    table = ledger(values, ops, first_offset=first)
    expected = fold(table)
    if isinstance(expected, int):
        with pytest.raises(IntegrityError, match=rf"\boffset {expected}\b"):
            _apply(table)
    else:
        folded = _apply(table)
        assert folded.column("offset").to_pylist() == [first + i for i in expected]
        assert folded.schema == table.schema
        # every column of those rows (NaNs compared as equal: Table.equals would not)
        survivors = table.take(pa.array(expected, pa.int64()))
        assert norm_rows(folded, table.column_names) == norm_rows(survivors, table.column_names)


def _counts(table: pa.Table, columns: list[str]) -> Counter:
    return Counter(norm_rows(table, columns))


@settings(max_examples=300, deadline=None)
@given(tables(few=True, max_rows=12), st.data())
def test_folding_a_diff_onto_the_old_answer_gives_the_new(old: pa.Table, data) -> None:
    columns = old.column_names
    new = data.draw(tables(names=columns, few=True, max_rows=12))
    retract, append = diff(old, new, columns)

    assert retract == sorted(set(retract)) and append == sorted(set(append))
    assert _counts(old.take(pa.array(retract, pa.int64())), columns) == (
        _counts(old, columns) - _counts(new, columns)
    )
    assert _counts(new.take(pa.array(append, pa.int64())), columns) == (
        _counts(new, columns) - _counts(old, columns)
    )

    remove, add = data.draw(st.sampled_from([(1, 0), (2, 3)]))  # retract/append, corrections
    rows = pa.concat_tables(
        [old, old.take(pa.array(retract, pa.int64())), new.take(pa.array(append, pa.int64()))]
    )
    ops = [0] * old.num_rows + [remove] * len(retract) + [add] * len(append)
    folded = _apply(ledger(rows, ops))
    assert _counts(folded, columns) == _counts(new, columns)
    assert folded.num_rows == new.num_rows


def test_diff_matches_the_first_occurrences() -> None:
    """k copies in old and m in new: the first min(k, m) on each side are the same rows."""
    old = pa.table({"v": ["a", "b", "a", "a"]})
    new = pa.table({"v": ["c", "a", "a", "b", "b"]})
    assert diff(old, new, ["v"]) == ([3], [0, 4])
    assert diff(new, old, ["v"]) == ([0, 4], [3])
    assert diff(old, old, ["v"]) == ([], [])
    assert diff(old.slice(0, 0), old, ["v"]) == ([], [0, 1, 2, 3])
    assert diff(old.slice(0, 0), old.slice(0, 0), ["v"]) == ([], [])


def test_diff_compares_only_the_columns_named() -> None:
    old = pa.table({"k": [1, 2], "noise": [0.5, 0.7]})
    new = pa.table({"k": [2, 1], "noise": [9.0, 9.0]})
    assert diff(old, new, ["k"]) == ([], [])
    assert diff(old, new, ["k", "noise"]) == ([0, 1], [0, 1])


def test_diff_refuses_columns_of_different_types() -> None:
    old = pa.table({"k": pa.array([1], pa.int64())})
    new = pa.table({"k": pa.array([1], pa.int32())})
    with pytest.raises(SchemaError, match=r"'k'.*int64.*int32"):
        diff(old, new, ["k"])


def test_a_retraction_removes_the_most_recent_equal_row() -> None:
    values = pa.table({"v": ["a", "b", "a", "a", "b"]})
    table = ledger(values, [0, 0, 0, 1, 2])
    assert _apply(table).column("offset").to_pylist() == [0]


def test_a_retraction_of_a_row_that_is_not_live_names_its_offset() -> None:
    values = pa.table({"k": [1, 1, 1], "v": ["x", "x", "x"]})
    with pytest.raises(IntegrityError, match=r"offset 12\b"):
        _apply(ledger(values, [0, 1, 1], first_offset=10))
    differs = pa.table({"k": [1, 1], "v": ["x", "y"]})  # one user column differs
    with pytest.raises(IntegrityError, match=r"offset 21\b"):
        _apply(ledger(differs, [0, 2], first_offset=20))


def test_a_retraction_before_its_append_is_not_matched() -> None:
    values = pa.table({"v": ["a", "a"]})
    with pytest.raises(IntegrityError, match=r"offset 5\b"):
        _apply(ledger(values, [1, 0], first_offset=5))


def test_the_system_columns_are_not_compared() -> None:
    """The offset and op always differ between a row and its retraction, the system time may."""
    values = pa.table({"v": ["a", "a"]})
    table = ledger(values, [0, 1])
    assert table.column("system_time")[0] != table.column("system_time")[1]
    assert _apply(table).num_rows == 0
    # without ignoring the system time, the retraction has no match
    with pytest.raises(IntegrityError, match=r"offset 1\b"):
        apply_changelog(table, op_column="op", offset_column="offset", ignore=())


def test_system_columns_can_be_named_otherwise() -> None:
    table = pa.table(
        {
            "pos": pa.array([7, 8], pa.int64()),
            "change": pa.array([0, 1], pa.int32()),
            "v": ["a", "a"],
        }
    )
    assert apply_changelog(table, op_column="change", offset_column="pos").num_rows == 0
    with pytest.raises(IntegrityError, match=r"offset 8\b"):
        apply_changelog(table.slice(1), op_column="change", offset_column="pos")


def test_nans_and_signed_zeros_retract_their_equals() -> None:
    nan_a = np.array([0x7FF8000000000001], np.uint64).view(np.float64)[0]
    nan_b = np.array([0xFFF8000000000000], np.uint64).view(np.float64)[0]
    values = pa.table({"x": pa.array([nan_a, 0.0, nan_b, -0.0], pa.float64())})
    assert math.isnan(values.column("x")[2].as_py())
    assert _apply(ledger(values, [0, 0, 1, 1])).num_rows == 0


def test_adds_only_return_the_very_same_table(monkeypatch) -> None:
    table = ledger(pa.table({"v": ["a", "a", "b"]}), [0, 3, 0])

    def no_keys(*args, **kwargs):
        raise AssertionError("keys computed for a ledger of adds")

    monkeypatch.setattr(changelog, "row_keys", no_keys)
    assert _apply(table) is table
    empty = table.slice(0, 0)
    assert _apply(empty) is empty


def test_the_surviving_rows_keep_every_column_and_their_order() -> None:
    values = pa.table({"v": ["a", "b", "c", "b"], "w": [1, 2, 3, 2]})
    table = ledger(values, [0, 0, 0, 1], first_offset=3)
    survivors = _apply(table)
    assert survivors.schema == table.schema
    assert survivors.to_pydict() == table.take(pa.array([0, 2])).to_pydict()


@pytest.mark.parametrize("bad", [4, -1, 255])
def test_an_unknown_op_names_itself_and_its_offset(bad: int) -> None:
    table = ledger(pa.table({"v": ["a", "b", "c"]}), [0, bad, 0], first_offset=40)
    with pytest.raises(FormatError, match=rf"\boffset 41\b.*\bop {bad}\b"):
        _apply(table)


def test_a_null_op_is_refused() -> None:
    table = ledger(pa.table({"v": ["a", "b"]}), [0, 0], first_offset=40)
    table = table.set_column(1, "op", pa.array([0, None], pa.int32()))
    with pytest.raises(FormatError, match=r"\boffset 41\b.*null"):
        _apply(table)


def test_a_chunked_ledger_folds_as_one() -> None:
    values = pa.table({"v": ["a", "b", "a", "b", "a"]})
    table = ledger(values, [0, 0, 0, 1, 2])
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2, 1), table.slice(3)])
    assert chunked.column("v").num_chunks == 3
    assert _apply(chunked).column("offset").to_pylist() == [0]
