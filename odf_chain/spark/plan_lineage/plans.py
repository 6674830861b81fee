"""Field lineage through a logical plan, bottom-up, one node at a time.

Every node yields its output columns (attribute id, name, field tree) and its *row
dependencies*: the INDIRECT dependencies that decide which rows exist (filter conditions, join
conditions, grouping keys, sort keys), which every column above it inherits. The walk is
iterative (post-order with an explicit stack), so plans thousands of nodes deep are fine.

Leaves become :class:`PlanSource` entries through a ``leaf_source`` callback (the capture asks
the JVM where a file relation's files are); nodes the walk does not know are treated as opaque
over everything their children output, and their classes are reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odf_chain.spark.plan_lineage import model as m
from odf_chain.spark.plan_lineage.expressions import (
    ExpressionLineage,
    Scope,
    SubqueryResult,
    expr_id,
)
from odf_chain.spark.plan_lineage.model import (
    NO_DEPS,
    Composer,
    Dependency,
    Deps,
    FieldTree,
    SourceField,
    Step,
    merge,
    type_paths,
    whole,
)
from odf_chain.spark.plan_lineage.tree import (
    Expr,
    PlanNode,
    field_expr,
    field_exprs,
    parse_expr,
    parse_plan,
)

# Nodes whose output is their (only) child's, rows and values untouched.
PASS_THROUGH = frozenset(
    {
        "SubqueryAlias",
        "View",
        "GlobalLimit",
        "LocalLimit",
        "Limit",
        "Offset",
        "Tail",
        "Sample",
        "Repartition",
        "RepartitionByExpression",
        "RebalancePartitions",
        "ResolvedHint",
        "UnresolvedHint",
        "Subquery",
        "EventTimeWatermark",
        "UpdateEventTimeWatermarkColumn",
        "CollectMetrics",
        "WithWindowDefinition",
        "ReturnAnswer",
        "IgnoreCachedData",
    }
)
# Python functions applied to whole partitions or groups: every output comes from every input.
OPAQUE_MAPPERS = frozenset(
    {
        "MapInPandas",
        "MapInArrow",
        "PythonMapInArrow",
        "FlatMapGroupsInPandas",
        "FlatMapGroupsInArrow",
        "FlatMapCoGroupsInPandas",
        "FlatMapCoGroupsInArrow",
        "FlatMapGroupsInPandasWithState",
        "TransformWithStateInPandas",
        "TransformWithStateInPySpark",
        "MapPartitionsInR",
        "MapPartitionsInRWithArrow",
        "FlatMapGroupsInR",
        "FlatMapGroupsInRWithArrow",
        "MapElements",
        "MapPartitions",
        "MapGroups",
        "FlatMapGroupsWithState",
        "CoGroup",
        "AppendColumns",
        "TypedFilter",
        "SerializeFromObject",
        "DeserializeToObject",
        "AttachDistributedSequence",
        "ScriptTransformation",
    }
)
EVAL_PYTHON = frozenset({"ArrowEvalPython", "BatchEvalPython", "ArrowEvalPythonUDTF"})
SOURCE_LEAVES = frozenset({"LogicalRelation", "LocalRelation", "LogicalRDD"})
EMPTY_LEAVES = frozenset({"OneRowRelation", "Range"})


@dataclass
class Column:
    """One output column of a node: its attribute id (None if unnamed), name, field tree."""

    attr_id: int | None
    name: str
    tree: FieldTree


@dataclass
class NodeResult:
    columns: list[Column]
    rows: Deps = NO_DEPS


@dataclass
class LeafInfo:
    """What the capture found out about a leaf: the source its columns come from, whether
    they come from it opaquely (an RDD round trip), and which other sources they could see."""

    source: int
    opaque_over: tuple[tuple[int, tuple[m.NamePath, ...]], ...] = ()
    reason: str | None = None


LeafSource = Callable[[PlanNode, list[dict[str, Any]]], LeafInfo | None]
# A mapper node that is really a read the capture knows (odf_chain's own Arrow read of a
# dataset): its source, and the source's name for each output column.
KnownScan = Callable[[PlanNode, list[dict[str, Any]]], tuple[LeafInfo, tuple[str, ...]] | None]


def _identity(source: int, output: list[dict[str, Any]], names: list[str]) -> list[Column]:
    """Columns read as they are from ``source``: attribute ``output[i]`` is its field
    ``names[i]``, every nested field included."""
    columns = []
    for a, name in zip(output, names, strict=True):
        tree = {
            path: frozenset({Dependency(SourceField(source, path), m.IDENTITY)})
            for path in type_paths(a.get("dataType"), (name,))
        }
        columns.append(Column(expr_id(a), str(a.get("name")), {p[1:]: d for p, d in tree.items()}))
    return columns


def attributes(fields: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The attribute references a ``Seq[Attribute]`` field holds, as their JSON nodes."""
    out = []
    for item in fields.get(name) or []:
        if isinstance(item, list) and item and isinstance(item[0], dict):
            out.append(item[0])
    return out


@dataclass
class PlanWalker:
    """Walks one analyzed plan (and the subquery plans inside its expressions)."""

    leaf_source: LeafSource
    known_scan: KnownScan | None = None
    composer: Composer = field(default_factory=Composer)
    unsupported: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    known: dict[int, FieldTree] = field(default_factory=dict)
    cte_outputs: dict[Any, NodeResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.exprs = ExpressionLineage(
            self.composer, self._lookup, self._subquery, self.unsupported
        )

    # -- scopes -------------------------------------------------------------------------------

    def _lookup(self, attr_id: int, name: str) -> FieldTree:
        found = self.known.get(attr_id)
        if found is None:
            self.notes.append(f"column {name}#{attr_id} was not found below its use")
            return {}
        return found

    def _subquery(self, plan: list[dict[str, Any]], outer: Scope) -> SubqueryResult:
        result = self.walk(parse_plan(plan), outer)
        return SubqueryResult([c.tree for c in result.columns], result.rows)

    # -- the walk -----------------------------------------------------------------------------

    def walk(self, root: PlanNode, outer: Scope | None = None) -> NodeResult:
        """The root's columns and row dependencies."""
        results: dict[int, NodeResult] = {}
        stack: list[tuple[PlanNode, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            result = None
            if not expanded:
                # a read the capture knows is a leaf: what is under it (the list of files its
                # tasks were handed) is how it reads, not a source of the data
                result = self._known_scan(node) if node.cls in OPAQUE_MAPPERS else None
                if result is None:
                    stack.append((node, True))
                    stack.extend((child, False) for child in reversed(node.children))
                    continue
            if result is None:
                children = [results.pop(id(child)) for child in node.children]
                result = self._node(node, children, outer)
            for column in result.columns:
                if column.attr_id is not None:
                    self.known[column.attr_id] = column.tree
            results[id(node)] = result
        return results[id(root)]

    def _scope(self, children: list[NodeResult], outer: Scope | None) -> Scope:
        attrs: dict[int, FieldTree] = {}
        for child in children:
            for column in child.columns:
                if column.attr_id is not None:
                    attrs[column.attr_id] = column.tree
        return Scope(attrs, outer)

    def _node(self, node: PlanNode, children: list[NodeResult], outer: Scope | None) -> NodeResult:
        cls = node.cls
        handler = _NODE_HANDLERS.get(cls)
        if handler is not None:
            missing = [
                f for f in _REQUIRED_FIELDS.get(cls, ()) if not isinstance(node.fields.get(f), list)
            ]
            if missing and children:
                # Spark could not serialise the expressions this node needs (it writes null)
                self.unsupported.add(f"{node.full_class} (no {', '.join(missing)} in the JSON)")
                return self._opaque(node, children, f"{cls} (expressions not serialised)")
            return handler(self, node, children, outer)
        if cls in OPAQUE_MAPPERS:
            return self._opaque(node, children, f"{cls} {_function_name(node)}".strip())
        if cls in PASS_THROUGH and len(children) == 1:
            return children[0]
        if not node.children:
            return self._unknown_leaf(node)
        self.unsupported.add(node.full_class)
        return self._opaque(node, children, f"{cls} (not understood)")

    # -- leaves -------------------------------------------------------------------------------

    def _leaf(self, node: PlanNode, children: list[NodeResult], outer: Scope | None) -> NodeResult:
        output = attributes(node.fields, "output")
        if node.cls in EMPTY_LEAVES:
            return NodeResult([Column(expr_id(a), str(a.get("name")), {}) for a in output])
        info = self.leaf_source(node, output)
        if info is None:
            return self._unknown_leaf(node)
        columns = []
        if info.opaque_over:
            seen = frozenset(
                Dependency(
                    SourceField(source, path),
                    m.Transformation(m.DIRECT, m.S.TRANSFORMATION, opaque=True),
                    info.reason,
                )
                for source, paths in info.opaque_over
                for path in paths
            )
            for a in output:
                columns.append(Column(expr_id(a), str(a.get("name")), {(): seen}))
            return NodeResult(columns)
        return NodeResult(_identity(info.source, output, [str(a.get("name")) for a in output]))

    def _known_scan(self, node: PlanNode) -> NodeResult | None:
        """A mapper that is a read the capture knows: each column is its source's column of the
        name given (the mapper's own names are positional), as a leaf's are."""
        output = attributes(node.fields, "output")
        found = None if self.known_scan is None else self.known_scan(node, output)
        if found is None:
            return None
        info, names = found
        return NodeResult(_identity(info.source, output, list(names)))

    def _unknown_leaf(self, node: PlanNode) -> NodeResult:
        output = attributes(node.fields, "output")
        if output:
            self.unsupported.add(node.full_class)
        info = self.leaf_source(node, output)
        if info is None:
            return NodeResult([Column(expr_id(a), str(a.get("name")), {}) for a in output])
        columns = []
        for a in output:
            name = str(a.get("name"))
            deps = frozenset({Dependency(SourceField(info.source, (name,)), m.IDENTITY)})
            columns.append(Column(expr_id(a), name, {(): deps}))
        return NodeResult(columns)

    # -- row-preserving nodes -------------------------------------------------------------------

    def _project(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        scope = self._scope(children, outer)
        rows = children[0].rows if children else NO_DEPS
        return NodeResult(self._named(field_exprs(node.fields, "projectList"), scope), rows)

    def _named(self, exprs: list[Expr], scope: Scope) -> list[Column]:
        columns = []
        for e in exprs:
            name = e.fields.get("name")
            columns.append(
                Column(
                    expr_id(e.fields),
                    str(name if name is not None else e.cls),
                    self.exprs.tree(e, scope),
                )
            )
        return columns

    def _filter(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        child = children[0]
        condition = field_expr(node.fields, "condition")
        if condition is None:
            return child
        deciding = self.exprs.deps(condition, self._scope(children, outer), Step(m.FILTER))
        return NodeResult(child.columns, child.rows | deciding)

    def _sort(self, node: PlanNode, children: list[NodeResult], outer: Scope | None) -> NodeResult:
        child = children[0]
        scope = self._scope(children, outer)
        ordering: set[Dependency] = set()
        for order in field_exprs(node.fields, "order"):
            ordering.update(self.exprs.deps(order, scope, Step(m.SORT)))
        return NodeResult(child.columns, child.rows | frozenset(ordering))

    def _distinct(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        """DISTINCT / dropDuplicates: the key columns decide which rows remain, as a GROUP BY
        over them would (Spark itself rewrites Distinct into an Aggregate)."""
        child = children[0]
        keys = attributes(node.fields, "keys")
        key_ids = {expr_id(k) for k in keys}
        keyed = [c for c in child.columns if not keys or c.attr_id in key_ids]
        grouping = self.composer.deps(
            Step(m.GROUP_BY), frozenset().union(*(whole(c.tree) for c in keyed))
        )
        return NodeResult(child.columns, child.rows | grouping)

    def _window(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        child = children[0]
        scope = self._scope(children, outer)
        added = self._named(field_exprs(node.fields, "windowExpressions"), scope)
        return NodeResult([*child.columns, *added], child.rows)

    # -- nodes that combine or reshape rows -----------------------------------------------------

    def _aggregate(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        scope = self._scope(children, outer)
        grouping: set[Dependency] = set()
        for key in field_exprs(node.fields, "groupingExpressions"):
            grouping.update(self.exprs.deps(key, scope, Step(m.GROUP_BY)))
        columns = self._named(field_exprs(node.fields, "aggregateExpressions"), scope)
        return NodeResult(columns, children[0].rows | frozenset(grouping))

    def _join(self, node: PlanNode, children: list[NodeResult], outer: Scope | None) -> NodeResult:
        left = node.child_at("left")
        right = node.child_at("right")
        by_node = dict(zip(map(id, node.children), children, strict=True))
        left_result = by_node.get(id(left), children[0])
        right_result = by_node.get(id(right), children[-1])
        scope = self._scope([left_result, right_result], outer)
        joining: set[Dependency] = set()
        condition = field_expr(node.fields, "condition")
        if condition is not None:
            joining.update(self.exprs.deps(condition, scope, Step(m.JOIN)))
        rows = left_result.rows | right_result.rows | frozenset(joining)
        join_type = node.fields.get("joinType")
        kind = ""
        if isinstance(join_type, dict):
            kind = str(join_type.get("object") or join_type.get("product-class") or "")
        if kind.endswith(("LeftSemi$", "LeftAnti$")):
            columns = list(left_result.columns)
        elif kind.endswith("ExistenceJoin"):
            exists = attributes({"exists": [join_type.get("exists")]}, "exists")
            flag = [
                Column(expr_id(a), str(a.get("name")), {(): frozenset(joining)}) for a in exists
            ]
            columns = [*left_result.columns, *flag]
        else:
            columns = [*left_result.columns, *right_result.columns]
        return NodeResult(columns, rows)

    def _lateral_join(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        """``FROM t, LATERAL (subquery)``: the subquery's columns join the left side's."""
        left = children[0]
        scope = self._scope(children, outer)
        right = field_expr(node.fields, "right")
        plan = right.fields.get("plan") if right is not None else None
        if not isinstance(plan, list) or not plan:
            self.unsupported.add(f"{node.full_class} (no subquery plan in the JSON)")
            return self._opaque(node, children, "LateralJoin (subquery not serialised)")
        lateral = self.walk(parse_plan(plan), scope)
        joining: set[Dependency] = set()
        condition = field_expr(node.fields, "condition")
        if condition is not None:
            joining.update(
                self.exprs.deps(condition, self._scope([left, lateral], outer), Step(m.JOIN))
            )
        rows = left.rows | lateral.rows | frozenset(joining)
        return NodeResult([*left.columns, *lateral.columns], rows)

    def _union(self, node: PlanNode, children: list[NodeResult], outer: Scope | None) -> NodeResult:
        first = children[0]
        columns = []
        for i, column in enumerate(first.columns):
            trees = [c.columns[i].tree for c in children if i < len(c.columns)]
            columns.append(Column(column.attr_id, column.name, merge(trees)))
        rows = frozenset().union(*(c.rows for c in children))
        return NodeResult(columns, rows)

    def _set_operation(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        """INTERSECT / EXCEPT: every column of both sides decides which left rows remain."""
        left, right = children[0], children[-1]
        matching = set()
        for column in [*left.columns, *right.columns]:
            matching.update(self.composer.deps(Step(m.JOIN), whole(column.tree)))
        return NodeResult(list(left.columns), left.rows | right.rows | frozenset(matching))

    def _expand(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        scope = self._scope(children, outer)
        output = attributes(node.fields, "output")
        projections = [
            [parse_expr(e) for e in projection if isinstance(e, list) and e]
            for projection in node.fields.get("projections") or []
        ]
        columns = []
        for i, a in enumerate(output):
            trees = [self.exprs.tree(p[i], scope) for p in projections if i < len(p)]
            columns.append(Column(expr_id(a), str(a.get("name")), merge(trees)))
        return NodeResult(columns, children[0].rows)

    def _generate(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        child = children[0]
        scope = self._scope(children, outer)
        skipped = set(node.fields.get("unrequiredChildIndex") or [])
        kept = [c for i, c in enumerate(child.columns) if i not in skipped]
        output = attributes(node.fields, "generatorOutput")
        generator = field_expr(node.fields, "generator")
        trees = self._generator_trees(generator, len(output), scope) if generator else []
        added = [
            Column(expr_id(a), str(a.get("name")), trees[i] if i < len(trees) else {})
            for i, a in enumerate(output)
        ]
        return NodeResult([*kept, *added], child.rows)

    def _generator_trees(self, generator: Expr, count: int, scope: Scope) -> list[FieldTree]:
        """One tree per generated column."""
        cls = generator.cls
        source = generator.children[0] if generator.children else None
        if cls in ("Explode", "PosExplode", "Inline", "PosInline") and source is not None:
            inner = self.exprs.tree(source, scope)
            position = {(): self.composer.deps(Step(m.TRANSFORMATION), whole(inner))}
            with_position = cls.startswith("Pos")
            values = count - 1 if with_position else count
            if cls.endswith("Inline"):
                names = self._struct_names(source, values)
                parts = [m.subtree(inner, ("[item]", n)) if n else {} for n in names]
            elif values == 2:  # a map: key and value
                parts = [m.subtree(inner, ("[key]",)), m.subtree(inner, ("[value]",))]
            else:
                parts = [m.subtree(inner, ("[item]",))]
            return [position, *parts] if with_position else parts
        # stack, json_tuple, Python UDTFs, ...: every output from every input
        tree = self.exprs.tree(generator, scope)
        return [tree] * count

    @staticmethod
    def _struct_names(source: Expr, count: int) -> list[str | None]:
        data_type = source.fields.get("dataType")
        if isinstance(data_type, dict):
            element = data_type.get("elementType")
            if isinstance(element, dict) and element.get("type") == "struct":
                return [str(f.get("name")) for f in element.get("fields") or []][:count]
        return [None] * count

    def _eval_python(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        child = children[0]
        scope = self._scope(children, outer)
        udfs = field_exprs(node.fields, "udfs")
        results = attributes(node.fields, "resultAttrs")
        added = [
            Column(
                expr_id(a),
                str(a.get("name")),
                self.exprs.tree(udfs[i], scope) if i < len(udfs) else {},
            )
            for i, a in enumerate(results)
        ]
        return NodeResult([*child.columns, *added], child.rows)

    def _opaque(self, node: PlanNode, children: list[NodeResult], reason: str) -> NodeResult:
        """Every output column from every column the node could see, opaquely."""
        opaque = Step(m.Transformation(m.DIRECT, m.S.TRANSFORMATION, opaque=True), reason)
        seen: set[Dependency] = set()
        for child in children:
            for column in child.columns:
                seen.update(self.composer.deps(opaque, whole(column.tree)))
        rows = frozenset().union(*(c.rows for c in children)) if children else NO_DEPS
        output = attributes(node.fields, "output")
        if output:
            columns = [
                Column(expr_id(a), str(a.get("name")), {(): frozenset(seen)}) for a in output
            ]
        else:  # no declared output: assume the child's columns come out, changed
            columns = [
                Column(c.attr_id, c.name, {(): frozenset(seen)})
                for c in (children[0].columns if children else [])
            ]
        return NodeResult(columns, rows)

    # -- CTEs ---------------------------------------------------------------------------------

    def _with_cte(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        plan = node.child_at("plan")
        by_node = dict(zip(map(id, node.children), children, strict=True))
        return by_node.get(id(plan), children[-1])

    def _cte_def(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        self.cte_outputs[node.fields.get("id")] = children[0]
        return children[0]

    def _cte_ref(
        self, node: PlanNode, children: list[NodeResult], outer: Scope | None
    ) -> NodeResult:
        definition = self.cte_outputs.get(node.fields.get("cteId"))
        output = attributes(node.fields, "output")
        if definition is None:
            self.unsupported.add(f"{node.full_class} (its definition was not seen first)")
            return NodeResult([Column(expr_id(a), str(a.get("name")), {}) for a in output])
        columns = [
            Column(
                expr_id(a),
                str(a.get("name")),
                definition.columns[i].tree if i < len(definition.columns) else {},
            )
            for i, a in enumerate(output)
        ]
        return NodeResult(columns, definition.rows)


def _function_name(node: PlanNode) -> str:
    function = field_expr(node.fields, "functionExpr") or field_expr(node.fields, "func")
    if function is not None:
        name = function.fields.get("name")
        if isinstance(name, str):
            return name
    return ""


# Fields a handled node cannot do without; when Spark writes null for one, the node is opaque.
_REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "Project": ("projectList",),
    "Aggregate": ("groupingExpressions", "aggregateExpressions"),
    "Window": ("windowExpressions",),
    "Expand": ("projections", "output"),
    "Generate": ("generator", "generatorOutput"),
    "Filter": ("condition",),
    "Sort": ("order",),
    "ArrowEvalPython": ("udfs", "resultAttrs"),
    "BatchEvalPython": ("udfs", "resultAttrs"),
}

_NodeHandler = Callable[[PlanWalker, PlanNode, list[NodeResult], Scope | None], NodeResult]
_NODE_HANDLERS: dict[str, _NodeHandler] = {
    "Project": PlanWalker._project,
    "Filter": PlanWalker._filter,
    "Sort": PlanWalker._sort,
    "Distinct": PlanWalker._distinct,
    "Deduplicate": PlanWalker._distinct,
    "DeduplicateWithinWatermark": PlanWalker._distinct,
    "Window": PlanWalker._window,
    "Aggregate": PlanWalker._aggregate,
    "Join": PlanWalker._join,
    "LateralJoin": PlanWalker._lateral_join,
    "Union": PlanWalker._union,
    "Intersect": PlanWalker._set_operation,
    "Except": PlanWalker._set_operation,
    "Expand": PlanWalker._expand,
    "Generate": PlanWalker._generate,
    "WithCTE": PlanWalker._with_cte,
    "CTERelationDef": PlanWalker._cte_def,
    "CTERelationRef": PlanWalker._cte_ref,
    **{name: PlanWalker._leaf for name in SOURCE_LEAVES | EMPTY_LEAVES},
    **{name: PlanWalker._eval_python for name in EVAL_PYTHON},
}
