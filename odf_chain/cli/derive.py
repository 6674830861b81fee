"""``odf-chain derive``: bring a derivative dataset up to date with a Spark SQL query over
odf_chain datasets (see :func:`odf_chain.spark.derive`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from odf_chain.cli.common import EXIT_OK, UsageError, alias_locations, terminal_phases
from odf_chain.errors import NotFoundError
from odf_chain.format.algorithms import BLAKE3, SHA3_256

if TYPE_CHECKING:
    from odf_chain.dataset import Dataset

EPILOG = """example:
  odf-chain derive warehouse/daily-stats --create \\
      --input sensors=warehouse/sensors --input stations=warehouse/stations \\
      --sql 'SELECT s.region, COUNT(*) AS n FROM sensors r JOIN stations s USING (station)
             GROUP BY s.region'

Each run appends the difference between the answer in force and the new one (rows retracted
and appended), pinned to the exact input blocks and offsets it read; 'chain-verify --reproduce'
re-runs every run and compares."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "derive",
        help="run a Spark SQL query over datasets into a derivative dataset (ODF ExecuteTransform)",
        description="Run a Spark SQL query over odf_chain datasets and record its answer in a "
        "derivative dataset, pinned to the input blocks and offsets it read.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dir", metavar="OUTPUT", help="the derivative dataset's directory")
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--sql", help="the query (each input is a view under its alias)")
    query.add_argument("--sql-file", metavar="FILE", help="a file holding the query")
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="ALIAS=DIR",
        help="an input dataset and the view name the query reads it by; repeatable",
    )
    parser.add_argument("--create", action="store_true", help="create OUTPUT if missing")
    parser.add_argument(
        "--hash", choices=[BLAKE3, SHA3_256], default=BLAKE3, help="hash for a new dataset"
    )
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    parser.set_defaults(run=run, start_spark=None)


def _inputs(given: list[str]) -> dict[str, Dataset]:
    # opened before Spark starts: a typo costs no 15 s
    from odf_chain.dataset import Dataset

    return {alias: Dataset.open(where) for alias, where in alias_locations(given).items()}


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.spark.derivative import derive

    if args.sql_file is not None:
        try:
            sql = Path(args.sql_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--sql-file {args.sql_file}: {exc.strerror or exc}") from None
    else:
        sql = args.sql
    if not sql.strip():
        raise UsageError("the query is empty")
    inputs = _inputs(args.input)
    if not args.create:
        try:
            Dataset.open(args.dir)
        except NotFoundError as missing:
            raise NotFoundError(f"{missing}; pass --create to create it") from None
    phase = terminal_phases()  # on a terminal: what it does now (off one: the report alone)
    if phase is not None:
        phase("starting Spark")
    session = args.start_spark(args.master)
    try:
        result = derive(
            sql,
            inputs,
            args.dir,
            create=args.create,
            spark=session.spark,
            hash=args.hash,
            progress=phase,
        )
    except BaseException as exc:
        if session.stop(failed=True) and isinstance(exc, Exception):
            exc.add_note(session.hint())
        raise
    session.stop(failed=False)
    print(f"{args.dir}: {result.message}")
    for entry in result.blocks:
        print(f"  block {entry.block.sequence_number} {entry.hash} {entry.block.event_name}")
    if result.nondeterministic:
        print(
            "  not reproducible: the query uses "
            + "; ".join(result.nondeterministic)
            + " (chain-verify --reproduce will say so)"
        )
    return EXIT_OK
