"""``odf-chain verify`` and ``chain-verify``: check blocks, rules and data, and say what is
wrong, one line each."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import (
    DIR_HELP,
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    alias_locations,
    count,
    examples,
    print_json,
)

VERIFY_DESCRIPTION = (
    "Prove that a dataset's blocks and data are intact and every rule holds: each block "
    "against its hash and its predecessor, every rule over the whole chain, every data file "
    "against its hash. Exit 0: intact; 1: broken (each problem named with its block); 2: an "
    "error (no dataset there, a bad argument)."
)
VERIFY_EXAMPLES = examples(
    "odf-chain verify DIR                        # or: chain-verify DIR",
    "odf-chain verify DIR --json > report.json",
    "odf-chain verify DIR --receipt receipt.json # the chain still extends that receipt",
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "verify",
        help="check blocks, rules and data (chain-verify)",
        description=VERIFY_DESCRIPTION,
        epilog=VERIFY_EXAMPLES,
    )
    add_arguments(parser)
    parser.set_defaults(run=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``odf-chain verify``, which ``chain-verify`` takes too."""
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--no-data", action="store_true", help="check blocks and rules only, not data files"
    )
    parser.add_argument(
        "--receipt",
        action="append",
        metavar="FILE",
        help="a receipt (odf-chain receipt) whose block the chain must still hold; repeatable",
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help="also read every row: recompute each slice's logical hash, check its offset, op "
        "and system_time columns against its block",
    )
    parser.add_argument(
        "--reproduce",
        action="store_true",
        help="re-run every derive run (Spark) on the input rows it pinned and compare the "
        "answer with the dataset's rows at its block",
    )
    parser.add_argument(
        "--recursive",
        action="store_true",
        help="with --reproduce: reproduce derivative inputs too, upstream first",
    )
    parser.add_argument(
        "--input",
        action="append",
        metavar="ALIAS=DIR",
        help="with --reproduce: open input ALIAS at DIR instead of where the runs read it "
        "(its dataset id is still checked); repeatable",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master for --reproduce")
    parser.set_defaults(start_spark=None)


def run(args: argparse.Namespace) -> int:
    from odf_chain.verify import verify_path

    if args.deep and args.no_data:
        raise UsageError("--deep reads every row of the data: it cannot go with --no-data")
    if (args.recursive or args.input) and not args.reproduce:
        raise UsageError("--recursive and --input go with --reproduce")
    moved = alias_locations(args.input)
    report = verify_path(
        args.dir, check_data=not args.no_data, receipts=args.receipt or (), deep=args.deep
    )
    if args.reproduce:
        from odf_chain.dataset import Dataset
        from odf_chain.spark.reproduce import reproduce

        session = args.start_spark(args.master)
        try:
            reproduce(
                Dataset.open(args.dir),
                report,
                spark=session.spark,
                recursive=args.recursive,
                inputs=moved,
            )
        except BaseException as exc:
            if session.stop(failed=True) and isinstance(exc, Exception):
                exc.add_note(session.hint())
            raise
        session.stop(failed=False)
    if args.json:
        print_json(report.to_dict())
    else:
        for problem in report.problems:
            print(problem.line())
        for run in report.runs:
            print(run.line())
        verdict = "OK" if report.ok else "FAILED"
        rows = f"{count(report.rows_checked, 'row')} checked, " if report.deep else ""
        print(
            f"{verdict}: {count(report.blocks_checked, 'block')}, "
            f"{count(report.slices_checked, 'slice')}, {rows}"
            f"{count(report.bytes_hashed, 'byte')} hashed, {count(len(report.errors), 'error')}, "
            f"{count(len(report.warnings), 'warning')}; head {report.head}"
        )
        if report.receipts_checked:
            print(
                f"receipts: {report.receipts_held} of {report.receipts_checked} held by the "
                f"chain, {report.receipts_signed} with a valid signature"
            )
    return EXIT_OK if report.ok else EXIT_FAILED
