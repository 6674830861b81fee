"""Field lineage of one Catalyst expression, as a field tree (see :mod:`.model`).

Each expression class either passes values on unchanged (aliases, column references, struct
field access, struct construction), changes them (anything else: casts, arithmetic, string
functions), aggregates them, chooses between them, hides them (hash and mask functions, and
``count``: masking), or cannot be looked into (Python and Scala UDFs: opaque). Subquery
expressions are walked as plans of their own, with the enclosing plan's columns in scope for
their outer references.

Choices follow openlineage-spark (its CaseWhenVisitor, IfVisitor and CoalesceVisitor): what
*decides* the value is INDIRECT CONDITIONAL (the conditions of CASE and IF, and every argument
of COALESCE, which is tested for null), what can be *returned* is DIRECT TRANSFORMATION (the
branches, and again every argument of COALESCE). NVL, IFNULL, NVL2 and NULLIF are what Spark
replaces them with (COALESCE, IF, and on Spark 4 a ``With`` whose ``NullIfResult`` tests the
shared first argument and returns it). NANVL is read as COALESCE (openlineage-spark treats it
as any function: its arguments DIRECT TRANSFORMATION only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odf_chain.spark.plan_lineage import model as m
from odf_chain.spark.plan_lineage.model import (
    NO_DEPS,
    Composer,
    Deps,
    FieldTree,
    Step,
    add_at_root,
    merge,
    nest,
    subtree,
    then,
    whole,
)
from odf_chain.spark.plan_lineage.tree import Expr

MASKING_FUNCTIONS = frozenset(
    {"Sha1", "Sha2", "Md5", "Murmur3Hash", "XxHash64", "Crc32", "HiveHash", "Mask"}
)
# Aggregates whose result reveals nothing of the values aggregated, only how many there are:
# openlineage-spark's Count (count, count(DISTINCT)), and two it does not list: count_if (which
# it meets as the Count Spark's optimizer turns it into) and approx_count_distinct's
# HyperLogLogPlusPlus (a count of distinct values, estimated).
MASKING_AGGREGATES = frozenset({"Count", "CountIf", "HyperLogLogPlusPlus"})
# Every argument is both tested (is it null, is it NaN) and possibly returned.
FIRST_AVAILABLE_FUNCTIONS = frozenset({"Coalesce", "NaNvl"})
RANKING_FUNCTIONS = frozenset(
    {"RowNumber", "Rank", "DenseRank", "PercentRank", "CumeDist", "NTile"}
)
AGGREGATE_FUNCTIONS = frozenset(
    {
        "Sum",
        "Count",
        "Max",
        "Min",
        "Average",
        "First",
        "Last",
        "CollectList",
        "CollectSet",
        "CountDistinct",
        "ApproximatePercentile",
        "HyperLogLogPlusPlus",
        "StddevSamp",
        "StddevPop",
        "VarianceSamp",
        "VariancePop",
        "Corr",
        "CovSample",
        "CovPopulation",
        "MaxBy",
        "MinBy",
        "BoolAnd",
        "BoolOr",
        "AnyValue",
        "Percentile",
        "Median",
        "Mode",
        "ListAgg",
    }
)
SUBQUERY_EXPRESSIONS = frozenset({"Exists", "ListQuery", "LateralSubquery", "ScalarSubquery"})
OPAQUE_UDFS = frozenset(
    {"ScalaUDF", "ScalaUDAF", "ScalaAggregator", "HiveSimpleUDF", "HiveGenericUDF", "HiveUDAF"}
)
# Python eval types whose function aggregates rows (pyspark.util.PythonEvalType).
AGGREGATING_EVAL_TYPES = frozenset({202, 203, 217, 252, 253, 254})
# Expressions with no column inputs of their own; they contribute no lineage.
_NO_INPUT = frozenset(
    {"Literal", "NamedLambdaVariable", "UnboundedPreceding$", "UnboundedFollowing$", "CurrentRow$"}
)

TRANSFORM = Step(m.TRANSFORMATION)
AGGREGATE = Step(m.AGGREGATION)
COUNT = Step(m.MASKING_AGGREGATION)
RETURNED = Step(m.TRANSFORMATION)  # a value a choice can return (a branch of CASE, IF)
CONDITION = Step(m.CONDITION)
AGG_FILTER = Step(m.FILTER)
WINDOW = Step(m.WINDOW)
MASK = Step(m.MASKING)
PICK = Step(m.SORT)  # max_by/min_by's ordering: it picks the row, its value is not taken


def expr_id(fields: dict[str, Any]) -> int | None:
    """The per-JVM expression id of a named expression (used within one capture only)."""
    value = fields.get("exprId")
    if isinstance(value, dict) and isinstance(value.get("id"), int):
        return value["id"]
    return None


class Scope:
    """The columns an expression can refer to: attribute id -> field tree, then the enclosing
    plan's (for a subquery's outer references). ``commons``: the field trees of the common
    expressions (``With``'s definitions) that a ``CommonExpressionRef`` here can stand for."""

    __slots__ = ("attrs", "commons", "outer")

    def __init__(
        self,
        attrs: dict[int, FieldTree],
        outer: Scope | None = None,
        commons: tuple[FieldTree, ...] | None = None,
    ) -> None:
        self.attrs = attrs
        self.outer = outer
        self.commons = commons if commons is not None else outer.commons if outer else ()

    def find(self, attr_id: int) -> FieldTree | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.attrs.get(attr_id)
            if found is not None:
                return found
            scope = scope.outer
        return None


@dataclass
class SubqueryResult:
    """A subquery plan walked: its output columns' trees and its row dependencies."""

    outputs: list[FieldTree]
    rows: Deps


@dataclass
class ExpressionLineage:
    """Evaluates expressions to field trees. ``lookup`` finds an attribute not in scope (the
    plan walker knows every attribute defined so far); ``subquery`` walks a subquery plan;
    ``unsupported`` collects the classes handled only conservatively."""

    composer: Composer
    lookup: Callable[[int, str], FieldTree]
    subquery: Callable[[list[dict[str, Any]], Scope], SubqueryResult]
    unsupported: set[str] = field(default_factory=set)

    # -- entry points -------------------------------------------------------------------------

    def tree(self, expr: Expr, scope: Scope, step: Step = m.NEUTRAL) -> FieldTree:
        """The field tree of ``expr``'s value, every dependency seen through ``step``."""
        try:
            return self._eval(expr, step, scope)
        except RecursionError:
            # A very deep expression: fall back to every column it mentions, as transformed.
            self.unsupported.add(f"{expr.cls} (nested too deeply to follow exactly)")
            return {(): self._flat(expr, then(step, TRANSFORM), scope)}

    def deps(self, expr: Expr, scope: Scope, step: Step) -> Deps:
        """Everything ``expr`` depends on as a whole, seen through ``step``."""
        return whole(self.tree(expr, scope, step))

    # -- the walk -----------------------------------------------------------------------------

    def _attr(self, fields: dict[str, Any], step: Step, scope: Scope) -> FieldTree:
        attr_id = expr_id(fields)
        found = scope.find(attr_id) if attr_id is not None else None
        if found is None:
            found = self.lookup(attr_id if attr_id is not None else -1, str(fields.get("name")))
        return self.composer.tree(step, found)

    def _whole_of_children(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        deps: set = set()
        for child in expr.children:
            deps.update(whole(self._eval(child, step, scope)))
        return {(): frozenset(deps)} if deps else {}

    def _eval(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        cls = expr.cls
        fields = expr.fields
        kids = expr.children
        if cls == "AttributeReference":
            return self._attr(fields, step, scope)
        if cls in ("Alias", "SortOrder", "KnownNotNull", "KnownFloatingPointNormalized"):
            return self._eval(kids[0], step, scope) if kids else {}
        if cls == "CommonExpressionRef":
            return self._common_ref(expr, step, scope)
        if cls == "OuterReference":
            inner = fields.get("e")
            if isinstance(inner, list) and inner and isinstance(inner[0], dict):
                return self._attr(inner[0], step, scope)
            return self._whole_of_children(expr, step, scope)
        if cls in _NO_INPUT or (not kids and cls not in SUBQUERY_EXPRESSIONS):
            return {}
        if "replacement" in fields and expr.child_at("replacement") is not None:
            # RuntimeReplaceable (nvl, ifnull, nullif, ...): what it stands for
            return self._eval(expr.child_at("replacement"), step, scope)
        handler = _HANDLERS.get(cls)
        if handler is not None:
            return handler(self, expr, step, scope)
        if cls in MASKING_FUNCTIONS:
            return self._whole_of_children(expr, then(step, MASK), scope)
        if cls in FIRST_AVAILABLE_FUNCTIONS:
            return self._choice(list(kids), list(kids), step, scope)
        if cls in MASKING_AGGREGATES:
            return self._whole_of_children(expr, then(step, COUNT), scope)
        if cls in AGGREGATE_FUNCTIONS:
            return self._whole_of_children(expr, then(step, AGGREGATE), scope)
        if cls in OPAQUE_UDFS:
            reason = f"{cls} {fields.get('udfName') or fields.get('name') or ''}".strip()
            opaque = Step(m.Transformation(m.DIRECT, m.S.TRANSFORMATION, opaque=True), reason)
            return self._whole_of_children(expr, then(step, opaque), scope)
        return self._whole_of_children(expr, then(step, TRANSFORM), scope)

    def _flat(self, expr: Expr, step: Step, scope: Scope) -> Deps:
        """Every attribute under ``expr`` through ``step``, without recursion."""
        out: set = set()
        stack = [expr]
        while stack:
            node = stack.pop()
            if node.cls == "AttributeReference":
                out.update(whole(self._attr(node.fields, step, scope)))
            stack.extend(node.children)
        return frozenset(out)

    # -- handlers -----------------------------------------------------------------------------

    def _get_struct_field(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        child = expr.children[0]
        name = expr.fields.get("name")
        if not isinstance(name, str):
            name = _struct_field_name(child, expr.fields.get("ordinal"))
        # The field is picked first and seen through ``step`` after: a condition on
        # ``addr.job.d`` depends on that field, not on ``addr`` and ``addr.job`` around it.
        inner = self._eval(child, m.NEUTRAL, scope)
        if name is None:
            return {(): self.composer.deps(then(step, TRANSFORM), whole(inner))}
        return self.composer.tree(step, subtree(inner, (name,)))

    def _pick_by(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        """``max_by(value, ordering)``: the value is aggregated; the ordering only chooses
        which row's value, so it is an indirect input."""
        if len(expr.children) != 2:
            return self._whole_of_children(expr, then(step, AGGREGATE), scope)
        value, ordering = expr.children
        deps = set(whole(self._eval(value, then(step, AGGREGATE), scope)))
        deps.update(whole(self._eval(ordering, then(step, PICK), scope)))
        return {(): frozenset(deps)} if deps else {}

    def _get_array_struct_fields(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        inner = self._eval(expr.children[0], step, scope)
        spec = expr.fields.get("field")
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str):
            return {(): self.composer.deps(TRANSFORM, whole(inner))}
        part = subtree(inner, ("[item]", name))
        return add_at_root(nest(("[item]",), part), whole(part))

    def _element(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        """``arr[i]``, ``map[k]``, ``element_at``: the element, plus what picks it."""
        container, *selectors = expr.children
        inner = self._eval(container, step, scope)
        token = "[value]" if any(p[:1] == ("[value]",) for p in inner) else "[item]"
        if expr.cls == "GetMapValue":
            token = "[value]"
        elif expr.cls in ("GetArrayItem",):
            token = "[item]"
        picked = subtree(inner, (token,))
        picking: set = set()
        for selector in selectors:
            picking.update(whole(self._eval(selector, then(step, TRANSFORM), scope)))
        return add_at_root(picked, frozenset(picking))

    def _named_struct(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        kids = expr.children
        parts: list[FieldTree] = []
        for i in range(0, len(kids) - 1, 2):
            name = kids[i].fields.get("value") if kids[i].cls == "Literal" else None
            value = self._eval(kids[i + 1], step, scope)
            if name is None:
                parts.append({(): self.composer.deps(TRANSFORM, whole(value))})
            else:
                parts.append(nest((str(name),), value))
        return merge(parts)

    def _update_fields(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        base = expr.child_at("structExpr") or expr.children[0]
        tree = dict(self._eval(base, step, scope))
        ops = expr.children_at("fieldOps") or list(expr.children[1:])
        if ops and () in tree and any(k != () for k in tree):
            # the struct is no longer its source as a whole: its fields say where they come from
            tree[()] = frozenset(d for d in tree[()] if d.transformation.type is m.INDIRECT)
        for op in ops:
            name = op.fields.get("name")
            if not isinstance(name, str):
                continue
            tree = {p: d for p, d in tree.items() if p[:1] != (name,)}
            if op.cls == "WithField" and op.children:
                tree.update(nest((name,), self._eval(op.children[0], step, scope)))
        return tree

    def _case_when(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        kids = expr.children
        branches = expr.fields.get("branches")
        count = len(branches) if isinstance(branches, list) else len(kids) // 2
        conditions = [kids[2 * i] for i in range(count) if 2 * i < len(kids)]
        values = [kids[2 * i + 1] for i in range(count) if 2 * i + 1 < len(kids)]
        values += kids[2 * count :]
        return self._choice(conditions, values, step, scope)

    def _if(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        kids = expr.children
        return self._choice(kids[:1], kids[1:], step, scope)

    def _null_if_result(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        """Spark 4's NULLIF(a, b): ``With(a) { ref => NullIfResult(ref = b, ref) }``, null
        when the predicate holds, else the value."""
        predicate = expr.child_at("predicate")
        value = expr.child_at("value")
        if predicate is None or value is None:
            return self._whole_of_children(expr, then(step, TRANSFORM), scope)
        return self._choice([predicate], [value], step, scope)

    def _with(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        """``With(child, defs)``: ``child`` with each common expression evaluated once and
        referred to by ``CommonExpressionRef``. Spark's JSON leaves out the ids that pair a
        reference with its definition, so with one definition in sight (NULLIF, BETWEEN) a
        reference is that definition exactly; with several, it may be any of them."""
        child = expr.child_at("child")
        definitions = expr.children_at("defs")
        if child is None:
            return self._whole_of_children(expr, then(step, TRANSFORM), scope)
        trees = tuple(
            self._eval(d.children[0], m.NEUTRAL, scope) if d.children else {} for d in definitions
        )
        return self._eval(child, step, Scope({}, scope, (*trees, *scope.commons)))

    def _common_ref(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        if not scope.commons:
            self.unsupported.add("CommonExpressionRef outside a With")
            return {}
        return self.composer.tree(step, merge(scope.commons))

    def _choice(
        self, conditions: list[Expr], values: list[Expr], step: Step, scope: Scope
    ) -> FieldTree:
        """What decides the value (INDIRECT CONDITIONAL) and what can be returned (DIRECT
        TRANSFORMATION); an expression can be both (a COALESCE argument)."""
        tree = merge(self._eval(v, then(step, RETURNED), scope) for v in values)
        deciding: set = set()
        for condition in conditions:
            deciding.update(whole(self._eval(condition, then(step, CONDITION), scope)))
        return add_at_root(tree, frozenset(deciding))

    def _aggregate_expression(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        function = expr.child_at("aggregateFunction") or expr.children[0]
        result = self._eval(function, then(step, AGGREGATE), scope)
        value = {(): whole(result)} if result else {}
        others = [k for k in expr.children if k is not function]
        filtering: set = set()
        for condition in others:  # FILTER (WHERE ...)
            filtering.update(whole(self._eval(condition, then(step, AGG_FILTER), scope)))
        return add_at_root(value, frozenset(filtering))

    def _window_expression(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        function = expr.child_at("windowFunction") or expr.children[0]
        spec = expr.child_at("windowSpec")
        if function.cls in RANKING_FUNCTIONS:
            value: FieldTree = {}  # its inputs are the ordering, taken from the spec below
        elif function.cls in ("AggregateExpression", "PythonUDF"):
            value = self._eval(function, step, scope)
        else:  # lag, lead, nth_value, ...: values of other rows
            value = {(): whole(self._eval(function, then(step, TRANSFORM), scope))}
        windowing: set = set()
        if spec is not None:
            for part in spec.children:
                windowing.update(whole(self._eval(part, then(step, WINDOW), scope)))
        return add_at_root(value, frozenset(windowing))

    def _python_udf(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        eval_type = expr.fields.get("evalType")
        name = expr.fields.get("name") or "?"
        aggregating = eval_type in AGGREGATING_EVAL_TYPES
        subtype = m.S.AGGREGATION if aggregating else m.S.TRANSFORMATION
        if expr.cls == "PythonUDTF":
            kind = "Python UDTF"
        elif isinstance(eval_type, int) and eval_type >= 200:
            kind = "pandas UDF"
        else:
            kind = "Python UDF"
        opaque = Step(m.Transformation(m.DIRECT, subtype, opaque=True), f"{kind} {name}")
        return self._whole_of_children(expr, then(step, opaque), scope)

    def _subquery(self, expr: Expr, step: Step, scope: Scope) -> FieldTree:
        plan = expr.fields.get("plan")
        if not isinstance(plan, list) or not plan:
            self.unsupported.add(f"{expr.cls} without a plan")
            return self._whole_of_children(expr, then(step, TRANSFORM), scope)
        result = self.subquery(plan, scope)
        rows = self.composer.deps(step, result.rows)
        if expr.cls == "ScalarSubquery" and len(result.outputs) == 1:
            value = self.composer.tree(step, result.outputs[0])
            return add_at_root(value, rows)
        # EXISTS, IN (subquery), LATERAL: the result depends on everything the subquery reads
        through = then(step, TRANSFORM)
        deps: set = set(rows)
        for output in result.outputs:
            deps.update(self.composer.deps(through, whole(output)))
        return {(): frozenset(deps)} if deps else {}


def _struct_field_name(child: Expr, ordinal: Any) -> str | None:
    """A struct field's name from the child's type, when GetStructField does not carry it."""
    data_type = child.fields.get("dataType")
    if isinstance(data_type, dict) and data_type.get("type") == "struct":
        fields = data_type.get("fields") or []
        if isinstance(ordinal, int) and 0 <= ordinal < len(fields):
            return str(fields[ordinal].get("name"))
    return None


_Handler = Callable[[ExpressionLineage, Expr, Step, Scope], FieldTree]
_HANDLERS: dict[str, _Handler] = {
    "MaxBy": ExpressionLineage._pick_by,
    "MinBy": ExpressionLineage._pick_by,
    "GetStructField": ExpressionLineage._get_struct_field,
    "GetArrayStructFields": ExpressionLineage._get_array_struct_fields,
    "GetArrayItem": ExpressionLineage._element,
    "GetMapValue": ExpressionLineage._element,
    "ElementAt": ExpressionLineage._element,
    "CreateNamedStruct": ExpressionLineage._named_struct,
    "UpdateFields": ExpressionLineage._update_fields,
    "CaseWhen": ExpressionLineage._case_when,
    "If": ExpressionLineage._if,
    "NullIfResult": ExpressionLineage._null_if_result,
    "With": ExpressionLineage._with,
    "AggregateExpression": ExpressionLineage._aggregate_expression,
    "WindowExpression": ExpressionLineage._window_expression,
    "PythonUDF": ExpressionLineage._python_udf,
    "PythonUDAF": ExpressionLineage._python_udf,
    "PythonUDTF": ExpressionLineage._python_udf,
    "ScalarSubquery": ExpressionLineage._subquery,
    "Exists": ExpressionLineage._subquery,
    "ListQuery": ExpressionLineage._subquery,
    "LateralSubquery": ExpressionLineage._subquery,
}

__all__ = ["NO_DEPS", "ExpressionLineage", "Scope", "SubqueryResult", "expr_id"]
