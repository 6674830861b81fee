"""``odf-chain audit``: verify a dataset and write one self-contained HTML page an auditor can
open or attach (verdict, blocks, schema history, lineage picture, upstream pins, receipts).

Exit codes are ``chain-verify``'s: the page is written either way, and the status says whether
the dataset checked out (0) or not (1), so a pipeline can gate on it and keep the page.
"""

from __future__ import annotations

import argparse
import sys

from odf_chain.cli.common import (
    DIR_HELP,
    EXIT_FAILED,
    EXIT_OK,
    REF_HELP,
    UsageError,
    alias_locations,
    count,
    examples,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "audit",
        help="verify, and write one self-contained HTML report for an auditor",
        description="Verify DIR (as chain-verify does) and write one HTML page with no "
        "external resources: the verdict with every problem, a timeline of blocks, the schema "
        "history, the field-lineage graph, upstream pins and the receipts checked. "
        "Exit status as chain-verify's: 0 OK, 1 verify failed, 2 usage or input error.",
        epilog=examples(
            "odf-chain audit data/orders -o report.html",
            "odf-chain audit data/orders --deep --receipt r1.json --receipt r2.json -o report.html",
            "odf-chain audit data/daily --reproduce -o daily.html   # re-runs every derive run",
        ),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write the page to FILE (default: stdout)"
    )
    parser.add_argument(
        "--at", default="head", metavar="REF", help="the block the report describes: " + REF_HELP
    )
    parser.add_argument(
        "--receipt",
        action="append",
        metavar="FILE",
        help="a receipt (odf-chain receipt) whose block the chain must still hold; repeatable",
    )
    parser.add_argument("--deep", action="store_true", help="also read every row (verify --deep)")
    parser.add_argument(
        "--reproduce",
        action="store_true",
        help="re-run every derive run (Spark) and compare (verify --reproduce)",
    )
    parser.add_argument(
        "--input",
        action="append",
        metavar="ALIAS=DIR",
        help="with --reproduce: open input ALIAS at DIR; repeatable",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master for --reproduce")
    parser.set_defaults(run=run, start_spark=None)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.views.audit import build_audit
    from odf_chain.views.audit_html import render_html

    if args.input and not args.reproduce:
        raise UsageError("--input goes with --reproduce")
    moved = alias_locations(args.input)
    dataset = Dataset.open(args.dir)
    session = args.start_spark(args.master) if args.reproduce else None
    try:
        report = build_audit(
            dataset,
            at=args.at,
            receipts=args.receipt or (),
            deep=args.deep,
            reproduce=args.reproduce,
            spark=None if session is None else session.spark,
            inputs=moved,
        )
    except BaseException as exc:
        if session is not None and session.stop(failed=True) and isinstance(exc, Exception):
            exc.add_note(session.hint())
        raise
    if session is not None:
        session.stop(failed=False)
    page = render_html(report)
    if args.output is None:
        sys.stdout.write(page)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(page)
        verdict = report.verdict
        word = "OK" if verdict.ok else "FAILED"
        print(
            f"{word}: {count(verdict.errors, 'error')}, {count(verdict.warnings, 'warning')}; "
            f"wrote {args.output}"
        )
    return EXIT_OK if report.verdict.ok else EXIT_FAILED
