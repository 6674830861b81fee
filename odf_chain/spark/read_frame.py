"""A dataset read into a Spark DataFrame as of a block."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError, SchemaError
from odf_chain.events import DatasetKind
from odf_chain.replay import slices_at
from odf_chain.schema.names import children
from odf_chain.spark.arrow_tasks import read_in_tasks
from odf_chain.spark.input_paths import escape_glob
from odf_chain.spark.workers import use_this_python


def read(spark, dataset: str | Path | Dataset, at: str | int = "head"):
    """The dataset's data as of block ``at``: exactly the slices the chain names up to it; a
    derivative dataset's changelog folded (as :meth:`Dataset.to_table` folds it, on the
    driver)."""
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
    if state.schema is None:
        raise NotFoundError(f"{dataset.location} has no schema at block {state.sequence_number}")
    spark_schema = _spark_schema(state.schema, dataset.location)
    if not names:
        return spark.createDataFrame([], spark_schema)
    if not isinstance(storage.filesystem, pafs.LocalFileSystem) or _has_nanoseconds(state.schema):
        # Spark's own reader needs the store's Hadoop connector, and refuses a Parquet timestamp
        # in nanoseconds (pandas' unit: "Illegal Parquet type"): read through Arrow instead,
        # where each value is cast to Spark's microseconds exactly or refused, naming the column
        use_this_python(spark)
        local = isinstance(storage.filesystem, pafs.LocalFileSystem)
        paths = [storage.fs_path(f"data/{n}") for n in names]
        uris = [Path(path).as_uri() for path in paths] if local else None  # escaped: # ? %
        return read_in_tasks(spark, storage.filesystem, paths, state.schema, uris)
    paths = [escape_glob(storage.spark_uri(storage.fs_path(f"data/{name}"))) for name in names]
    # Read with the schema in force at that block: slices from before an evolution lack the
    # newer (nullable) columns, which then read as nulls.
    return spark.read.schema(spark_schema).parquet(*paths)


def _has_nanoseconds(schema: pa.Schema) -> bool:
    """Does any column hold a timestamp in nanoseconds, at any depth?"""

    def nested(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.unit == "ns"
        return any(nested(child.type) for _, child in children(t) or ())

    return any(nested(field.type) for field in schema)


def _spark_schema(schema, location: str):
    """The dataset's schema as Spark's, or a SchemaError naming what Spark cannot take (a
    dataset written with Dataset.write can hold it): two columns whose names differ only in
    case (one name to Spark), a type Spark has no counterpart for (unsigned integers, say)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    seen: dict[str, str] = {}
    for name in schema.names:
        twin = seen.setdefault(name.lower(), name)
        if twin != name:
            raise SchemaError(
                f"{location}: columns {twin!r} and {name!r} differ only in case, which Spark "
                "takes for one name: read this dataset with Dataset.to_table() instead"
            )
    try:
        return from_arrow_schema(schema)
    except (TypeError, ValueError) as exc:  # PySparkTypeError is a TypeError
        raise SchemaError(
            f"{location}: Spark cannot take this dataset's schema ({exc}): read it with "
            "Dataset.to_table() instead"
        ) from None
