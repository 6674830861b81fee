"""Lineage answers for people and programs: the field graph, a field's summaries, the fields
reached up or down, the run of an offset, as JSON-ready documents and as text (the text is
:mod:`odf_chain.views.lineage_text`, re-exported here; pictures:
:mod:`odf_chain.views.lineage_dot`).

Each answer is first built as one JSON-ready document (stable keys, full v2 paths and dataset
ids); the text is rendered from that document, so ``--json`` always holds everything the text
shows. Other datasets are named the way people know them: the location a run read them from,
the URI of an external source, and only when neither is known the dataset id.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from odf_chain.errors import NotFoundError
from odf_chain.events import LineageInput, LineageRun, Transformation
from odf_chain.lineage.graph import (
    EventRef,
    FieldDrop,
    FieldEdge,
    FieldGraph,
    FieldRef,
    FieldUnused,
    Reached,
    RunOperations,
    input_key,
)
from odf_chain.lineage.names import resolve_name
from odf_chain.replay import LineageReplay
from odf_chain.schema.paths import v1_path
from odf_chain.state import schema_path_set
from odf_chain.storage import is_uri
from odf_chain.views.lineage_text import (  # text re-exported: callers take both from here
    Doc,
    graph_text as graph_text,
    offset_text as offset_text,
    reached_text as reached_text,
    summary_text as summary_text,
    transformation_label,
    unique_in_order as unique_in_order,
    warning_lines,
)

# -- naming ---------------------------------------------------------------------------------------


def _all_edges(graph: FieldGraph) -> Iterator[FieldEdge]:
    for dataset in graph.datasets():
        for path in graph.fields(dataset):
            yield from graph.edges_into(FieldRef(dataset, path))


def _all_drops(graph: FieldGraph) -> Iterator[FieldDrop]:
    for dataset in graph.datasets():
        for path in graph.fields(dataset):
            yield from graph.drops_of(FieldRef(dataset, path))


def _all_unused(graph: FieldGraph) -> Iterator[FieldUnused]:
    for dataset in graph.datasets():
        for path in graph.fields(dataset):
            yield from graph.unused_of(FieldRef(dataset, path))


@dataclass(frozen=True)
class LineageView:
    """A replayed field graph with readable dataset names, the block it is at, and the lookups
    a command line needs (a field by plain name or v2 path, a dataset by name, alias or id)."""

    replay: LineageReplay
    names: dict[str, str]  # dataset key -> readable name
    aliases: dict[str, frozenset[str]]  # input name used by some run -> dataset keys
    sequence_number: int
    block_hash: str

    @classmethod
    def build(
        cls, replay: LineageReplay, location: str, sequence_number: int, block_hash: str
    ) -> LineageView:
        """``location``: how the user named this dataset (its own display name)."""
        found: dict[str, str] = {replay.dataset: location}
        aliases: dict[str, set[str]] = {}

        def note(pinned: LineageInput) -> None:
            key = input_key(pinned)
            aliases.setdefault(pinned.name, set()).add(key)
            if key not in found and pinned.uri:
                found[key] = _readable(pinned.uri)

        for edge in _all_edges(replay.graph):
            note(edge.source_input)
        for drop in _all_drops(replay.graph):
            note(drop.source_input)
        for unused in _all_unused(replay.graph):
            note(unused.source_input)
        for key in replay.graph.datasets():
            found.setdefault(key, key)
        # Two datasets shown under one name (a location reused) are told apart by their ids.
        counts: dict[str, int] = {}
        for name in found.values():
            counts[name] = counts.get(name, 0) + 1
        names = {
            key: name if counts[name] == 1 or name == key else f"{name} ({key})"
            for key, name in found.items()
        }
        return cls(
            replay,
            names,
            {alias: frozenset(keys) for alias, keys in aliases.items()},
            sequence_number,
            block_hash,
        )

    @property
    def graph(self) -> FieldGraph:
        return self.replay.graph

    @property
    def dataset(self) -> str:
        return self.replay.dataset

    def name(self, key: str) -> str:
        return self.names.get(key, key)

    def find_dataset(self, text: str) -> str:
        """The dataset key ``text`` means: a dataset id or URI key, a readable name, or the name
        a run gave the input."""
        if text in self.names:
            return text
        by_name = [key for key, name in self.names.items() if name == text]
        if len(by_name) == 1:
            return by_name[0]
        if not is_uri(text):  # a path as typed: the dataset read from there, however named
            where = _readable(str(Path(text).absolute()))
            as_uri = Path(text).absolute().as_uri()
            by_path = [k for k, n in self.names.items() if n in (where, as_uri)]
            if len(by_path) == 1:
                return by_path[0]
        keys = self.aliases.get(text, frozenset())
        if len(keys) == 1:
            return next(iter(keys))
        if keys:
            listed = ", ".join(sorted(self.name(k) for k in keys))
            raise NotFoundError(f"{text!r} names several inputs: {listed}")
        known = ", ".join(sorted({*self.names.values(), *self.aliases}))
        raise NotFoundError(
            f"no dataset {text!r} in the lineage of {self.name(self.dataset)} (known: {known})"
        )

    def field(self, name: str, dataset: str | None = None) -> FieldRef:
        """The field ``name`` (plain dotted name or v2 path) of ``dataset`` (default: this one)."""
        key = self.dataset if dataset is None else self.find_dataset(dataset)
        known = set(self.graph.fields(key))
        if key == self.dataset and self.replay.schema is not None:
            known |= schema_path_set(self.replay.schema)
        return FieldRef(key, resolve_name(name, known, where=self.name(key)))


def _readable(location: str) -> str:
    """A local location as people would type it here: relative to the working directory when
    it is below it."""
    if is_uri(location):
        return location
    path = Path(location)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return location


# -- JSON pieces ----------------------------------------------------------------------------------


def plain_name(path: str) -> str:
    """The dotted name people know a field by: a v2 path without its type tokens; any other
    name (a field of an external source, as its run named it) as it is."""
    if not path.startswith("[version="):
        return path
    return v1_path(path) or path


def field_json(view: LineageView, ref: FieldRef) -> Doc:
    return {
        "dataset": ref.dataset,
        "dataset_name": view.name(ref.dataset),
        "name": plain_name(ref.path),
        "path": ref.path,
    }


def transformation_json(t: Transformation) -> Doc:
    return {
        "type": t.type.name,
        "subtype": t.subtype.name,
        "masking": t.masking,
        "opaque": t.opaque,
    }


def run_json(view: LineageView, event: EventRef) -> Doc:
    run: LineageRun = event.run
    return {
        "job_name": run.job_name,
        "run_id": run.run_id,
        "dataset": event.dataset,
        "dataset_name": view.name(event.dataset),
        "started_at": run.started_at.isoformat(),
        "ended_at": None if run.ended_at is None else run.ended_at.isoformat(),
        "offsets": None
        if run.offsets is None
        else {"start": run.offsets.start, "end": run.offsets.end},
        "block": None
        if event.block is None
        else {"sequence_number": event.block.sequence_number, "hash": event.block.block_hash},
    }


def event_order(event: EventRef) -> tuple[int, float, str]:
    sequence = -1 if event.block is None else event.block.sequence_number
    return (sequence, event.run.started_at.timestamp(), event.run.run_id)


def _header(view: LineageView, query: Doc) -> Doc:
    return {
        "dataset": {"id": view.dataset, "name": view.name(view.dataset)},
        "block": {"sequence_number": view.sequence_number, "hash": view.block_hash},
        "query": query,
        "datasets": [
            {"key": key, "name": view.name(key), "is_dataset": key.startswith("did:")}
            for key in view.graph.datasets()
        ],
        "unreachable": [
            {"dataset_id": u.dataset_id, "uri": u.uri, "reason": u.reason}
            for u in view.replay.unreachable
        ],
    }


def field_sort_key(view: LineageView, ref: FieldRef) -> tuple[str, str, str]:
    return (view.name(ref.dataset), plain_name(ref.path), ref.path)


def _grouped_drops(view: LineageView, drops: Iterable[FieldDrop]) -> list[Doc]:
    """Drops of the same field by the same operation and transformation, runs merged."""
    groups: dict[tuple, list[EventRef]] = {}
    for drop in drops:
        key = (
            drop.field,
            drop.source_input.name,
            drop.operation,
            drop.operations,
            drop.transformation,
            drop.only_dropped,
        )
        runs = groups.setdefault(key, [])
        if drop.event not in runs:
            runs.append(drop.event)
    out = []
    for (field, alias, operation, operations, step, only), runs in groups.items():
        out.append(
            {
                "field": field_json(view, field),
                "input": alias,
                "operation": operation,
                "operations": list(operations),
                "transformation": transformation_json(step),
                "only_dropped": only,
                "runs": [run_json(view, r) for r in sorted(runs, key=event_order)],
            }
        )
    out.sort(
        key=lambda d: (d["field"]["dataset_name"], d["field"]["name"], d["operation"], d["input"])
    )
    return out


def _grouped_unused(view: LineageView, unused: Iterable[FieldUnused]) -> list[Doc]:
    """Fields read and then used by nothing, by field, operation and output, runs merged."""
    groups: dict[tuple, list[EventRef]] = {}
    for found in unused:
        key = (
            found.field,
            found.source_input.name,
            found.operation,
            found.output,
            found.operations,
            found.transformation,
            found.only_unused,
        )
        runs = groups.setdefault(key, [])
        if found.event not in runs:
            runs.append(found.event)
    out = [
        {
            "field": field_json(view, field),
            "input": alias,
            "operation": operation,
            "output": output,
            "operations": list(operations),
            "transformation": transformation_json(step),
            "only_unused": only,
            "runs": [run_json(view, r) for r in sorted(runs, key=event_order)],
        }
        for (field, alias, operation, output, operations, step, only), runs in groups.items()
    ]
    out.sort(
        key=lambda d: (d["field"]["dataset_name"], d["field"]["name"], d["operation"], d["input"])
    )
    return out


# -- the whole graph ------------------------------------------------------------------------------


def _section_order(view: LineageView) -> list[str]:
    """Datasets that recorded lineage: this one first, then the others by name."""
    with_events = {e.dataset for e in view.graph.events()}
    others = sorted((k for k in with_events if k != view.dataset), key=view.name)
    return ([view.dataset] if view.dataset in with_events else []) + others


def graph_json(view: LineageView) -> Doc:
    """Per dataset that recorded lineage: the inputs its runs read, its runs, each written field
    with its direct sources, its drops, and the fields its runs read and used for nothing."""
    drops: dict[str, list[FieldDrop]] = {}
    for drop in _all_drops(view.graph):
        drops.setdefault(drop.event.dataset, []).append(drop)
    unused: dict[str, list[FieldUnused]] = {}
    for found in _all_unused(view.graph):
        unused.setdefault(found.event.dataset, []).append(found)
    doc = _header(view, {"mode": "graph", "field": None, "depth": None})
    doc["graph"] = [
        _section_json(view, key, drops.get(key, []), unused.get(key, []))
        for key in _section_order(view)
    ]
    return doc


def _section_json(
    view: LineageView, key: str, drops: list[FieldDrop], unused: list[FieldUnused]
) -> Doc:
    graph = view.graph
    inputs: dict[str, set[str]] = {}  # input name -> dataset keys
    for item in [
        *drops,
        *unused,
        *(e for p in graph.fields(key) for e in graph.edges_into(FieldRef(key, p))),
    ]:
        inputs.setdefault(item.source_input.name, set()).add(input_key(item.source_input))
    refs = sorted(
        (FieldRef(key, p) for p in graph.fields(key)), key=lambda r: field_sort_key(view, r)
    )
    return {
        "dataset": key,
        "name": view.name(key),
        "inputs": [
            {"input": alias, "dataset": k, "dataset_name": view.name(k)}
            for alias in sorted(inputs)
            for k in sorted(inputs[alias], key=view.name)
        ],
        "runs": [run_json(view, e) for e in sorted(graph.events(key), key=event_order)],
        "fields": [
            {"field": field_json(view, ref), "sources": _sources_json(view, graph.edges_into(ref))}
            for ref in refs
            if _written_by(graph, ref)
        ],
        "drops": _grouped_drops(view, drops),
        "unused": _grouped_unused(view, unused),
    }


def _sources_json(view: LineageView, edges: Iterable[FieldEdge]) -> list[Doc]:
    """The direct sources of one field, runs merged where the source, input name,
    transformation and operations agree."""
    groups: dict[tuple, list[EventRef]] = {}
    for edge in edges:
        group = (edge.source, edge.source_input.name, edge.transformation, edge.operations)
        runs = groups.setdefault(group, [])
        if edge.event not in runs:
            runs.append(edge.event)
    sources = [
        {
            "field": field_json(view, source),
            "input": alias,
            "transformation": transformation_json(step),
            "operations": list(operations),
            "runs": [run_json(view, r) for r in sorted(runs, key=event_order)],
        }
        for (source, alias, step, operations), runs in groups.items()
    ]
    sources.sort(
        key=lambda s: (
            s["field"]["dataset_name"],
            s["field"]["name"],
            s["field"]["path"],
            transformation_label(s["transformation"]),
            s["input"],
        )
    )
    return sources


def _written_by(graph: FieldGraph, ref: FieldRef) -> bool:
    """``ref`` was written by its own dataset's runs: it has sources, or nothing reads it. (A
    field that only a downstream run reads is in the graph whether its dataset's own lineage
    wrote it or not: without sources it is not listed as written.)"""
    if graph.edges_into(ref):
        return True
    reads = graph.edges_out_of(ref) or graph.drops_of(ref) or graph.unused_of(ref)
    return not reads


# -- one field ------------------------------------------------------------------------------------


def _runs_json(view: LineageView, runs: Sequence[RunOperations]) -> list[Doc]:
    return [{"run": run_json(view, r.event), "operations": list(r.operations)} for r in runs]


def summary_json(view: LineageView, field: FieldRef) -> Doc:
    """CDAP's incoming and outgoing summaries of ``field``."""
    incoming = view.graph.incoming(field)
    outgoing = view.graph.outgoing(field)
    doc = _header(view, {"mode": "summary", "field": field_json(view, field), "depth": None})
    doc["incoming"] = {
        "origins": [
            field_json(view, f)
            for f in sorted(incoming.origins, key=lambda r: field_sort_key(view, r))
        ],
        "runs": _runs_json(view, incoming.runs),
    }
    doc["outgoing"] = {
        "destinations": [
            field_json(view, f)
            for f in sorted(outgoing.destinations, key=lambda r: field_sort_key(view, r))
        ],
        "drops": _grouped_drops(view, outgoing.drops),
        "unused": _grouped_unused(view, outgoing.unused),
        "runs": _runs_json(view, outgoing.runs),
    }
    return doc


def edge_json(view: LineageView, edge: FieldEdge) -> Doc:
    return {
        "source": field_json(view, edge.source),
        "target": field_json(view, edge.target),
        "input": edge.source_input.name,
        "transformation": transformation_json(edge.transformation),
        "operations": list(edge.operations),
        "run": run_json(view, edge.event),
    }


def reached_json(view: LineageView, field: FieldRef, direction: str, depth: int | None) -> Doc:
    """The fields ``direction`` ("upstream" or "downstream") of ``field``, ``depth`` steps
    (None: all the way), each with its distance and the edges that link it one step nearer."""
    walk = view.graph.upstream if direction == "upstream" else view.graph.downstream
    reached: Sequence[Reached] = walk(field, depth, with_edges=True)
    doc = _header(view, {"mode": direction, "field": field_json(view, field), "depth": depth})
    doc["reached"] = [
        {
            "distance": r.distance,
            "field": field_json(view, r.field),
            "edges": [
                edge_json(view, e) for e in sorted(r.edges, key=lambda e: _edge_order(view, e))
            ],
        }
        for r in sorted(reached, key=lambda r: (r.distance, *field_sort_key(view, r.field)))
    ]
    return doc


def _edge_order(view: LineageView, edge: FieldEdge) -> tuple:
    return (
        field_sort_key(view, edge.source),
        field_sort_key(view, edge.target),
        event_order(edge.event),
    )


def offset_json(view: LineageView, offset: int, field: FieldRef | None = None) -> Doc:
    """The run that wrote record ``offset`` of this dataset; NotFoundError when no lineage
    event covers it. With ``field``, also the fields it came from in that run."""
    event = view.graph.event_for_offset(view.dataset, offset)
    if event is None:
        raise NotFoundError(
            f"no run with recorded lineage wrote offset {offset} of {view.name(view.dataset)} "
            f"(as of block {view.sequence_number})"
        )
    doc = _header(view, {"mode": "offset", "field": None, "depth": None})
    doc["offset"] = offset
    doc["run"] = run_json(view, event)
    if field is not None:
        doc["field"] = field_json(view, field)
        doc["from"] = [
            field_json(view, edge.source)
            for edge in view.graph.edges_into(field)
            if edge.event == event
        ]
    return doc


def add_consumed(doc: Doc, dataset) -> None:
    """For a run a derive wrote (an ExecuteTransform), what it read: each input's dataset,
    block interval and offsets (:func:`odf_chain.derived.consumed`)."""
    from odf_chain.chain import load_block
    from odf_chain.derived import consumed
    from odf_chain.events import ExecuteTransform
    from odf_chain.format.multihash import Multihash

    block = doc["run"]["block"]
    if block is None:
        return
    entry = load_block(dataset.storage, Multihash.from_multibase(block["hash"]))
    if isinstance(entry.block.event, ExecuteTransform):
        transform = dataset.state_at(str(entry.hash)).transform
        doc["consumed"] = consumed(transform, entry.block.event)


def warnings(view: LineageView) -> list[str]:
    """One line per input whose lineage could not be followed."""
    return warning_lines(_header(view, {}))
