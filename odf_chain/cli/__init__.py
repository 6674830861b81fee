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
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from odf_chain.cli import completion
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

COMMAND_NAMES = (
    "init", "log", "diff", "index", "schema", "fields", "ingest", "derive", "gc", "export",
    "lineage", "receipt", "verify", "audit", "completion",
)  # fmt: skip
"""The commands in the order ``odf-chain --help`` lists them; each is the module
``odf_chain.cli.<name>`` (``add_parser`` beside ``run``).

Each command module is light to import (argparse and :mod:`.common`): what its handler needs
(the library, pyarrow, Spark) the handler imports when it runs. And a command line that names
its command builds that command's parser only. So ``--version`` and ``--help`` load no library
module and each command loads only its own (tests/test_install.py holds this;
tools/bench_cli_startup.py measures it)."""


def _command(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def __getattr__(name: str) -> Any:
    """``COMMANDS``: every command's module, in ``--help`` order (imported when asked for)."""
    if name == "COMMANDS":
        return tuple(_command(n) for n in COMMAND_NAMES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser(only: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``odf-chain`` parser with every command, or with the commands ``only`` (what a
    command line naming one needs: the other commands' modules stay unimported)."""
    parser = top_parser()
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_NAMES if only is None else only:
        _command(name).add_parser(commands)
    return parser


def _spark_session(master: str | None):
    """Start the CLI's Spark session (looked up at each call, so a caller can lend a running
    session instead: tests/cli_run.py replaces this name)."""
    from odf_chain.cli.ingest import start_spark

    return start_spark(master)


def _commands_needed(argv: Sequence[str] | None) -> tuple[str, ...] | None:
    """The commands whose parsers a command line needs: the one it names (its first word that
    is not an option, when it is one of ours), none for ``--version`` alone, and None (every
    one) for anything else: help, a mistyped command, a shell asking for completions."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words == ["--version"]:
        return ()
    first = next((w for w in words if not w.startswith("-")), None)
    return (first,) if first in COMMAND_NAMES else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(_commands_needed(argv))
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
    from odf_chain.cli import verify

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
    from odf_chain.cli import verify

    return _run(verify.run, args)
