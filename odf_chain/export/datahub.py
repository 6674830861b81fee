"""A DataHub metadata file for a dataset: the MCP JSON that ``datahub ingest`` (file source) and
``datahub check metadata-file`` read.

The file is a JSON list of MetadataChangeProposals (entity type ``dataset``, change type
``UPSERT``, the aspect as plain JSON under ``aspect.json``), written in the canonical form
DataHub's own classes give (``MetadataChangeProposalWrapper.to_obj(simplified_structure=True)``,
defaults included), so reading it back and writing it again changes nothing. It is built as
plain JSON: acryl-datahub is a test-only dependency, and the tests check the round trip.

What it holds, for the dataset as of block ``at``:

- ``datasetProperties``: name (the last part of its location), description and keywords from
  SetInfo, and ``odf.*`` custom properties (dataset id, head block, block count, ...);
- ``schemaMetadata``: the schema in force, one field per v2 path exactly as DataHub lists it
  (:attr:`DatasetState.fields`); ``hash`` is the hash of the SetDataSchema block;
- ``upstreamLineage``: every input its lineage runs read (type TRANSFORMED) and the
  ``fineGrainedLineages``: one entry per (written field, transformation), its upstreams the
  source fields of every run that wrote the field that way (with ``indirect=False``,
  ``--no-indirect``, the INDIRECT ones left out: join keys, filters, group-by and sort then show
  only as the dataset-level ``upstreams``);
- ``schemaMetadata`` of each odf_chain dataset it read, as of the newest block a run pinned
  (evolution only adds fields, so the fields of every older pin are there too), so that every
  upstream field URN resolves. An input that cannot be opened is still named in the lineage
  and listed in the ``odf.unreachable_inputs`` property.

Names: an odf_chain dataset is ``urn:li:dataset:(urn:li:dataPlatform:<platform>,<dataset id>,
<env>)`` with its ``did:odf:...`` text as name: unique, and stable for the dataset's whole life
wherever it is stored. An external input is on platform ``file``, named by its URI. Field URNs
are ``urn:li:schemaField:(<dataset urn>,<v2 path>)``; as in DataHub's own URN classes, the
reserved characters ``,`` ``(`` ``)`` ``␟`` in a name or a path are percent-encoded there (the
schema keeps the path as it is).

Drops have no place in DataHub's model and are left out. Everything is sorted, so two exports
of one chain are byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from odf_chain.dataset import Dataset
from odf_chain.errors import FormatError, OdfChainError
from odf_chain.events import LineageInput, Transformation, TransformationType
from odf_chain.export.chain_view import (
    ChainView,
    InputOpener,
    PinnedView,
    millis,
    view_dataset,
    write_text,
)
from odf_chain.lineage import input_key, openlineage_names, resolve
from odf_chain.schema.fields import FieldInfo

DEFAULT_PLATFORM = "odf"
FILE_PLATFORM = "file"
UNKNOWN_ACTOR = "urn:li:corpuser:unknown"

# Characters DataHub percent-encodes inside URN parts (its UrnEncoder.RESERVED_CHARS).
_RESERVED = {",": "%2C", "(": "%28", ")": "%29", "\u241f": "%E2%90%9F"}

# FieldInfo.type -> DataHub's SchemaFieldDataType member.
_TYPE_CLASSES = {
    "string": "StringType",
    "number": "NumberType",
    "boolean": "BooleanType",
    "bytes": "BytesType",
    "date": "DateType",
    "time": "TimeType",
    "enum": "EnumType",
    "null": "NullType",
    "array": "ArrayType",
    "map": "MapType",
    "union": "UnionType",
    "record": "RecordType",
    "fixed": "FixedType",
}


def encode_urn_part(text: str) -> str:
    """``text`` with DataHub's reserved URN characters percent-encoded."""
    if not any(c in _RESERVED for c in text):
        return text
    return "".join(_RESERVED.get(c, c) for c in text)


def dataset_urn(platform: str, name: str, env: str = "PROD") -> str:
    return f"urn:li:dataset:(urn:li:dataPlatform:{platform},{encode_urn_part(name)},{env.upper()})"


def schema_field_urn(dataset: str, path: str) -> str:
    return f"urn:li:schemaField:({dataset},{encode_urn_part(path)})"


def transform_operation(t: Transformation) -> str:
    """``DIRECT:AGGREGATION``, with ``,MASKED`` and ``,OPAQUE`` when they apply: OpenLineage's
    names, as in the OpenLineage export (an older chain's DIRECT CONDITIONAL is
    ``DIRECT:TRANSFORMATION``; an INDIRECT step with a direct subtype is just ``INDIRECT``)."""
    kind, subtype = openlineage_names(t)
    text = kind if subtype is None else f"{kind}:{subtype}"
    return text + (",MASKED" if t.masking else "") + (",OPAQUE" if t.opaque else "")


def _stamp(time_ms: int) -> dict[str, Any]:
    return {"time": time_ms, "actor": UNKNOWN_ACTOR}


def _mcp(urn: str, aspect_name: str, aspect: dict[str, Any]) -> dict[str, Any]:
    return {
        "entityType": "dataset",
        "entityUrn": urn,
        "changeType": "UPSERT",
        "aspectName": aspect_name,
        "aspect": {"json": aspect},
    }


def _schema_field(info: FieldInfo) -> dict[str, Any]:
    type_class = _TYPE_CLASSES.get(info.type)
    if type_class is None:
        raise FormatError(f"field {info.path}: no DataHub type for {info.type!r}")
    field: dict[str, Any] = {
        "fieldPath": info.path,
        "nullable": info.nullable,
        "type": {"type": {f"com.linkedin.schema.{type_class}": {}}},
        "nativeDataType": info.native_type,
        "recursive": False,
        "isPartOfKey": info.is_part_of_key,
    }
    if info.doc is not None:
        field["description"] = info.doc
    return field


def schema_metadata(view: ChainView, platform: str) -> dict[str, Any] | None:
    """The ``schemaMetadata`` aspect of ``view`` (None before any schema)."""
    schema, entry = view.state.schema, view.schema_entry
    if schema is None or entry is None:
        return None
    stamp = _stamp(millis(entry.block.system_time))
    raw = schema.to_string(show_field_metadata=False, show_schema_metadata=False)
    return {
        "schemaName": view.name,
        "platform": f"urn:li:dataPlatform:{platform}",
        "version": 0,
        "created": stamp,
        "lastModified": stamp,
        "hash": str(entry.hash),
        "platformSchema": {"com.linkedin.schema.OtherSchema": {"rawSchema": raw}},
        "fields": [_schema_field(info) for info in view.state.fields],
    }


def dataset_properties(view: ChainView, unreachable: Iterable[str] = ()) -> dict[str, Any]:
    state = view.state
    custom = {
        "odf.dataset_id": view.key,
        "odf.location": view.location,
        "odf.head": str(state.head),
        "odf.blocks": str(state.sequence_number + 1),
        "odf.records": str(state.num_records),
    }
    missing = sorted(set(unreachable))
    if missing:
        custom["odf.unreachable_inputs"] = ",".join(missing)
    aspect: dict[str, Any] = {"customProperties": custom, "name": view.name}
    info = state.info
    if info is not None and info.description is not None:
        aspect["description"] = info.description
    aspect["tags"] = list(info.keywords or ()) if info is not None else []
    return aspect


class _Names:
    """URNs of the datasets an export names."""

    def __init__(self, platform: str, env: str) -> None:
        self.platform, self.env = platform, env

    def of_key(self, key: str) -> str:
        """The URN of a field-graph dataset key: a dataset id, else an external URI."""
        if key.startswith("did:odf:"):
            return dataset_urn(self.platform, key, self.env)
        return dataset_urn(FILE_PLATFORM, key, self.env)

    def of_input(self, pinned: LineageInput) -> str:
        return self.of_key(input_key(pinned))


def upstream_lineage(
    view: ChainView, names: _Names, *, indirect: bool = True
) -> dict[str, Any] | None:
    """The ``upstreamLineage`` aspect from every lineage run of ``view`` (None without runs).
    ``indirect=False`` leaves the INDIRECT edges (join keys, filters, group-by, sort) out of
    ``fineGrainedLineages``: DataHub has no dataset-level list for them, and ``upstreams``
    names their datasets already."""
    if not view.runs:
        return None
    own = names.of_key(view.key)
    upstreams: dict[str, dict[str, Any]] = {}
    grouped: dict[tuple[str, str], set[str]] = {}
    for run in view.runs:
        time_ms = millis(run.entry.block.system_time)
        for pinned in run.event.inputs:
            urn = names.of_input(pinned)
            properties = {"odf.input": pinned.name}
            if pinned.block_hash is not None:
                properties["odf.pinned_block"] = str(pinned.block_hash)
            if pinned.content_hash is not None:
                properties["odf.content_hash"] = str(pinned.content_hash)
            upstreams[urn] = {  # the latest run's pin wins
                "auditStamp": _stamp(time_ms),
                "dataset": urn,
                "type": "TRANSFORMED",
                "properties": properties,
            }
        for edge in resolve(run.event).edges:
            if not indirect and edge.transformation.type == TransformationType.INDIRECT:
                continue
            key = (schema_field_urn(own, edge.target), transform_operation(edge.transformation))
            source = schema_field_urn(names.of_input(edge.input), edge.source)
            grouped.setdefault(key, set()).add(source)
    fine = [
        {
            "upstreamType": "FIELD_SET",
            "upstreams": sorted(sources),
            "downstreamType": "FIELD",
            "downstreams": [downstream],
            "transformOperation": operation,
            "confidenceScore": 1.0,
        }
        for (downstream, operation), sources in sorted(grouped.items())
    ]
    return {"upstreams": [upstreams[urn] for urn in sorted(upstreams)], "fineGrainedLineages": fine}


def _newest_pins(view: ChainView, opener: InputOpener) -> dict[str, PinnedView]:
    """Each odf_chain input of ``view``'s runs, opened at the newest block any run pinned."""
    best: dict[str, tuple[int, LineageInput]] = {}
    failed: dict[str, PinnedView] = {}
    for run in view.runs:
        for pinned in run.event.inputs:
            if not pinned.is_dataset:
                continue
            key = input_key(pinned)
            try:
                position = opener.position(pinned)
            except OdfChainError as exc:  # reported, never fatal
                failed.setdefault(key, PinnedView(pinned, None, str(exc)))
                continue
            if key not in best or position >= best[key][0]:
                best[key] = (position, pinned)
    opened = {key: opener.open(pinned) for key, (_, pinned) in best.items()}
    return {**{k: v for k, v in failed.items() if k not in opened}, **opened}


def datahub_mcps(
    dataset: Dataset,
    *,
    at: str = "head",
    platform: str = DEFAULT_PLATFORM,
    env: str = "PROD",
    indirect: bool = True,
) -> list[dict[str, Any]]:
    """The MCPs of :func:`write_datahub_file`, as JSON-ready dicts in file order."""
    view = view_dataset(dataset, at)
    names = _Names(platform, env)
    pins = _newest_pins(view, InputOpener())
    own = names.of_key(view.key)
    unreachable = [key for key, pin in pins.items() if pin.view is None]
    mcps = [_mcp(own, "datasetProperties", dataset_properties(view, unreachable))]
    schema = schema_metadata(view, platform)
    if schema is not None:
        mcps.append(_mcp(own, "schemaMetadata", schema))
    lineage = upstream_lineage(view, names, indirect=indirect)
    if lineage is not None:
        mcps.append(_mcp(own, "upstreamLineage", lineage))
    for key in sorted(pins, key=names.of_key):
        upstream = pins[key].view
        if upstream is None or upstream.key == view.key:
            continue
        aspect = schema_metadata(upstream, platform)
        if aspect is not None:
            mcps.append(_mcp(names.of_key(key), "schemaMetadata", aspect))
    return mcps


def write_datahub_file(
    dataset: Dataset,
    out: str | Path,
    *,
    at: str = "head",
    platform: str = DEFAULT_PLATFORM,
    env: str = "PROD",
    indirect: bool = True,
) -> int:
    """Write the DataHub metadata file of ``dataset`` as of block ``at`` to ``out`` (see the
    module doc); return the number of MCPs written. ``indirect=False``: no INDIRECT edges in
    ``fineGrainedLineages``."""
    text, count = datahub_text(dataset, at=at, platform=platform, env=env, indirect=indirect)
    write_text(out, text)
    return count


def datahub_text(
    dataset: Dataset,
    *,
    at: str = "head",
    platform: str = DEFAULT_PLATFORM,
    env: str = "PROD",
    indirect: bool = True,
) -> tuple[str, int]:
    """The text :func:`write_datahub_file` writes, and the number of MCPs in it."""
    mcps = datahub_mcps(dataset, at=at, platform=platform, env=env, indirect=indirect)
    return json.dumps(mcps, indent=2, sort_keys=True, ensure_ascii=False) + "\n", len(mcps)
