"""PySpark ingest: write DataFrames into a dataset as Parquet slices, read them back.

Imports pyspark lazily: the rest of odf_chain works without a JVM.
"""

from odf_chain.spark.writer import IngestError, IngestResult, read, write

__all__ = ["IngestError", "IngestResult", "read", "write"]
