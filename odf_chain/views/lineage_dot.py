"""Lineage as a picture: Graphviz DOT text of the field graph or of one field's neighbourhood,
and SVG drawn by Graphviz's ``dot`` when it is installed.

One cluster per dataset (dashed for external sources), a node per field (its v2 path as the
tooltip), edges labelled with the transformation: dashed for INDIRECT, red for masked, an open
head for opaque; drops end in octagons, fields read and then used by nothing in a note named
after the operation that read them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence

from odf_chain.errors import GraphvizError
from odf_chain.events import Transformation, TransformationType
from odf_chain.lineage.graph import EventRef, FieldDrop, FieldEdge, FieldRef, FieldUnused
from odf_chain.views.lineage import (
    LineageView,
    event_order,
    field_sort_key,
    plain_name,
    transformation_json,
    transformation_label,
    unique_in_order,
)

GRAPHVIZ_INSTALL = "apt install graphviz, brew install graphviz or conda install graphviz"


def neighbourhood(
    view: LineageView, field: FieldRef, direction: str | None, depth: int | None
) -> tuple[set[FieldRef], set[FieldRef]]:
    """The fields a picture of ``field`` shows (those the text answer names: upstream and/or
    downstream, ``depth`` steps), and the fields whose drops it shows (the downstream side)."""
    nodes = {field}
    dropping: set[FieldRef] = set()
    if direction in (None, "upstream"):
        nodes.update(r.field for r in view.graph.upstream(field, depth))
    if direction in (None, "downstream"):
        down = {r.field for r in view.graph.downstream(field, depth)}
        nodes.update(down)
        dropping = {field, *down}
    return nodes, dropping


def dot_text(
    view: LineageView,
    nodes: set[FieldRef] | None = None,
    dropping: set[FieldRef] | None = None,
    highlight: FieldRef | None = None,
) -> str:
    """The field graph as Graphviz DOT: a cluster per dataset (dashed for external sources;
    tooltip: the dataset id), a node per field (label: plain name, tooltip: v2 path), an edge
    per source, target and transformation (label: the transformation; dashed when INDIRECT,
    red when masked, an open circle head when opaque), and drops as edges into a node per drop
    operation of a dataset's runs (fields read and used by nothing likewise, into a node per
    operation that read them). ``nodes``: only these fields and the edges among them (default:
    everything); ``dropping``: the fields whose drops and unused reads are drawn (default: all
    when ``nodes`` is None, else none)."""
    graph = view.graph
    if nodes is None:
        nodes = {FieldRef(d, p) for d in graph.datasets() for p in graph.fields(d)}
        dropping = nodes if dropping is None else dropping
    dropping = set() if dropping is None else dropping
    order = sorted(nodes, key=lambda r: (r.dataset != view.dataset, *field_sort_key(view, r)))
    ids = {ref: f"f{i}" for i, ref in enumerate(order)}

    edges: dict[tuple[FieldRef, FieldRef, Transformation], list[FieldEdge]] = {}
    for ref in order:
        for edge in graph.edges_into(ref):
            if edge.source in ids:
                edges.setdefault((edge.source, ref, edge.transformation), []).append(edge)
    drops: dict[tuple[str, str], list[FieldDrop]] = {}  # (dataset of the run, op) -> drops
    for ref in order:
        if ref in dropping:
            for drop in graph.drops_of(ref):
                drops.setdefault((drop.event.dataset, drop.operation), []).append(drop)
    drop_ids = {
        key: f"d{i}"
        for i, key in enumerate(
            sorted(drops, key=lambda k: (k[0] != view.dataset, view.name(k[0]), k[1]))
        )
    }
    unused: dict[tuple[str, str], list[FieldUnused]] = {}  # (dataset of the run, op) -> fields
    for ref in order:
        if ref in dropping:
            for found in graph.unused_of(ref):
                unused.setdefault((found.event.dataset, found.operation), []).append(found)
    unused_ids = {
        key: f"u{i}"
        for i, key in enumerate(
            sorted(unused, key=lambda k: (k[0] != view.dataset, view.name(k[0]), k[1]))
        )
    }

    clusters: dict[str, list[str]] = {}
    for ref in order:
        attrs = {"label": plain_name(ref.path), "tooltip": ref.path}
        if ref == highlight:
            attrs.update(style="rounded,filled", fillcolor="lightyellow", penwidth="2")
        clusters.setdefault(ref.dataset, []).append(f"{ids[ref]} {_attrs(attrs)};")
    for (dataset, operation), found in drops.items():
        attrs = {
            "label": operation,
            "tooltip": f"dropped by {operation} in {_runs_tip(d.event for d in found)}",
            "shape": "octagon",
            "style": "dashed",
            "color": "gray50",
        }
        clusters.setdefault(dataset, []).append(
            f"{drop_ids[(dataset, operation)]} {_attrs(attrs)};"
        )
    for (dataset, operation), found_unused in unused.items():
        attrs = {
            "label": operation,
            "tooltip": f"read by {operation} in {_runs_tip(u.event for u in found_unused)}, "
            "then used by nothing",
            "shape": "note",
            "style": "dashed",
            "color": "gray50",
        }
        clusters.setdefault(dataset, []).append(
            f"{unused_ids[(dataset, operation)]} {_attrs(attrs)};"
        )

    lines = [
        "digraph lineage {",
        "  "
        + "graph "
        + _attrs(
            {
                "rankdir": "LR",
                "fontname": "Helvetica",
                "labelloc": "t",
                "label": f"field lineage of {view.name(view.dataset)} "
                f"at block {view.sequence_number}",
            }
        )
        + ";",
        '  node [shape=box, style=rounded, fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    cluster_order = sorted(clusters, key=lambda k: (k != view.dataset, view.name(k), k))
    for number, dataset in enumerate(cluster_order):
        external = not dataset.startswith("did:")
        lines.append(f"  subgraph cluster_{number} {{")
        cluster_attrs = {
            "label": view.name(dataset),
            "tooltip": dataset,
            "color": "gray60",
            "style": "dashed" if external else "rounded",
        }
        lines.extend(f"    {name}={_quote(value)};" for name, value in cluster_attrs.items())
        lines.extend(f"    {statement}" for statement in clusters[dataset])
        lines.append("  }")
    for (source, target, step), found in edges.items():
        attrs = {
            "label": transformation_label(transformation_json(step)),
            "tooltip": _edges_tip(found),
        }
        if step.type == TransformationType.INDIRECT:
            attrs["style"] = "dashed"
        if step.opaque:
            attrs.update(color="gray40", arrowhead="odot")
        if step.masking:
            attrs.update(color="red", fontcolor="red")
        lines.append(f"  {ids[source]} -> {ids[target]} {_attrs(attrs)};")
    for key, found in drops.items():
        for ref in _unique_refs(d.field for d in found):
            attrs = {"label": "drop", "style": "dotted", "arrowhead": "tee", "color": "gray50"}
            lines.append(f"  {ids[ref]} -> {drop_ids[key]} {_attrs(attrs)};")
    for key, found_unused in unused.items():
        for ref in _unique_refs(u.field for u in found_unused):
            attrs = {"label": "unused", "style": "dotted", "arrowhead": "none", "color": "gray50"}
            lines.append(f"  {ids[ref]} -> {unused_ids[key]} {_attrs(attrs)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _unique_refs(refs: Iterable[FieldRef]) -> list[FieldRef]:
    return list(dict.fromkeys(refs))


def _runs_tip(events: Iterable[EventRef]) -> str:
    runs = dict.fromkeys(
        f"{e.run.job_name}/{e.run.run_id}" for e in sorted(events, key=event_order)
    )
    return ", ".join(runs)


def _edges_tip(edges: Sequence[FieldEdge]) -> str:
    operations = unique_in_order(op for e in edges for op in e.operations)
    return f"via {', '.join(operations)} in {_runs_tip(e.event for e in edges)}"


def _quote(text: str) -> str:
    """A DOT quoted string whose escString value is ``text``: backslashes and quotes escaped,
    line breaks as ``\\n``, and ampersands as ``&amp;`` (Graphviz reads character references
    in labels and tooltips)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'


def _attrs(attrs: dict[str, str]) -> str:
    return "[" + ", ".join(f"{name}={_quote(value)}" for name, value in attrs.items()) + "]"


def svg_from_dot(dot: str, dot_binary: str) -> bytes:
    """SVG drawn by Graphviz's ``dot`` from DOT text."""
    try:
        done = subprocess.run(
            [dot_binary, "-Tsvg"], input=dot.encode("utf-8"), capture_output=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GraphvizError(f"could not run Graphviz ({dot_binary}): {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GraphvizError(
            f"Graphviz ({dot_binary} -Tsvg) failed: {detail[0] if detail else done.returncode}"
        )
    return done.stdout
