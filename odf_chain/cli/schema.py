"""``odf-chain schema``: the schema at a block, its history, or a compatibility check of two
schema files."""

from __future__ import annotations

import argparse
import dataclasses

from odf_chain.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    REF_HELP,
    VERIFIED_HELP,
    UsageError,
    count,
    examples,
    print_json,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "schema",
        help="the schema at a block, its history, or a compatibility check of two schema files",
        usage="odf-chain schema DIR [--at REF | --history] [--json]\n"
        "       odf-chain schema check OLD NEW [--table NAME] [--json]",
        description="The schema in force at a block; with --history, every SetDataSchema as "
        "the fields it adds, removes or changes (v2 paths; the first one as the fields it "
        "declares); 'schema check OLD NEW': whether a dataset with schema OLD may evolve to NEW "
        "(exit 1 if not). Schema files: .avsc (Avro), .json (DataMine) or .parquet.",
        epilog=examples(
            "odf-chain schema DIR --at 3",
            "odf-chain schema DIR --history",
            "odf-chain schema check old.avsc new.avsc",
        ),
    )
    parser.add_argument("target", nargs="+", metavar="DIR | check OLD NEW")
    parser.add_argument("--at", default="head", metavar="REF", help=REF_HELP)
    parser.add_argument("--verified", action="store_true", help=VERIFIED_HELP)
    parser.add_argument(
        "--history",
        action="store_true",
        help="every SetDataSchema, as the fields it adds, removes or changes",
    )
    parser.add_argument("--table", help="which table of DataMine documents (check)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.views.blocks import state_to_jsonable

    if args.target[0] == "check":
        return _check(args)
    if len(args.target) != 1:
        raise UsageError("usage: odf-chain schema DIR [--at REF] | schema check OLD NEW")
    directory = args.target[0]
    if args.history:
        return _history(directory, args.json, args.verified)
    state = Dataset.open(directory).state_at(args.at, verified=args.verified)
    if args.json:
        print_json(state_to_jsonable(state))
        return EXIT_OK
    print(f"block {state.sequence_number}  {state.head}")
    if state.schema is None:
        print("no schema declared yet")
        return EXIT_OK
    print(f"schema set at block {state.schema_sequence_number}")
    print(state.schema.to_string(show_schema_metadata=False))
    return EXIT_OK


def _history(directory: str, as_json: bool, verified: bool) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.views.blocks import schema_to_jsonable

    history = Dataset.open(directory).schema_history(verified=verified)
    if as_json:
        print_json(
            [
                {
                    "block": change.entry.block.sequence_number,
                    "hash": str(change.entry.hash),
                    "system_time": change.entry.block.system_time.isoformat(),
                    "fields": schema_to_jsonable(change.schema),
                    "diff": None if change.diff is None else dataclasses.asdict(change.diff),
                }
                for change in history
            ]
        )
        return EXIT_OK
    if not history:
        print("no schema declared yet")
    for change in history:
        block = change.entry.block
        print(
            f"block {block.sequence_number}  {change.entry.hash}  {block.system_time.isoformat()}"
        )
        # one form for every version: fields added, removed or changed, by v2 path; the first
        # version adds every field (nested ones after their parents)
        if change.diff is None:
            from odf_chain.schema.paths import schema_fields

            print(f"  initial schema: {count(len(change.schema), 'field')}")
            for info in schema_fields(change.schema):
                print(f"  + {info.path}")
        for line in change.diff.lines() if change.diff is not None else ():
            print(f"  {line}")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from odf_chain.schema.evolution import check_evolution, diff_schemas
    from odf_chain.schema_files import load_schema_file

    if len(args.target) != 3:
        raise UsageError("usage: odf-chain schema check OLD NEW")
    old = load_schema_file(args.target[1], table=args.table)
    new = load_schema_file(args.target[2], table=args.table)
    violations = check_evolution(old, new)
    diff = diff_schemas(old, new)
    if args.json:
        print_json(
            {
                "compatible": not violations,
                "violations": [dataclasses.asdict(v) for v in violations],
                "diff": dataclasses.asdict(diff),
            }
        )
    else:
        for line in diff.lines():
            print(line)
        for violation in violations:
            print(f"VIOLATION [{violation.rule}] {violation}")
        print("compatible" if not violations else f"incompatible: {len(violations)} violation(s)")
    return EXIT_OK if not violations else EXIT_FAILED
