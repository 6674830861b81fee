"""``odf-chain ingest``: input files appended to a dataset, each content once, with their stated
lineage (the files are read by :mod:`odf_chain.spark.inputs`, written by
:func:`odf_chain.spark.write`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pyspark.sql import SparkSession

from odf_chain.dataset import Dataset
from odf_chain.errors import ConflictError, FormatError, NotFoundError
from odf_chain.format.multihash import Multihash
from odf_chain.lineage.recorder import LineageRecorder
from odf_chain.schema.convert import avro_to_arrow
from odf_chain.spark.input_paths import _expand, _Located, _open
from odf_chain.spark.inputs import (
    _DEFAULT_OPTIONS,
    InputFile,
    SourceFrame,
    _check_format,
    _option,
    _read_probed,
    _run_probe,
)
from odf_chain.spark.write_frame import IngestResult, write
from odf_chain.state import DatasetState

# --------------------------------------------------------------------------------------------
# ingesting files, each content once


@dataclass(frozen=True, slots=True)
class SkippedInput:
    """An input file :func:`ingest_files` left out: its content is already in the dataset (at
    block ``block``, read then from ``same_as``), or ``block`` is None and an earlier input of
    the same call, ``same_as``, has the same bytes."""

    file: InputFile
    block: int | None
    same_as: str


@dataclass(frozen=True)
class FileIngest:
    """What :func:`ingest_files` did: the files it ingested, those it skipped, and the write's
    result (None when every file was skipped: nothing was read or appended)."""

    inputs: tuple[InputFile, ...]
    skipped: tuple[SkippedInput, ...]
    result: IngestResult | None


def ingest_files(
    spark: SparkSession,
    dataset: str | Path | Dataset,
    paths: list[str],
    fmt: str,
    *,
    options: dict | None = None,
    allow_duplicates: bool = False,
    event_time: str | None = None,
    job_name: str = "odf-chain ingest",
    create: bool = False,
    **write_options: Any,
) -> FileIngest:
    """Ingest input files into ``dataset``, each content once: what ``odf-chain ingest`` does.

    The files are listed and hashed (:func:`read_input`'s first step); those whose content
    hash the dataset already records as an ingested input (``replay.ingested_inputs``), and
    repeats of a content within this call, are skipped before Spark reads any row; the rest
    are read and appended by :func:`odf_chain.spark.write` with their stated lineage, each
    file (URI, size, BLAKE3 hash) recorded as the source of every AddData.
    ``allow_duplicates`` ingests every file given. ``write_options`` go to ``write``
    (``hash``, ``truncate_timestamps``, ``transaction``, ...).

    Another writer may ingest the same files meanwhile: when blocks appended after the lookup
    name one of them, nothing is appended and :class:`ConflictError` says so (run it again:
    they are then skipped).
    """
    from odf_chain.replay import ingested_inputs
    from odf_chain.spark.workers import use_this_python

    _check_format(fmt, options)
    use_this_python(spark)
    phase = write_options.get("_phase")  # the CLI's, on a terminal: each phase as it starts
    files = _expand(paths)
    target: str | Path | Dataset = dataset
    if not isinstance(target, Dataset):
        try:
            target = Dataset.open(target)
        except NotFoundError:
            if not create:
                raise
    base = target.refresh().head if isinstance(target, Dataset) else None  # None: write creates it
    known = (
        {}
        if allow_duplicates or not isinstance(target, Dataset)
        else ingested_inputs(target.storage, base)
    )
    if phase is not None:
        phase(f"reading and hashing {len(files):,} input file{'s' if len(files) != 1 else ''}")
    probes = _run_probe(spark, files, fmt)

    kept: list[tuple[_Located, tuple]] = []
    skipped: list[SkippedInput] = []
    first_of: dict[str, str] = {}  # content hash -> the first input of this call holding it
    for located, probe in zip(files, probes, strict=True):
        item = InputFile(probe[1], probe[2], probe[3])
        recorded = known.get(item.blake3)
        if recorded is not None:
            skipped.append(SkippedInput(item, recorded.sequence_number, recorded.uri))
        elif not allow_duplicates and item.blake3 in first_of:
            skipped.append(SkippedInput(item, None, first_of[item.blake3]))
        else:
            first_of.setdefault(item.blake3, item.uri)
            kept.append((located, probe))
    if not kept:
        return FileIngest((), tuple(skipped), None)

    frame = _read_probed(spark, [k[0] for k in kept], [k[1] for k in kept], fmt, options)

    def not_ingested_meanwhile(written: Dataset, state: DatasetState) -> None:
        if allow_duplicates or base is None or state.head == base:
            return  # (base None: a new dataset, whose first head move expects no head at all)
        meanwhile = ingested_inputs(written.storage, state.head, since=base)
        clash = [i for i in frame.inputs if i.blake3 in meanwhile]
        if clash:
            block = min(meanwhile[i.blake3].sequence_number for i in clash)
            raise ConflictError(
                f"{written.location}: another writer ingested {len(clash)} of these input "
                f"files meanwhile (from block {block}: {_names(clash)}); nothing was appended: "
                "run it again and they will be skipped"
            )

    def rows_from_every_file(per_file: dict[str, int]) -> None:
        if fmt in ("csv", "json"):  # a Parquet or Avro file without rows says so itself
            _refuse_rowless(kept, per_file, fmt, options)

    result = write(
        frame.df,
        target,
        event_time=event_time,
        create=create,
        avro_schema=frame.avro_schema,
        lineage=ingest_lineage(frame, job_name),
        source={
            "format": fmt,
            "inputs": [{"uri": i.uri, "size": i.size, "hash": i.blake3} for i in frame.inputs],
        },
        _check_state=not_ingested_meanwhile,
        _input=f"input {_names(frame.inputs)}",
        _check_rows=rows_from_every_file,
        **write_options,
    )
    return FileIngest(frame.inputs, tuple(skipped), result)


_HEADER_BYTES = 1 << 20  # a header-only file longer than this is not taken as one


def _file_key(uri: str) -> str:
    """A file's URI as Spark's ``input_file_name`` and :func:`_expand` both spell it, decoded
    (``file:/x``, ``file:///x`` -> ``/x``)."""
    text = unquote(uri)
    if text.startswith("file:"):
        text = "/" + text[len("file:") :].lstrip("/")
    return text


def _refuse_rowless(
    kept: list[tuple[_Located, tuple]], per_file: dict[str, int], fmt: str, options: dict | None
) -> None:
    """Refuse text inputs that hold bytes but gave no rows (a file in another format, the wrong
    options), before anything is written; a file that is explicitly empty passes: no bytes, only
    blank lines, or (CSV with a header) a header line alone."""
    read = {_file_key(name) for name, rows in per_file.items() if rows}
    rowless = [
        (located, probe)
        for located, probe in kept
        if probe[2] and _file_key(located.uri) not in read and _file_key(probe[1]) not in read
    ]
    opts = {**_DEFAULT_OPTIONS[fmt], **{k: _option(v) for k, v in (options or {}).items()}}
    header = fmt == "csv" and opts.get("header", "false").lower() == "true"
    encoding = opts.get("encoding", opts.get("charset", "utf-8"))
    refused = [
        InputFile(probe[1], probe[2], probe[3])
        for located, probe in rowless
        if not _explicitly_empty(located, header, encoding)
    ]
    if refused:
        size = sum(f.size for f in refused)
        raise FormatError(
            f"input {_names(refused)}: no rows read as {fmt} from {size} bytes; is the input "
            f"in the format given (--format {fmt})? nothing was ingested"
        )


def _explicitly_empty(located: _Located, header: bool, encoding: str) -> bool:
    """Does the file hold no data by its content: text of blank lines, plus one line if it
    starts with a header? (Read on the driver, only for the files that gave no rows.)"""
    try:
        with _open(located.fs, located.path) as fh:
            data = fh.read(_HEADER_BYTES + 1)
    except OSError:
        return False
    if len(data) > _HEADER_BYTES or (
        b"\x00" in data and encoding.lower().replace("-", "") == "utf8"
    ):
        return False
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return False
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) <= (1 if header else 0)


def _names(files: Iterable[InputFile], limit: int = 5) -> str:
    names = [f.name for f in files]
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------------------------
# lineage of an ingest


def ingest_lineage(frame: SourceFrame, job_name: str) -> LineageRecorder:
    """The field lineage of ingesting ``frame`` as it is: every column copied from the column of
    the same name in each input file, the files pinned by their content hashes (as listed).

    Stated, not captured: the plan of an Avro read is an RDD round trip that capture could
    only call opaque, and the files were already hashed when they were listed. The column taken
    as the event time keeps its name (the vocabulary names it), so it too is a copy.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from odf_chain.events import FieldOperation, InputField
    from odf_chain.schema.convert import AVRO_SCHEMA_KEY
    from odf_chain.schema.evolution import ITEM, KEY, VALUE
    from odf_chain.schema.paths import field_index

    schema = to_arrow_schema(frame.df.schema, timezone="UTC")
    if frame.avro_schema is not None:
        schema = avro_to_arrow(frame.avro_schema).with_metadata(
            {AVRO_SCHEMA_KEY: frame.avro_schema.encode()}
        )
    paths = field_index(schema)
    recorder = LineageRecorder(job_name)
    names: list[str] = []
    for item in frame.inputs:
        base = unquote(item.uri.rstrip("/").rsplit("/", 1)[-1]) or "input"
        name, n = base, 1
        while name in names:  # two files of one name in different folders
            n += 1
            name = f"{base} ({n})"
        recorder.external_input(name, item.uri, content_hash=Multihash.from_multibase(item.blake3))
        names.append(name)
    # every field, nested ones too, so that lineage asked of ``location.lat`` reaches the files
    structural = {ITEM, KEY, VALUE}
    top = set(frame.df.columns)
    done: set[str] = set()
    for name_path, source_path in sorted(paths.items(), key=lambda item: item[0]):
        dotted = ".".join(part for part in name_path if part not in structural)
        if name_path[0] not in top or dotted in done:  # a map's values: the map's own name
            continue
        done.add(dotted)
        recorder.record(
            FieldOperation(
                f"read {dotted}",
                tuple(InputField(name, source_path) for name in names),
                (dotted,),
                description=f"field {dotted!r} as read from the input files",
            )
        )
    return recorder
