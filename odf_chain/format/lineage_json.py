"""Field lineage (:class:`AddFieldLineage`) as JSON, to be carried in ODF's ``extra`` attributes.

AddFieldLineage is odf_chain's own event: a plain ODF reader does not know it. ODF's extension
point is the ExtraAttributes of a block (a JSON object per key), which every reader keeps and
may ignore; lineage written there as JSON survives in a chain that plain ODF tools read, copy
and re-serve. This module is that JSON form, and nothing else: where it is put, and when, is the
writer's business; whether the lineage makes sense (its names resolve, it has no cycle) is the
rules'.

The form is small (every optional value left out when it is None or its default, so a typical
run costs a few hundred bytes per block) and canonical: one event has one JSON form (the same
instant in any zone is the same text), and :func:`lineage_from_json` accepts only that form,
so ``lineage_to_json(lineage_from_json(doc)) == doc`` for every document it accepts. Anything
else is refused with the path of the bad value rather than half-read, because the JSON in a
block is anybody's to write. ``"v"`` is the shape's version: a reader meeting a version it does
not know refuses it instead of misreading it, so the shape can change later.

The shape, version 1 (names as in the dataclasses; ``?`` marks what is left out when absent)::

    {"v": 1,
     "run": {"job_name": str, "run_id": str, "started_at": TIME, "ended_at"?: TIME,
             "offsets"?: {"start": uint64, "end": uint64}},
     "inputs"?: [{"name": str, "uri"?: str, "dataset_id"?: "did:odf:f…",
                  "block_hash"?: "f…", "content_hash"?: "f…"}],
     "operations"?: [{"name": str, "inputs"?: [{"origin": str, "field": str}],
                      "outputs"?: [str],
                      "transformation"?: {"type"?: "INDIRECT", "subtype"?: "JOIN",
                                          "masking"?: true, "opaque"?: true},
                      "description"?: str, "writes"?: false}]}

TIME is ISO-8601 UTC with microseconds, ``2024-03-01T02:00:00.000500Z``; hashes are multibase
base16 (``f`` + hex), dataset ids ``did:odf:`` text, enums their names. Empty lists, the
default transformation's parts and ``writes: true`` are defaults, so left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, TypeVar

from odf_chain.errors import FormatError
from odf_chain.format.did import DatasetId
from odf_chain.format.events import (
    AddFieldLineage,
    FieldOperation,
    InputField,
    LineageInput,
    LineageRun,
    OffsetInterval,
    Transformation,
    TransformationSubtype,
    TransformationType,
)
from odf_chain.format.multihash import Multihash

VERSION = 1
_UINT64_MAX = 2**64 - 1
_DEFAULT_TRANSFORMATION = Transformation()
# Fixed width, ASCII digits only (``\d`` would take any script's digits): the one form written.
_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{6})Z"
)
_NAIVE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+")

_E = TypeVar("_E", bound=IntEnum)
_T = TypeVar("_T")

# ---------------------------------------------------------------------------------------------
# Writing


def lineage_to_json(event: AddFieldLineage) -> dict[str, Any]:
    """The JSON-safe object for ``event`` (only dicts, lists, str, int and bool): keys in a
    fixed order, defaults left out, so equal events give equal objects and equal text."""
    doc: dict[str, Any] = {"v": VERSION, "run": _run_to_json(event.run)}
    if event.inputs:
        doc["inputs"] = [_input_to_json(i) for i in event.inputs]
    if event.operations:
        doc["operations"] = [_operation_to_json(op) for op in event.operations]
    return doc


def _run_to_json(run: LineageRun) -> dict[str, Any]:
    out: dict[str, Any] = {
        "job_name": run.job_name,
        "run_id": run.run_id,
        "started_at": _time_to_json(run.started_at),
    }
    if run.ended_at is not None:
        out["ended_at"] = _time_to_json(run.ended_at)
    if run.offsets is not None:
        out["offsets"] = {"start": run.offsets.start, "end": run.offsets.end}
    return out


def _input_to_json(item: LineageInput) -> dict[str, Any]:
    out: dict[str, Any] = {"name": item.name}
    if item.uri is not None:
        out["uri"] = item.uri
    if item.dataset_id is not None:
        out["dataset_id"] = item.dataset_id.to_did()
    if item.block_hash is not None:
        out["block_hash"] = item.block_hash.to_multibase()
    if item.content_hash is not None:
        out["content_hash"] = item.content_hash.to_multibase()
    return out


def _operation_to_json(op: FieldOperation) -> dict[str, Any]:
    out: dict[str, Any] = {"name": op.name}
    if op.inputs:
        out["inputs"] = [{"origin": f.origin, "field": f.field} for f in op.inputs]
    if op.outputs:
        out["outputs"] = list(op.outputs)
    if op.transformation != _DEFAULT_TRANSFORMATION:
        out["transformation"] = _transformation_to_json(op.transformation)
    if op.description is not None:
        out["description"] = op.description
    if not op.writes:
        out["writes"] = False
    return out


def _transformation_to_json(t: Transformation) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.type != _DEFAULT_TRANSFORMATION.type:
        out["type"] = t.type.name
    if t.subtype != _DEFAULT_TRANSFORMATION.subtype:
        out["subtype"] = t.subtype.name
    if t.masking:
        out["masking"] = True
    if t.opaque:
        out["opaque"] = True
    return out


def _time_to_json(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise FormatError(f"lineage times must be timezone-aware (UTC), got naive {moment}")
    # isoformat pads the year to four digits (strftime's %Y does not, on Linux)
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    return utc.isoformat(timespec="microseconds") + "Z"


# ---------------------------------------------------------------------------------------------
# Reading


def lineage_from_json(doc: object, where: str) -> AddFieldLineage:
    """The event ``doc`` holds, when ``doc`` is exactly what :func:`lineage_to_json` writes.

    ``where`` says where ``doc`` was found (a block and its extra key, a file) and starts every
    error message; the message then names the path of the bad value, as in
    ``operations[2].transformation.subtype``. Raises :class:`FormatError`; the lineage itself
    (names, cycles, offsets) is not judged here.
    """
    return _Reader(where).event(doc)


class _Reader:
    """One document's reading: every method takes the value and its path, so the error that
    stops it can say where in the document it is."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, problem: str) -> FormatError:
        at = f" at {path}" if path else ""
        return FormatError(f"{self.where}: field lineage JSON{at}: {problem}")

    def event(self, doc: object) -> AddFieldLineage:
        if not isinstance(doc, dict):
            raise self.fail("", f"expected an object, got {_kind(doc)}")
        # the version first: a later version's keys are no error of this one
        if "v" not in doc:
            raise self.fail("v", "missing (the shape's version)")
        version = doc["v"]
        if type(version) is not int or version != VERSION:
            raise self.fail("v", f"unknown version {_show(version)}: this reader knows {VERSION}")
        obj = self.object(doc, "", required=("v", "run"), optional=("inputs", "operations"))
        return AddFieldLineage(
            run=self.run(obj["run"], "run"),
            inputs=self.items(obj, "inputs", "", self.input),
            operations=self.items(obj, "operations", "", self.operation),
        )

    def run(self, value: object, path: str) -> LineageRun:
        obj = self.object(
            value,
            path,
            required=("job_name", "run_id", "started_at"),
            optional=("ended_at", "offsets"),
        )
        offsets = None
        if "offsets" in obj:
            at = f"{path}.offsets"
            o = self.object(obj["offsets"], at, required=("start", "end"))
            offsets = OffsetInterval(
                self.uint64(o["start"], f"{at}.start"), self.uint64(o["end"], f"{at}.end")
            )
        return LineageRun(
            job_name=self.string(obj["job_name"], f"{path}.job_name"),
            run_id=self.string(obj["run_id"], f"{path}.run_id"),
            started_at=self.time(obj["started_at"], f"{path}.started_at"),
            ended_at=self.optional(obj, "ended_at", path, self.time),
            offsets=offsets,
        )

    def input(self, value: object, path: str) -> LineageInput:
        obj = self.object(
            value,
            path,
            required=("name",),
            optional=("uri", "dataset_id", "block_hash", "content_hash"),
        )
        return LineageInput(
            name=self.string(obj["name"], f"{path}.name"),
            uri=self.optional(obj, "uri", path, self.string),
            dataset_id=self.optional(obj, "dataset_id", path, self.did),
            block_hash=self.optional(obj, "block_hash", path, self.hash),
            content_hash=self.optional(obj, "content_hash", path, self.hash),
        )

    def operation(self, value: object, path: str) -> FieldOperation:
        obj = self.object(
            value,
            path,
            required=("name",),
            optional=("inputs", "outputs", "transformation", "description", "writes"),
        )
        writes = True
        if "writes" in obj:
            if obj["writes"] is not False:
                raise self.fail(
                    f"{path}.writes",
                    f"expected false (true is the default, left out), got {_show(obj['writes'])}",
                )
            writes = False
        transformation = _DEFAULT_TRANSFORMATION
        if "transformation" in obj:
            transformation = self.transformation(obj["transformation"], f"{path}.transformation")
        return FieldOperation(
            name=self.string(obj["name"], f"{path}.name"),
            inputs=self.items(obj, "inputs", path, self.input_field),
            outputs=self.items(obj, "outputs", path, self.string),
            transformation=transformation,
            description=self.optional(obj, "description", path, self.string),
            writes=writes,
        )

    def input_field(self, value: object, path: str) -> InputField:
        obj = self.object(value, path, required=("origin", "field"))
        return InputField(
            origin=self.string(obj["origin"], f"{path}.origin"),
            field=self.string(obj["field"], f"{path}.field"),
        )

    def transformation(self, value: object, path: str) -> Transformation:
        obj = self.object(value, path, optional=("type", "subtype", "masking", "opaque"))
        if not obj:
            raise self.fail(path, "empty (the default transformation is left out)")
        default = _DEFAULT_TRANSFORMATION
        for key in ("masking", "opaque"):
            if key in obj and obj[key] is not True:
                raise self.fail(
                    f"{path}.{key}",
                    f"expected true (false is the default, left out), got {_show(obj[key])}",
                )
        return Transformation(
            type=self.enum(obj, "type", path, TransformationType, default.type),
            subtype=self.enum(obj, "subtype", path, TransformationSubtype, default.subtype),
            masking="masking" in obj,
            opaque="opaque" in obj,
        )

    # Containers

    def object(
        self,
        value: object,
        path: str,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
    ) -> dict[str, object]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        for key in value:
            if key not in required and key not in optional:
                raise self.fail(_join(path, key), "unknown key")
        for key in required:
            if key not in value:
                raise self.fail(_join(path, key), "missing")
        return value

    def items(
        self,
        obj: dict[str, object],
        key: str,
        path: str,
        item: Callable[[object, str], _T],
    ) -> tuple[_T, ...]:
        """The items of optional list ``obj[key]``, each read by ``item``; ``()`` when absent."""
        if key not in obj:
            return ()
        at = _join(path, key)
        value = obj[key]
        if not isinstance(value, list):
            raise self.fail(at, f"expected a list, got {_kind(value)}")
        if not value:
            raise self.fail(at, "empty (an empty list is the default, left out)")
        return tuple(item(v, f"{at}[{i}]") for i, v in enumerate(value))

    def optional(
        self, obj: dict[str, object], key: str, path: str, read: Callable[[object, str], _T]
    ) -> _T | None:
        if key not in obj:
            return None
        at = _join(path, key)
        if obj[key] is None:
            raise self.fail(at, "null (an absent value is left out)")
        return read(obj[key], at)

    # Scalars

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_kind(value)}")
        return value

    def uint64(self, value: object, path: str) -> int:
        if type(value) is not int:  # not bool, not float
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if not 0 <= value <= _UINT64_MAX:
            raise self.fail(path, f"{_show(value)} is not an unsigned 64-bit offset")
        return value

    def time(self, value: object, path: str) -> datetime:
        text = self.string(value, path)
        if not (match := _TIME.fullmatch(text)):
            naive = _NAIVE.fullmatch(text) is not None
            problem = " (a time without zone)" if naive else ""
            raise self.fail(
                path,
                f"expected an ISO-8601 UTC time like 2024-03-01T02:00:00.000500Z, "
                f"got {_show(text)}{problem}",
            )
        try:
            return datetime(*map(int, match.groups()), tzinfo=UTC)  # type: ignore[misc]
        except ValueError as exc:
            raise self.fail(path, f"{_show(text)} is no valid time ({exc})") from None

    def did(self, value: object, path: str) -> DatasetId:
        text = self.string(value, path)
        try:
            did = DatasetId.from_did(text)
        except FormatError as exc:
            raise self.fail(path, str(exc)) from None
        if did.to_did() != text:  # bytes.fromhex also takes upper case and spaces
            raise self.fail(path, f"dataset id must be lowercase base16: {_show(text)}")
        return did

    def hash(self, value: object, path: str) -> Multihash:
        text = self.string(value, path)
        try:
            return Multihash.from_multibase(text)  # refuses upper case and spaces itself
        except FormatError as exc:
            raise self.fail(path, str(exc)) from None

    def enum(self, obj: dict[str, object], key: str, path: str, kind: type[_E], default: _E) -> _E:
        if key not in obj:
            return default
        at = _join(path, key)
        name = obj[key]
        if not isinstance(name, str) or name not in kind.__members__:
            known = ", ".join(kind.__members__)
            raise self.fail(at, f"expected one of {known}, got {_show(name)}")
        if name == default.name:
            raise self.fail(at, f"{name} is the default, left out")
        return kind.__members__[name]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: object) -> str:
    """What a JSON reader would call ``value``'s type."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if type(value) in (int, float):
        return f"the number {_show(value)}"
    return names.get(type(value), type(value).__name__)


def _show(value: object, limit: int = 60) -> str:
    """``value`` as JSON spells it (``true``, ``null``), cut short: the document is JSON.
    A container is only named: it may be large, or nested deeper than printing can go."""
    if isinstance(value, dict | list):
        return _kind(value)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON at all (a caller's own object, a NaN)
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
