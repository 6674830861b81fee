"""Capture: a PySpark DataFrame -> :class:`PlanLineage`, from its analyzed logical plan.

The analyzed plan (not the optimized one: the optimizer adds inferred filters, prunes and
reorders, and swaps in cached relations) comes over py4j as JSON in one call and is walked in
Python (:mod:`.plans`). Expression ids are per-JVM counters: they tie attributes together within
this one capture and are never kept in what it returns.

Under Spark Connect a DataFrame has no ``_jdf``: capture warns with
:class:`LineageCaptureWarning` and returns None, so that the writer records only the lineage it
was given by hand.
"""

from __future__ import annotations

import gc
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from odf_chain.spark import arrow_reads
from odf_chain.spark.plan_lineage import jvm as jvm_side, model as m
from odf_chain.spark.plan_lineage.expressions import expr_id
from odf_chain.spark.plan_lineage.model import (
    Dependency,
    PlanLineage,
    PlanSource,
    SourceField,
    SourceKind,
    deps_at,
    type_paths,
    whole,
)
from odf_chain.spark.plan_lineage.plans import Column, LeafInfo, NodeResult, PlanWalker
from odf_chain.spark.plan_lineage.tree import PlanNode, field_expr, parse_plan


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector while the plan is parsed and walked.

    A wide plan's JSON becomes millions of small objects at once, which sets off full
    collections again and again (more than half of the time at 5,000 columns); what the walk
    builds has no reference cycles, so nothing is lost by collecting afterwards instead.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class LineageCaptureWarning(UserWarning):
    """Capture could not see all of a DataFrame's lineage (Spark Connect, a plan node it does
    not understand, an RDD whose origin it cannot see)."""


def spark_struct_to_arrow(struct_json: dict[str, Any]) -> pa.Schema:
    """A Spark ``StructType`` (as JSON) as an Arrow schema, field by field; a field Spark's
    converter refuses (a user-defined type, a variant) becomes binary, under its own name."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructField

    fields = []
    for f in struct_json.get("fields") or []:
        spark_field = StructField.fromJson(
            {
                "name": f["name"],
                "type": f["type"],
                "nullable": f.get("nullable", True),
                "metadata": {},
            }
        )
        try:
            arrow_type = to_arrow_type(spark_field.dataType, timezone="UTC")
        except Exception:
            arrow_type = pa.binary()
        fields.append(pa.field(spark_field.name, arrow_type, spark_field.nullable))
    return pa.schema(fields)


def _attributes_schema(output: list[dict[str, Any]]) -> pa.Schema:
    return spark_struct_to_arrow(
        {
            "fields": [
                {
                    "name": str(a.get("name")),
                    "type": a.get("dataType"),
                    "nullable": a.get("nullable", True),
                }
                for a in output
            ]
        }
    )


def _table_name(fields: dict[str, Any]) -> str | None:
    table = fields.get("catalogTable")
    identifier = table.get("identifier") if isinstance(table, dict) else None
    if isinstance(identifier, dict) and identifier.get("table"):
        parts = [identifier.get("catalog"), identifier.get("database"), identifier.get("table")]
        return ".".join(str(p) for p in parts if p)
    return None


class _Sources:
    """The leaf_source callback: turns plan leaves into :class:`PlanSource` entries."""

    def __init__(self, probe: jvm_side.LeafProbe | None, fallback_files: Any) -> None:
        self.probe = probe
        self.fallback_files = fallback_files  # () -> tuple[str, ...], called at most once
        self.sources: list[PlanSource] = []
        self.notes: list[str] = []
        self._fallback: tuple[str, ...] | None = None

    def add(self, source: PlanSource) -> int:
        self.sources.append(source)
        return len(self.sources) - 1

    def _probe(self, what: str, ids: tuple[int, ...]) -> Any:
        if self.probe is None:
            return None
        try:
            return getattr(self.probe, what)(ids)
        except Exception as exc:  # py4j or JVM API differences: fall back, never fail
            self.notes.append(f"could not ask the JVM about a leaf ({type(exc).__name__}: {exc})")
            self.probe = None
            return None

    def _all_files(self) -> tuple[str, ...]:
        if self._fallback is None:
            try:
                self._fallback = tuple(self.fallback_files())
            except Exception as exc:
                self.notes.append(f"df.inputFiles() failed ({type(exc).__name__})")
                self._fallback = ()
        return self._fallback

    def __call__(self, node: PlanNode, output: list[dict[str, Any]]) -> LeafInfo | None:
        ids = tuple(i for i in (expr_id(a) for a in output) if i is not None)
        schema = _attributes_schema(output)
        if node.cls == "LogicalRelation":
            found = self._probe("file_relation", ids)
            table = _table_name(node.fields)
            if found is not None and not found.has_files:  # JDBC and other non-file sources
                source = PlanSource(SourceKind.OTHER, found.relation, schema, table=table)
                return LeafInfo(self.add(source))
            if found is None:
                files = self._all_files()
                self.notes.append(
                    "a file relation's own files were not found; it is given every file the "
                    "DataFrame reads"
                )
                source = PlanSource(SourceKind.FILES, node.cls, schema, files=files, table=table)
            else:
                source = PlanSource(
                    SourceKind.FILES,
                    node.cls,
                    schema,
                    files=found.files,
                    roots=found.roots,
                    format=found.format,
                    table=table,
                )
            return LeafInfo(self.add(source))
        if node.cls == "LocalRelation":
            return LeafInfo(self.add(PlanSource(SourceKind.LOCAL, node.cls, schema)))
        if node.cls == "LogicalRDD":
            return self._rdd(node, ids, schema)
        if not output:
            return None
        return LeafInfo(
            self.add(PlanSource(SourceKind.OTHER, node.cls, schema, table=_table_name(node.fields)))
        )

    def known_scan(
        self, node: PlanNode, output: list[dict[str, Any]]
    ) -> tuple[LeafInfo, tuple[str, ...]] | None:
        """A ``MapInArrow`` node that is odf_chain's own Arrow read of a dataset's slices
        (:mod:`odf_chain.spark.arrow_reads`): a scan of those files, under the dataset's
        column names."""
        function = field_expr(node.fields, "functionExpr")
        read = None if function is None else arrow_reads.recall(function.fields, len(output))
        if read is None:
            return None
        positional = _attributes_schema(output)
        schema = pa.schema([f.with_name(n) for f, n in zip(positional, read.names, strict=True)])
        source = PlanSource(SourceKind.FILES, "odf_chain Arrow read", schema, files=read.files)
        return LeafInfo(self.add(source)), read.names

    def _rdd(self, node: PlanNode, ids: tuple[int, ...], schema: pa.Schema) -> LeafInfo:
        origin: jvm_side.RddOrigin | None = self._probe("rdd_origin", ids)
        if origin is not None and origin.scans:
            seen = []
            for scan in origin.scans:
                scan_schema = spark_struct_to_arrow(json.loads(scan.schema_json))
                index = self.add(
                    PlanSource(SourceKind.FILES, "FileScanRDD", scan_schema, files=scan.files)
                )
                seen.append((index, tuple((name,) for name in scan_schema.names)))
            reason = "RDD round trip"
            if origin.truncated or not origin.from_dataframe:
                reason += " (its origin is only partly visible)"
            return LeafInfo(seen[0][0], tuple(seen), reason)
        if origin is not None and not origin.from_dataframe and not origin.truncated:
            # rows made in the driver from Python objects (createDataFrame of a list or RDD)
            return LeafInfo(self.add(PlanSource(SourceKind.LOCAL, node.cls, schema)))
        index = self.add(
            PlanSource(SourceKind.RDD, node.cls, schema, note="an RDD whose origin is not visible")
        )
        paths = tuple((name,) for name in schema.names)
        return LeafInfo(index, ((index, paths),), "RDD round trip (origin not visible)")


def _outputs(
    result: NodeResult, schema_json: dict[str, Any], walker: PlanWalker
) -> tuple[list[Column], list[Any]]:
    """The root's columns matched with the DataFrame's schema fields (by position and name);
    when they do not match, every column is made opaque over everything the root outputs."""
    fields = schema_json.get("fields") or []
    names = [str(f.get("name")) for f in fields]
    if [c.name for c in result.columns] == names:
        return result.columns, fields
    walker.unsupported.add("the plan's output does not match the DataFrame's schema")
    opaque = m.Step(m.Transformation(m.DIRECT, m.S.TRANSFORMATION, opaque=True), "unmatched output")
    seen = frozenset().union(*(walker.composer.deps(opaque, whole(c.tree)) for c in result.columns))
    return [Column(None, name, {(): seen}) for name in names], fields


def lineage_of_plan(
    plan_json: list[dict[str, Any]],
    schema_json: dict[str, Any],
    sources: _Sources,
) -> PlanLineage:
    """The field lineage of a plan given as parsed JSON, with ``schema_json`` the DataFrame's
    schema (``StructType.jsonValue()``)."""
    walker = PlanWalker(sources, known_scan=sources.known_scan)
    result = walker.walk(parse_plan(plan_json))
    columns, fields = _outputs(result, schema_json, walker)
    by_path: dict[m.NamePath, frozenset[Dependency]] = {}
    for column, spark_field in zip(columns, fields, strict=True):
        for path in type_paths(spark_field.get("type"), (column.name,)):
            deps = deps_at(column.tree, path[1:]) | result.rows
            by_path[path] = by_path[path] | deps if path in by_path else deps
    return PlanLineage(
        sources=tuple(sources.sources),
        columns=tuple(c.name for c in columns),
        fields=by_path,
        row_dependencies=result.rows,
        unsupported=tuple(sorted(walker.unsupported)),
        notes=tuple(dict.fromkeys([*sources.notes, *walker.notes])),
    )


def capture_plan_lineage(df: Any) -> PlanLineage | None:
    """The field lineage of ``df`` from its analyzed plan, or None under Spark Connect.

    Warns (:class:`LineageCaptureWarning`) when part of the plan was not understood; those
    parts are recorded as opaque over everything they could see, never dropped.
    """
    try:
        jdf = df._jdf
    except Exception:
        jdf = None
    if jdf is None:
        warnings.warn(
            f"field lineage: {type(df).__module__}.{type(df).__name__} has no JVM plan (Spark "
            "Connect?); no lineage is captured, only lineage recorded by hand is kept",
            LineageCaptureWarning,
            stacklevel=2,
        )
        return None
    jvm = df.sparkSession._jvm
    analyzed = jdf.queryExecution().analyzed()
    text = analyzed.toJSON()
    schema_json = json.loads(jdf.schema().json())
    sources = _Sources(jvm_side.LeafProbe(analyzed, jvm), lambda: jvm_side.input_files(jdf, jvm))
    with _collector_paused():
        lineage = lineage_of_plan(json.loads(text), schema_json, sources)
    if lineage.unsupported:
        warnings.warn(
            "field lineage: treated as opaque (not understood): " + ", ".join(lineage.unsupported),
            LineageCaptureWarning,
            stacklevel=2,
        )
    return lineage


__all__ = [
    "LineageCaptureWarning",
    "PlanLineage",
    "SourceField",
    "capture_plan_lineage",
    "lineage_of_plan",
    "spark_struct_to_arrow",
]
