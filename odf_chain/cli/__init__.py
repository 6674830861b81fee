"""The ``odf-chain`` and ``chain-verify`` commands.

Each command is one module: its arguments (``add_parser``) beside its handler (``run``), one
library call plus formatting. What they share is :mod:`.common`. Exit codes:

- 0: done;
- 1: the answer is "no": ``verify`` found the dataset broken, ``schema check`` found the two
  schemas incompatible, ``lineage --format svg`` had no Graphviz (and wrote the DOT text);
- 2: an error the user can fix: every :class:`OdfChainError` (a missing dataset, a bad ref, a
  damaged block) and every usage error (an unknown command or option, a missing argument, a bad
  number), each one line on stderr, a usage error with one ``try: ... --help`` line after it;
- 3: a bug of odf_chain's, one line too (``ODF_CHAIN_DEBUG=1`` shows its traceback);
- 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from odf_chain.cli import (
    audit,
    completion,
    derive,
    diff,
    export,
    fields,
    gc,
    index,
    ingest,
    init,
    lineage,
    log,
    receipt,
    schema,
    verify,
)
from odf_chain.cli.common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    REF_HELP,
    VERIFIED_HELP,
    Parser,
    UsageError,
    needs_spark,
    parse,
    run_command as _run,
    tolerant_stdout,
    top_parser,
)
from odf_chain.cli.ingest import start_spark as _spark_session

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "REF_HELP",
    "VERIFIED_HELP",
    "UsageError",
    "build_parser",
    "chain_verify_main",
    "chain_verify_parser",
    "main",
]

COMMANDS = (
    init, log, diff, index, schema, fields, ingest, derive, gc, export, lineage, receipt, verify,
    audit, completion,
)  # fmt: skip
"""The commands in the order ``odf-chain --help`` lists them.

Each command module is light to import (argparse and :mod:`.common`): what its handler needs
(the library, pyarrow, Spark) the handler imports when it runs. So ``--version`` and ``--help``
load no library module and each command loads only its own (tests/test_install.py holds this;
tools/bench_cli_startup.py measures it)."""


def build_parser() -> argparse.ArgumentParser:
    parser = top_parser()
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    completion.complete(parser)  # a shell asking for completions gets them, and nothing runs
    tolerant_stdout()
    args = parse(parser, argv)
    if needs_spark(args):
        return EXIT_ERROR
    if hasattr(args, "start_spark"):
        # ingest starts Spark by this module's _spark_session, looked up at each call, so a
        # caller can lend it a running session instead (tests/cli_run.py replaces it)
        args.start_spark = _spark_session
    return _run(args.run, args)


def chain_verify_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="chain-verify",
        description="Prove that a dataset's blocks and data are intact and every rule holds "
        "(same as 'odf-chain verify').",
    )
    verify.add_arguments(parser)
    return parser


def chain_verify_main(argv: Sequence[str] | None = None) -> int:
    parser = chain_verify_parser()
    completion.complete(parser)
    tolerant_stdout()
    args = parse(parser, argv)
    if needs_spark(args, prog="chain-verify"):
        return EXIT_ERROR
    args.start_spark = _spark_session  # for --reproduce (see main)
    return _run(verify.run, args)
