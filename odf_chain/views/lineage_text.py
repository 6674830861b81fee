"""Lineage answers as text, rendered from the JSON-ready documents of
:mod:`odf_chain.views.lineage` and nothing else.

Kept apart so the text cannot know more than the document: whatever a line shows, ``--json``
holds too. Tables are aligned columns; every answer ends with its warnings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Doc = dict[str, Any]


def transformation_label(t: Doc) -> str:
    """DIRECT/IDENTITY, INDIRECT/JOIN masked, ..."""
    label = f"{t['type']}/{t['subtype']}"
    if t["masking"]:
        label += " masked"
    if t["opaque"]:
        label += " opaque"
    return label


def _run_label(run: Doc) -> str:
    return f"{run['job_name']}/{run['run_id']}"


def _runs_label(runs: Iterable[Doc]) -> str:
    return ", ".join(_run_label(r) for r in runs)


def _block_label(run: Doc) -> str:
    block = run["block"]
    return "no block" if block is None else f"block {block['sequence_number']}"


def _table(rows: Sequence[Sequence[str]], indent: str) -> list[str]:
    """Rows as aligned columns (the last column unpadded)."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        out.append((indent + "  ".join([*cells, row[-1]])).rstrip())
    return out


def _heading(doc: Doc) -> str:
    block = doc["block"]
    return (
        f"field lineage of {doc['dataset']['name']} at block {block['sequence_number']} "
        f"{block['hash']}"
    )


def warning_lines(doc: Doc) -> list[str]:
    names = {d["key"]: d["name"] for d in doc["datasets"]}
    return [
        f"warning: input {names.get(u['dataset_id'], u['uri'] or u['dataset_id'])} "
        f"({u['dataset_id']}) could not be followed, its lineage is missing: {u['reason']}"
        for u in doc["unreachable"]
    ]


def graph_text(doc: Doc) -> str:
    lines = [_heading(doc)]
    for section in doc["graph"]:
        lines.append(f"dataset {section['name']} ({section['dataset']})")
        inputs = ", ".join(f"{i['input']} = {i['dataset_name']}" for i in section["inputs"])
        lines.append(f"  inputs: {inputs or 'none'}")
        runs = ", ".join(
            f"{_run_label(r)} ({_block_label(r)}, {_offsets_label(r)})" for r in section["runs"]
        )
        lines.append(f"  runs: {runs}")
        rows: list[list[str]] = []
        marks: list[tuple[int, str]] = []  # (row index, field line before it)
        for written in section["fields"]:
            marks.append((len(rows), f"  {written['field']['name']}"))
            if not written["sources"]:
                marks.append((len(rows), "    (no recorded source)"))
            for source in written["sources"]:
                rows.append(
                    [
                        source["input"],
                        source["field"]["name"],
                        transformation_label(source["transformation"]),
                        "via " + ", ".join(source["operations"]),
                        _runs_label(source["runs"]),
                    ]
                )
        table = _table(rows, "    <- ")
        lines.extend(_interleave(table, marks))
        if section["drops"]:
            lines.append("  drops")
            lines.extend(
                _table(
                    [
                        [
                            d["input"],
                            d["field"]["name"],
                            f"by {d['operation']}",
                            _runs_label(d["runs"]),
                        ]
                        for d in section["drops"]
                    ],
                    "    ",
                )
            )
        if section["unused"]:
            lines.append("  read, then used by nothing")
            lines.extend(_table(_unused_rows(section["unused"], "input"), "    "))
    if not doc["graph"]:
        lines.append("no field lineage recorded")
    lines.extend(warning_lines(doc))
    return "\n".join(lines) + "\n"


def _unused_rows(unused: Sequence[Doc], owner: str) -> list[list[str]]:
    """``owner``: "input" (the run's name for the input) or "dataset" (its readable name)."""
    return [
        [
            u["input"] if owner == "input" else u["field"]["dataset_name"],
            u["field"]["name"],
            f"by {u['operation']}"
            + (f" as {u['output']}" if u["output"] != u["field"]["path"] else ""),
            _runs_label(u["runs"]),
        ]
        for u in unused
    ]


def _interleave(table: list[str], marks: list[tuple[int, str]]) -> list[str]:
    out: list[str] = []
    at = 0
    for row, line in marks:
        out.extend(table[at:row])
        at = max(at, row)
        out.append(line)
    out.extend(table[at:])
    return out


def _offsets_label(run: Doc) -> str:
    offsets = run["offsets"]
    return "no records" if offsets is None else f"offsets {offsets['start']}..{offsets['end']}"


def _field_title(doc: Doc) -> str:
    field = doc["query"]["field"]
    return f"{field['name']} in {field['dataset_name']}"


def _fields_rows(fields: Sequence[Doc]) -> list[list[str]]:
    return [[f["dataset_name"], f["name"]] for f in fields]


def _run_rows(runs: Sequence[Doc]) -> list[list[str]]:
    return [
        [
            _run_label(r["run"]),
            r["run"]["dataset_name"],
            _block_label(r["run"]),
            ", ".join(r["operations"]),
        ]
        for r in runs
    ]


def summary_text(doc: Doc) -> str:
    field = doc["query"]["field"]
    lines = [_heading(doc), _field_title(doc), f"  path {field['path']}"]
    incoming, outgoing = doc["incoming"], doc["outgoing"]
    lines.append("incoming: where its values come from")
    lines.append("  origins")
    lines.extend(_table(_fields_rows(incoming["origins"]), "    ") or ["    (none recorded)"])
    if incoming["runs"]:
        lines.append("  operations, nearest run first")
        lines.extend(_table(_run_rows(incoming["runs"]), "    "))
    lines.append("outgoing: where its values go")
    lines.append("  destinations")
    nowhere = ["    (none recorded)"]
    if field["dataset"] == doc["dataset"]["id"]:
        nowhere = [
            "    (none recorded: the datasets that read this one are not in its chain; run "
            "lineage on them with --dataset)"
        ]
    lines.extend(_table(_fields_rows(outgoing["destinations"]), "    ") or nowhere)
    if outgoing["drops"]:
        lines.append("  drops")
        lines.extend(
            _table(
                [
                    [
                        d["field"]["dataset_name"],
                        d["field"]["name"],
                        f"by {d['operation']}",
                        _runs_label(d["runs"]),
                    ]
                    for d in outgoing["drops"]
                ],
                "    ",
            )
        )
    if outgoing["unused"]:
        lines.append("  read, then used by nothing")
        lines.extend(_table(_unused_rows(outgoing["unused"], "dataset"), "    "))
    if outgoing["runs"]:
        lines.append("  operations, nearest run first")
        lines.extend(_table(_run_rows(outgoing["runs"]), "    "))
    lines.extend(warning_lines(doc))
    return "\n".join(lines) + "\n"


def unique_in_order(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def reached_text(doc: Doc) -> str:
    depth = doc["query"]["depth"]
    steps = "all the way" if depth is None else f"{depth} step" + ("s" if depth != 1 else "")
    lines = [_heading(doc), f"{doc['query']['mode']} of {_field_title(doc)}, {steps}"]
    rows = [
        [
            str(r["distance"]),
            r["field"]["dataset_name"],
            r["field"]["name"],
            ", ".join(
                unique_in_order(transformation_label(e["transformation"]) for e in r["edges"])
            ),
            ", ".join(unique_in_order(_run_label(e["run"]) for e in r["edges"])),
        ]
        for r in doc["reached"]
    ]
    lines.extend(_table(rows, "  ") or ["  (none recorded)"])
    lines.extend(warning_lines(doc))
    return "\n".join(lines) + "\n"


def offset_text(doc: Doc) -> str:
    run = doc["run"]
    block = run["block"]
    lines = [
        f"offset {doc['offset']} of {doc['dataset']['name']} was written by run "
        f"{run['run_id']} of job {run['job_name']}",
        f"  started  {run['started_at']}",
        f"  ended    {run['ended_at'] or 'unknown'}",
        "  offsets  "
        + ("none" if run["offsets"] is None else _offsets_label(run).removeprefix("offsets ")),
        "  lineage  "
        + ("no block" if block is None else f"block {block['sequence_number']} {block['hash']}"),
    ]
    if "field" in doc:
        sources = ", ".join(f"{f['dataset_name']}.{f['path']}" for f in doc["from"]) or "nothing"
        lines.append(f"  {doc['field']['path']} came from {sources}")
    for given in doc.get("consumed", ()):
        lines.append(
            f"  read     {given['alias']} ({given['dataset_id']}"
            + (f" at {given['location']}" if given["location"] else "")
            + ")"
        )
        lines.append(
            f"           blocks {given['prev_block_hash'] or '(start)'} .. "
            f"{given['new_block_hash']}"
        )
        read, new = given["read_offsets"], given["new_offsets"]
        lines.append(
            "           offsets "
            + ("none" if read is None else f"{read[0]}..{read[1]}")
            + (" (new since its last run: " + (f"{new[0]}..{new[1]}" if new else "none") + ")")
        )
    lines.extend(warning_lines(doc))
    return "\n".join(lines) + "\n"
