"""Reading a dataset without Spark: the slices in force at a block, with that block's schema,
as a pyarrow dataset, a table, and through pandas, DuckDB and polars as the docs show."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from odf_chain import Dataset
from odf_chain.errors import NotFoundError, StorageError
from odf_chain.events import AddData


@pytest.fixture
def sensors(tmp_path: Path) -> Dataset:
    ds = Dataset.create(tmp_path / "sensors")
    ds.write(pa.table({"station": ["a", "b"], "temperature_c": [14.2, 13.9]}))
    ds.write(pa.table({"station": ["c"], "temperature_c": [12.0], "humidity": [61.0]}), evolve=True)
    return ds


def test_the_slices_and_schema_of_a_block(sensors: Dataset) -> None:
    first_data = next(
        e.block.sequence_number for e in sensors.blocks() if isinstance(e.block.event, AddData)
    )
    then = sensors.to_table(at=first_data)
    assert then.column("station").to_pylist() == ["a", "b"]
    assert "humidity" not in then.column_names  # the schema in force at that block
    now = sensors.to_table().sort_by("offset")
    assert now.column("station").to_pylist() == ["a", "b", "c"]
    assert now.column("humidity").to_pylist() == [None, None, 61.0]  # older slice: nulls
    assert now.column("offset").to_pylist() == [0, 1, 2]
    picked = sensors.to_table(columns=["station"], filter=pc.field("temperature_c") < 14.0)
    assert picked.column_names == ["station"] and sorted(picked.column("station").to_pylist()) == [
        "b",
        "c",
    ]
    assert sensors.to_pyarrow_dataset(at=first_data).count_rows() == 2
    with pytest.raises(NotFoundError, match="no schema at block 0"):
        sensors.to_table(at=0)


def test_pandas_duckdb_and_polars_one_liners(sensors: Dataset) -> None:
    import duckdb  # dev dependencies, as the README's one-liners need them
    import polars

    frame = sensors.to_table().to_pandas()
    assert sorted(frame["station"]) == ["a", "b", "c"]
    data = sensors.to_pyarrow_dataset()  # noqa: F841  (DuckDB finds it by its name)
    cold = duckdb.sql("select station from data where temperature_c < 14 order by 1").fetchall()
    assert cold == [("b",), ("c",)]
    wet = polars.scan_pyarrow_dataset(sensors.to_pyarrow_dataset()).filter(
        polars.col("humidity").is_not_null()
    )
    assert wet.collect()["station"].to_list() == ["c"]


def test_a_slice_replaced_by_a_symlink_is_refused(sensors: Dataset, tmp_path: Path) -> None:
    """Readers open what the chain names as verify does: a symlink is not followed."""
    data = sensors.path / "data"
    victim = sorted(data.iterdir())[0]
    (tmp_path / "elsewhere").write_bytes(victim.read_bytes())
    victim.unlink()
    os.symlink(tmp_path / "elsewhere", victim)
    with pytest.raises(StorageError, match=victim.name):
        sensors.to_table()
