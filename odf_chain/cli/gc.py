"""``odf-chain gc``: remove the leftovers of interrupted or losing writers."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import DIR_HELP, EXIT_OK, examples
from odf_chain.errors import OdfChainError
from odf_chain.gc_age import DEFAULT_MIN_AGE, check_min_age


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "gc",
        help="remove leftovers of interrupted or losing writers",
        description="Remove what interrupted or losing writers left behind: staged files, "
        "blocks no chain reaches, slices no block names. Only leftovers older than --min-age "
        "go, so a writer still at work keeps its files.",
        epilog=examples("odf-chain gc DIR --dry-run", "odf-chain gc DIR --min-age 3600"),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument(
        "--min-age",
        type=_seconds,
        default=DEFAULT_MIN_AGE,
        metavar="SECONDS",
        help=f"only remove leftovers at least this old (default {DEFAULT_MIN_AGE:g})",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed")
    parser.add_argument(
        "--discard-uncommitted",
        action="append",
        metavar="HASH",
        help="also remove this block, which descends from the head but was never committed "
        "(a crashed writer's; verify lists them); repeatable; a block once the head is refused",
    )
    parser.add_argument(
        "--single-writer",
        action="store_true",
        help="nothing else writes to the dataset meanwhile: lets --min-age go below the "
        "default on storage without a head lock (object stores)",
    )
    parser.set_defaults(run=run)


def _seconds(text: str) -> float:
    """A ``--min-age``: float() also takes 'nan', 'inf' and negative numbers, which no age
    is."""
    try:
        return check_min_age(float(text))
    except (ValueError, OdfChainError):
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds (0 or more), not {text!r}"
        ) from None


def run(args: argparse.Namespace) -> int:
    from odf_chain.gc import collect_garbage_path

    result = collect_garbage_path(
        args.dir,
        min_age=args.min_age,
        dry_run=args.dry_run,
        discard_uncommitted=args.discard_uncommitted or (),
        single_writer=args.single_writer,
    )
    verb = "would remove" if args.dry_run else "removed"
    for path in result.removed:
        print(f"{verb} {path}")
    for kept in result.kept:
        print(f"kept {kept.path} ({kept.why()})")
    print(
        f"{verb} {len(result.removed)} leftovers, {result.bytes_freed:,} bytes; "
        f"kept {len(result.kept)}"
    )
    return EXIT_OK
