"""OpenLineage run events for a dataset's lineage runs, in JSON Lines (one event a line).

Each AddFieldLineage in the chain up to block ``at`` is one run, and gives two RunEvents, as the
OpenLineage spec asks of every run: START at the run's start time (job, run, input and output
names) and COMPLETE at its end time (the start time when none was recorded) with the facets:

- inputs: each dataset the run read; an odf_chain input that can be opened carries its
  ``schema`` as of the pinned block; every input carries ``version`` (the pinned block hash, or
  the content hash of an external file);
- output: this dataset with its ``schema`` for the run's data, ``columnLineage`` (facet 1-2-0),
  and, once the run's last record is in the chain at ``at``, ``version`` (the hash of the block
  holding it: the dataset's version once the run was done) and ``outputStatistics`` (records
  written, their slices' total size and count);
- run: ``odf_chain_run``, this project's facet, with the run id as recorded, the dataset id,
  the block holding the event, the offsets written and the drops (which OpenLineage has no
  place for);
- job: ``jobType`` (BATCH, integration ODF_CHAIN).

Run ids: OpenLineage wants a UUID. A recorded run id that is one is used as it is (in its
canonical text); any other becomes ``uuid5(RUN_ID_NAMESPACE, "<dataset id>/<run id>")``: stable,
so exporting twice gives the same ids.

Names: an odf_chain dataset is namespace ``odf``, name its ``did:odf:...`` text (stable wherever
it is stored). An external input follows OpenLineage's naming for files: ``file`` and the path
for a local file, ``s3://bucket`` and the key, ``gs://bucket`` and the key, otherwise
``scheme://authority`` and the path. Jobs are in ``namespace`` (default ``odf_chain``) under
the run's job name.

Fields: OpenLineage names columns, not DataHub paths: a field is the dotted name of its v2 path
(``[version=2.0].[type=struct].[type=struct].address.[type=string].city`` -> ``address.city``),
matching the nested names of the ``schema`` facet. Each transformation says which operations of
the run the value went through (its description); an opaque step is named as such there.

Transformations use OpenLineage's vocabulary only: ``type`` DIRECT (subtype IDENTITY,
TRANSFORMATION, AGGREGATION) or INDIRECT (JOIN, GROUP_BY, FILTER, SORT, WINDOW, CONDITIONAL),
``masking`` a boolean. An older chain's DIRECT CONDITIONAL is written DIRECT TRANSFORMATION; an
INDIRECT step recorded with a direct subtype is written without a subtype (the facet requires
only the type); see :func:`odf_chain.lineage.openlineage_names`. By default, as
openlineage-spark does, the INDIRECT inputs that decide which rows exist (join keys, filters,
group-by, sort) are listed under each field and the facet's ``dataset`` list is empty; with
``indirect=False`` (``--no-indirect``) they are listed once in ``dataset``, the facet's list
(since 1-2-0) for inputs that affect the whole dataset, and the fields keep their DIRECT inputs
only.

Events are built with the openlineage-python client's classes and written with its serializer
(keys sorted); lists are sorted, so two exports of one chain are byte-identical. They are built
from a run's :class:`RunFacts` by :func:`start_event` and :func:`end_event`, the builders live
emission (:mod:`odf_chain.emit`) uses too: a run sent while it happens and the same run
exported later carry the same run id and facets.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

import attr
import pyarrow as pa
from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import (
    RunFacet,
    column_lineage_dataset,
    dataset_version_dataset,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    schema_dataset,
)
from openlineage.client.serde import Serde

from odf_chain.chain import BlockEntry
from odf_chain.dataset import Dataset
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    DataSlice,
    ExecuteTransform,
    FieldOperation,
    LineageInput,
    LineageRun,
    OffsetInterval,
    TransformationType,
)
from odf_chain.export.chain_view import (
    ChainView,
    InputOpener,
    LineageRunBlock,
    view_dataset,
    write_text,
)
from odf_chain.lineage import input_key, openlineage_names, resolve
from odf_chain.schema.arrow_paths import is_list_like, unwrap_encoding
from odf_chain.schema.paths import v1_path

# The project has no public home to point at: URNs name it and its facet instead of URLs.
PRODUCER = "urn:odf-chain:export:openlineage"
RUN_FACET_KEY = "odf_chain_run"
RUN_FACET_SCHEMA_URL = "urn:odf-chain:facets:OdfChainRunFacet:1-0-0"
ODF_NAMESPACE = "odf"
DEFAULT_JOB_NAMESPACE = "odf_chain"
# Fixed for good: derived run ids depend on it.
RUN_ID_NAMESPACE = uuid.UUID("6f3c1a52-8d0e-4b7a-9c25-0d4f7e1b2a93")

_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


@attr.define
class OdfChainRunFacet(RunFacet):
    """The run as the chain recorded it (see module doc)."""

    runId: str  # OpenLineage names its fields in camel case
    datasetId: str
    blockSequenceNumber: int
    blockHash: str
    offsets: dict[str, int] | None = attr.field(default=None)
    drops: list[dict[str, str]] = attr.field(factory=list)

    _additional_skip_redact: ClassVar[list[str]] = ["runId", "datasetId", "blockHash"]

    @staticmethod
    def _get_schema() -> str:
        return RUN_FACET_SCHEMA_URL


def openlineage_run_id(dataset_key: str, run: LineageRun) -> str:
    """The run's id as OpenLineage wants it: a UUID (see module doc)."""
    try:
        return str(uuid.UUID(run.run_id))
    except ValueError:
        return str(uuid.uuid5(RUN_ID_NAMESPACE, f"{dataset_key}/{run.run_id}"))


def external_name(uri: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) for an external source named by ``uri``."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # a plain path (or a Windows drive letter)
        return "file", uri
    if scheme == "file":
        path = unquote(parts.path)
        if parts.netloc in ("", "localhost"):
            return "file", path
        return f"file://{parts.netloc}", path
    if scheme in _OBJECT_STORES:
        return f"{_OBJECT_STORES[scheme]}://{parts.netloc}", parts.path.lstrip("/")
    return f"{scheme}://{parts.netloc}", parts.path or "/"


def dataset_name(key: str) -> tuple[str, str]:
    """(namespace, name) of a field-graph dataset key: a dataset id, else an external URI."""
    if key.startswith("did:odf:"):
        return ODF_NAMESPACE, key
    return external_name(key)


def _input_name(pinned: LineageInput) -> tuple[str, str]:
    return dataset_name(input_key(pinned))


# -- schema facet -------------------------------------------------------------------------------


def _description(field: pa.Field) -> str | None:
    metadata = field.metadata or {}
    raw = metadata.get(b"doc") or metadata.get(b"comment")
    return None if raw is None else raw.decode("utf-8", "replace")


def _schema_field(field: pa.Field, position: int) -> schema_dataset.SchemaDatasetFacetFields:
    t = unwrap_encoding(field.type)
    inner = t
    if is_list_like(t):
        kind, inner = "array", unwrap_encoding(t.value_type)
    elif pa.types.is_map(t):
        kind, inner = "map", unwrap_encoding(t.item_type)
    elif pa.types.is_struct(t):
        kind = "struct"
    else:
        kind = str(t)
    members = (
        [_schema_field(inner.field(i), i + 1) for i in range(inner.num_fields)]
        if pa.types.is_struct(inner)
        else None
    )
    return schema_dataset.SchemaDatasetFacetFields(
        name=field.name,
        type=kind,
        description=_description(field),
        ordinal_position=position,
        fields=members,
    )


def schema_facet(schema: pa.Schema) -> schema_dataset.SchemaDatasetFacet:
    """OpenLineage's ``schema`` facet: columns with Arrow types, struct members nested (also
    those of a struct inside a list or a map value)."""
    return schema_dataset.SchemaDatasetFacet(
        fields=[_schema_field(f, i + 1) for i, f in enumerate(schema)], producer=PRODUCER
    )


# -- column lineage -------------------------------------------------------------------------------


def _via(operations: tuple[str, ...], by_name: Mapping[str, FieldOperation]) -> str:
    """How a value went: the run's operations on the way, and which of them were opaque."""
    steps = []
    for name in operations:
        op = by_name[name]
        steps.append(f"{name} ({op.description})" if op.description else name)
    text = "via " + " -> ".join(steps)
    opaque = [name for name in operations if by_name[name].transformation.opaque]
    if opaque:
        text += (
            f"; opaque step: {', '.join(opaque)} could not be looked into, so the exact mapping "
            "is unknown (every input the step could see is listed)"
        )
    return text


# (type, subtype or "", masking, description) of one transformation: sortable, so output is stable
_Step = tuple[str, str, bool, str]


def _input_field(key: tuple[str, str, str], steps: set[_Step]) -> column_lineage_dataset.InputField:
    namespace, name, field = key
    return column_lineage_dataset.InputField(
        namespace=namespace,
        name=name,
        field=field,
        transformations=[
            column_lineage_dataset.Transformation(
                type=kind, subtype=subtype or None, description=text, masking=masking
            )
            for kind, subtype, masking, text in sorted(steps)
        ],
    )


def column_lineage_facet(
    event: AddFieldLineage, *, indirect: bool = True
) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    """The ``columnLineage`` facet (1-2-0) of one run: each written field with the input fields
    it derives from and how.

    ``indirect=False`` moves the INDIRECT inputs (join keys, filters, group-by, sort) out of the
    fields into the facet's ``dataset`` list, the place 1-2-0 has for inputs that decide which
    rows exist rather than a value; a field fed by INDIRECT inputs only is then left out."""
    by_name = {op.name: op for op in event.operations}
    fields: dict[str, dict[tuple[str, str, str], set[_Step]]] = {}
    whole: dict[tuple[str, str, str], set[_Step]] = {}  # the facet's dataset-level list
    for edge in resolve(event).edges:
        namespace, name = _input_name(edge.input)
        t = edge.transformation
        kind, subtype = openlineage_names(t)
        step = (kind, subtype or "", t.masking, _via(edge.operations, by_name))
        source = (namespace, name, v1_path(edge.source))
        if not indirect and t.type == TransformationType.INDIRECT:
            whole.setdefault(source, set()).add(step)
            continue
        fields.setdefault(v1_path(edge.target), {}).setdefault(source, set()).add(step)
    return column_lineage_dataset.ColumnLineageDatasetFacet(
        fields={
            target: column_lineage_dataset.Fields(
                inputFields=[_input_field(key, steps) for key, steps in sorted(sources.items())]
            )
            for target, sources in sorted(fields.items())
        },
        dataset=[_input_field(key, steps) for key, steps in sorted(whole.items())],
        producer=PRODUCER,
    )


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFacts:
    """One run as its events tell it: what the file export reads from a chain
    (:func:`run_facts`) and live emission (:mod:`odf_chain.emit`) knows as the write goes, so
    both build their events with the same functions (:func:`start_event`, :func:`end_event`).

    ``run_id`` is OpenLineage's (a UUID, :func:`openlineage_run_id`); ``version`` the dataset
    version once the run is done (the hash of the block it ended at; None: not known or not
    done); ``lineage`` None for a run that recorded none (its events then carry no
    ``columnLineage`` and no inputs); ``run_facet`` None before the run has a block."""

    key: str  # the output dataset's id text
    job_name: str
    run_id: str
    started_at: datetime
    ended_at: datetime | None = None
    lineage: AddFieldLineage | None = None
    schema: pa.Schema | None = None
    version: str | None = None
    slices: tuple[DataSlice, ...] = ()
    offsets: OffsetInterval | None = None
    run_facet: OdfChainRunFacet | None = None


def _time(moment: datetime) -> str:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _run_facet(key: str, run: LineageRunBlock) -> OdfChainRunFacet:
    event = run.event
    offsets = event.run.offsets
    drops = sorted(
        {
            (*_input_name(drop.input), v1_path(drop.source), drop.operation)
            for drop in resolve(event).drops
        }
    )
    return OdfChainRunFacet(
        runId=event.run.run_id,
        datasetId=key,
        blockSequenceNumber=run.entry.block.sequence_number,
        blockHash=str(run.entry.hash),
        offsets=None if offsets is None else {"start": offsets.start, "end": offsets.end},
        drops=[
            {"namespace": ns, "name": name, "field": field, "operation": op}
            for ns, name, field, op in drops
        ],
        producer=PRODUCER,
    )


def _inputs(
    event: AddFieldLineage | None, opener: InputOpener | None, with_facets: bool
) -> list[InputDataset]:
    inputs = []
    for pinned in () if event is None else event.inputs:
        namespace, name = _input_name(pinned)
        facets: dict[str, Any] = {}
        if with_facets:
            version = pinned.block_hash or pinned.content_hash
            if version is not None:
                facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                    datasetVersion=str(version), producer=PRODUCER
                )
            schema = opener.schema(pinned) if pinned.is_dataset and opener is not None else None
            if schema is not None:
                facets["schema"] = schema_facet(schema)
        inputs.append(InputDataset(namespace=namespace, name=name, facets=facets))
    return sorted(inputs, key=lambda d: (d.namespace, d.name))


def _slice_of(entry: BlockEntry) -> DataSlice:
    event = entry.block.event
    assert isinstance(event, AddData | ExecuteTransform) and event.new_data is not None
    return event.new_data


def _output(facts: RunFacts, with_facets: bool, indirect: bool = True) -> OutputDataset:
    facets: dict[str, Any] = {}
    output_facets: dict[str, Any] = {}
    if with_facets:
        if facts.schema is not None:
            facets["schema"] = schema_facet(facts.schema)
        if facts.lineage is not None:
            facets["columnLineage"] = column_lineage_facet(facts.lineage, indirect=indirect)
        if facts.version is not None:
            facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                datasetVersion=facts.version, producer=PRODUCER
            )
            if facts.offsets is not None:
                output_facets["outputStatistics"] = (
                    output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                        rowCount=facts.offsets.end - facts.offsets.start + 1,
                        size=sum(s.size for s in facts.slices),
                        fileCount=len(facts.slices),
                        producer=PRODUCER,
                    )
                )
    return OutputDataset(
        namespace=ODF_NAMESPACE, name=facts.key, facets=facets, outputFacets=output_facets
    )


def _job(facts: RunFacts, namespace: str) -> Job:
    return Job(
        namespace=namespace,
        name=facts.job_name,
        facets={
            "jobType": job_type_job.JobTypeJobFacet(
                processingType="BATCH", integration="ODF_CHAIN", jobType="JOB", producer=PRODUCER
            )
        },
    )


def _run(facts: RunFacts, extra: Mapping[str, RunFacet] | None = None) -> Run:
    facets: dict[str, RunFacet] = (
        {} if facts.run_facet is None else {RUN_FACET_KEY: facts.run_facet}
    )
    return Run(runId=facts.run_id, facets={**facets, **(extra or {})})


def start_event(facts: RunFacts, namespace: str = DEFAULT_JOB_NAMESPACE) -> RunEvent:
    """The run's START: at its start time, with the job, the run and the names of its inputs
    (those known: a live START is sent before the plan is read) and of its output."""
    return RunEvent(
        eventType=RunState.START,
        eventTime=_time(facts.started_at),
        run=_run(facts),
        job=_job(facts, namespace),
        inputs=_inputs(facts.lineage, None, with_facets=False),
        outputs=[_output(facts, with_facets=False)],
        producer=PRODUCER,
    )


def end_event(
    facts: RunFacts,
    namespace: str = DEFAULT_JOB_NAMESPACE,
    *,
    opener: InputOpener | None = None,
    indirect: bool = True,
    error: BaseException | None = None,
) -> RunEvent:
    """The run's COMPLETE, or with ``error`` its FAIL (with OpenLineage's ``errorMessage`` run
    facet), at its end time (the start time when none is known): inputs with their versions
    (and schemas, when ``opener`` can open them), the output with its facets."""
    extra: dict[str, RunFacet] = {}
    if error is not None:
        extra["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=f"{type(error).__name__}: {error}",
            programmingLanguage="PYTHON",
            producer=PRODUCER,
        )
    return RunEvent(
        eventType=RunState.COMPLETE if error is None else RunState.FAIL,
        eventTime=_time(facts.ended_at or facts.started_at),
        run=_run(facts, extra),
        job=_job(facts, namespace),
        inputs=_inputs(facts.lineage, opener, with_facets=True),
        outputs=[_output(facts, with_facets=True, indirect=indirect)],
        producer=PRODUCER,
    )


def run_facts(key: str, run: LineageRunBlock) -> RunFacts:
    """The facts of one lineage run of a chain (``key``: the dataset's id text): the version
    and statistics once the run's last record is in the chain as far as it was read."""
    recorded = run.event.run
    done = run.completed_by
    finished = done is not None and recorded.offsets is not None
    return RunFacts(
        key=key,
        job_name=recorded.job_name,
        run_id=openlineage_run_id(key, recorded),
        started_at=recorded.started_at,
        ended_at=recorded.ended_at,
        lineage=run.event,
        schema=run.schema,
        version=str(done.hash) if finished else None,  # type: ignore[union-attr]
        slices=tuple(_slice_of(entry) for entry in run.data) if finished else (),
        offsets=recorded.offsets if finished else None,
        run_facet=_run_facet(key, run),
    )


def _run_events(
    view: ChainView, run: LineageRunBlock, namespace: str, opener: InputOpener, indirect: bool
) -> list[RunEvent]:
    facts = run_facts(view.key, run)
    return [
        start_event(facts, namespace),
        end_event(facts, namespace, opener=opener, indirect=indirect),
    ]


def openlineage_events(
    dataset: Dataset, *, at: str = "head", namespace: str | None = None, indirect: bool = True
) -> list[RunEvent]:
    """The events of :func:`write_openlineage_file`, in chain order (START, then COMPLETE)."""
    view = view_dataset(dataset, at)
    opener = InputOpener()
    job_namespace = namespace or DEFAULT_JOB_NAMESPACE
    return [e for run in view.runs for e in _run_events(view, run, job_namespace, opener, indirect)]


def write_openlineage_file(
    dataset: Dataset,
    out: str | Path,
    *,
    at: str = "head",
    namespace: str | None = None,
    indirect: bool = True,
) -> int:
    """Write the OpenLineage run events of ``dataset``'s lineage runs up to block ``at`` to
    ``out``, one JSON event a line (see the module doc); return the number of events.
    ``indirect=False``: INDIRECT inputs go in the ``columnLineage`` facet's ``dataset`` list,
    not under each field."""
    text, count = openlineage_text(dataset, at=at, namespace=namespace, indirect=indirect)
    write_text(out, text)
    return count


def openlineage_text(
    dataset: Dataset, *, at: str = "head", namespace: str | None = None, indirect: bool = True
) -> tuple[str, int]:
    """The text :func:`write_openlineage_file` writes, and the number of events in it."""
    events = openlineage_events(dataset, at=at, namespace=namespace, indirect=indirect)
    return "".join(Serde.to_json(event) + "\n" for event in events), len(events)
