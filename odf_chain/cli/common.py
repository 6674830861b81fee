"""What every command shares: exit codes, the help texts several commands repeat, the parser
class whose errors are one line, the mapping of an error to one line and an exit code, and
the printing helpers.

The commands import this module and nothing else of the CLI's; it imports none of them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

from odf_chain import __version__
from odf_chain.errors import OdfChainError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

DIR_HELP = "dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"

REF_HELP = (
    "'head' (default), a block hash or a unique prefix of one (the short hash 'log' prints; "
    "6 hex digits or more), a sequence number or an ISO-8601 time (the last block at or "
    "before it)"
)

VERIFIED_HELP = (
    "answer from one full fold of the chain walked back from its head, taking nothing from the "
    "derived index (slower: O(chain length))"
)

SINGLE_WRITER_HELP = (
    "allow writing on a filesystem without conditional writes (HDFS, say): you "
    "promise no other writer writes this dataset meanwhile (s3://, gs:// and abfs:// "
    "need no promise: the head moves by compare-and-swap)"
)


SPARK_INSTALL = "pip install 'odf_chain[spark]'"

SPARK_COMMANDS = ("ingest", "derive")
"""The commands that always run Spark; ``verify --reproduce`` runs it too."""


def needs_spark(args: argparse.Namespace, prog: str = "odf-chain") -> bool:
    """True, after one line on stderr naming the extra to install, when the command ``args``
    chose runs Spark and PySpark is not installed (``pip install odf_chain`` leaves it out)."""
    command = getattr(args, "command", None)
    if command in SPARK_COMMANDS:
        what = f"'{prog} {command}'"
    elif getattr(args, "reproduce", False):
        what = f"'{prog} {command or ''}{' ' if command else ''}--reproduce'"
    else:
        return False
    from importlib.util import find_spec

    if find_spec("pyspark") is not None:
        return False
    print(f"{prog}: error: {what} needs PySpark, not installed: {SPARK_INSTALL}", file=sys.stderr)
    return True


def _spark_module(name: str | None) -> bool:
    return (name or "").split(".")[0] in ("pyspark", "py4j")


class UsageError(OdfChainError):
    """A command line that does not make sense."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, with paragraphs (split by blank lines) filled one by one and those
    whose lines are indented (examples, lists) kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            if any(line.startswith(" ") for line in paragraph.splitlines()):
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                paragraphs.append(super()._fill_text(paragraph, width, indent))
        return "\n\n".join(paragraphs)


def examples(*lines: str) -> str:
    """An ``epilog``: the lines under ``examples:``, each a command line or a ``# comment``."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as the CLI's other errors: one line (and a hint), exit 2.
    Subparsers are made of the same class (``add_subparsers`` takes the parent's), and all
    use :class:`HelpFormatter`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\ntry: {self.prog} --help\n")


def top_parser() -> Parser:
    """``odf-chain`` without its commands: its description and ``--version``."""
    parser = Parser(
        prog="odf-chain",
        description="Tamper-evident ODF metadata chains next to Parquet data slices.",
    )
    parser.add_argument("--version", action="version", version=f"odf-chain {__version__}")
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parse_args``, with arguments the command does not take reported by that command's
    parser (argparse reports them as the top-level program's, whose --help does not list
    them)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    args.prog = parser.prog  # the program's name for run_command's messages
    return args


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The parser of the (sub)command ``args`` chose: the one whose --help explains it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None))
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def run_command(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``handler(args)``'s exit code, every error it raises turned into one line on stderr
    and its exit code (the list in :mod:`odf_chain.cli`). The lines begin with the name of the
    program run (``args.prog``, set by :func:`parse`: ``odf-chain`` or ``chain-verify``)."""
    from odf_chain import progress  # (not at the top: --version and --help load no library)

    prog = getattr(args, "prog", None) or "odf-chain"
    listening = progress.LISTENER.set(terminal_progress())
    try:
        return handler(args)
    except OdfChainError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):  # at most one: where to look next
            print(f"hint: {note}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `odf-chain log DIR | head`: the reader has seen enough
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps interpreter exit quiet
        return EXIT_OK
    except OSError as exc:  # unreadable paths, permissions, full disks
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: still one line, the traceback on request
        if isinstance(exc, ModuleNotFoundError) and _spark_module(exc.name):
            # a Spark path needs_spark did not foresee: the install, not a bug
            print(f"odf-chain: error: this needs PySpark: {SPARK_INSTALL}", file=sys.stderr)
            return EXIT_ERROR
        if os.environ.get("ODF_CHAIN_DEBUG"):
            raise
        detail = str(exc).strip().splitlines()
        print(
            f"{prog}: internal error: {type(exc).__name__}"
            f"{': ' + detail[0] if detail else ''} (a bug in odf_chain; "
            "ODF_CHAIN_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        for note in getattr(exc, "__notes__", ()):
            print(f"hint: {note}", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        progress.LISTENER.reset(listening)


def tolerant_stdout() -> None:
    """Field names can be any Unicode; a terminal that cannot show them gets escapes, not a
    UnicodeEncodeError halfway through a listing."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def terminal_phases(stream: TextIO | None = None) -> Callable[[str], None] | None:
    """On a terminal, a function that prints each phase of the command as it starts (one line
    on stderr: the seconds since the command began, and what it does now); None elsewhere, so
    what a pipe or a file gets is only the report at the end."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        return None
    began = time.monotonic()

    def phase(what: str) -> None:
        print(f"{time.monotonic() - began:6.1f}s  {what}", file=stream, flush=True)

    return phase


def terminal_progress(stream: TextIO | None = None) -> Callable[[str, bool], None] | None:
    """On a terminal, how a long operation nobody asked for goes (an index rebuild): each
    step on its own line of stderr, a running count rewritten in place; None elsewhere."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        return None
    began = time.monotonic()

    def show(what: str, done: bool) -> None:
        line = f"{time.monotonic() - began:6.1f}s  {what}"
        print(f"\r\x1b[K{line}", end="\n" if done else "", file=stream, flush=True)

    return show


def count(n: int, noun: str) -> str:
    """``1 block``, ``2 blocks``, ``1,024 bytes``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def alias_locations(given: Sequence[str] | None) -> dict[str, str]:
    """``--input ALIAS=DIR`` arguments (derive, verify --reproduce) as alias -> location; a
    malformed one or an alias given twice is a usage error."""
    found: dict[str, str] = {}
    for item in given or ():
        alias, sep, location = item.partition("=")
        if not sep or not alias or not location:
            raise UsageError(f"--input {item!r}: expected ALIAS=DIR")
        if alias in found:
            raise UsageError(f"--input: alias {alias!r} given twice")
        found[alias] = location
    return found
