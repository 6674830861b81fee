"""A dataset read into a Spark DataFrame as of a block."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs

from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError
from odf_chain.events import DatasetKind
from odf_chain.replay import slices_at
from odf_chain.spark.arrow_tasks import read_in_tasks
from odf_chain.spark.input_paths import escape_glob
from odf_chain.spark.workers import use_this_python


def read(spark, dataset: str | Path | Dataset, at: str | int = "head"):
    """The dataset's data as of block ``at``: exactly the slices the chain names up to it; a
    derivative dataset's changelog folded (as :meth:`Dataset.to_table` folds it, on the
    driver)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not isinstance(dataset, Dataset):
        dataset = Dataset.open(dataset)
    storage = dataset.storage
    state, found = slices_at(storage, at)
    if state.dataset_kind == DatasetKind.DERIVATIVE:
        return spark.createDataFrame(dataset.to_table(at=at))
    names = [str(s.physical_hash) for s in found]
    # Spark follows symlinks and waits on FIFOs: what it is given is checked as verify reads
    # it (real directories, regular files of the dataset), each slice opened and closed once.
    storage.check_layout()
    for name in names:
        storage.open_data(name).close()
    if not names:
        if state.schema is None:
            raise NotFoundError(
                f"{dataset.location} has no schema at block {state.sequence_number}"
            )
        return spark.createDataFrame([], from_arrow_schema(state.schema))
    if not isinstance(storage.filesystem, pafs.LocalFileSystem):
        # Spark's own reader needs the store's Hadoop connector: read through Arrow instead
        use_this_python(spark)
        return read_in_tasks(
            spark, storage.filesystem, [storage.fs_path(f"data/{n}") for n in names], state.schema
        )
    paths = [escape_glob(storage.spark_uri(storage.fs_path(f"data/{name}"))) for name in names]
    # Read with the schema in force at that block: slices from before an evolution lack the
    # newer (nullable) columns, which then read as nulls.
    return spark.read.schema(from_arrow_schema(state.schema)).parquet(*paths)
