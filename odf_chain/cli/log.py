"""``odf-chain log``: blocks newest first, one line each (or full blocks as JSON)."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import DIR_HELP, EXIT_OK, examples, print_json


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "log",
        help="list blocks, newest first",
        description="Blocks newest first, one line each within 100 columns: sequence number, "
        "the block hash's first 12 hex digits after the header every block shares (a ref: give "
        "them to --at or diff), system time (UTC, ISO-8601), event and a summary cut to fit "
        "(what it added first: offsets and rows, then the transaction and the lineage run). "
        "Streams: a line is printed as its block is read.",
        epilog=examples(
            "odf-chain log DIR -n 5",
            "odf-chain log DIR --full       # whole hashes and summaries",
            "odf-chain log DIR --json | jq '.[0].event'",
        ),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="full blocks as JSON")
    parser.add_argument(
        "--full", action="store_true", help="whole block hashes and whole summaries (wide lines)"
    )
    parser.add_argument(
        "-n",
        "--max-count",
        type=_block_count,
        metavar="N",
        help="show only the N newest blocks (reads only those)",
    )
    parser.set_defaults(run=run)


def _block_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a number of blocks (0 or more), not {text!r}")
    return count


def run(args: argparse.Namespace) -> int:
    from odf_chain.chain import newest_first
    from odf_chain.storage import open_storage
    from odf_chain.views.blocks import block_to_jsonable, log_header, log_line

    # newest first, read as printed: the chain alone (no index, no fold), so it starts fast
    entries = newest_first(open_storage(args.dir), args.max_count)
    if args.json:
        print_json([block_to_jsonable(e) for e in entries])
        return EXIT_OK
    seq_width = None
    for entry in entries:
        if seq_width is None:  # the newest block has the widest sequence number
            seq_width = max(3, len(str(entry.block.sequence_number)))
            print(log_header(seq_width, full=args.full))
        print(log_line(entry, full=args.full, seq_width=seq_width))
    return EXIT_OK
