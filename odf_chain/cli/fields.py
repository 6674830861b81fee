"""``odf-chain fields``: the DataHub v2 field paths at a block."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from odf_chain.cli.common import DIR_HELP, EXIT_OK, REF_HELP, VERIFIED_HELP, examples, print_json

if TYPE_CHECKING:
    from odf_chain.schema.fields import FieldInfo


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "fields",
        help="DataHub v2 field paths at a block",
        description="Every field of the schema in force at a block, nested ones included, by "
        "its DataHub v2 field path, with its type and nullability (docs/field-paths.md).",
        epilog=examples("odf-chain fields DIR", "odf-chain fields DIR --at 3 --json"),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument("--at", default="head", metavar="REF", help=REF_HELP)
    parser.add_argument("--verified", action="store_true", help=VERIFIED_HELP)
    parser.add_argument("--json", action="store_true", help="paths, types and nullability as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset

    state = Dataset.open(args.dir).state_at(args.at, verified=args.verified)
    fields = state.fields
    if args.json:
        print_json(
            {
                "block": state.sequence_number,
                "head": str(state.head),
                "fields": [dataclasses.asdict(f) for f in fields],
            }
        )
        return EXIT_OK
    print(f"block {state.sequence_number}  {state.head}")
    if state.schema is None:
        print("no schema declared yet")
        return EXIT_OK
    _print_fields(fields)
    return EXIT_OK


def _print_fields(fields: list[FieldInfo]) -> None:
    width = max((len(f.path) for f in fields), default=len("PATH"))
    print(f"{'PATH':<{width}}  {'TYPE':<8}  {'VALUES':<8}  NATIVE TYPE")
    for f in fields:
        flag = "nullable" if f.nullable else "required"
        print(f"{f.path:<{width}}  {f.type:<8}  {flag:<8}  {f.native_type}")
