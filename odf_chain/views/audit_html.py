"""An :class:`~odf_chain.views.audit.AuditReport` as one self-contained HTML page.

Self-contained because the page travels: attached to an email, opened from a share, archived
with the audit. So nothing is fetched: the style is inline, there is no script, the lineage
picture is inline SVG, and no element names an external resource. Every string that comes from
the chain (field, job, dataset and source names, messages) goes through :func:`html.escape`:
a chain is written by whoever could write to it, and its text must render as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from odf_chain.views.audit import AuditReport, BlockRow, SchemaVersion, Timeline, Verdict
from odf_chain.views.audit_svg import lineage_svg
from odf_chain.views.lineage import plain_name

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a202c;
margin:0;background:#f7fafc}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid
#e2e8f0;padding-bottom:4px}
.meta{color:#4a5568;font-size:13px}.meta code{font-size:12px}
.verdict{border-radius:10px;padding:18px 24px;margin:18px 0;color:#fff}
.verdict.ok{background:#2f855a}.verdict.failed{background:#c53030}
.verdict .word{font-size:44px;font-weight:800;letter-spacing:2px}
.verdict .counts{font-size:16px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#edf2f7}td.num{text-align:right;white-space:nowrap}
code,.hash{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.hash{word-break:break-all}td.nowrap,td.nowrap code{white-space:nowrap}
.tag{display:inline-block;border-radius:3px;padding:0 5px;margin:1px;font-size:11px;
background:#e2e8f0}
.tag.write{background:#c6f6d5}.tag.schema{background:#feebc8}.tag.lineage{background:#bee3f8}
.tag.transaction{background:#e9d8fd}.tag.derive{background:#fed7e2}.tag.seed{background:#fefcbf}
.error{color:#c53030;font-weight:600}.warning{color:#b7791f;font-weight:600}
tr.broken td{background:#fff5f5}.tag.failed{background:#c53030;color:#fff}
.elided td{background:#fffff0;font-style:italic}
ul{margin:0;padding:0;list-style:none}.added{color:#2f855a}.removed{color:#c53030}.changed{color:#b7791f}
.graph{overflow-x:auto;background:#fff;border:1px solid #e2e8f0;padding:8px}
.legend span{margin-right:16px}.note{color:#4a5568}
.ok-text{color:#2f855a;font-weight:600}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _n(value: int) -> str:
    return f"{value:,}"


def _short(block_hash: str) -> str:
    """12 characters of the digest: BLAKE3's constant multihash prefix (``f1e20``) dropped."""
    return block_hash[5:17] if block_hash.startswith("f1e20") else block_hash[:16]


def _table(headers: Sequence[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _verdict(v: Verdict) -> str:
    word = "OK" if v.ok else "FAILED"
    rows = f", {_n(v.rows_checked)} rows" if "every row (--deep)" in v.checks else ""
    counts = (
        f"{_n(v.errors)} error{'s' * (v.errors != 1)}, "
        f"{_n(v.warnings)} warning{'s' * (v.warnings != 1)} — "
        f"{_n(v.blocks_checked)} blocks, {_n(v.slices_checked)} slices{rows}, "
        f"{_n(v.bytes_hashed)} bytes hashed"
    )
    out = [
        f'<section id="verdict" class="verdict {word.lower()}">'
        f'<div class="word" id="verdict-word">{word}</div>'
        f'<div class="counts">{_e(counts)}</div>'
        f'<div class="checks">checked: {_e(", ".join(v.checks))}</div></section>'
    ]
    if v.problems:
        out.append("<h2>Problems</h2>")
        out.append(
            _table(
                ["severity", "rule", "block", "where", "message"],
                (
                    f'<tr class="problem"><td class="{_e(p.severity)}">{_e(p.severity.upper())}'
                    f"</td><td><code>{_e(p.rule)}</code></td>"
                    f'<td class="num">{"" if p.sequence_number is None else p.sequence_number}'
                    f'</td><td class="hash">{_e(p.block_hash or "")} {_e(p.path or "")}</td>'
                    f"<td>{_e(p.message)}</td></tr>"
                    for p in v.problems
                ),
            )
        )
    if v.runs:
        out.append("<h2>Reproduction</h2>")
        out.append(
            _table(
                ["dataset", "block", "verdict", "detail"],
                (
                    f"<tr><td>{_e(r.dataset)}</td><td class='num'>{r.sequence_number}</td>"
                    f"<td class='{'ok-text' if r.verdict == 'reproduced' else 'error'}'>"
                    f"{_e(r.verdict)}</td><td>{_e(r.detail)}</td></tr>"
                    for r in v.runs
                ),
            )
        )
    return "".join(out)


def _block_tr(row: BlockRow, broken: frozenset[int]) -> str:
    tags = "".join(f'<span class="tag {_e(k)}">{_e(k)}</span>' for k in row.kinds)
    marked = row.sequence_number in broken
    if marked:
        tags += '<span class="tag failed">error: see Problems</span>'
    detail = f"<br><small>{_e(row.detail)}</small>" if row.detail else ""
    return (
        f'<tr class="block{" broken" if marked else ""}">'
        f'<td class="num">{row.sequence_number}</td>'
        f'<td class="hash nowrap" title="{_e(row.block_hash)}">{_e(_short(row.block_hash))}</td>'
        f'<td class="nowrap"><code>{_e(row.system_time)}</code></td>'
        f"<td>{_e(row.event)}<br>{tags}</td>"
        f'<td class="num">{"" if row.rows is None else _n(row.rows)}</td>'
        f'<td class="num">{"" if row.size is None else _n(row.size)}</td>'
        f"<td>{_e(row.summary)}{detail}</td></tr>"
    )


def _timeline(t: Timeline, v: Verdict) -> str:
    """The blocks, those verify found an error in marked (they may sit among the elided)."""
    broken = frozenset(
        p.sequence_number
        for p in v.problems
        if p.severity == "error" and p.sequence_number is not None
    )
    kinds = ", ".join(f"{count} {kind}" for kind, count in t.kinds)
    rows = [_block_tr(r, broken) for r in t.first]
    if t.elided:
        what = ", ".join(f"{count} {kind}" for kind, count in t.elided_kinds)
        rows.append(
            f'<tr class="elided"><td colspan="4">… {_n(t.elided)} blocks not shown ({_e(what)})'
            f'</td><td class="num">{_n(t.elided_rows)}</td>'
            f'<td class="num">{_n(t.elided_bytes)}</td><td></td></tr>'
        )
        rows.extend(_block_tr(r, broken) for r in t.last)
    return (
        f'<section id="timeline"><h2>Timeline of blocks</h2><p class="note">{_n(t.blocks)} '
        f"blocks, {_n(t.rows)} rows, {_n(t.bytes)} bytes of data: {_e(kinds)}. Block hashes "
        "are shortened without their constant multihash prefix; hover for the whole.</p>"
        + _table(["#", "block", "system time (UTC)", "event", "rows", "bytes", "what"], rows)
        + "</section>"
    )


def _path(path: str) -> str:
    """A field by its dotted name, its v2 path (with types) as the tooltip."""
    return f'<code title="{_e(path)}">{_e(plain_name(path))}</code>'


def _schema(version: SchemaVersion) -> str:
    if version.initial:
        change = f"initial schema: {len(version.fields)} fields"
    else:
        items = [f'<li class="added">+ {_path(p)}</li>' for p in version.added]
        items += [f'<li class="removed">&minus; {_path(p)}</li>' for p in version.removed]
        items += [
            f'<li class="changed">~ {_path(p)}: {_e(a)} → {_e(b)}</li>'
            for p, a, b in version.changed
        ]
        change = f"<ul>{''.join(items)}</ul>" if items else "no field changed"
    fields = ", ".join(
        f"<code>{_e(n)}</code>: {_e(t)}{'' if null else ' (required)'}"
        for n, t, null in version.fields
    )
    return (
        f'<tr class="schema"><td class="num">{version.sequence_number}</td>'
        f"<td><code>{_e(version.system_time)}</code></td><td>{change}</td>"
        f"<td><details><summary>{len(version.fields)} fields</summary>{fields}</details></td></tr>"
    )


def _lineage(report: AuditReport) -> str:
    graph = report.lineage
    if graph is None or graph.empty:
        return (
            '<section id="lineage"><h2>Field lineage</h2><p>No field lineage recorded.</p>'
            "</section>"
        )
    hidden = ""
    if graph.hidden_edges:
        hidden = f" {graph.hidden_edges} edges to fields not shown are left out."
    legend = (
        '<p class="legend note"><span>── direct</span><span>- - indirect (filter, join, group)'
        '</span><span style="color:#c53030">── masked</span><span style="color:#718096">── '
        "opaque</span><span>✕ drop</span><span>dashed box: external source</span>"
        f"<span>blue box: this dataset</span></p><p class='note'>Hover a field for its path, an "
        f"edge for its runs.{_e(hidden)}</p>"
    )
    return (
        '<section id="lineage"><h2>Field lineage</h2>'
        + legend
        + f'<div class="graph">{lineage_svg(graph)}</div></section>'
    )


def _upstream(report: AuditReport) -> str:
    if not report.upstream:
        return '<section id="upstream"><h2>Upstream</h2><p>No inputs recorded.</p></section>'
    rows = (
        f"<tr><td>{_e(u.name)}</td><td class='hash'>{_e(u.dataset_id or '')}</td>"
        f"<td class='hash'>{_e(u.block_hash or u.content_hash or '')}</td>"
        f"<td>{_e(u.uri or '')}</td><td>{_e(', '.join(u.used_by))}</td></tr>"
        for u in report.upstream
    )
    return (
        '<section id="upstream"><h2>Upstream datasets and sources</h2>'
        + _table(["name", "dataset id", "pinned block / content hash", "uri", "read by"], rows)
        + "</section>"
    )


def _receipts(report: AuditReport) -> str:
    if not report.receipts:
        return ""
    rows = []
    for r in report.receipts:
        signed = {None: "unsigned", True: "valid signature", False: "BAD signature"}[r.signed]
        verdict = (
            '<span class="ok-text">held</span>'
            if r.held
            else '<span class="error">NOT HELD</span><br>' + "<br>".join(_e(m) for m in r.messages)
        )
        rows.append(
            f'<tr class="receipt"><td>{_e(r.source)}</td><td class="num">{r.sequence_number}'
            f'</td><td class="hash">{_e(r.block_hash)}</td><td><code>{_e(r.system_time)}</code>'
            f"</td><td>{_e(signed)}</td><td>{verdict}</td></tr>"
        )
    return (
        '<section id="receipts"><h2>Receipts checked</h2>'
        + _table(["receipt", "block", "block hash", "system time", "signature", "verdict"], rows)
        + "</section>"
    )


def render_html(report: AuditReport) -> str:
    """The whole page."""
    v = report.verdict
    word = "OK" if v.ok else "FAILED"
    at = (
        f"block {report.at_sequence_number} <code>{_e(report.at_hash)}</code>"
        if report.at_hash
        else "no block"
    )
    notes = "".join(f'<p class="warning">{_e(n)}</p>' for n in report.notes)
    schemas = (
        '<section id="schemas"><h2>Schema history</h2>'
        + _table(["block", "system time", "change", "fields"], (_schema(s) for s in report.schemas))
        + "</section>"
        if report.schemas
        else '<section id="schemas"><h2>Schema history</h2><p>No schema declared.</p></section>'
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{word}: audit of {_e(report.location)}</title><style>{_CSS}</style></head>"
        f"<body><main><h1>Audit of <code>{_e(report.location)}</code></h1>"
        f'<div class="meta">dataset <code>{_e(report.dataset_id or "unknown")}</code>'
        f"{' (' + _e(report.kind) + ')' if report.kind else ''}; described at {at}; "
        f"head <code>{_e(v.head or 'none')}</code>; report made {_e(report.generated_at)} "
        "by odf-chain audit</div>"
        + _verdict(v)
        + notes
        + _receipts(report)
        + (_timeline(report.timeline, v) if report.timeline else "")
        + schemas
        + _lineage(report)
        + _upstream(report)
        + "</main></body></html>\n"
    )
