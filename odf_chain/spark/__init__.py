"""PySpark ingest: write DataFrames into a dataset as Parquet slices, read them back.

Imports pyspark lazily: the rest of odf_chain works without a JVM.
"""

from odf_chain.spark.derivative import DeriveResult, derive
from odf_chain.spark.errors import IngestError
from odf_chain.spark.read_frame import read
from odf_chain.spark.write_frame import IngestResult, write

__all__ = ["DeriveResult", "IngestError", "IngestResult", "derive", "read", "write"]
