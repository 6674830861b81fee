"""Metadata events and blocks as immutable values.

Field names follow the ODF schema so that a reader of the spec finds them here unchanged.
Most events have typed fields. SetTransform and the source and attachment events
(SetPollingSource, AddPushSource, SetAttachments) keep their nested content as plain data
(``dict``/``tuple``, union members tagged with ``"kind"``): ODF nests some thirty tables there,
whose one description (:mod:`~odf_chain.format.plain_tables`) normalises, encodes and checks
them. Every event is written as well as read.
"""

from __future__ import annotations

import enum
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from odf_chain.errors import SchemaError
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash
from odf_chain.format.plain_tables import normalise_event

if TYPE_CHECKING:  # pyarrow (~130 ms with numpy) loads where a schema is decoded or built
    import pyarrow as pa

# ---------------------------------------------------------------------------------------------
# Parts


@dataclass(frozen=True, slots=True)
class OffsetInterval:
    """A closed interval ``[start, end]`` of record offsets."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class DataSlice:
    logical_hash: Multihash
    physical_hash: Multihash
    offset_interval: OffsetInterval
    size: int

    @property
    def num_records(self) -> int:
        return self.offset_interval.end - self.offset_interval.start + 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physical_hash: Multihash
    size: int


@dataclass(frozen=True, slots=True)
class SourceState:
    source_name: str | None = None
    kind: str | None = None
    value: str | None = None


class DatasetKind(enum.IntEnum):
    ROOT = 0
    DERIVATIVE = 1


# ---------------------------------------------------------------------------------------------
# Events odf_chain writes


@dataclass(frozen=True)
class AddData:
    """Data appended to a root dataset: one slice, with the offsets it covers."""

    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: datetime | None = None
    new_source_state: SourceState | None = None
    extra: Mapping[str, Any] | None = None  # ODF ExtraAttributes: a JSON object


@dataclass(frozen=True, slots=True)
class ExecuteTransformInput:
    dataset_id: DatasetId | None = None
    prev_block_hash: Multihash | None = None
    new_block_hash: Multihash | None = None
    prev_offset: int | None = None
    new_offset: int | None = None


@dataclass(frozen=True)
class ExecuteTransform:
    """A derivative dataset's transaction: the input slices it read, the slice it wrote.

    ``extra`` is odf_chain's addition, not ODF's (see ``schemas/odf_chain.fbs``): ExtraAttributes
    as on AddData. Left out, the block is ODF's byte for byte; present, ODF readers skip it.
    """

    query_inputs: tuple[ExecuteTransformInput, ...] = ()
    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: datetime | None = None
    extra: Mapping[str, Any] | None = None  # ExtraAttributes: a JSON object


@dataclass(frozen=True)
class SetTransform:
    """A derivative dataset's inputs and query, kept as plain data (ODF's layout, snake_case)::

        SetTransform(
            inputs=({"dataset_ref": "did:odf:fed01...", "alias": "orders"},),
            transform={"kind": "TransformSql", "engine": "spark", "query": "SELECT ..."},
        )

    ``transform`` may also hold ``version``, ``queries`` (``{"alias", "query"}`` steps) and
    ``temporal_tables`` (``{"name", "primary_key"}``). Optional fields left out are filled in as
    ``None`` and lists become tuples, so that a value built by hand equals the one decoded from
    its bytes: an append folds the value it was given, a replay the value it reads back.
    Anything else (a missing required field, an unknown key) is refused when encoded. The layout
    is :mod:`~odf_chain.format.plain_tables`'s, as for the source events.
    """

    inputs: tuple[Mapping[str, Any], ...] | None = None
    transform: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        normalise_event(self, "SetTransform")


@dataclass(frozen=True, slots=True)
class Seed:
    """The first block of every chain: names the dataset for its whole life."""

    dataset_id: DatasetId
    dataset_kind: DatasetKind = DatasetKind.ROOT


@dataclass(frozen=True, slots=True)
class SetVocab:
    """Renames the system columns; ``None`` keeps ODF's default name."""

    offset_column: str | None = None
    operation_type_column: str | None = None
    system_time_column: str | None = None
    event_time_column: str | None = None


@dataclass(frozen=True, slots=True)
class SetInfo:
    description: str | None = None
    keywords: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class SetLicense:
    short_name: str | None = None
    name: str | None = None
    spdx_id: str | None = None
    website_url: str | None = None


class StructuredSchemaWarning(UserWarning):
    """A SetDataSchema was written without ODF's structured schema (its Arrow schema has a
    type the structured form cannot hold); the message names the field."""


@dataclass(frozen=True)
class SetDataSchema:
    """The Arrow schema of every data slice added after this block.

    ``raw_arrow_schema`` holds the bare Arrow ``Schema`` flatbuffer (ODF field id 0, deprecated
    in ODF 0.39); ``schema`` is ODF's structured form (field id 1, RFC-016) as plain data (the
    shape :func:`~odf_chain.format.data_schema.arrow_to_data_schema` returns). The event
    carries exactly the forms its block carries, each ``None`` when absent, and is written
    back with exactly those: a block another tool wrote with one form re-encodes to the same
    bytes, and ``decode(encode(e)) == e``. :meth:`from_arrow` (what odf_chain's writers use)
    fills both. When both are present they must describe one schema (rule ``schema-forms``);
    :meth:`to_arrow` then reads the raw form, which also holds the Arrow metadata.
    """

    raw_arrow_schema: bytes | None = None
    schema: Mapping[str, Any] | None = None

    @classmethod
    def from_arrow(cls, schema: pa.Schema) -> SetDataSchema:
        """Both forms of ``schema``; the raw form alone when it has no structured form.

        Raw only, rather than refusing: the raw form is still ODF 0.39 (deprecated, read by
        every ODF tool) and is what odf_chain wrote before, so a dataset whose schema holds a
        union, a dictionary or a timestamp without a timezone keeps being writable, and its
        Arrow schema stays exact. Refusing would break such datasets for a form that ODF does
        not yet require. The omission is not silent: a :class:`StructuredSchemaWarning` names
        the field (ODF says the structured form becomes required after its migration; such a
        dataset will need a schema change then).
        """
        from odf_chain.format.arrow_schema import schema_to_bare_flatbuffer
        from odf_chain.format.data_schema import arrow_to_data_schema

        raw = schema_to_bare_flatbuffer(schema)
        try:
            structured = arrow_to_data_schema(schema)
        except SchemaError as exc:
            warnings.warn(
                f"SetDataSchema written with the raw Arrow form only: {exc}",
                StructuredSchemaWarning,
                stacklevel=2,
            )
            structured = None
        return cls(raw_arrow_schema=raw, schema=structured)

    @functools.cached_property
    def arrow_schema(self) -> pa.Schema:
        """The schema as pyarrow sees it, decoded once (the rules and the fold both need it)."""
        return self.to_arrow()

    def to_arrow(self) -> pa.Schema:
        """The schema as pyarrow sees it (pyarrow and the schema codecs load here: reading the
        chain needs them only where a schema is looked at)."""
        if self.raw_arrow_schema is not None:
            from odf_chain.format.arrow_schema import schema_from_bare_flatbuffer

            return schema_from_bare_flatbuffer(self.raw_arrow_schema)
        from odf_chain.format.data_schema import data_schema_to_arrow

        return data_schema_to_arrow(self.schema)


@dataclass(frozen=True, slots=True)
class DisablePushSource:
    source_name: str


@dataclass(frozen=True, slots=True)
class DisablePollingSource:
    pass


# ---------------------------------------------------------------------------------------------
# Field lineage (odf_chain's own event; not part of ODF)


class TransformationType(enum.IntEnum):
    """OpenLineage's split: DIRECT = the output's value comes from the input's value; INDIRECT =
    the input only decides which rows or groups exist (filter, join key, group-by, sort)."""

    DIRECT = 0
    INDIRECT = 1


class TransformationSubtype(enum.IntEnum):
    IDENTITY = 0
    TRANSFORMATION = 1
    AGGREGATION = 2
    JOIN = 3
    FILTER = 4
    GROUP_BY = 5
    SORT = 6
    WINDOW = 7
    CONDITIONAL = 8


@dataclass(frozen=True, slots=True)
class Transformation:
    """How inputs become outputs. ``masking``: the output hides the input (hash, redaction).
    ``opaque``: the step could not be looked into (Python UDF, mapInPandas, RDD round trip), so
    every input it could see is listed and the exact mapping is unknown."""

    type: TransformationType = TransformationType.DIRECT
    subtype: TransformationSubtype = TransformationSubtype.IDENTITY
    masking: bool = False
    opaque: bool = False


@dataclass(frozen=True, slots=True)
class LineageInput:
    """What a run read, under a ``name`` that field references use.

    Either another odf_chain dataset pinned at a block (``dataset_id`` and ``block_hash``; the
    ``uri`` then says where it was found), or an external source by ``uri`` and, when known, the
    ``content_hash`` of what was read.
    """

    name: str
    uri: str | None = None
    dataset_id: DatasetId | None = None
    block_hash: Multihash | None = None
    content_hash: Multihash | None = None

    @property
    def is_dataset(self) -> bool:
        return self.dataset_id is not None


@dataclass(frozen=True, slots=True)
class InputField:
    """A field an operation reads: ``origin`` names one of the run's inputs (``field`` is then a
    v2 path in that input's schema) or an earlier operation of the same event (``field`` is then
    one of that operation's outputs)."""

    origin: str
    field: str


@dataclass(frozen=True, slots=True)
class FieldOperation:
    """A CDAP-style field operation.

    ``outputs`` are fields this operation produces. When ``writes`` is true they are v2 paths of
    this dataset, otherwise intermediate names that later operations read through
    :class:`InputField`. An operation with no outputs is a drop: recorded, not lost.

    Every output derives from every input, except in an IDENTITY operation with as many outputs
    as inputs, which copies them pairwise in order (the i-th input becomes the i-th output):
    that is how a read or a write of many fields is one operation.
    """

    name: str
    inputs: tuple[InputField, ...] = ()
    outputs: tuple[str, ...] = ()
    transformation: Transformation = Transformation()
    description: str | None = None
    writes: bool = True


@dataclass(frozen=True, slots=True)
class LineageRun:
    """The run that wrote the data following the lineage event. ``offsets``: the records it
    wrote, so any offset can be traced back to its run (``None``: the run wrote no records)."""

    job_name: str
    run_id: str
    started_at: datetime
    ended_at: datetime | None = None
    offsets: OffsetInterval | None = None


@dataclass(frozen=True)
class AddFieldLineage:
    """Field-level lineage of one run, appended just before that run's AddData blocks."""

    run: LineageRun
    inputs: tuple[LineageInput, ...] = ()
    operations: tuple[FieldOperation, ...] = ()


# ---------------------------------------------------------------------------------------------
# Sources and attachments: nested content kept as plain data (layout: format/plain_tables.py)


@dataclass(frozen=True)
class SetPollingSource:
    """A root dataset's polling source, as plain data (ODF's layout, snake_case)::

        SetPollingSource(
            fetch={"kind": "FetchStepUrl", "url": "https://example.org/data.csv"},
            read={"kind": "ReadStepCsv", "header": True},
            merge={"kind": "MergeStrategyLedger", "primary_key": ["id"]},
        )

    ``prepare`` is a tuple of ``{"value": <PrepStep>}`` (flatbuffers spells a vector of unions
    as a vector of one-field tables); enums are their integer values (``"order": 1`` is
    ``SourceOrdering.ByName``). As with :class:`SetTransform`, left-out optional fields are
    filled in as ``None`` and lists become tuples when the event is made, so that a value built
    by hand equals the one decoded from its bytes; anything else (a missing required field, an
    unknown key, a wrong type) is refused, by field path, when it is encoded.
    """

    fetch: Mapping[str, Any] | None = None
    prepare: tuple[Mapping[str, Any], ...] | None = None
    read: Mapping[str, Any] | None = None
    preprocess: Mapping[str, Any] | None = None
    merge: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        normalise_event(self, "SetPollingSource")


@dataclass(frozen=True)
class AddPushSource:
    """A named push source of a root dataset: how pushed data is read, shaped and merged
    (plain data as in :class:`SetPollingSource`)."""

    source_name: str | None = None
    read: Mapping[str, Any] | None = None
    preprocess: Mapping[str, Any] | None = None
    merge: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        normalise_event(self, "AddPushSource")


@dataclass(frozen=True)
class SetAttachments:
    """Files attached to the dataset, e.g.
    ``{"kind": "AttachmentsEmbedded", "items": [{"path": "README.md", "content": "..."}]}``."""

    attachments: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        normalise_event(self, "SetAttachments")


MetadataEvent = (
    AddData
    | ExecuteTransform
    | Seed
    | SetPollingSource
    | SetTransform
    | SetVocab
    | SetAttachments
    | SetInfo
    | SetLicense
    | SetDataSchema
    | AddPushSource
    | DisablePushSource
    | DisablePollingSource
    | AddFieldLineage
)

# ODF's MetadataEvent union ids; part of the bytes, never to be moved.
EVENT_TYPE_IDS: dict[type, int] = {
    AddData: 1,
    ExecuteTransform: 2,
    Seed: 3,
    SetPollingSource: 4,
    SetTransform: 5,
    SetVocab: 6,
    SetAttachments: 7,
    SetInfo: 8,
    SetLicense: 9,
    SetDataSchema: 10,
    AddPushSource: 11,
    DisablePushSource: 12,
    DisablePollingSource: 13,
    # odf_chain's own events: ids far from ODF's 1..13 so that a future ODF event cannot collide.
    AddFieldLineage: 200,
}


@dataclass(frozen=True)
class MetadataBlock:
    """One link of the chain: an event, when it was written, and what came before it."""

    system_time: datetime
    prev_block_hash: Multihash | None
    sequence_number: int
    event: MetadataEvent = field()

    @property
    def event_name(self) -> str:
        return type(self.event).__name__
