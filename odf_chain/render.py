"""Human and JSON renderings of blocks, events, schemas and states (for the CLI and exports)."""

from __future__ import annotations

import base64
import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from odf_chain.chain import BlockEntry
from odf_chain.errors import FormatError
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    ExecuteTransform,
    Seed,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetVocab,
)
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState


def to_jsonable(value: Any) -> Any:
    """Events and their parts as JSON-ready data: hashes and ids as text, times ISO-8601."""
    if isinstance(value, Multihash | DatasetId):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, SetDataSchema):
        out: dict[str, Any] = {"fields": None}
        try:
            out["fields"] = schema_to_jsonable(value.to_arrow())
        except FormatError as exc:
            out["error"] = str(exc)
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def schema_to_jsonable(schema: pa.Schema) -> list[dict[str, Any]]:
    def field_json(f: pa.Field) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f.name, "type": str(f.type), "nullable": f.nullable}
        if f.metadata:
            out["metadata"] = {
                k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
                for k, v in f.metadata.items()
            }
        return out

    return [field_json(f) for f in schema]


def block_to_jsonable(entry: BlockEntry) -> dict[str, Any]:
    block = entry.block
    return {
        "sequence_number": block.sequence_number,
        "hash": str(entry.hash),
        "prev_block_hash": to_jsonable(block.prev_block_hash),
        "system_time": block.system_time.isoformat(),
        "event_type": block.event_name,
        "event": to_jsonable(block.event),
    }


def _count(n: int, unit: str) -> str:
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def summarize_event(event: Any) -> str:
    """One line that says what the event did."""
    match event:
        case Seed():
            return f"dataset {event.dataset_id} ({event.dataset_kind.name.lower()})"
        case SetDataSchema():
            try:
                schema = event.to_arrow()
            except FormatError as exc:
                return f"unreadable schema: {exc}"
            return f"{_count(len(schema), 'field')}: {', '.join(schema.names)}"
        case AddData() | ExecuteTransform():
            parts = []
            if event.new_data is not None:
                interval = event.new_data.offset_interval
                parts.append(
                    f"offsets {interval.start}..{interval.end} "
                    f"({_count(event.new_data.num_records, 'row')}, "
                    f"{_count(event.new_data.size, 'byte')}) -> data/{event.new_data.physical_hash}"
                )
            if event.new_watermark is not None:
                parts.append(f"watermark {event.new_watermark.isoformat()}")
            if isinstance(event, AddData) and event.new_source_state is not None:
                parts.append(f"source {event.new_source_state.source_name}")
            return "; ".join(parts) or "no data"
        case SetVocab():
            names = {k: v for k, v in dataclasses.asdict(event).items() if v is not None}
            return ", ".join(f"{k}={v}" for k, v in names.items())
        case SetInfo():
            return (event.description or "") + (
                f" [{', '.join(event.keywords)}]" if event.keywords else ""
            )
        case SetLicense():
            return event.spdx_id or event.short_name or event.name or ""
        case AddFieldLineage():
            run = event.run
            offsets = (
                "no records"
                if run.offsets is None
                else f"offsets {run.offsets.start}..{run.offsets.end}"
            )
            return (
                f"job {run.job_name} run {run.run_id}: {_count(len(event.inputs), 'input')}, "
                f"{_count(len(event.operations), 'operation')}; {offsets}"
            )
        case _:
            return ""


def log_line(entry: BlockEntry) -> str:
    block = entry.block
    time = block.system_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return (
        f"{block.sequence_number:>6}  {entry.hash}  {time}  "
        f"{block.event_name}  {summarize_event(block.event)}"
    ).rstrip()


def state_to_jsonable(state: DatasetState) -> dict[str, Any]:
    return {
        "head": to_jsonable(state.head),
        "sequence_number": state.sequence_number,
        "system_time": to_jsonable(state.system_time),
        "dataset_id": to_jsonable(state.dataset_id),
        "schema_block": state.schema_sequence_number,
        "schema": None if state.schema is None else schema_to_jsonable(state.schema),
        "vocab": to_jsonable(state.vocab),
        "last_offset": state.last_offset,
        "watermark": to_jsonable(state.watermark),
        "num_records": state.num_records,
        "num_slices": state.num_slices,
        "data_size": state.data_size,
        "last_lineage_block": state.last_lineage_sequence_number,
    }
