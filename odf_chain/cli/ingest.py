"""``odf-chain ingest``: files ingested with Spark into Parquet slices and blocks, in one
transaction.

Spark is imported only here and only when the command runs; what can be refused is refused
before Spark starts (~10 s). How Spark starts is :func:`start_spark`, which the command is
given (``args.start_spark``) rather than calling by name, so that whoever runs the command can
lend it a session instead (:mod:`odf_chain.cli` passes its own ``_spark_session``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from odf_chain.cli.common import (
    DIR_HELP,
    EXIT_OK,
    SINGLE_WRITER_HELP,
    count,
    examples,
    terminal_phases,
)
from odf_chain.errors import NotFoundError
from odf_chain.format.algorithms import BLAKE3, SHA3_256

if TYPE_CHECKING:
    from odf_chain.spark.ingest import SkippedInput


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "ingest",
        help="ingest files with Spark: Parquet slices and blocks, one transaction",
        description="Read CSV, JSON, Parquet or Avro files with Spark and append them to the "
        "dataset as Parquet slices and blocks, all or nothing, with the run's field lineage and "
        "each input file's hash recorded (a file already ingested is skipped). Spark starts "
        "after the arguments are checked; its own output goes to a log file.",
        epilog=examples(
            "odf-chain ingest DIR data/*.csv --format csv --create",
            "odf-chain ingest DIR s3://bucket/in/ --format parquet --event-time ts --evolve",
        ),
    )
    parser.add_argument("dir", help=DIR_HELP)
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="files, folders or globs")
    parser.add_argument(
        "--format", required=True, choices=["csv", "json", "parquet", "avro"], help="input format"
    )
    parser.add_argument("--event-time", metavar="COL", help="column holding event times")
    parser.add_argument(
        "--job", default="odf-chain ingest", help="job name recorded with the field lineage"
    )
    parser.add_argument(
        "--truncate-timestamps",
        action="store_true",
        help="store timestamps finer than a millisecond truncated (default: refuse them)",
    )
    parser.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="ingest every input (default: skip files whose content the dataset already has)",
    )
    parser.add_argument(
        "--evolve",
        action="store_true",
        help="allow columns the dataset's schema lacks (default: refuse them, naming the "
        "closest existing columns)",
    )
    parser.add_argument(
        "--target-slice-size",
        "--target-slice-bytes",
        dest="target_slice_bytes",
        default="256MiB",
        metavar="SIZE",
        help="Parquet size each slice aims at, in bytes or with a unit (64MiB, 1GB); small "
        "partitions are merged, big ones cut (default: 256MiB)",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    parser.add_argument("--create", action="store_true", help="create the dataset if missing")
    parser.add_argument(
        "--hash", choices=[BLAKE3, SHA3_256], default=BLAKE3, help="hash for a new dataset"
    )
    parser.add_argument("--single-writer", action="store_true", help=SINGLE_WRITER_HELP)
    parser.set_defaults(run=run, start_spark=start_spark)


def start_spark(master: str):
    """A SparkSession for the CLI: local by default, any cluster with --master; Java checked
    first, and Spark's own output kept in a log file (:mod:`odf_chain.spark.session`)."""
    from odf_chain.spark.session import start_quiet_session

    # Python workers run this interpreter (with odf_chain and pyarrow), not whatever python3
    # is first on PATH; a cluster sets its own.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # no stage bars: Spark's "[Stage 7:=>  (3 + 2) / 40]" names none of odf_chain's phases
    conf = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false"}
    return start_quiet_session(master, "odf-chain ingest", conf)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
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
    phase = terminal_phases()
    if phase is not None:
        phase("starting Spark")
    session = args.start_spark(args.master)
    interrupted = _interrupt_plainly()
    try:
        return _ingest_and_report(args, session, dataset, target, interrupted, phase)
    finally:
        if threading.current_thread() is threading.main_thread() and before is not None:
            signal.signal(signal.SIGINT, before)


def _interrupt_plainly() -> threading.Event:
    """Ctrl-C during an ingest: a KeyboardInterrupt, and an event that says it came.

    PySpark's own SIGINT handler cancels the jobs over py4j from inside the handler, on the
    very connection the interrupted call is reading: py4j then logs two tracebacks of a
    reentrant read (~45 lines) before the KeyboardInterrupt. Python's default handler only
    raises; stopping the session on the way out (:func:`run`) cancels the jobs, and py4j's
    own log lines go to Spark's log (:mod:`odf_chain.spark.session`). The event lets the
    command answer 130 even when the interrupt surfaced as a Spark error."""
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


def _ingest_and_report(
    args, session, dataset, target, interrupted: threading.Event, phase=None
) -> int:
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
            _phase=phase,
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
    inputs = count(len(done.inputs), "input file")
    if result.rows == 0:  # header-only CSV files, say: refused when they hold anything else
        names = ", ".join(i.name for i in done.inputs[:5])
        more = f" and {len(done.inputs) - 5} more" if len(done.inputs) > 5 else ""
        print(f"ingested   0 rows from {inputs} ({names}{more}: no rows): nothing appended")
        return EXIT_OK
    print(f"ingested   {count(result.rows, 'row')} from {inputs}")
    print(f"slices     {result.slices} ({count(result.bytes, 'byte')} of Parquet)")
    names = ", ".join(sorted({b.block.event_name for b in result.blocks})) or "none"
    print(f"blocks     {len(result.blocks)} appended ({names})")
    if result.lineage is not None:  # carried by the first AddData's extra attributes
        run = result.lineage.run
        operations = count(len(result.lineage.operations), "field operation")
        print(f"lineage    {operations} of run {run.run_id} (job {run.job_name})")
    print(f"head       {result.head}")
    timings = "  ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    print(f"timings    {timings}")
    return EXIT_OK


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
        files = count(len(names), "file")
        why = (
            "with the same content as an earlier input"
            if block is None
            else f"already ingested at block {block}"
        )
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        lines.append(f"skipped {files} {why} ({listed})")
    return lines
