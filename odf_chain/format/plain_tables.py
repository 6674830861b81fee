"""The layout of ODF's source and attachment tables, for the events odf_chain keeps as plain data.

SetTransform, SetPollingSource, AddPushSource and SetAttachments nest some thirty tables and
eight unions (transforms, fetch, prepare, read and merge steps, event time sources, caching,
attachments).
odf_chain does not model them as classes: the decoder gives them as plain data (a table is a
``dict`` of its schema fields in snake_case, a vector a ``tuple``, a union member carries its
table's name under ``"kind"``), and this one description of their layout serves the three
things that need it, so that it is spelt once:

* :func:`normalise` fills in the fields a hand-built value leaves out (``None``) and turns lists
  into tuples, so that a value built by hand equals the one decoded from its bytes;
* the encoder (:mod:`~odf_chain.format.block_encoder`) writes them in flatc's builder order and
  refuses, naming the field path, a missing required field, an unknown key or a wrong type;
* the tests generate values from it.

Field order is the schema's (``schemas/odf_chain.fbs``) and is what the bytes follow. A type is
``string``, ``bool``, ``int32``, ``uint64``, an enum of :data:`ENUMS`, a table of :data:`TABLES`,
a union of :data:`UNIONS`, or ``DataSchema``; ``[T]`` is a vector of T. A trailing ``!`` marks a
field ODF requires (a table, string or vector that must be present); ``?`` an optional scalar
(``= null`` in the schema: written whenever present). A scalar without ``?`` has a default and
is required in plain data (the decoder always gives it; its default is not written).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Enums by name: their values in order (the value is the index), as the schema lists them.
ENUMS: dict[str, tuple[str, ...]] = {
    "SourceOrdering": ("ByEventTime", "ByName"),
    "MqttQos": ("AtMostOnce", "AtLeastOnce", "ExactlyOnce"),
    "CompressionFormat": ("Gzip", "Zip"),
}

#: Unions by name: their members in order (member i has union type id i + 1).
UNIONS: dict[str, tuple[str, ...]] = {
    "EventTimeSource": (
        "EventTimeSourceFromMetadata",
        "EventTimeSourceFromPath",
        "EventTimeSourceFromSystemTime",
    ),
    "SourceCaching": ("SourceCachingForever",),
    "FetchStep": (
        "FetchStepUrl",
        "FetchStepFilesGlob",
        "FetchStepContainer",
        "FetchStepMqtt",
        "FetchStepEthereumLogs",
    ),
    "PrepStep": ("PrepStepDecompress", "PrepStepPipe"),
    "ReadStep": (
        "ReadStepCsv",
        "ReadStepGeoJson",
        "ReadStepEsriShapefile",
        "ReadStepParquet",
        "ReadStepJson",
        "ReadStepNdJson",
        "ReadStepNdGeoJson",
    ),
    "Transform": ("TransformSql",),
    "MergeStrategy": (
        "MergeStrategyAppend",
        "MergeStrategyLedger",
        "MergeStrategySnapshot",
        "MergeStrategyChangelogStream",
        "MergeStrategyUpsertStream",
    ),
    "Attachments": ("AttachmentsEmbedded",),
}

_S, _SS, _KEYS = "string", "[string]", "[string]!"

#: Tables by name: (field, type) in schema order.
TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    # events
    "SetPollingSource": (
        ("fetch", "FetchStep!"),
        ("prepare", "[PrepStepWrapper]"),
        ("read", "ReadStep!"),
        ("preprocess", "Transform"),
        ("merge", "MergeStrategy!"),
    ),
    "AddPushSource": (
        ("source_name", "string!"),
        ("read", "ReadStep!"),
        ("preprocess", "Transform"),
        ("merge", "MergeStrategy!"),
    ),
    "SetAttachments": (("attachments", "Attachments!"),),
    "SetTransform": (("inputs", "[TransformInput]!"), ("transform", "Transform!")),
    "TransformInput": (("dataset_ref", "string!"), ("alias", _S)),
    # event time, caching
    "EventTimeSourceFromMetadata": (),
    "EventTimeSourceFromPath": (("pattern", "string!"), ("timestamp_format", _S)),
    "EventTimeSourceFromSystemTime": (),
    "SourceCachingForever": (),
    # fetch steps
    "RequestHeader": (("name", "string!"), ("value", "string!")),
    "EnvVar": (("name", "string!"), ("value", _S)),
    "MqttTopicSubscription": (("path", "string!"), ("qos", "MqttQos?")),
    "FetchStepUrl": (
        ("url", "string!"),
        ("event_time", "EventTimeSource"),
        ("cache", "SourceCaching"),
        ("headers", "[RequestHeader]"),
    ),
    "FetchStepFilesGlob": (
        ("path", "string!"),
        ("event_time", "EventTimeSource"),
        ("cache", "SourceCaching"),
        ("order", "SourceOrdering?"),
    ),
    "FetchStepContainer": (
        ("image", "string!"),
        ("command", _SS),
        ("args", _SS),
        ("env", "[EnvVar]"),
    ),
    "FetchStepMqtt": (
        ("host", "string!"),
        ("port", "int32"),
        ("username", _S),
        ("password", _S),
        ("topics", "[MqttTopicSubscription]!"),
    ),
    "FetchStepEthereumLogs": (
        ("chain_id", "uint64?"),
        ("node_url", _S),
        ("filter", _S),
        ("signature", _S),
    ),
    # prepare steps (a vector of unions is a vector of one-field wrapper tables)
    "PrepStepWrapper": (("value", "PrepStep!"),),
    "PrepStepDecompress": (("format", "CompressionFormat"), ("sub_path", _S)),
    "PrepStepPipe": (("command", _KEYS),),
    # read steps
    "ReadStepCsv": (
        ("ddl_schema", _SS),
        ("separator", _S),
        ("encoding", _S),
        ("quote", _S),
        ("escape", _S),
        ("header", "bool?"),
        ("infer_schema", "bool?"),
        ("null_value", _S),
        ("date_format", _S),
        ("timestamp_format", _S),
        ("schema", "DataSchema"),
    ),
    "ReadStepGeoJson": (("ddl_schema", _SS), ("schema", "DataSchema")),
    "ReadStepEsriShapefile": (("ddl_schema", _SS), ("sub_path", _S), ("schema", "DataSchema")),
    "ReadStepParquet": (("ddl_schema", _SS), ("schema", "DataSchema")),
    "ReadStepJson": (
        ("sub_path", _S),
        ("ddl_schema", _SS),
        ("date_format", _S),
        ("encoding", _S),
        ("timestamp_format", _S),
        ("schema", "DataSchema"),
    ),
    "ReadStepNdJson": (
        ("ddl_schema", _SS),
        ("date_format", _S),
        ("encoding", _S),
        ("timestamp_format", _S),
        ("schema", "DataSchema"),
    ),
    "ReadStepNdGeoJson": (("ddl_schema", _SS), ("schema", "DataSchema")),
    # transforms (SetTransform's too: see events.SetTransform)
    "SqlQueryStep": (("alias", _S), ("query", "string!")),
    "TemporalTable": (("name", "string!"), ("primary_key", _KEYS)),
    "TransformSql": (
        ("engine", "string!"),
        ("version", _S),
        ("query", _S),
        ("queries", "[SqlQueryStep]"),
        ("temporal_tables", "[TemporalTable]"),
    ),
    # merge strategies
    "MergeStrategyAppend": (),
    "MergeStrategyLedger": (("primary_key", _KEYS),),
    "MergeStrategySnapshot": (("primary_key", _KEYS), ("compare_columns", _SS)),
    "MergeStrategyChangelogStream": (("primary_key", _KEYS),),
    "MergeStrategyUpsertStream": (("primary_key", _KEYS),),
    # attachments
    "AttachmentEmbedded": (("path", "string!"), ("content", "string!")),
    "AttachmentsEmbedded": (("items", "[AttachmentEmbedded]!"),),
}

#: Integer types: (smallest, largest).
SCALARS: dict[str, tuple[int, int]] = {"int32": (-(2**31), 2**31 - 1), "uint64": (0, 2**64 - 1)}


@dataclass(frozen=True, slots=True)
class FieldType:
    """One field's type, parsed from its spelling in :data:`TABLES`."""

    name: str  # string, bool, int32, uint64, DataSchema, an enum, table or union name
    vector: bool = False
    required: bool = False  # ``!``: a table, string, vector or union ODF requires
    optional_scalar: bool = False  # ``?``: written whenever present

    @property
    def category(self) -> str:
        """scalar, enum, union, table, or the name itself (string, bool, DataSchema)."""
        if self.name in SCALARS:
            return "scalar"
        if self.name in ENUMS:
            return "enum"
        if self.name in UNIONS:
            return "union"
        if self.name in TABLES:
            return "table"
        return self.name


def field_type(spelling: str) -> FieldType:
    required = spelling.endswith("!")
    optional = spelling.endswith("?")
    core = spelling.rstrip("!?")
    vector = core.startswith("[")
    name = core.strip("[]")
    known = ("string", "bool", "DataSchema", *SCALARS, *ENUMS, *UNIONS, *TABLES)
    assert name in known, spelling
    return FieldType(name, vector, required, optional)


#: Parsed :data:`TABLES`: table name -> ((field, FieldType), ...).
LAYOUT: dict[str, tuple[tuple[str, FieldType], ...]] = {
    table: tuple((name, field_type(spelling)) for name, spelling in fields)
    for table, fields in TABLES.items()
}


def normalise(value: Any, t: FieldType) -> Any:
    """``value`` as the decoder would give it back: every field of every table present
    (``None`` when left out), lists as tuples, union members by their ``"kind"``. Values that do
    not fit the layout are left as they are, for the encoder to refuse by name."""
    if value is None:
        return None
    if t.vector:
        if isinstance(value, list | tuple):
            item = FieldType(t.name)
            return tuple(normalise(v, item) for v in value)
        return value
    category = t.category
    if category == "table":
        return normalise_table(value, t.name)
    if category == "union":
        if isinstance(value, Mapping) and value.get("kind") in UNIONS[t.name]:
            return {"kind": value["kind"], **normalise_table(value, value["kind"])}
        return value
    return value


def normalise_table(value: Any, table: str) -> Any:
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    for name, t in LAYOUT[table]:
        out[name] = normalise(out.get(name), t)
    return out


def normalise_event(event: Any, table: str) -> None:
    """Normalise a frozen event dataclass's fields in place (from its ``__post_init__``)."""
    for name, t in LAYOUT[table]:
        object.__setattr__(event, name, normalise(getattr(event, name), t))
