"""The field-lineage graph of an audit report as plain values: datasets with their fields, and
the edges between fields, ready for a layout (:mod:`odf_chain.views.audit_svg`).

Kept apart from the drawing so the report model holds what the picture shows (and tests can
read it) without any geometry, and bounded: a dataset shows at most ``max_fields`` fields, the
rest counted, so a wide schema cannot make the page unreadable or unbounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from odf_chain.events import TransformationType
from odf_chain.lineage.graph import FieldRef
from odf_chain.views.lineage import (
    LineageView,
    field_sort_key,
    plain_name,
    transformation_json,
    transformation_label,
)

MAX_FIELDS = 40
"""Fields shown per dataset in the picture (drop and unused notes included)."""


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A field (``kind`` "field"), or a drop / read-and-unused note named after its operation."""

    id: str
    label: str  # the plain name, or the operation
    title: str  # the tooltip: a field's v2 path, a note's runs
    kind: str = "field"  # "field", "drop" or "unused"


@dataclass(frozen=True, slots=True)
class GraphDataset:
    key: str  # dataset id text, or an external source's URI
    name: str  # how people know it
    external: bool  # an external source (no dataset id), drawn dashed
    own: bool  # the audited dataset
    nodes: tuple[GraphNode, ...]
    hidden: int  # nodes left out beyond MAX_FIELDS


@dataclass(frozen=True, slots=True)
class GraphEdge:
    source: str  # node ids
    target: str
    label: str  # DIRECT/IDENTITY, INDIRECT/JOIN masked, drop, unused ...
    title: str  # the operations and runs it went through
    style: str  # "direct", "indirect", "masked", "opaque", "drop" or "unused"


@dataclass(frozen=True, slots=True)
class LineageGraph:
    datasets: tuple[GraphDataset, ...]
    edges: tuple[GraphEdge, ...]
    hidden_edges: int  # edges to or from a node left out

    @property
    def empty(self) -> bool:
        return not self.datasets


def _style(edge_transformation) -> str:
    if edge_transformation.masking:
        return "masked"
    if edge_transformation.opaque:
        return "opaque"
    if edge_transformation.type == TransformationType.INDIRECT:
        return "indirect"
    return "direct"


def _runs(events) -> str:
    return ", ".join(dict.fromkeys(f"{e.run.job_name}/{e.run.run_id}" for e in events))


def lineage_graph(view: LineageView, max_fields: int = MAX_FIELDS) -> LineageGraph:
    """Every field of every dataset the graph knows, each edge into them (merged over runs),
    and the drops and read-but-unused notes of each run's dataset."""
    graph = view.graph
    keys = sorted(graph.datasets(), key=lambda k: (k != view.dataset, view.name(k), k))
    members: dict[str, list[GraphNode]] = {key: [] for key in keys}
    ids: dict[FieldRef | tuple[str, str, str], str] = {}
    refs = sorted(
        (FieldRef(k, p) for k in keys for p in graph.fields(k)),
        key=lambda r: field_sort_key(view, r),
    )
    for ref in refs:
        ids[ref] = f"n{len(ids)}"
        members[ref.dataset].append(GraphNode(ids[ref], plain_name(ref.path), ref.path))

    merged: dict[tuple[str, str, str, str], list] = {}  # source, target, label, style -> events
    notes: dict[tuple[str, str, str], list] = {}  # (dataset, kind, operation) -> events
    note_edges: dict[tuple[FieldRef, tuple[str, str, str]], None] = {}
    for ref in refs:
        for edge in graph.edges_into(ref):
            if edge.source not in ids:
                continue
            label = transformation_label(transformation_json(edge.transformation))
            key = (ids[edge.source], ids[ref], label, _style(edge.transformation))
            merged.setdefault(key, []).append(edge)
        for kind, found in (("drop", graph.drops_of(ref)), ("unused", graph.unused_of(ref))):
            for item in found:
                note = (item.event.dataset, kind, item.operation)
                notes.setdefault(note, []).append(item.event)
                note_edges[(ref, note)] = None
    for dataset, kind, operation in sorted(notes):
        node_id = f"n{len(ids)}"
        ids[(dataset, kind, operation)] = node_id
        verb = "dropped by" if kind == "drop" else "read, then used by nothing, in"
        title = f"{verb} {operation} ({_runs(notes[(dataset, kind, operation)])})"
        members.setdefault(dataset, []).append(GraphNode(node_id, operation, title, kind))

    shown: set[str] = set()
    datasets = []
    for key in members:
        nodes = members[key]
        shown.update(n.id for n in nodes[:max_fields])
        datasets.append(
            GraphDataset(
                key,
                view.name(key),
                not key.startswith("did:"),
                key == view.dataset,
                tuple(nodes[:max_fields]),
                max(len(nodes) - max_fields, 0),
            )
        )
    edges = [
        GraphEdge(source, target, label, f"{label} in {_runs(e.event for e in found)}", style)
        for (source, target, label, style), found in merged.items()
    ]
    edges += [
        GraphEdge(ids[ref], ids[note], note[1], f"{note[1]}: {note[2]}", note[1])
        for ref, note in note_edges
    ]
    kept = tuple(e for e in edges if e.source in shown and e.target in shown)
    return LineageGraph(tuple(datasets), kept, len(edges) - len(kept))
