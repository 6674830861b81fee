"""The field-lineage graph drawn as inline SVG, laid out in Python: no Graphviz at build or view
time, no script in the page.

A simple layered layout is enough for field lineage, where the interesting direction is always
"read from" → "written to": each dataset is a box listing its fields, boxes stand in columns by
their distance from the sources (inputs left, the audited dataset and what it feeds right), and
an edge is a curve from a field's right side to another's left side. Text is measured by an
average glyph width (no font metrics at build time), so long names are cut with an ellipsis and
kept whole in the tooltip.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from odf_chain.views.audit_graph import GraphDataset, GraphEdge, LineageGraph

CHAR = 7.0  # average width of a 12 px sans-serif glyph
ROW = 22  # height of a field row
HEADER = 26  # the dataset's name above its fields
PAD = 8
GAP = 150  # between columns: room for the curves
MAX_LABEL = 36  # characters of a name shown in a box

_STROKES = {
    "direct": 'stroke="#4a5568"',
    "indirect": 'stroke="#4a5568" stroke-dasharray="6 4"',
    "masked": 'stroke="#c53030"',
    "opaque": 'stroke="#a0aec0"',
    "drop": 'stroke="#a0aec0" stroke-dasharray="2 3"',
    "unused": 'stroke="#a0aec0" stroke-dasharray="2 3"',
}
_NODE_FILL = {"field": "#ffffff", "drop": "#fff5f5", "unused": "#f7fafc"}


@dataclass(frozen=True, slots=True)
class _Box:
    dataset: GraphDataset
    x: float
    y: float
    width: float
    height: float


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _layers(graph: LineageGraph) -> dict[str, int]:
    """Each dataset's column: the longest chain of datasets feeding it (sources at 0). A cycle
    (a dataset feeding itself through another) stops growing after as many rounds as there
    are datasets, so the layout always ends."""
    owner = {n.id: d.key for d in graph.datasets for n in d.nodes}
    feeds = {
        (owner[e.source], owner[e.target])
        for e in graph.edges
        if owner[e.source] != owner[e.target]
    }
    layer = {d.key: 0 for d in graph.datasets}
    for _ in range(len(layer)):
        moved = False
        for source, target in feeds:
            if layer[target] < layer[source] + 1:
                layer[target] = layer[source] + 1
                moved = True
        if not moved:
            break
    return layer


def _boxes(graph: LineageGraph) -> list[_Box]:
    layer = _layers(graph)
    columns: dict[int, list[GraphDataset]] = {}
    for dataset in graph.datasets:
        columns.setdefault(layer[dataset.key], []).append(dataset)
    boxes: list[_Box] = []
    x = PAD
    for number in sorted(columns):
        members = columns[number]
        longest = max(
            len(_cut(text))
            for d in members
            for text in [d.name, *(n.label for n in d.nodes), "… 000 more"]
        )
        width = longest * CHAR + 3 * PAD
        y = PAD
        for dataset in members:
            rows = len(dataset.nodes) + (1 if dataset.hidden else 0)
            height = HEADER + rows * ROW + PAD
            boxes.append(_Box(dataset, x, y, width, height))
            y += height + 2 * PAD
        x += width + GAP
    return boxes


def _edge(edge: GraphEdge, where: dict[str, tuple[float, float, float]]) -> str:
    """A curve from the right side of the source row to the left side of the target row (or a
    loop on the right when both sit in one column)."""
    sx, sy, sw = where[edge.source]
    tx, ty, tw = where[edge.target]
    x1 = sx + sw
    if tx > x1:
        bend = (tx - x1) / 2
        d = (
            f"M{x1:.1f},{sy:.1f} C{x1 + bend:.1f},{sy:.1f} "
            f"{tx - bend:.1f},{ty:.1f} {tx:.1f},{ty:.1f}"
        )
    else:
        x2 = tx + tw
        reach = max(x1, x2) + 40
        d = f"M{x1:.1f},{sy:.1f} C{reach:.1f},{sy:.1f} {reach:.1f},{ty:.1f} {x2:.1f},{ty:.1f}"
    return (
        f'<path class="edge edge-{edge.style}" d="{d}" fill="none" stroke-width="1.4" '
        f'{_STROKES.get(edge.style, _STROKES["direct"])} marker-end="url(#arrow)">'
        f"<title>{escape(edge.title)}</title></path>"
    )


def lineage_svg(graph: LineageGraph) -> str:
    """``graph`` as one ``<svg>`` element (every text escaped; tooltips as ``<title>``)."""
    boxes = _boxes(graph)
    where: dict[str, tuple[float, float, float]] = {}  # node id -> left x, middle y, width
    parts: list[str] = []
    for box in boxes:
        d = box.dataset
        dash = ' stroke-dasharray="5 4"' if d.external else ""
        fill = "#ebf8ff" if d.own else ("#fafafa" if d.external else "#f0fff4")
        parts.append(
            f'<g class="dataset"><title>{escape(d.key)}</title>'
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.width:.1f}" '
            f'height="{box.height:.1f}" rx="6" fill="{fill}" stroke="#718096"{dash}/>'
            f'<text x="{box.x + PAD:.1f}" y="{box.y + 17:.1f}" font-weight="bold">'
            f"{escape(_cut(d.name))}</text></g>"
        )
        for row, node in enumerate(d.nodes):
            top = box.y + HEADER + row * ROW
            left, width = box.x + PAD, box.width - 2 * PAD
            where[node.id] = (left, top + ROW / 2 - 1, width)
            label = ("✕ " if node.kind == "drop" else "") + _cut(node.label)
            parts.append(
                f'<g class="node node-{node.kind}"><title>{escape(node.title)}</title>'
                f'<rect x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" height="{ROW - 4}" '
                f'rx="3" fill="{_NODE_FILL.get(node.kind, "#ffffff")}" stroke="#cbd5e0"/>'
                f'<text x="{left + 5:.1f}" y="{top + 13:.1f}">{escape(label)}</text></g>'
            )
        if d.hidden:
            top = box.y + HEADER + len(d.nodes) * ROW
            parts.append(
                f'<text x="{box.x + PAD + 5:.1f}" y="{top + 13:.1f}" fill="#718096">'
                f"… {d.hidden} more</text>"
            )
    edges = [_edge(e, where) for e in graph.edges if e.source in where and e.target in where]
    width = max((b.x + b.width for b in boxes), default=0) + PAD + 40
    height = max((b.y + b.height for b in boxes), default=0) + PAD
    return (
        f'<svg class="lineage" role="img" '
        f'aria-label="field lineage graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#4a5568"/></marker></defs>' + "".join(parts) + "".join(edges) + "</svg>"
    )
