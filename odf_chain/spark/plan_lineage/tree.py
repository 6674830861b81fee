"""Spark's ``TreeNode.toJSON`` as Python trees.

Spark serialises a plan (and every expression inside it) as a flat list of nodes in pre-order,
each carrying its class, ``num-children`` and its constructor fields. A field that holds a child
is an int (the child's position among the node's children) or a list of ints; a field that holds
an expression which is *not* a child is the expression's own flat list; a field that holds a
sequence of expressions is a list of flat lists. This module rebuilds the trees without
recursion (plans built column by column, and long ``a + b + c + ...`` chains, are thousands of
levels deep) and leaves the fields as JSON for the lineage walk to read on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self, TypeVar

from odf_chain.errors import FormatError

Json = dict[str, Any]
T = TypeVar("T")


def short_name(class_name: str) -> str:
    """``org.apache...expressions.aggregate.Sum`` -> ``Sum``; Scala objects keep their ``$``."""
    return class_name.rsplit(".", 1)[-1]


class _Node:
    """A node of a rebuilt tree: its short class name, its JSON fields and its children."""

    __slots__ = ("children", "cls", "fields")

    def __init__(self, fields: Json, children: tuple[Self, ...]) -> None:
        self.fields = fields
        self.cls = short_name(fields.get("class", "?"))
        self.children = children

    @property
    def full_class(self) -> str:
        return self.fields.get("class", "?")

    def _child(self, index: object) -> Self | None:
        if isinstance(index, int) and not isinstance(index, bool) and index < len(self.children):
            return self.children[index]
        return None

    def child_at(self, field: str) -> Self | None:
        """The child a field names by position (``"child": 0``), if it does."""
        return self._child(self.fields.get(field))

    def children_at(self, field: str) -> list[Self]:
        """The children a field names by position (``"children": [0, 1]``)."""
        indices = self.fields.get(field)
        if not isinstance(indices, list):
            return []
        return [c for c in map(self._child, indices) if c is not None]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cls}, {len(self.children)} children)"


class Expr(_Node):
    """One expression node."""

    __slots__ = ()


class PlanNode(_Node):
    """One logical plan node."""

    __slots__ = ()


def _build(flat: list[Json], make: Callable[[Json, tuple[T, ...]], T], what: str) -> T:
    """Rebuild one tree from its pre-order list, iteratively."""
    if not isinstance(flat, list) or not flat:
        raise FormatError(f"Spark {what} JSON: expected a non-empty list of nodes")
    frames: list[tuple[Json, int, list[T]]] = []
    root: T | None = None
    for position, fields in enumerate(flat):
        if root is not None:
            raise FormatError(f"Spark {what} JSON: node {position} is outside the tree")
        if not isinstance(fields, dict) or "class" not in fields:
            raise FormatError(f"Spark {what} JSON: node {position} has no class")
        count = fields.get("num-children", 0)
        if not isinstance(count, int) or count < 0:
            raise FormatError(f"Spark {what} JSON: node {position} has a bad num-children")
        frames.append((fields, count, []))
        while frames and len(frames[-1][2]) == frames[-1][1]:
            node_fields, _, kids = frames.pop()
            node = make(node_fields, tuple(kids))
            if frames:
                frames[-1][2].append(node)
            else:
                root = node
    if root is None:
        raise FormatError(f"Spark {what} JSON: the list ends inside a node")
    return root


def parse_expr(flat: list[Json]) -> Expr:
    """One expression from its flat pre-order list."""
    if len(flat) == 1 and isinstance(flat[0], dict) and not flat[0].get("num-children"):
        return Expr(flat[0], ())  # a lone column reference or literal: the common case
    return _build(flat, Expr, "expression")


def parse_plan(flat: list[Json]) -> PlanNode:
    """One logical plan from its flat pre-order list."""
    return _build(flat, PlanNode, "plan")


def is_expr_list(value: Any) -> bool:
    """Whether a JSON field holds one expression (its flat list of nodes)."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict)


def field_expr(fields: Json, name: str) -> Expr | None:
    """The expression a field holds inline (an ``Option[Expression]`` or an expression that is
    not a child), or None."""
    value = fields.get(name)
    return parse_expr(value) if is_expr_list(value) else None


def field_exprs(fields: Json, name: str) -> list[Expr]:
    """The expressions a ``Seq[Expression]`` field holds."""
    value = fields.get(name)
    if not isinstance(value, list):
        return []
    return [parse_expr(item) for item in value if is_expr_list(item)]
