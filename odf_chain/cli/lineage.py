"""``odf-chain lineage``: the field graph, where a field comes from and goes, which run wrote a
record, or a picture of it. The answers are built by :mod:`odf_chain.views.lineage` (JSON
documents and their text) and :mod:`odf_chain.views.lineage_dot` (Graphviz)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from odf_chain.cli.common import (
    DIR_HELP,
    EXIT_FAILED,
    EXIT_OK,
    REF_HELP,
    VERIFIED_HELP,
    UsageError,
    examples,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "lineage",
        help="field lineage: the field graph, where a field comes from and goes, or a picture",
        description="Field-level lineage as of a block, across the datasets this one read "
        "(when they can be opened). Without FIELD: every written field with its direct "
        "sources, drops and runs. With FIELD: where its values come from and go (all the way), "
        "or the fields --upstream/--downstream of it with their distance.",
        epilog=examples(
            "odf-chain lineage DIR",
            "odf-chain lineage DIR total --upstream",
            "odf-chain lineage DIR --format svg -o lineage.svg",
        ),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument(
        "field", nargs="?", metavar="FIELD", help="a plain name (total, address.city) or a v2 path"
    )
    parser.add_argument("--at", default="head", metavar="REF", help=REF_HELP)
    parser.add_argument("--verified", action="store_true", help=VERIFIED_HELP)
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        help="FIELD is a field of this input (its location, URI, dataset id, or the name a run "
        "gave it) rather than of DIR: how to ask where an input's field went",
    )
    parser.add_argument("--upstream", action="store_true", help="the fields FIELD comes from")
    parser.add_argument("--downstream", action="store_true", help="the fields FIELD goes to")
    parser.add_argument(
        "--depth",
        metavar="N",
        help="steps for --upstream/--downstream: 1 by default, 0 or 'all' for all the way",
    )
    parser.add_argument(
        "--offset", type=int, metavar="N", help="which run wrote record N of this dataset"
    )
    parser.add_argument(
        "--format",
        choices=["text", "json", "dot", "svg"],
        help="text (default), json, dot (Graphviz source) or svg (needs Graphviz's dot)",
    )
    parser.add_argument("--json", action="store_true", help="same as --format json")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE, not stdout")
    parser.add_argument(
        "--emit",
        action="store_true",
        help="send the OpenLineage events DIR's outbox holds (those a write could not deliver) "
        "to the configured backend (OPENLINEAGE_URL, OPENLINEAGE__TRANSPORT__*, openlineage.yml); "
        "exit 1 if some are left",
    )
    parser.set_defaults(run=run)


def _depth(text: str | None) -> int | None:
    """--depth: N >= 1 steps; 0 or 'all' for all the way."""
    if text is None:
        return 1
    if text.strip().lower() == "all":
        return None
    try:
        depth = int(text)
    except ValueError:
        raise UsageError(f"--depth takes a number of steps, 0 or 'all', not {text!r}") from None
    if depth < 0:
        raise UsageError(f"--depth takes a number of steps, 0 or 'all', not {text!r}")
    return None if depth == 0 else depth


def _format(args: argparse.Namespace) -> str:
    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json and --format {args.format} ask for two different outputs")
    return "json" if args.json else (args.format or "text")


def _check_usage(args: argparse.Namespace, output: str) -> None:
    direction = args.upstream or args.downstream
    if args.upstream and args.downstream:
        raise UsageError("--upstream and --downstream ask two questions: choose one")
    if args.field is None:
        for flag, given in (
            ("--upstream", args.upstream),
            ("--downstream", args.downstream),
            ("--depth", args.depth is not None),
            ("--dataset", args.dataset is not None),
        ):
            if given:
                raise UsageError(f"{flag} needs a FIELD")
    if args.depth is not None and not direction:
        raise UsageError("--depth needs --upstream or --downstream")
    if args.offset is not None:
        if direction:
            raise UsageError("--offset asks about a record: no --upstream or --downstream")
        if output in ("dot", "svg"):
            raise UsageError(f"--offset has no picture: use text or json, not {output}")


def _emit(text: str | bytes, output_file: str | None) -> None:
    if output_file is None:
        if isinstance(text, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(text)
        else:
            sys.stdout.write(text)
        return
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    with open(output_file, "wb") as out:
        out.write(data)


def _send(args: argparse.Namespace) -> int:
    """``--emit``: the outbox sent, and how many events went and stayed."""
    given = [
        flag
        for flag, value in (
            ("FIELD", args.field),
            ("--at", args.at != "head"),
            ("--verified", args.verified),
            ("--dataset", args.dataset),
            ("--upstream", args.upstream),
            ("--downstream", args.downstream),
            ("--depth", args.depth),
            ("--offset", args.offset is not None),
            ("--format", args.format),
            ("--json", args.json),
            ("-o", args.output),
        )
        if value
    ]
    if given:
        raise UsageError(f"--emit sends the outbox: no {', '.join(given)}")
    from odf_chain.dataset import Dataset
    from odf_chain.emit import send_outbox  # the OpenLineage client: only when asked for

    result = send_outbox(Dataset.open(args.dir).storage)
    print(f"{len(result.sent)} OpenLineage event(s) sent, {result.left} left in the outbox")
    if result.left:
        print(f"odf-chain: not sent: {result.error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    if args.emit:
        return _send(args)
    from odf_chain.dataset import Dataset
    from odf_chain.views import lineage as lineage_view

    output = _format(args)
    _check_usage(args, output)
    direction = "upstream" if args.upstream else "downstream" if args.downstream else None
    depth = _depth(args.depth) if direction else None
    dataset = Dataset.open(args.dir)
    state = dataset.state_at(args.at, verified=args.verified)
    view = lineage_view.LineageView.build(
        dataset.lineage(state.head, verified=args.verified),
        dataset.location,
        state.sequence_number,
        str(state.head),
    )
    field = None if args.field is None else view.field(args.field, args.dataset)
    if output in ("dot", "svg"):
        return _picture(args, output, view, field, direction, depth)

    if args.offset is not None:
        doc = lineage_view.offset_json(view, args.offset, field=field)
        lineage_view.add_consumed(doc, dataset)
        text = lineage_view.offset_text
    elif field is None:
        doc = lineage_view.graph_json(view)
        text = lineage_view.graph_text
    elif direction is None:
        doc = lineage_view.summary_json(view, field)
        text = lineage_view.summary_text
    else:
        doc = lineage_view.reached_json(view, field, direction, depth)
        text = lineage_view.reached_text
    if output == "json":
        _emit(json.dumps(doc, indent=2) + "\n", args.output)
    else:
        _emit(text(doc), args.output)
    return EXIT_OK


def _picture(args, output, view, field, direction, depth) -> int:
    """``--format dot|svg``: the DOT text, or its SVG; without Graphviz, the DOT text (never
    under the SVG's name) and exit 1."""
    from odf_chain.views import lineage as lineage_view, lineage_dot

    if field is None:
        dot = lineage_dot.dot_text(view)
    else:
        nodes, dropping = lineage_dot.neighbourhood(view, field, direction, depth)
        dot = lineage_dot.dot_text(view, nodes, dropping, highlight=field)
    for warning in lineage_view.warnings(view):  # the DOT text has no room for them
        print(f"odf-chain: {warning}", file=sys.stderr)
    if output == "dot":
        _emit(dot, args.output)
        return EXIT_OK
    binary = shutil.which("dot")
    if binary is None:  # no SVG: the DOT text instead, never under the SVG's name
        if args.output is None:
            instead = "this is the DOT text instead of SVG"
        else:
            svg_path = Path(args.output)
            dot_path = svg_path.with_suffix(".dot")
            if dot_path == svg_path:
                dot_path = svg_path.with_name(svg_path.name + ".dot")
            instead = f"wrote the DOT text to {dot_path} instead of SVG to {svg_path}"
        print(
            f"odf-chain: Graphviz is not installed (no 'dot' on PATH), so {instead}; "
            f"install it with {lineage_dot.GRAPHVIZ_INSTALL}",
            file=sys.stderr,
        )
        _emit(dot, None if args.output is None else str(dot_path))
        return EXIT_FAILED
    _emit(lineage_dot.svg_from_dot(dot, binary), args.output)
    return EXIT_OK
