"""Human and JSON renderings of blocks, events, schemas and states (for the CLI and exports)."""

from __future__ import annotations

import base64
import dataclasses
import enum
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

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
    SetTransform,
    SetVocab,
)
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState, Vocabulary, lineage_of, recorded_transaction

if TYPE_CHECKING:  # pyarrow (~130 ms with numpy) loads where a schema is decoded or built
    import pyarrow as pa


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
            return f"{event.dataset_kind.name.lower()} dataset {event.dataset_id}"
        case SetDataSchema():
            try:
                schema = event.to_arrow()
            except FormatError as exc:
                return f"unreadable schema: {exc}"
            # the dataset's own columns first: a line cut to fit keeps them, not ODF's
            system = dataclasses.astuple(Vocabulary())
            own = [name for name in schema.names if name not in system]
            rest = [name for name in schema.names if name in system]
            listed = ", ".join(own) + (f" (and {', '.join(rest)})" if own and rest else "")
            return f"{_count(len(schema), 'field')}: {listed or ', '.join(rest)}"
        case AddData() | ExecuteTransform():
            # what a reader looks for first; the slice's file name (69 characters) last, so a
            # line cut to fit loses that rather than the lineage or the transaction
            parts = []
            if event.new_data is not None:
                interval = event.new_data.offset_interval
                parts.append(
                    f"offsets {interval.start}..{interval.end} "
                    f"({_count(event.new_data.num_records, 'row')}, "
                    f"{_count(event.new_data.size, 'byte')})"
                )
            transaction = recorded_transaction(event)
            if transaction is not None:
                parts.append(f"transaction {transaction[0]} v{transaction[1]}")
            if isinstance(event, ExecuteTransform):
                parts.append(_run_summary(event))
            carried = lineage_of(event)
            if carried is not None:
                parts.append(
                    f"lineage of {carried.run.job_name} run {carried.run.run_id} "
                    f"({_count(len(carried.operations), 'operation')})"
                )
            if isinstance(event, AddData) and event.new_source_state is not None:
                parts.append(f"source {event.new_source_state.source_name}")
            if event.new_watermark is not None:
                parts.append(f"watermark {log_time(event.new_watermark)}")
            if event.new_data is not None:
                parts.append(f"data/{event.new_data.physical_hash}")
            return "; ".join(parts) or "no data"
        case SetTransform():
            sql = event.transform or {}
            aliases = ", ".join(str(i.get("alias")) for i in event.inputs or ())
            steps = sql.get("queries") or ()
            query = " ".join(str(steps[-1].get("query") if steps else sql.get("query")).split())
            return (
                f"{sql.get('engine')} {sql.get('version') or ''}".strip()
                + f" over {aliases or 'no inputs'}: {query}"
            )
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


def _run_summary(event: ExecuteTransform) -> str:
    """What a run read: each input's offsets, and whether it can be re-run."""
    from odf_chain.derived import RunRecord  # derive's record: only for its runs

    ends = ", ".join(str(i.new_offset) for i in event.query_inputs)
    record = RunRecord.of(event)
    verdict = "" if record is None or record.reproducible else " (not reproducible)"
    return f"{_count(len(event.query_inputs), 'input')} read to offsets {ends}{verdict}"


LOG_WIDTH = 100
"""Columns a ``log`` line fits in (the summary is cut with an ellipsis to fit)."""
SHORT_HASH = 12
"""Hex characters of a block hash's digest ``log`` shows (48 bits), without the multibase and
multihash header every block of a chain shares (``f1e20``: base16, BLAKE3, 32 bytes;
``f1620`` for SHA3-256); pasted back, it is a ref (:mod:`odf_chain.replay`). A chain of a
million blocks holds a pair sharing them with a chance of about 0.2%, and such a prefix is
refused as ambiguous, never misread. One made of digits only would read as a sequence number:
it is lengthened to its first letter."""
_EVENT_WIDTH = len("AddFieldLineage")
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def short_hash(block_hash: Multihash) -> str:
    """The :data:`SHORT_HASH` first hex digits of the digest (more, up to the first a-f, when
    those are all digits)."""
    digest = block_hash.digest_bytes.hex()
    end = SHORT_HASH
    while end < len(digest) and digest[:end].isdigit():
        end += 1
    return digest[:end]


def short_hash_text(block_hash: str) -> str:
    """:func:`short_hash` of a hash given as its multibase text."""
    return short_hash(Multihash.from_multibase(block_hash))


def log_time(moment: datetime) -> str:
    """``2026-11-24T10:15:00.123Z``: UTC, in milliseconds (the resolution odf_chain writes
    system times in, so the text given back as a ref names the same block)."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


def _printable(text: str) -> str:
    """``text`` on one line: control, format and separator characters (a newline, a
    right-to-left override in a field name) escaped."""
    if text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) in _UNPRINTABLE
        else ch
        for ch in text
    )


def _columns(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal columns, ending in an ellipsis when cut."""
    if sum(map(_columns, text)) <= width:
        return text
    used, out = 0, []
    for ch in text:
        used += _columns(ch)
        if used > width - 1:
            break
        out.append(ch)
    return "".join(out).rstrip() + "…"


def log_header(seq_width: int = 3, *, full: bool = False) -> str:
    """The column names above log lines of the same ``seq_width`` and ``full``."""
    block_width = len(str(Multihash("blake3", bytes(32)))) if full else SHORT_HASH
    return (
        f"{'SEQ':>{seq_width}}  {'BLOCK':<{block_width}}  {'SYSTEM TIME (UTC)':<24}  "
        f"{'EVENT':<{_EVENT_WIDTH}}  SUMMARY"
    )


def log_line(entry: BlockEntry, *, full: bool = False, seq_width: int = 3) -> str:
    """One block as ``odf-chain log`` shows it: sequence number, hash, system time, event and
    what it did, within :data:`LOG_WIDTH` columns; ``full``: the whole hash and summary."""
    block = entry.block
    head = (
        f"{block.sequence_number:>{seq_width}}  "
        f"{str(entry.hash) if full else short_hash(entry.hash)}  "
        f"{log_time(block.system_time)}  {block.event_name:<{_EVENT_WIDTH}}  "
    )
    summary = _printable(summarize_event(block.event))
    if not full:
        summary = fit(summary, max(LOG_WIDTH - len(head), 1))
    return (head + summary).rstrip()


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
