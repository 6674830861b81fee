"""The ``odf-chain`` and ``chain-verify`` commands.

Each command is one library call plus formatting. Exit codes:

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
import dataclasses
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError, OdfChainError, SchemaError
from odf_chain.format.multihash import BLAKE3, SHA3_256
from odf_chain.gc import DEFAULT_MIN_AGE, check_min_age, collect_garbage_path
from odf_chain.index.read import check_index
from odf_chain.receipt import write_receipt
from odf_chain.schema.evolution import check_evolution, diff_schemas
from odf_chain.schema.fields import FieldInfo
from odf_chain.schema_files import load_schema_file
from odf_chain.slices import with_system_fields
from odf_chain.state import Vocabulary
from odf_chain.verify import verify_path
from odf_chain.views import lineage as lineage_view, lineage_dot
from odf_chain.views.blocks import (
    block_to_jsonable,
    log_header,
    log_line,
    schema_to_jsonable,
    state_to_jsonable,
)

if TYPE_CHECKING:
    from odf_chain.spark.ingest import SkippedInput

REF_HELP = (
    "'head' (default), a block hash or a unique prefix of one (the 16 characters 'log' "
    "prints), a sequence number or an ISO-8601 time (the last block at or before it)"
)

VERIFIED_HELP = (
    "answer from one full fold of the chain walked back from its head, taking nothing from the "
    "derived index (slower: O(chain length))"
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERNAL = 3


class UsageError(OdfChainError):
    """A command line that does not make sense."""


def _count(n: int, noun: str) -> str:
    """``1 block``, ``2 blocks``, ``1,024 bytes``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def cmd_log(args: argparse.Namespace) -> int:
    entries = Dataset.open(args.dir).log(args.max_count)  # newest first, read as printed
    if args.json:
        _print_json([block_to_jsonable(e) for e in entries])
        return EXIT_OK
    seq_width = None
    for entry in entries:
        if seq_width is None:  # the newest block has the widest sequence number
            seq_width = max(3, len(str(entry.block.sequence_number)))
            print(log_header(seq_width, full=args.full))
        print(log_line(entry, full=args.full, seq_width=seq_width))
    return EXIT_OK


def cmd_index(args: argparse.Namespace) -> int:
    report = check_index(args.dir, from_scratch=args.rebuild)
    print(report.line())
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    if args.table and not args.schema:
        raise UsageError("--table needs --schema")
    schema = load_schema_file(args.schema, table=args.table) if args.schema else None
    if schema is not None:
        # Refuse a schema the dataset cannot take (a reserved column name, no columns, a type
        # Parquet cannot store) before anything is created: no half-made dataset is left behind.
        try:
            with_system_fields(schema, Vocabulary())
        except SchemaError as exc:
            raise SchemaError(f"{args.schema}: {exc}") from None
    dataset = Dataset.create(
        args.dir, hash=args.hash, key_file=args.key_file, single_writer=args.single_writer
    )
    if schema is not None:
        dataset.set_schema(schema)
    state = dataset.state
    print(f"created {dataset.path}")
    print(f"dataset id  {state.dataset_id}")
    print(f"hash        {state.hash_algorithm}")
    if args.key_file is not None:
        print(f"key file    {args.key_file} (mode 0600; signs receipts; keep it safe and apart)")
    if schema is not None:
        print(f"schema      {len(state.schema)} fields, declared at block {state.sequence_number}")
    print(f"head        {state.head}")
    return EXIT_OK


def _print_fields(fields: list[FieldInfo]) -> None:
    width = max((len(f.path) for f in fields), default=len("PATH"))
    print(f"{'PATH':<{width}}  {'TYPE':<8}  {'VALUES':<8}  NATIVE TYPE")
    for f in fields:
        flag = "nullable" if f.nullable else "required"
        print(f"{f.path:<{width}}  {f.type:<8}  {flag:<8}  {f.native_type}")


def cmd_fields(args: argparse.Namespace) -> int:
    state = Dataset.open(args.dir).state_at(args.at, verified=args.verified)
    fields = state.fields
    if args.json:
        _print_json(
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


def cmd_schema(args: argparse.Namespace) -> int:
    if args.target[0] == "check":
        return _schema_check(args)
    if len(args.target) != 1:
        raise UsageError("usage: odf-chain schema DIR [--at REF] | schema check OLD NEW")
    directory = args.target[0]
    if args.history:
        return _schema_history(directory, args.json, args.verified)
    state = Dataset.open(directory).state_at(args.at, verified=args.verified)
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


def _schema_history(directory: str, as_json: bool, verified: bool) -> int:
    history = Dataset.open(directory).schema_history(verified=verified)
    if as_json:
        _print_json(
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
        if change.diff is None:
            print(f"  initial schema: {len(change.schema)} fields")
            for line in change.schema.to_string(show_schema_metadata=False).splitlines():
                print(f"    {line}")
        for line in change.diff.lines() if change.diff is not None else ():
            print(f"  {line}")
    return EXIT_OK


def _schema_check(args: argparse.Namespace) -> int:
    if len(args.target) != 3:
        raise UsageError("usage: odf-chain schema check OLD NEW")
    old = load_schema_file(args.target[1], table=args.table)
    new = load_schema_file(args.target[2], table=args.table)
    violations = check_evolution(old, new)
    diff = diff_schemas(old, new)
    if args.json:
        _print_json(
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


def cmd_verify(args: argparse.Namespace) -> int:
    if args.deep and args.no_data:
        raise UsageError("--deep reads every row of the data: it cannot go with --no-data")
    report = verify_path(
        args.dir, check_data=not args.no_data, receipts=args.receipt or (), deep=args.deep
    )
    if args.json:
        _print_json(report.to_dict())
    else:
        for problem in report.problems:
            print(problem.line())
        verdict = "OK" if report.ok else "FAILED"
        rows = f"{_count(report.rows_checked, 'row')} checked, " if report.deep else ""
        print(
            f"{verdict}: {_count(report.blocks_checked, 'block')}, "
            f"{_count(report.slices_checked, 'slice')}, {rows}"
            f"{_count(report.bytes_hashed, 'byte')} hashed, {_count(len(report.errors), 'error')}, "
            f"{_count(len(report.warnings), 'warning')}; head {report.head}"
        )
        if report.receipts_checked:
            print(
                f"receipts: {report.receipts_held} of {report.receipts_checked} held by the "
                f"chain, {report.receipts_signed} with a valid signature"
            )
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_receipt(args: argparse.Namespace) -> int:
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


def cmd_gc(args: argparse.Namespace) -> int:
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


def cmd_export(args: argparse.Namespace) -> int:
    dataset = Dataset.open(args.dir)
    if args.target == "datahub":
        from odf_chain.export.datahub import write_datahub_file

        count = write_datahub_file(
            dataset, args.output, at=args.at, platform=args.platform, env=args.env
        )
        print(f"wrote {count} metadata change proposals to {args.output}")
    else:
        from odf_chain.export.openlineage import write_openlineage_file

        count = write_openlineage_file(dataset, args.output, at=args.at, namespace=args.namespace)
        print(f"wrote {count} OpenLineage run events to {args.output}")
    return EXIT_OK


def _spark_session(master: str):
    """A SparkSession for the CLI: local by default, any cluster with --master; Java checked
    first, and Spark's own output kept in a log file (:mod:`odf_chain.spark.session`)."""
    from odf_chain.spark.session import start_quiet_session

    # Python workers run this interpreter (with odf_chain and pyarrow), not whatever python3
    # is first on PATH; a cluster sets its own.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return start_quiet_session(master, "odf-chain ingest", {"spark.sql.session.timeZone": "UTC"})


def _interrupt_plainly() -> threading.Event:
    """Ctrl-C during an ingest: a KeyboardInterrupt, and an event that says it came.

    PySpark's own SIGINT handler cancels the jobs over py4j from inside the handler, on the
    very connection the interrupted call is reading: py4j then logs two tracebacks of a
    reentrant read (~45 lines) before the KeyboardInterrupt. Python's default handler only
    raises; stopping the session on the way out (:func:`cmd_ingest`) cancels the jobs, and
    py4j's own log lines go to Spark's log (:mod:`odf_chain.spark.session`). The event lets
    the command answer 130 even when the interrupt surfaced as a Spark error."""
    came = threading.Event()

    def handler(signum: int, frame: object) -> None:
        came.set()
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)
    return came


def _exit_now(signum: int, frame: object) -> None:
    """A second Ctrl-C while the first one cleans up: leave now (what staging holds is gc's)."""
    print("odf-chain: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def _skipped_lines(skipped: Sequence[SkippedInput]) -> list[str]:
    """What an ingest skipped: one phrase per block that already held the contents, one for
    repeats within the call."""
    from odf_chain.spark.input_paths import file_name

    groups: dict[int | None, list[str]] = {}
    for item in skipped:
        same = "" if item.block is not None else f" = {file_name(item.same_as)}"
        groups.setdefault(item.block, []).append(item.file.name + same)
    lines = []
    for block, names in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        files = _count(len(names), "file")
        why = (
            "with the same content as an earlier input"
            if block is None
            else f"already ingested at block {block}"
        )
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        lines.append(f"skipped {files} {why} ({listed})")
    return lines


def cmd_ingest(args: argparse.Namespace) -> int:
    from odf_chain.spark.input_paths import expand_inputs
    from odf_chain.spark.sizing import target_slice_bytes

    # what can be refused is refused before Spark starts (~10 s): the slice size, a missing
    # input, a missing dataset without --create
    target = target_slice_bytes(args.target_slice_bytes)
    expand_inputs(list(args.inputs))
    dataset: str | Dataset = args.dir
    try:
        dataset = Dataset.open(args.dir, single_writer=args.single_writer)
    except NotFoundError as missing:
        if not args.create:
            raise NotFoundError(f"{missing}; pass --create to create it") from None
        if args.single_writer:  # the declaration travels with the opened dataset
            dataset = Dataset.create(args.dir, hash=args.hash, single_writer=True)
    before = signal.getsignal(signal.SIGINT)  # PySpark puts its own in as Spark starts
    session = _spark_session(args.master)
    interrupted = _interrupt_plainly()
    try:
        return _ingest_and_report(args, session, dataset, target, interrupted)
    finally:
        if threading.current_thread() is threading.main_thread() and before is not None:
            signal.signal(signal.SIGINT, before)


def _ingest_and_report(args, session, dataset, target, interrupted: threading.Event) -> int:
    from odf_chain.spark.ingest import ingest_files

    try:
        done = ingest_files(
            session.spark,
            dataset,
            list(args.inputs),
            args.format,
            allow_duplicates=args.allow_duplicates,
            event_time=args.event_time,
            job_name=args.job,
            create=args.create,
            hash=args.hash,
            truncate_timestamps=args.truncate_timestamps,
            evolve=args.evolve,
            target_slice_bytes=target,
        )
    except BaseException as exc:
        if interrupted.is_set():  # Ctrl-C: whatever Spark made of it, the answer is 130
            signal.signal(signal.SIGINT, _exit_now)
            session.stop(failed=False)  # its log is of no use to someone who stopped it
            raise KeyboardInterrupt from None
        if session.stop(failed=True) and isinstance(exc, Exception):
            exc.add_note(session.hint())
        raise
    session.stop(failed=False)
    skipped = _skipped_lines(done.skipped)
    result = done.result
    if result is None:  # every input is in the dataset already
        print("; ".join(skipped) + ": nothing appended")
        return EXIT_OK
    for line in skipped:
        print(line)
    inputs = _count(len(done.inputs), "input file")
    if result.rows == 0:  # header-only CSV files, say: refused when they hold anything else
        names = ", ".join(i.name for i in done.inputs[:5])
        more = f" and {len(done.inputs) - 5} more" if len(done.inputs) > 5 else ""
        print(f"ingested   0 rows from {inputs} ({names}{more}: no rows): nothing appended")
        return EXIT_OK
    print(f"ingested   {_count(result.rows, 'row')} from {inputs}")
    print(f"slices     {result.slices} ({_count(result.bytes, 'byte')} of Parquet)")
    names = ", ".join(sorted({b.block.event_name for b in result.blocks})) or "none"
    print(f"blocks     {len(result.blocks)} appended ({names})")
    print(f"head       {result.head}")
    timings = "  ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    print(f"timings    {timings}")
    return EXIT_OK


def _lineage_depth(text: str | None) -> int | None:
    """--depth: N >= 1 steps; 0 or 'all' for all the way."""
    if text is None:
        return 1
    if text.strip().lower() == "all":
        return None
    try:
        depth = int(text)
    except ValueError:
        raise UsageError(f"--depth takes a number of steps, 0 or 'all', not {text!r}") from None
    if depth < 0:
        raise UsageError(f"--depth takes a number of steps, 0 or 'all', not {text!r}")
    return None if depth == 0 else depth


def _lineage_format(args: argparse.Namespace) -> str:
    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json and --format {args.format} ask for two different outputs")
    return "json" if args.json else (args.format or "text")


def _check_lineage_usage(args: argparse.Namespace, output: str) -> None:
    direction = args.upstream or args.downstream
    if args.upstream and args.downstream:
        raise UsageError("--upstream and --downstream ask two questions: choose one")
    if args.field is None:
        for flag, given in (
            ("--upstream", args.upstream),
            ("--downstream", args.downstream),
            ("--depth", args.depth is not None),
            ("--dataset", args.dataset is not None),
        ):
            if given:
                raise UsageError(f"{flag} needs a FIELD")
    if args.depth is not None and not direction:
        raise UsageError("--depth needs --upstream or --downstream")
    if args.offset is not None:
        if args.field is not None:
            raise UsageError("--offset asks about a record, not a FIELD: give one or the other")
        if output in ("dot", "svg"):
            raise UsageError(f"--offset has no picture: use text or json, not {output}")


def _emit(text: str | bytes, output_file: str | None) -> None:
    if output_file is None:
        if isinstance(text, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(text)
        else:
            sys.stdout.write(text)
        return
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    with open(output_file, "wb") as out:
        out.write(data)


def cmd_lineage(args: argparse.Namespace) -> int:
    output = _lineage_format(args)
    _check_lineage_usage(args, output)
    direction = "upstream" if args.upstream else "downstream" if args.downstream else None
    depth = _lineage_depth(args.depth) if direction else None
    dataset = Dataset.open(args.dir)
    state = dataset.state_at(args.at, verified=args.verified)
    view = lineage_view.LineageView.build(
        dataset.lineage(state.head, verified=args.verified),
        dataset.location,
        state.sequence_number,
        str(state.head),
    )
    field = None if args.field is None else view.field(args.field, args.dataset)

    if output in ("dot", "svg"):
        if field is None:
            dot = lineage_dot.dot_text(view)
        else:
            nodes, dropping = lineage_dot.neighbourhood(view, field, direction, depth)
            dot = lineage_dot.dot_text(view, nodes, dropping, highlight=field)
        for warning in lineage_view.warnings(view):  # the DOT text has no room for them
            print(f"odf-chain: {warning}", file=sys.stderr)
        if output == "dot":
            _emit(dot, args.output)
            return EXIT_OK
        binary = shutil.which("dot")
        if binary is None:  # no SVG: the DOT text instead, never under the SVG's name
            if args.output is None:
                instead = "this is the DOT text instead of SVG"
            else:
                svg_path = Path(args.output)
                dot_path = svg_path.with_suffix(".dot")
                if dot_path == svg_path:
                    dot_path = svg_path.with_name(svg_path.name + ".dot")
                instead = f"wrote the DOT text to {dot_path} instead of SVG to {svg_path}"
            print(
                f"odf-chain: Graphviz is not installed (no 'dot' on PATH), so {instead}; "
                f"install it with {lineage_dot.GRAPHVIZ_INSTALL}",
                file=sys.stderr,
            )
            _emit(dot, None if args.output is None else str(dot_path))
            return EXIT_FAILED
        _emit(lineage_dot.svg_from_dot(dot, binary), args.output)
        return EXIT_OK

    if args.offset is not None:
        doc = lineage_view.offset_json(view, args.offset)
        text = lineage_view.offset_text
    elif field is None:
        doc = lineage_view.graph_json(view)
        text = lineage_view.graph_text
    elif direction is None:
        doc = lineage_view.summary_json(view, field)
        text = lineage_view.summary_text
    else:
        doc = lineage_view.reached_json(view, field, direction, depth)
        text = lineage_view.reached_text
    if output == "json":
        _emit(json.dumps(doc, indent=2) + "\n", args.output)
    else:
        _emit(text(doc), args.output)
    return EXIT_OK


def _add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--no-data", action="store_true", help="check blocks and rules only, not data files"
    )
    parser.add_argument(
        "--receipt",
        action="append",
        metavar="FILE",
        help="a receipt (odf-chain receipt) whose block the chain must still hold; repeatable",
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help="also read every row: recompute each slice's logical hash, check its offset, op "
        "and system_time columns against its block",
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odf-chain")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as the CLI's other errors: one line (and a hint), exit 2.
    Subparsers are made of the same class (``add_subparsers`` takes the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\ntry: {self.prog} --help\n")


def _block_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a number of blocks (0 or more), not {text!r}")
    return count


def _seconds(text: str) -> float:
    """A ``--min-age``: float() also takes 'nan', 'inf' and negative numbers, which no age
    is."""
    try:
        return check_min_age(float(text))
    except (ValueError, OdfChainError):
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds (0 or more), not {text!r}"
        ) from None


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The parser of the (sub)command ``args`` chose: the one whose --help explains it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None))
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parse_args``, with arguments the command does not take reported by that command's
    parser (argparse reports them as the top-level program's, whose --help does not list
    them)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="odf-chain",
        description="Tamper-evident ODF metadata chains next to Parquet data slices.",
    )
    parser.add_argument("--version", action="version", version=f"odf-chain {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser("init", help="create a dataset (writes the Seed block)")
    init.add_argument("dir", help="dataset directory or pyarrow.fs URI to create")
    init.add_argument(
        "--hash",
        choices=[BLAKE3, SHA3_256],
        default=BLAKE3,
        help="hash for blocks and slices (sha3-256 for ODF interoperability)",
    )
    init.add_argument(
        "--schema",
        metavar="FILE",
        help="declare the data schema up front: .avsc (Avro), .json (DataMine) or .parquet",
    )
    init.add_argument("--table", help="which table of a DataMine document")
    init.add_argument(
        "--key-file",
        metavar="FILE",
        help="keep the dataset id's private key in FILE (new, outside the dataset, mode 0600) "
        "to sign receipts",
    )
    init.add_argument(
        "--single-writer",
        action="store_true",
        help="allow writing on a filesystem without conditional writes (HDFS, say): you "
        "promise no other writer writes this dataset meanwhile (s3://, gs:// and abfs:// "
        "need no promise: the head moves by compare-and-swap)",
    )
    init.set_defaults(run=cmd_init)

    log = commands.add_parser(
        "log",
        help="list blocks, newest first",
        description="Blocks newest first, one line each within 100 columns: sequence number, "
        "the first 16 characters of the block hash (give them to --at), system time (UTC, "
        "ISO-8601), event and a summary cut to fit. Streams: a line is printed as its block is "
        "read.",
    )
    log.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    log.add_argument("--json", action="store_true", help="full blocks as JSON")
    log.add_argument(
        "--full", action="store_true", help="whole block hashes and whole summaries (wide lines)"
    )
    log.add_argument(
        "-n",
        "--max-count",
        type=_block_count,
        metavar="N",
        help="show only the N newest blocks (reads only those)",
    )
    log.set_defaults(run=cmd_log)

    index = commands.add_parser(
        "index", help="check the derived index (info/odf-chain-index/), repairing it if needed"
    )
    index.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    index.add_argument(
        "--rebuild", action="store_true", help="rebuild it from the chain (one full fold)"
    )
    index.set_defaults(run=cmd_index)

    schema = commands.add_parser(
        "schema",
        help="the schema at a block, its history, or a compatibility check of two schema files",
        usage="odf-chain schema DIR [--at REF | --history] [--json]\n"
        "       odf-chain schema check OLD NEW [--table NAME] [--json]",
    )
    schema.add_argument("target", nargs="+", metavar="DIR | check OLD NEW")
    schema.add_argument("--at", default="head", metavar="REF", help=REF_HELP)
    schema.add_argument("--verified", action="store_true", help=VERIFIED_HELP)
    schema.add_argument("--history", action="store_true", help="every SetDataSchema with its diff")
    schema.add_argument("--table", help="which table of DataMine documents (check)")
    schema.add_argument("--json", action="store_true", help="machine-readable output")
    schema.set_defaults(run=cmd_schema)

    fields = commands.add_parser("fields", help="DataHub v2 field paths at a block")
    fields.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    fields.add_argument("--at", default="head", metavar="REF", help=REF_HELP)
    fields.add_argument("--verified", action="store_true", help=VERIFIED_HELP)
    fields.add_argument("--json", action="store_true", help="paths, types and nullability as JSON")
    fields.set_defaults(run=cmd_fields)

    ingest = commands.add_parser(
        "ingest", help="ingest files with Spark: Parquet slices and blocks, one transaction"
    )
    ingest.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    ingest.add_argument("inputs", nargs="+", metavar="INPUT", help="files, folders or globs")
    ingest.add_argument(
        "--format", required=True, choices=["csv", "json", "parquet", "avro"], help="input format"
    )
    ingest.add_argument("--event-time", metavar="COL", help="column holding event times")
    ingest.add_argument(
        "--job", default="odf-chain ingest", help="job name recorded with the field lineage"
    )
    ingest.add_argument(
        "--truncate-timestamps",
        action="store_true",
        help="store timestamps finer than a millisecond truncated (default: refuse them)",
    )
    ingest.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="ingest every input (default: skip files whose content the dataset already has)",
    )
    ingest.add_argument(
        "--evolve",
        action="store_true",
        help="allow columns the dataset's schema lacks (default: refuse them, naming the "
        "closest existing columns)",
    )
    ingest.add_argument(
        "--target-slice-size",
        "--target-slice-bytes",
        dest="target_slice_bytes",
        default="256MiB",
        metavar="SIZE",
        help="Parquet size each slice aims at, in bytes or with a unit (64MiB, 1GB); small "
        "partitions are merged, big ones cut (default: 256MiB)",
    )
    ingest.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    ingest.add_argument("--create", action="store_true", help="create the dataset if missing")
    ingest.add_argument(
        "--hash", choices=[BLAKE3, SHA3_256], default=BLAKE3, help="hash for a new dataset"
    )
    ingest.add_argument(
        "--single-writer",
        action="store_true",
        help="allow writing on a filesystem without conditional writes (HDFS, say): you "
        "promise no other writer writes this dataset meanwhile (s3://, gs:// and abfs:// "
        "need no promise: the head moves by compare-and-swap)",
    )
    ingest.set_defaults(run=cmd_ingest)

    gc = commands.add_parser("gc", help="remove leftovers of interrupted or losing writers")
    gc.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    gc.add_argument(
        "--min-age",
        type=_seconds,
        default=DEFAULT_MIN_AGE,
        metavar="SECONDS",
        help=f"only remove leftovers at least this old (default {DEFAULT_MIN_AGE:g})",
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed")
    gc.add_argument(
        "--discard-uncommitted",
        action="append",
        metavar="HASH",
        help="also remove this block, which descends from the head but was never committed "
        "(a crashed writer's; verify lists them); repeatable; a block once the head is refused",
    )
    gc.add_argument(
        "--single-writer",
        action="store_true",
        help="nothing else writes to the dataset meanwhile: lets --min-age go below the "
        "default on storage without a head lock (object stores)",
    )
    gc.set_defaults(run=cmd_gc)

    export = commands.add_parser(
        "export", help="write the schema and field lineage for DataHub or OpenLineage"
    )
    targets = export.add_subparsers(dest="target", required=True, metavar="TARGET")
    for target, what in (
        ("datahub", "a DataHub metadata file (MCP JSON: schemaMetadata, upstreamLineage)"),
        ("openlineage", "OpenLineage run events (JSON lines, columnLineage 1-2-0)"),
    ):
        sub = targets.add_parser(target, help=what)
        sub.add_argument(
            "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
        )
        sub.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write")
        sub.add_argument(
            "--at", default="head", metavar="REF", help=f"block to export as of: {REF_HELP}"
        )
        if target == "datahub":
            sub.add_argument("--platform", default="odf", help="DataHub platform (default odf)")
            sub.add_argument("--env", default="PROD", help="DataHub environment (default PROD)")
        else:
            sub.add_argument("--namespace", default=None, help="OpenLineage job namespace")
        sub.set_defaults(run=cmd_export)

    lineage = commands.add_parser(
        "lineage",
        help="field lineage: the field graph, where a field comes from and goes, or a picture",
        description="Field-level lineage as of a block, across the datasets this one read "
        "(when they can be opened). Without FIELD: every written field with its direct "
        "sources, drops and runs. With FIELD: where its values come from and go (all the way), "
        "or the fields --upstream/--downstream of it with their distance.",
    )
    lineage.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    lineage.add_argument(
        "field", nargs="?", metavar="FIELD", help="a plain name (total, address.city) or a v2 path"
    )
    lineage.add_argument("--at", default="head", metavar="REF", help=REF_HELP)
    lineage.add_argument("--verified", action="store_true", help=VERIFIED_HELP)
    lineage.add_argument(
        "--dataset",
        metavar="NAME",
        help="FIELD is a field of this input (its location, URI, dataset id, or the name a run "
        "gave it) rather than of DIR: how to ask where an input's field went",
    )
    lineage.add_argument("--upstream", action="store_true", help="the fields FIELD comes from")
    lineage.add_argument("--downstream", action="store_true", help="the fields FIELD goes to")
    lineage.add_argument(
        "--depth",
        metavar="N",
        help="steps for --upstream/--downstream: 1 by default, 0 or 'all' for all the way",
    )
    lineage.add_argument(
        "--offset", type=int, metavar="N", help="which run wrote record N of this dataset"
    )
    lineage.add_argument(
        "--format",
        choices=["text", "json", "dot", "svg"],
        help="text (default), json, dot (Graphviz source) or svg (needs Graphviz's dot)",
    )
    lineage.add_argument("--json", action="store_true", help="same as --format json")
    lineage.add_argument("-o", "--output", metavar="FILE", help="write to FILE, not stdout")
    lineage.set_defaults(run=cmd_lineage)

    receipt = commands.add_parser(
        "receipt",
        help="a JSON receipt of the head, to verify the chain against later (--receipt)",
    )
    receipt.add_argument(
        "dir", help="dataset directory or pyarrow.fs URI (s3://..., gs://..., hdfs://...)"
    )
    receipt.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (must be new), not stdout"
    )
    receipt.add_argument(
        "--key-file", metavar="FILE", help="sign with the dataset's key (from init --key-file)"
    )
    receipt.set_defaults(run=cmd_receipt)

    verify = commands.add_parser("verify", help="check blocks, rules and data (chain-verify)")
    _add_verify_arguments(verify)
    verify.set_defaults(run=cmd_verify)
    return parser


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except OdfChainError as exc:
        print(f"odf-chain: error: {exc}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):  # at most one: where to look next
            print(f"hint: {note}", file=sys.stderr)
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
    except Exception as exc:  # a bug of ours: still one line, the traceback on request
        if os.environ.get("ODF_CHAIN_DEBUG"):
            raise
        detail = str(exc).strip().splitlines()
        print(
            f"odf-chain: internal error: {type(exc).__name__}"
            f"{': ' + detail[0] if detail else ''} (a bug in odf_chain; "
            "ODF_CHAIN_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        for note in getattr(exc, "__notes__", ()):
            print(f"hint: {note}", file=sys.stderr)
        return EXIT_INTERNAL


def _tolerant_stdout() -> None:
    """Field names can be any Unicode; a terminal that cannot show them gets escapes, not a
    UnicodeEncodeError halfway through a listing."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    _tolerant_stdout()
    args = _parse(build_parser(), argv)
    return _run(args.run, args)


def chain_verify_main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="chain-verify",
        description="Prove that a dataset's blocks and data are intact and every rule holds "
        "(same as 'odf-chain verify').",
    )
    _add_verify_arguments(parser)
    _tolerant_stdout()
    return _run(cmd_verify, _parse(parser, argv))


if __name__ == "__main__":
    sys.exit(main())
