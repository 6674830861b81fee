"""The ``odf-chain`` and ``chain-verify`` commands.

Each command is one library call plus formatting. Every :class:`OdfChainError` becomes one line
on stderr and exit code 2; ``verify`` exits 1 when the dataset fails verification.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

from odf_chain.dataset import Dataset
from odf_chain.errors import OdfChainError
from odf_chain.format.multihash import BLAKE3, SHA3_256
from odf_chain.render import block_to_jsonable, log_line, state_to_jsonable
from odf_chain.verify import verify_path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def cmd_init(args: argparse.Namespace) -> int:
    dataset = Dataset.create(args.dir, hash=args.hash)
    state = dataset.state
    print(f"created {dataset.path}")
    print(f"dataset id  {state.dataset_id}")
    print(f"hash        {state.hash_algorithm}")
    print(f"head        {state.head}")
    return EXIT_OK


def cmd_log(args: argparse.Namespace) -> int:
    entries = Dataset.open(args.dir).blocks()
    entries.reverse()  # newest first, like git log
    if args.json:
        _print_json([block_to_jsonable(e) for e in entries])
    else:
        for entry in entries:
            print(log_line(entry))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    state = Dataset.open(args.dir).state_at(args.at)
    if args.json:
        _print_json(state_to_jsonable(state))
        return EXIT_OK
    print(f"block {state.sequence_number}  {state.head}")
    if state.schema is None:
        print("no schema declared yet")
        return EXIT_OK
    print(f"schema set at block {state.schema_sequence_number}")
    print(state.schema.to_string(show_schema_metadata=False))
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    report = verify_path(args.dir, check_data=not args.no_data)
    if args.json:
        _print_json(report.to_dict())
    else:
        for problem in report.problems:
            print(problem.line())
        verdict = "OK" if report.ok else "FAILED"
        print(
            f"{verdict}: {report.blocks_checked} blocks, {report.slices_checked} slices, "
            f"{report.bytes_hashed:,} bytes hashed, {len(report.errors)} errors, "
            f"{len(report.warnings)} warnings; head {report.head}"
        )
    return EXIT_OK if report.ok else EXIT_FAILED


def _add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="dataset directory")
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--no-data", action="store_true", help="check blocks and rules only, not data files"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="odf-chain",
        description="Tamper-evident ODF metadata chains next to Parquet data slices.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser("init", help="create a dataset (writes the Seed block)")
    init.add_argument("dir", help="dataset directory to create")
    init.add_argument(
        "--hash",
        choices=[BLAKE3, SHA3_256],
        default=BLAKE3,
        help="hash for blocks and slices (sha3-256 for ODF interoperability)",
    )
    init.set_defaults(run=cmd_init)

    log = commands.add_parser("log", help="list blocks, newest first")
    log.add_argument("dir", help="dataset directory")
    log.add_argument("--json", action="store_true", help="full blocks as JSON")
    log.set_defaults(run=cmd_log)

    schema = commands.add_parser("schema", help="the data schema in force at a block")
    schema.add_argument("dir", help="dataset directory")
    schema.add_argument(
        "--at",
        default="head",
        metavar="REF",
        help="'head' (default), a block hash, a sequence number or an ISO-8601 time",
    )
    schema.add_argument("--json", action="store_true", help="state and schema as JSON")
    schema.set_defaults(run=cmd_schema)

    verify = commands.add_parser("verify", help="check blocks, rules and data (chain-verify)")
    _add_verify_arguments(verify)
    verify.set_defaults(run=cmd_verify)
    return parser


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except OdfChainError as exc:
        print(f"odf-chain: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `odf-chain log DIR | head`: the reader has seen enough
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps interpreter exit quiet
        return EXIT_OK
    except OSError as exc:  # unreadable paths, permissions, full disks
        print(f"odf-chain: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("odf-chain: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _run(args.run, args)


def chain_verify_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="chain-verify",
        description="Prove that a dataset's blocks and data are intact and every rule holds "
        "(same as 'odf-chain verify').",
    )
    _add_verify_arguments(parser)
    return _run(cmd_verify, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
