"""Dataset.write with a pandas DataFrame: its index is data when someone named it.

A named index (a groupby's keys, a MultiIndex's levels, a named RangeIndex) is kept as columns
as pyarrow keeps it; an unnamed RangeIndex (row positions) is dropped; any other unnamed index,
or one named like a column, is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from odf_chain.dataset import Dataset
from odf_chain.errors import OdfChainError
from tests.helpers import snapshot_tree

SYSTEM = ["offset", "op", "system_time", "event_time"]


def _user_rows(ds: Dataset) -> list[dict]:
    """The rows read back (``to_table``) in offset order, without the system columns."""
    read = ds.to_table().sort_by("offset")
    return read.drop_columns([c for c in SYSTEM if c in read.column_names]).to_pylist()


def _rows(frame: pd.DataFrame) -> list[dict]:
    return frame.to_dict("records")


def test_a_groupby_keeps_its_key_and_a_later_write_with_it_is_accepted(tmp_path: Path) -> None:
    sales = pd.DataFrame({"k": ["a", "b", "a", "c"], "amount": [1, 2, 3, 4]})
    ds = Dataset.create(tmp_path / "ds")
    summed = sales.groupby("k").sum()
    ds.write(summed)
    assert [n for n in ds.state.schema.names if n not in SYSTEM] == ["amount", "k"]
    # the key is a column now: a frame holding it is no new column (no evolve=True needed)
    later = pd.DataFrame({"k": ["d"], "amount": [5]})
    ds.write(later)
    assert _user_rows(ds) == _rows(summed.reset_index()[["amount", "k"]]) + _rows(
        later[["amount", "k"]]
    )
    assert ds.verify().ok


def test_a_multiindex_keeps_every_level(tmp_path: Path) -> None:
    sales = pd.DataFrame(
        {
            "region": ["n", "n", "s", "s", "n"],
            "year": [2024, 2025, 2024, 2024, 2024],
            "amount": [1.5, 2.0, 3.0, 4.0, 0.5],
        }
    )
    summed = sales.groupby(["region", "year"]).sum()
    ds = Dataset.create(tmp_path / "ds")
    ds.write(summed)
    assert [n for n in ds.state.schema.names if n not in SYSTEM] == ["amount", "region", "year"]
    assert _user_rows(ds) == _rows(summed.reset_index()[["amount", "region", "year"]])


def test_an_unnamed_range_index_is_dropped_a_named_one_kept(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": [10, 20, 30, 40]})
    ds = Dataset.create(tmp_path / "ds")
    ds.write(frame)
    ds.write(frame.iloc[1:3])  # a slice keeps a RangeIndex (1..2): row positions still
    ds.write(frame.iloc[::-1])  # so does a reversal
    assert [n for n in ds.state.schema.names if n not in SYSTEM] == ["x"]
    assert [r["x"] for r in _user_rows(ds)] == [10, 20, 30, 40, 20, 30, 40, 30, 20, 10]
    # named, a RangeIndex is the user's column (pyarrow keeps it only as pandas metadata)
    named = Dataset.create(tmp_path / "named")
    named.write(frame.rename_axis("row"))
    assert _user_rows(named) == [{"x": x, "row": i} for i, x in enumerate([10, 20, 30, 40])]


def test_an_index_that_is_neither_kept_nor_dropped_is_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame({"k": ["a", "b", "c"], "x": [1, 2, 3]})
    ds = Dataset.create(tmp_path / "ds")
    ds.write(frame)
    before = snapshot_tree(ds.path)
    refused = [
        (frame[frame.x > 1], "the DataFrame's index has no name"),  # a filter's row labels
        (frame.sort_values("x", ascending=False), "index has no name"),
        (pd.DataFrame({"x": [4]}, index=["r1"]), "index has no name"),
        (
            frame.set_index(["k", pd.Index([7, 8, 9])]),
            "level 1 of the DataFrame's MultiIndex has no name",
        ),
        (frame.set_index("k", drop=False), "index is named 'k', as a column is"),
        (  # pyarrow would store one level as __index_level_1__
            frame.set_index(["k", "x"], drop=False).rename_axis(["lvl", "lvl"]),
            "levels of the DataFrame's MultiIndex share a name",
        ),
    ]
    for given, fragment in refused:
        with pytest.raises(OdfChainError, match=r"^Dataset\.write: ") as info:
            ds.write(given)
        assert fragment in str(info.value)
        assert "df.reset_index(drop=True)" in str(info.value)
    assert snapshot_tree(ds.path) == before
    # what the message says to do is accepted
    ds.write(frame[frame.x > 1].reset_index(drop=True))
    ds.write(frame[frame.x > 2].rename_axis("label"), evolve=True)
    assert _user_rows(ds)[-3:] == [
        {"k": "b", "x": 2, "label": None},
        {"k": "c", "x": 3, "label": None},
        {"k": "c", "x": 3, "label": 2},
    ]


def test_frames_pyarrow_cannot_take_are_refused_as_schema_errors(tmp_path: Path) -> None:
    """Two columns of one name, a sparse column: a SchemaError naming what pandas said, not
    pandas' own ValueError or TypeError; nothing written."""
    from odf_chain.errors import SchemaError

    ds = Dataset.create(tmp_path / "ds")
    before = snapshot_tree(ds.path)
    twice = pd.DataFrame([[1, 2]], columns=["a", "a"])
    sparse = pd.DataFrame({"s": pd.arrays.SparseArray([0, 0, 1])})
    for given in (twice, sparse):
        with pytest.raises(SchemaError, match="cannot read the DataFrame as Arrow data"):
            ds.write(given)
    assert snapshot_tree(ds.path) == before
