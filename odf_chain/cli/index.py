"""``odf-chain index``: check the derived index, repairing it if needed."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import DIR_HELP, EXIT_OK, examples


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "index",
        help="check the derived index (info/odf-chain-index/), repairing it if needed",
        description="Check the derived index that answers states, schemas and lineage quickly "
        "(info/odf-chain-index/) against the chain, and rebuild it when it does not check out. "
        "The index is never trusted: every reader checks it; this only saves the next reader "
        "the rebuild.",
        epilog=examples("odf-chain index DIR", "odf-chain index DIR --rebuild"),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="rebuild it from the chain (one full fold, every rule)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.index.read import check_index

    report = check_index(args.dir, from_scratch=args.rebuild)
    print(report.line())
    return EXIT_OK
