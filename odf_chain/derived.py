"""Derivative datasets, without Spark: what a run records, and how its output is a changelog.

A derivative dataset (Seed of kind Derivative) holds a SetTransform — its inputs by dataset id
and alias, and the query — and one ExecuteTransform per run. odf_chain's runs *recompute and
correct* (docs/derived.md): each run computes the query's whole answer over every input row up
to the blocks it pins, and appends the difference from the answer in force as ODF changelog
rows (RFC-015's ``op``: 1 retracts a row, 0 appends one). Folding the changelog up to any
block gives the query's answer over the inputs as that block pins them, however the inputs
grew between runs. Each run's ExecuteTransform records, in its ``extra`` attributes under
:data:`DERIVE_KEY`, what a verifier needs to run it again and compare: the engine version and
the session settings results depend on, the inputs' locations, and order-independent digests
(:mod:`odf_chain.row_digest`) of the answer and of the slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from odf_chain import changelog, row_digest
from odf_chain.errors import SchemaError, TypeChangeError
from odf_chain.events import ExecuteTransform, SetTransform
from odf_chain.format.did import DatasetId
from odf_chain.slices import OPERATION_TYPE, TIME_TYPE
from odf_chain.state import Vocabulary

DERIVE_KEY = "odf-chain.dev/derive"
"""The ExecuteTransform extra attribute that records a run (see :class:`RunRecord`)."""
ENGINE = "spark"
OP_RETRACT = 1
OP_APPEND = 0

REPRODUCIBLE_CONF = ("spark.sql.session.timeZone", "spark.sql.ansi.enabled")
"""Session settings a query's answer can depend on (timestamp rendering and casts; ANSI
arithmetic and casts): recorded with each run, set again when it is reproduced. Parallelism
and adaptive execution are not among them: a deterministic query answers the same whatever
they are, and ``--reproduce`` proves it by re-running under the verifier's own settings."""


def sql_transform(inputs: Sequence[tuple[str, DatasetId]], sql: str, version: str) -> SetTransform:
    """The SetTransform of a Spark SQL query over ``inputs`` (alias, dataset id): stored, as
    ODF says, as a one-step ``queries`` list rather than ``query``."""
    return SetTransform(
        inputs=tuple({"dataset_ref": i.to_did(), "alias": alias} for alias, i in inputs),
        transform={
            "kind": "TransformSql",
            "engine": ENGINE,
            "version": version,
            "query": None,
            "queries": ({"alias": None, "query": sql},),
            "temporal_tables": None,
        },
    )


def transform_inputs(transform: SetTransform) -> list[tuple[str, DatasetId]]:
    """(alias, dataset id) of each input, in the SetTransform's order."""
    return [(i["alias"], DatasetId.from_did(i["dataset_ref"])) for i in transform.inputs or ()]


def transform_queries(transform: SetTransform) -> list[tuple[str | None, str]]:
    """(alias, query) steps: every step but the last a temporary view, the last the answer."""
    sql = transform.transform or {}
    steps = [(q.get("alias"), q["query"]) for q in sql.get("queries") or ()]
    return steps or [(None, sql["query"])]


@dataclass(frozen=True)
class RunRecord:
    """What a derive run records about itself beyond ODF's ExecuteTransform fields."""

    engine_version: str
    conf: Mapping[str, str | None]
    input_uris: Mapping[str, str]  # alias -> where the input was read from
    columns: tuple[str, ...]  # the answer's columns, in order
    answer_rows: int
    answer_digest: str
    slice_digest: str | None
    retracted: int
    appended: int
    nondeterministic: tuple[str, ...]  # why the answer may differ on a re-run (empty: it won't)

    @property
    def reproducible(self) -> bool:
        return not self.nondeterministic

    def as_extra(self) -> dict[str, Any]:
        return {
            DERIVE_KEY: {
                "engine": ENGINE,
                "version": self.engine_version,
                "conf": dict(self.conf),
                "inputs": dict(self.input_uris),
                "columns": list(self.columns),
                "answer": {"rows": self.answer_rows, "digest": self.answer_digest},
                "slice": None
                if self.slice_digest is None
                else {
                    "digest": self.slice_digest,
                    "retracted": self.retracted,
                    "appended": self.appended,
                },
                "nondeterministic": list(self.nondeterministic),
            }
        }

    @classmethod
    def of(cls, event: ExecuteTransform) -> RunRecord | None:
        """The record an ExecuteTransform carries, or None (a run made by another tool)."""
        raw = (event.extra or {}).get(DERIVE_KEY)
        if not isinstance(raw, Mapping):
            return None
        try:
            answer, piece = raw["answer"], raw.get("slice")
            return cls(
                engine_version=str(raw["version"]),
                conf=dict(raw.get("conf") or {}),
                input_uris=dict(raw.get("inputs") or {}),
                columns=tuple(str(c) for c in raw["columns"]),
                answer_rows=int(answer["rows"]),
                answer_digest=str(answer["digest"]),
                slice_digest=None if piece is None else str(piece["digest"]),
                retracted=0 if piece is None else int(piece["retracted"]),
                appended=0 if piece is None else int(piece["appended"]),
                nondeterministic=tuple(str(r) for r in raw.get("nondeterministic") or ()),
            )
        except (KeyError, TypeError, ValueError, OverflowError):  # "rows": Infinity, say
            return None


def answer_digest(answer: pa.Table, columns: Sequence[str] | None = None) -> str:
    """The order-independent digest of an answer's rows (all its columns by default)."""
    names = list(answer.column_names if columns is None else columns)
    return row_digest.digest_text(row_digest.multiset_digest(answer, names))


def slice_digest_columns(schema: pa.Schema, vocab: Vocabulary) -> list[str]:
    """The columns a slice's digest covers: every column but the offset and system time
    (which say where and when a row was written, not what it is)."""
    skip = {vocab.offset_column, vocab.system_time_column}
    return [n for n in schema.names if n not in skip]


def fold(ledger: pa.Table, vocab: Vocabulary) -> pa.Table:
    """The live rows of a changelog: appends not retracted since, in offset order."""
    if vocab.operation_type_column not in ledger.column_names:
        return ledger
    return changelog.apply_changelog(
        ledger,
        op_column=vocab.operation_type_column,
        offset_column=vocab.offset_column,
        ignore=(vocab.offset_column, vocab.operation_type_column, vocab.system_time_column),
    )


def fold_onto(live: pa.Table | None, rows: pa.Table, vocab: Vocabulary) -> pa.Table:
    """The live rows once the changelog rows ``rows`` (one slice) follow ``live`` (the live
    rows before them; None before the first slice): how reproduce and ``verify --deep`` walk a
    derivative dataset slice by slice. IntegrityError when a row retracts one not live."""
    ledger = rows if live is None else pa.concat_tables([live, rows], promote_options="permissive")
    return fold(ledger, vocab)


@dataclass(frozen=True)
class Changes:
    """A run's changelog rows (user columns, event time and ``op``), retractions first."""

    table: pa.Table
    retracted: int
    appended: int


def changes(
    live: pa.Table | None, answer: pa.Table, vocab: Vocabulary, system_time: datetime
) -> Changes:
    """The changelog that turns ``live`` (the folded output, system columns included; None
    before the first run) into ``answer``: retract each live row the answer holds fewer times,
    append each answer row the live rows hold fewer times (multisets over the answer's
    columns). Live rows with other columns than the answer's (the query changed) are all
    retracted and the answer appended whole.

    Retracted rows are copied whole (their event time too), so a retraction names exactly the
    row it cancels; appended rows take the query's event time column when it has one, the
    run's system time otherwise."""
    event_time = vocab.event_time_column
    columns = answer.column_names
    system = set(vocab.system_columns)
    if len(set(columns)) != len(columns):
        twice = sorted({c for c in columns if columns.count(c) > 1})
        raise SchemaError(f"the answer has more than one column named {', '.join(twice)}")
    reserved = vocab.spark_clashes(columns)  # the answer comes from Spark
    if reserved:
        raise SchemaError(
            f"the answer's column(s) {', '.join(reserved)} are reserved for ODF system columns "
            "(a SELECT * of a dataset has them): leave them out or rename them"
        )
    if live is None:
        live_columns: list[str] = []
    else:
        live_columns = [c for c in live.column_names if c not in system]
    user = [c for c in live_columns if c != event_time or event_time in columns]
    if live is None or live.num_rows == 0:
        gone, new = [], list(range(answer.num_rows))
    elif sorted(user) != sorted(columns):
        gone, new = list(range(live.num_rows)), list(range(answer.num_rows))
    else:
        old = live.select(columns)
        try:
            old = old if old.schema.equals(answer.schema) else old.cast(answer.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            old = None
        if old is None:
            gone, new = list(range(live.num_rows)), list(range(answer.num_rows))
        else:
            gone, new = changelog.diff(old, answer, columns)
    added = answer.take(pa.array(new, pa.int64()))
    if event_time not in columns:
        stamp = pa.array(np.full(len(new), pa.scalar(system_time, TIME_TYPE).value), pa.int64())
        added = added.append_column(event_time, stamp.view(TIME_TYPE))
    added = added.append_column(op_field(vocab), pa.array(np.full(len(new), OP_APPEND, np.int32)))
    parts = [added]
    if gone:
        assert live is not None
        removed = live.take(pa.array(gone, pa.int64())).select(live_columns)
        removed = removed.append_column(
            op_field(vocab), pa.array(np.full(len(gone), OP_RETRACT, np.int32))
        )
        parts.insert(0, removed)
    table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else added
    return Changes(table.combine_chunks(), len(gone), len(new))


def op_field(vocab: Vocabulary) -> pa.Field:
    return pa.field(vocab.operation_type_column, OPERATION_TYPE, nullable=False)


def comparable(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with each column the dataset's ``schema`` declares cast to the declared type
    (the type its slices store), refusing a cast that would change a value: an answer and the
    rows folded from the slices then compare value for value, and digest alike."""
    fields = []
    for f in table.schema:
        declared = schema.field(f.name) if f.name in schema.names else None
        if (
            declared is not None
            and not pa.types.is_null(f.type)  # all nulls: of any type
            and _kind(f.type) != _kind(declared.type)
        ):
            raise TypeChangeError(
                "schema-evolution",
                f"the answer's column {f.name!r} is {f.type}, the dataset's is "
                f"{declared.type}: a column's type never changes (a cast would change or refuse "
                "values); cast it in the query, or give it a new name",
            )
        fields.append(f if declared is None else f.with_type(declared.type))
    target = pa.schema(fields)
    if target.equals(table.schema):
        return table
    try:
        return table.cast(target)  # safe: a value the declared type cannot hold is refused
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"the answer does not fit the dataset's schema: {exc}") from None


def _kind(t: pa.DataType) -> str:
    """What a type holds, whatever its width or unit: integers, floats, decimals, text, bytes,
    timestamps, dates; for nested types, the kinds of what they hold (a list of floats is not
    a list of integers)."""
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{_kind(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{_kind(t.key_type)},{_kind(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"list<{_kind(t.value_type)}>"
    for kind, test in (
        ("integer", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("decimal", pa.types.is_decimal),
        ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("bytes", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("timestamp", pa.types.is_timestamp),
        ("date", pa.types.is_date),
    ):
        if test(t):
            return kind
    return str(t)


def consumed(transform: SetTransform | None, event: ExecuteTransform) -> list[dict[str, Any]]:
    """What a run read, input by input, as plain data: alias, dataset id, where it was read,
    the block interval (prev, new] and offsets. A run recomputes over every input row up to
    ``new_offset``; ``prev_offset`` + 1 .. ``new_offset`` are the rows new since the last
    run of that input (ODF's interval)."""
    aliases = {} if transform is None else {i: a for a, i in transform_inputs(transform)}
    record = RunRecord.of(event)
    uris = {} if record is None else record.input_uris
    out = []

    def text(value: object) -> str | None:
        return None if value is None else str(value)

    for pin in event.query_inputs:
        alias = aliases.get(pin.dataset_id)
        new_rows = None
        if pin.new_offset is not None:
            first = 0 if pin.prev_offset is None else pin.prev_offset + 1
            new_rows = None if first > pin.new_offset else [first, pin.new_offset]
        out.append(
            {
                "alias": alias,
                "dataset_id": text(pin.dataset_id),
                "location": None if alias is None else uris.get(alias),
                "prev_block_hash": text(pin.prev_block_hash),
                "new_block_hash": text(pin.new_block_hash),
                "prev_offset": pin.prev_offset,
                "new_offset": pin.new_offset,
                "read_offsets": None if pin.new_offset is None else [0, pin.new_offset],
                "new_offsets": new_rows,
            }
        )
    return out
