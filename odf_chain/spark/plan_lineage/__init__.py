"""Automatic field lineage from PySpark DataFrames, read from their analyzed logical plans over
py4j (no JVM jar).

- :func:`capture_plan_lineage` (``df -> PlanLineage | None``): for every output field (top-level
  columns and nested fields as name paths), the source fields it depends on and how.
- :func:`lineage_from_plan` (``df, output_schema, resolve_input -> (inputs, operations) |
  None``): the same as the inputs and field operations of an ``AddFieldLineage`` event.
- :class:`InputResolver`: the default ``resolve_input`` (odf_chain datasets pinned at the block
  that named the slice read, other files by content hash).

Module map: :mod:`.tree` (Spark's plan JSON as trees), :mod:`.model` (sources, dependencies,
field trees), :mod:`.expressions` and :mod:`.plans` (the walk), :mod:`.jvm` (the few py4j calls),
:mod:`.capture`, :mod:`.resolve`, :mod:`.mapping`.
"""

from odf_chain.spark.plan_lineage.capture import LineageCaptureWarning, capture_plan_lineage
from odf_chain.spark.plan_lineage.mapping import (
    DEFAULT_SYSTEM_COLUMNS,
    lineage_from_plan,
    operations_from_lineage,
)
from odf_chain.spark.plan_lineage.model import (
    Dependency,
    PlanLineage,
    PlanSource,
    SourceField,
    SourceKind,
)
from odf_chain.spark.plan_lineage.resolve import InputResolver, ResolvedInput, ResolveInput

__all__ = [
    "DEFAULT_SYSTEM_COLUMNS",
    "Dependency",
    "InputResolver",
    "LineageCaptureWarning",
    "PlanLineage",
    "PlanSource",
    "ResolveInput",
    "ResolvedInput",
    "SourceField",
    "SourceKind",
    "capture_plan_lineage",
    "lineage_from_plan",
    "operations_from_lineage",
]
