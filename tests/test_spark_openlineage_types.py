"""Captured transformation types against openlineage-spark's own expectations, on the Spark in
use (Spark 4 rewrites NULLIF into ``With``/``NullIfResult``; earlier versions into ``If``).

Each test runs the very query of an openlineage-spark test over a table ``t1`` with the same
columns, and expects what that test expects, transcribed from
``integration/spark/app/src/test/java/io/openlineage/spark/agent/column/
ColumnLineageWithTransformationTypesTest.java`` (OpenLineage/OpenLineage), named in each test.
That test enables ``datasetLineageEnabled``: the INDIRECT inputs that decide which rows exist
(filter, group by, sort) are listed once for the dataset, not under each field; here they are
:attr:`PlanLineage.row_dependencies`, and a field's own inputs are its value dependencies.
Where openlineage-spark has no test, the expectation comes from the visitor that decides it
(named in the test); where odf_chain deliberately differs, the test says so (and the README).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.spark.plan_lineage import capture_plan_lineage

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


# TransformationInfo.identity(), transformation(), aggregation(), indirect(SUBTYPE), with the
# masking flag last, as openlineage-spark's TransformationInfo spells them.
IDENTITY = ("DIRECT", "IDENTITY", False)
TRANSFORMATION = ("DIRECT", "TRANSFORMATION", False)
TRANSFORMATION_MASKING = ("DIRECT", "TRANSFORMATION", True)
AGGREGATION = ("DIRECT", "AGGREGATION", False)
AGGREGATION_MASKING = ("DIRECT", "AGGREGATION", True)
CONDITIONAL = ("INDIRECT", "CONDITIONAL", False)
FILTER = ("INDIRECT", "FILTER", False)
GROUP_BY = ("INDIRECT", "GROUP_BY", False)
SORT = ("INDIRECT", "SORT", False)
WINDOW = ("INDIRECT", "WINDOW", False)


@pytest.fixture(scope="module")
def t1(spark, tmp_path_factory):
    """``t1`` as a Parquet file, with the columns the openlineage-spark tests give their tables
    (``a``, ``b``, ``c`` int; ``s`` string), a few rows with nulls."""
    root: Path = tmp_path_factory.mktemp("ol-types")
    table = pa.table(
        {"a": [1, 2, None], "b": [1, 5, 3], "c": [1, None, 7], "s": ["1", "x y", None]},
        schema=pa.schema([("a", pa.int32()), ("b", pa.int32()), ("c", pa.int32()), ("s", "str")]),
    )
    pq.write_table(table, root / "t1.parquet")
    spark.read.parquet(str(root / "t1.parquet")).createOrReplaceTempView("t1")
    yield
    spark.catalog.dropTempView("t1")


Kinds = set[tuple[str, tuple[str, str, bool]]]


def captured(spark, query: str) -> tuple[dict[str, Kinds], Kinds]:
    """(output column -> {(input field, kind)}, the dataset's {(input field, kind)}), kind as
    (type, subtype, masking); the query is run too, so that it is known to be valid."""
    df = spark.sql(query)
    df.collect()
    lineage = capture_plan_lineage(df)
    assert lineage is not None
    assert lineage.unsupported == (), lineage.unsupported
    assert lineage.notes == (), lineage.notes

    def kinds(deps) -> Kinds:
        out: Kinds = set()
        for d in deps:
            assert lineage.sources[d.field.source].label == "t1.parquet"
            assert not d.transformation.opaque
            t = d.transformation
            out.add((".".join(d.field.path), (t.type.name, t.subtype.name, t.masking)))
        return out

    fields = {
        ".".join(path): kinds(lineage.value_dependencies(path))
        for path in lineage.fields
        if len(path) == 1
    }
    return fields, kinds(lineage.row_dependencies)


# -- conditionals -------------------------------------------------------------------------------


def test_case_when(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWithCaseWhenConditional
    fields, dataset = captured(
        spark, "SELECT CASE WHEN b > 1 THEN a ELSE a + b END AS cond FROM t1"
    )
    assert fields == {"cond": {("a", TRANSFORMATION), ("b", TRANSFORMATION), ("b", CONDITIONAL)}}
    assert dataset == set()


def test_if(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWithIfConditional
    fields, dataset = captured(spark, "SELECT IF(b > 1, a, a + b) AS cond FROM t1")
    assert fields == {"cond": {("a", TRANSFORMATION), ("b", TRANSFORMATION), ("b", CONDITIONAL)}}
    assert dataset == set()


def test_nullif(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWithNullIfConditional
    # NULLIF(a, b) = IF(a = b, NULL, a); on Spark 4 the analyzed plan holds
    # With(a){ref => NullIfResult(ref = b, ref)}, which must not fall back to "every argument
    # transformed"
    fields, dataset = captured(spark, "SELECT NULLIF(a, b) AS cond FROM t1")
    assert fields == {"cond": {("a", TRANSFORMATION), ("a", CONDITIONAL), ("b", CONDITIONAL)}}
    assert dataset == set()


def test_nullif_of_an_expression(spark, t1):
    # the shared first argument is an expression: all of its inputs decide and are returned
    fields, _ = captured(spark, "SELECT NULLIF(a + c, b) AS cond FROM t1")
    assert fields == {
        "cond": {
            ("a", TRANSFORMATION),
            ("a", CONDITIONAL),
            ("c", TRANSFORMATION),
            ("c", CONDITIONAL),
            ("b", CONDITIONAL),
        }
    }


def test_nvl(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWithNvlConditional
    # NVL is COALESCE
    fields, dataset = captured(spark, "SELECT NVL(a, b) AS cond FROM t1")
    assert fields == {
        "cond": {
            ("a", TRANSFORMATION),
            ("a", CONDITIONAL),
            ("b", TRANSFORMATION),
            ("b", CONDITIONAL),
        }
    }
    assert dataset == set()


def test_nvl2(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWithNvl2Conditional
    # NVL2(a, b, c) is IF(a IS NOT NULL, b, c)
    fields, dataset = captured(spark, "SELECT NVL2(a, b, c) AS cond FROM t1")
    assert fields == {"cond": {("a", CONDITIONAL), ("b", TRANSFORMATION), ("c", TRANSFORMATION)}}
    assert dataset == set()


def test_coalesce(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWithCoalesceConditional
    # every argument is tested and may be returned
    fields, dataset = captured(spark, "SELECT coalesce(a, b, 0) AS cond FROM t1")
    assert fields == {
        "cond": {
            ("a", TRANSFORMATION),
            ("a", CONDITIONAL),
            ("b", TRANSFORMATION),
            ("b", CONDITIONAL),
        }
    }
    assert dataset == set()


def test_masked_branch(spark, t1):
    # ExpressionDependencyCollectorTest.testCollectMaskingExpressions (spark3 module):
    # IF(a = b, c, sha1(s)): a, b conditional, c transformed, s transformed and masked
    fields, _ = captured(spark, "SELECT IF(a = b, CAST(c AS STRING), sha1(s)) AS res FROM t1")
    assert fields == {
        "res": {
            ("a", CONDITIONAL),
            ("b", CONDITIONAL),
            ("c", TRANSFORMATION),
            ("s", TRANSFORMATION_MASKING),
        }
    }


# -- aggregations -------------------------------------------------------------------------------


def test_count_is_masking(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryOnlyAggregation
    # count(a) is aggregation(masking = true)
    fields, dataset = captured(spark, "SELECT count(a) AS a FROM t1")
    assert fields == {"a": {("a", AGGREGATION_MASKING)}}
    assert dataset == set()


def test_count_distinct_and_approx_count_distinct_are_masking(spark, t1):
    # count(DISTINCT b) is openlineage-spark's Count (ExpressionTraverser's masking classes);
    # approx_count_distinct (HyperLogLogPlusPlus) is not in that list: odf_chain's deliberate
    # extension, as it too reveals only how many distinct values there are
    fields, _ = captured(
        spark, "SELECT count(DISTINCT b) AS n, approx_count_distinct(c) AS m, count(*) AS k FROM t1"
    )
    assert fields == {
        "n": {("b", AGGREGATION_MASKING)},
        "m": {("c", AGGREGATION_MASKING)},
        "k": set(),
    }


def test_sum_and_priority_of_direct_subtypes(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryPriorityDirect
    # aggregation wins over transformation, which wins over identity; the grouping key is a
    # GROUP_BY input of the dataset
    fields, dataset = captured(
        spark,
        "SELECT a AS i, a + 1 AS t, sum(b) AS a, 2 * sum(b) AS ta, 2 * sum(b + 3) AS tat "
        "FROM t1 GROUP BY a",
    )
    assert fields == {
        "i": {("a", IDENTITY)},
        "t": {("a", TRANSFORMATION)},
        "a": {("b", AGGREGATION)},
        "ta": {("b", AGGREGATION)},
        "tat": {("b", AGGREGATION)},
    }
    assert dataset == {("a", GROUP_BY)}


@pytest.mark.parametrize("function", ["avg", "min", "max"])
def test_avg_min_max_aggregate(spark, t1, function):
    # no openlineage-spark test names them; its AggregateExpressionVisitor gives every
    # aggregate function aggregation(), masking only for the classes ExpressionTraverser lists
    fields, dataset = captured(spark, f"SELECT {function}(b) AS x FROM t1 GROUP BY c")
    assert fields == {"x": {("b", AGGREGATION)}}
    assert dataset == {("c", GROUP_BY)}


def test_masking(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryMasking
    fields, dataset = captured(
        spark,
        "SELECT a AS i, a + 1 AS t, sha1(string(a + 1)) AS mt, sum(b) AS a, "
        "sha1(string(sum(b))) AS ma FROM t1 GROUP BY a",
    )
    assert fields == {
        "i": {("a", IDENTITY)},
        "t": {("a", TRANSFORMATION)},
        "mt": {("a", TRANSFORMATION_MASKING)},
        "a": {("b", AGGREGATION)},
        "ma": {("b", AGGREGATION_MASKING)},
    }
    assert dataset == {("a", GROUP_BY)}


def test_filter_group_by_and_sort_decide_the_rows(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryMultipleIndirect
    fields, dataset = captured(spark, "SELECT a, c FROM t1 WHERE b > 1 GROUP BY a, c ORDER BY c")
    assert fields == {"a": {("a", IDENTITY)}, "c": {("c", IDENTITY)}}
    assert dataset == {("a", GROUP_BY), ("b", FILTER), ("c", GROUP_BY), ("c", SORT)}


# -- windows ------------------------------------------------------------------------------------


def test_rank(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryRank
    # a rank depends on the window only
    fields, dataset = captured(
        spark, "SELECT a, RANK() OVER (PARTITION BY b ORDER BY c) AS rank FROM t1"
    )
    assert fields == {"a": {("a", IDENTITY)}, "rank": {("b", WINDOW), ("c", WINDOW)}}
    assert dataset == set()


def test_row_number(spark, t1):
    # no openlineage-spark test; its WindowVisitor treats RowNumberLike as RankLike: only the
    # window's partition and order keys, INDIRECT WINDOW
    fields, dataset = captured(
        spark, "SELECT a, row_number() OVER (PARTITION BY b ORDER BY c) AS rn FROM t1"
    )
    assert fields == {"a": {("a", IDENTITY)}, "rn": {("b", WINDOW), ("c", WINDOW)}}
    assert dataset == set()


def test_windowed_aggregate(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWindowedAggregate
    fields, dataset = captured(spark, "SELECT sum(a) OVER (PARTITION BY b ORDER BY c) AS s FROM t1")
    assert fields == {"s": {("a", AGGREGATION), ("b", WINDOW), ("c", WINDOW)}}
    assert dataset == set()


def test_lag(spark, t1):
    # ColumnLineageWithTransformationTypesTest.simpleQueryWindowedTransformation
    fields, dataset = captured(
        spark, "SELECT LAG(a, 3, 0) OVER (PARTITION BY b ORDER BY c) AS l FROM t1"
    )
    assert fields == {"l": {("a", TRANSFORMATION), ("b", WINDOW), ("c", WINDOW)}}
    assert dataset == set()


# -- odf_chain's deliberate differences ---------------------------------------------------------


def test_nanvl_reads_like_coalesce(spark, t1):
    # openlineage-spark has no visitor for NaNvl (each argument TRANSFORMATION only); nanvl(x,
    # y) tests x for NaN and returns x or y, as COALESCE tests for null: both kinds, as there
    fields, _ = captured(spark, "SELECT nanvl(CAST(a AS DOUBLE), CAST(b AS DOUBLE)) AS n FROM t1")
    assert fields == {
        "n": {("a", TRANSFORMATION), ("a", CONDITIONAL), ("b", TRANSFORMATION), ("b", CONDITIONAL)}
    }


def test_a_filter_on_a_hash_decides_rows_by_a_masked_value(spark, t1):
    # TransformationInfo.merge ORs masking whatever the type: the filter's input is
    # INDIRECT FILTER with masking
    fields, dataset = captured(spark, "SELECT a FROM t1 WHERE sha1(s) = 'x'")
    assert fields == {"a": {("a", IDENTITY)}}
    assert dataset == {("s", ("INDIRECT", "FILTER", True))}
