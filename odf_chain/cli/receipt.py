"""``odf-chain receipt``: a JSON receipt of the head, to verify the chain against later."""

from __future__ import annotations

import argparse
import sys

from odf_chain.cli.common import DIR_HELP, EXIT_OK, examples


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "receipt",
        help="a JSON receipt of the head, to verify the chain against later (--receipt)",
        description="A receipt of the head block (its hash, sequence number, time and the "
        "dataset's id), optionally signed with the dataset's key: kept elsewhere, it lets "
        "'chain-verify --receipt' prove later that the chain was only appended to since.",
        epilog=examples(
            "odf-chain receipt DIR > receipt.json",
            "odf-chain receipt DIR --key-file key.pem -o receipt.json",
        ),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (must be new), not stdout"
    )
    parser.add_argument(
        "--key-file", metavar="FILE", help="sign with the dataset's key (from init --key-file)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.receipt import write_receipt

    taken = Dataset.open(args.dir).receipt(key_file=args.key_file)
    if args.output is None:
        sys.stdout.write(taken.to_json())
        return EXIT_OK
    write_receipt(taken, args.output)
    signed = "signed" if taken.signature is not None else "unsigned"
    print(
        f"wrote {signed} receipt of block {taken.sequence_number} {taken.block_hash} "
        f"to {args.output}"
    )
    return EXIT_OK
