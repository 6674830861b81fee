"""The names this module held before the write was split by job, for code that imports them from
here: the write is :mod:`odf_chain.spark.write_frame` (its steps in modules of their own, named
there), the read :mod:`odf_chain.spark.read_frame`.
"""

from odf_chain.spark.errors import IngestError
from odf_chain.spark.file_checks import WrittenSlice
from odf_chain.spark.read_frame import read
from odf_chain.spark.write_frame import IngestResult, write

__all__ = ["IngestError", "IngestResult", "WrittenSlice", "read", "write"]
