"""``odf-chain diff``: what changed between two blocks (:mod:`odf_chain.views.diff`)."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import DIR_HELP, EXIT_OK, REF_HELP, examples, print_json


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "diff",
        help="what changed between two blocks: schema, rows, vocabulary, lineage runs",
        description="What the blocks after A, up to and including B, changed: fields added, "
        "removed or retyped (v2 paths, as 'schema' and 'fields' name them), rows, slices and "
        "bytes added, the watermark, vocabulary, SetInfo and SetLicense, and the lineage runs, "
        "transactions and derive runs recorded in between. Only what changed is printed.\n\n"
        "A must not come after B (a chain only grows): the older block first.",
        epilog=examples(
            "odf-chain diff DIR 2 5            # blocks 3, 4 and 5",
            "odf-chain diff DIR 3c379ddcdb85   # from that block to the head",
            "odf-chain diff DIR 2026-11-24T00:00:00Z head --json",
        ),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument("a", metavar="A", help=f"the older block: {REF_HELP}")
    parser.add_argument(
        "b", metavar="B", nargs="?", default="head", help="the newer block (default: head)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.views.diff import diff_blocks, diff_lines

    dataset = Dataset.open(args.dir)
    diff = diff_blocks(dataset.storage, args.a, args.b)
    if args.json:
        print_json(diff.to_json())
        return EXIT_OK
    for line in diff_lines(diff):
        print(line)
    return EXIT_OK
