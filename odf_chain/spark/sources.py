"""The names this module held before the ingest of files was split by job, for code that imports
them from here: finding the files is :mod:`odf_chain.spark.input_paths`, reading them
:mod:`odf_chain.spark.inputs` (Avro: :mod:`odf_chain.spark.avro_input`), ingesting them
:mod:`odf_chain.spark.ingest`, Spark's errors :mod:`odf_chain.spark.errors`.
"""

from odf_chain.spark.avro_input import MAX_SPARK_NESTING
from odf_chain.spark.errors import odf_error, printable, spark_errors
from odf_chain.spark.ingest import FileIngest, SkippedInput, ingest_files, ingest_lineage
from odf_chain.spark.input_paths import escape_glob, expand_inputs, file_name
from odf_chain.spark.inputs import FORMATS, InputFile, SourceFrame, read_input

__all__ = [
    "FORMATS",
    "MAX_SPARK_NESTING",
    "FileIngest",
    "InputFile",
    "SkippedInput",
    "SourceFrame",
    "escape_glob",
    "expand_inputs",
    "file_name",
    "ingest_files",
    "ingest_lineage",
    "odf_error",
    "printable",
    "read_input",
    "spark_errors",
]
