"""A Spark job as a newcomer writes it, run as ``.venv/bin/python venv_job.py DATASET`` in a
shell where the venv is not activated and PYSPARK_PYTHON is not set."""

import sys

from pyspark.sql import SparkSession

from odf_chain.spark import write

spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .getOrCreate()
)
result = write(spark.range(0, 100), sys.argv[1], create=True)
print(f"rows {result.rows} slices {result.slices}")
spark.stop()
