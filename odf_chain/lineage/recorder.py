"""LineageRecorder: a job states the field lineage of one run by hand, in the spirit of CDAP's
LineageRecorder.

    rec = LineageRecorder("enrich")
    users = rec.dataset_input("users", dataset_id, block_hash, fields=user_paths)
    raw = rec.external_input("raw", "file:///x.csv", content_hash=h)
    r = rec.read("read users", users, ["id", "first", "last", "dob"])
    t = rec.transform("concat", [r["first"], r["last"]], ["name"], description="first + last")
    rec.drop("drop dob", [r["dob"]])
    rec.write("write", {"name": t["name"], "id": r["id"]})
    event = rec.event(started_at=start, ended_at=end, offsets=written)

Handles give :class:`InputField` references: ``users["id"]`` (a field of an input; operations
may read inputs directly, without a read step) and ``r["id"]`` (an output of an operation).
A field is named by its exact path or, when that is unique, by its dotted name (``address.city``
for ``[version=2.0].[type=struct].[type=struct].address.[type=string].city``); dotted names work
for an input only when its paths were given (``fields=``), and for written fields only when the
recorder was given the dataset's paths (``output_fields=``). Every mistake (a duplicate name, a
field no input or operation has) is refused when recorded, naming the operation and the field.

Reads and writes copy their fields pairwise (an IDENTITY operation with as many outputs as
inputs, see :mod:`odf_chain.lineage.resolve`); in a transform every output derives from every
input.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from odf_chain.errors import LineageError
from odf_chain.events import (
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
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash
from odf_chain.lineage.transformations import (
    NEUTRAL,
    default_type,
    in_openlineage_vocabulary,
    transformation,
)
from odf_chain.schema.paths import v1_path

_SHOWN = 8  # known paths listed in an error message


class _Paths:
    """Known field paths, found by exact path or by a unique dotted name."""

    __slots__ = ("_dotted", "_paths")

    def __init__(self, paths: Iterable[str]) -> None:
        self._paths: dict[str, None] = dict.fromkeys(paths)
        self._dotted: dict[str, list[str]] | None = None

    def __contains__(self, path: object) -> bool:
        return path in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def find(self, key: str, owner: str) -> str:
        """The path ``key`` names; ``owner`` ("input 'users'") goes into the error."""
        if key in self._paths:
            return key
        if self._dotted is None:
            self._dotted = {}
            for path in self._paths:
                self._dotted.setdefault(v1_path(path), []).append(path)
        found = self._dotted.get(key, [])
        if len(found) == 1:
            return found[0]
        if found:
            raise LineageError(f"{owner}: {key!r} names several fields: {', '.join(found)}")
        raise LineageError(f"{owner} has no field {key!r} ({self.listing()})")

    def listing(self) -> str:
        shown = list(self._paths)[:_SHOWN]
        more = len(self._paths) - len(shown)
        return "fields: " + ", ".join(shown) + (f", ... {more} more" if more > 0 else "")


@dataclass(frozen=True)
class InputHandle:
    """One input of the run; ``handle[name]`` is a reference to one of its fields."""

    input: LineageInput
    known: _Paths | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.input.name

    def __getitem__(self, key: str) -> InputField:
        path = key if self.known is None else self.known.find(key, f"input {self.name!r}")
        return InputField(self.name, path)

    @property
    def fields(self) -> tuple[InputField, ...]:
        """Every field of the input (known only when its paths were given)."""
        if self.known is None:
            raise LineageError(f"input {self.name!r}: its fields were not given (fields=...)")
        return tuple(InputField(self.name, path) for path in self.known)


@dataclass(frozen=True)
class OperationHandle:
    """One recorded operation; ``handle[name]`` is a reference to one of its outputs."""

    operation: FieldOperation
    outputs: _Paths = field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.operation.name

    def __getitem__(self, key: str) -> InputField:
        return InputField(self.name, self.outputs.find(key, f"operation {self.name!r}"))

    @property
    def fields(self) -> tuple[InputField, ...]:
        """Every output of the operation, in order."""
        return tuple(InputField(self.name, out) for out in self.operation.outputs)


class LineageRecorder:
    """Collects the inputs and field operations of one run of ``job_name`` (see module doc)."""

    def __init__(
        self,
        job_name: str,
        run_id: str | None = None,
        *,
        output_fields: Iterable[str] | None = None,
    ) -> None:
        if not job_name:
            raise LineageError("a lineage recorder needs a job name")
        self.job_name = job_name
        self.run_id = run_id if run_id is not None else str(uuid.uuid4())
        self._outputs = None if output_fields is None else _Paths(output_fields)
        self._inputs: dict[str, InputHandle] = {}
        self._operations: dict[str, OperationHandle] = {}

    # -- inputs ----------------------------------------------------------------------------

    def dataset_input(
        self,
        name: str,
        dataset_id: DatasetId | str,
        block_hash: Multihash | str,
        *,
        uri: str | None = None,
        fields: Iterable[str] | None = None,
    ) -> InputHandle:
        """An odf_chain dataset read at the block ``block_hash`` (``did:odf:...`` and multibase
        text are accepted). ``fields``: its v2 paths at that block, to check references."""
        if isinstance(dataset_id, str):
            dataset_id = DatasetId.from_did(dataset_id)
        if isinstance(block_hash, str):
            block_hash = Multihash.from_multibase(block_hash)
        pinned = LineageInput(name=name, uri=uri, dataset_id=dataset_id, block_hash=block_hash)
        return self._add_input(pinned, fields)

    def external_input(
        self,
        name: str,
        uri: str,
        *,
        content_hash: Multihash | str | None = None,
        fields: Iterable[str] | None = None,
    ) -> InputHandle:
        """A source outside odf_chain, by URI and, when known, the hash of what was read."""
        if not uri:
            raise LineageError(f"external input {name!r} needs a URI")
        if isinstance(content_hash, str):
            content_hash = Multihash.from_multibase(content_hash)
        return self._add_input(LineageInput(name=name, uri=uri, content_hash=content_hash), fields)

    def _add_input(self, pinned: LineageInput, fields: Iterable[str] | None) -> InputHandle:
        self._check_new_name(pinned.name, "input")
        handle = InputHandle(pinned, None if fields is None else _Paths(fields))
        self._inputs[pinned.name] = handle
        return handle

    # -- operations ------------------------------------------------------------------------

    def read(
        self,
        name: str,
        source: InputHandle | str,
        fields: Sequence[str] | Mapping[str, str],
        *,
        description: str | None = None,
    ) -> OperationHandle:
        """Fields of ``source`` made available to later operations (IDENTITY, pairwise).
        ``fields``: paths (each output named by the path it reads) or a mapping from output
        names to paths."""
        handle = self._input(source, name)
        pairs = fields.items() if isinstance(fields, Mapping) else ((None, f) for f in fields)
        inputs, outputs = [], []
        for out, key in pairs:
            ref = handle[key]
            inputs.append(ref)
            outputs.append(ref.field if out is None else out)
        if not inputs:
            raise LineageError(f"read {name!r} reads no field")
        op = FieldOperation(name, tuple(inputs), tuple(outputs), NEUTRAL, description, writes=False)
        return self._add(op)

    def transform(
        self,
        name: str,
        inputs: Sequence[InputField],
        outputs: Sequence[str],
        *,
        subtype: TransformationSubtype = TransformationSubtype.TRANSFORMATION,
        type: TransformationType | None = None,
        masking: bool = False,
        opaque: bool = False,
        description: str | None = None,
        writes: bool = False,
    ) -> OperationHandle:
        """Outputs computed from inputs; every output derives from every input. The type
        follows from the subtype (FILTER, JOIN, ... are INDIRECT), as in OpenLineage; a
        ``type`` given must agree. ``writes``: the outputs are fields of the dataset (then
        dotted names resolve)."""
        if not outputs:
            raise LineageError(f"transform {name!r} has no outputs; record a drop instead")
        if writes:
            outputs = [self._output_path(out, name) for out in outputs]
        try:
            step = transformation(subtype, type=type, masking=masking, opaque=opaque)
        except LineageError as exc:
            raise LineageError(f"transform {name!r}: {exc}") from None
        op = FieldOperation(name, tuple(inputs), tuple(outputs), step, description, writes)
        return self._add(op)

    def drop(
        self, name: str, fields: Sequence[InputField], *, description: str | None = None
    ) -> OperationHandle:
        """Fields that go no further: recorded, not lost."""
        if not fields:
            raise LineageError(f"drop {name!r} drops no field")
        op = FieldOperation(name, tuple(fields), (), NEUTRAL, description, writes=False)
        return self._add(op)

    def write(
        self,
        name: str,
        fields: Sequence[InputField] | Mapping[str, InputField],
        outputs: Sequence[str] | None = None,
        *,
        description: str | None = None,
    ) -> OperationHandle:
        """Fields copied into the dataset (IDENTITY, pairwise): ``{output path: field}``, or
        fields with their ``outputs`` in the same order (default: the same names)."""
        if isinstance(fields, Mapping):
            if outputs is not None:
                raise LineageError(f"write {name!r}: outputs come from the mapping's keys")
            outputs, inputs = list(fields.keys()), list(fields.values())
        else:
            inputs = list(fields)
            outputs = [f.field for f in inputs] if outputs is None else list(outputs)
        if len(outputs) != len(inputs):
            raise LineageError(
                f"write {name!r}: {len(inputs)} fields but {len(outputs)} outputs; "
                "a write copies one field into each output"
            )
        if not inputs:
            raise LineageError(f"write {name!r} writes no field")
        paths = tuple(self._output_path(out, name) for out in outputs)
        return self._add(FieldOperation(name, tuple(inputs), paths, NEUTRAL, description, True))

    def record(self, operation: FieldOperation) -> OperationHandle:
        """An operation built by hand, checked like the others (written paths must be exact)."""
        return self._add(operation)

    # -- the result ------------------------------------------------------------------------

    @property
    def inputs(self) -> tuple[LineageInput, ...]:
        return tuple(h.input for h in self._inputs.values())

    @property
    def operations(self) -> tuple[FieldOperation, ...]:
        return tuple(h.operation for h in self._operations.values())

    def input(self, name: str) -> InputHandle:
        try:
            return self._inputs[name]
        except KeyError:
            raise LineageError(f"no input named {name!r}") from None

    def operation(self, name: str) -> OperationHandle:
        try:
            return self._operations[name]
        except KeyError:
            raise LineageError(f"no operation named {name!r}") from None

    def run(
        self,
        *,
        started_at: datetime,
        ended_at: datetime | None = None,
        offsets: OffsetInterval | None = None,
    ) -> LineageRun:
        return LineageRun(self.job_name, self.run_id, started_at, ended_at, offsets)

    def event(
        self,
        *,
        started_at: datetime,
        ended_at: datetime | None = None,
        offsets: OffsetInterval | None = None,
    ) -> AddFieldLineage:
        """The lineage event of the run; the writer gives the times and the offsets written."""
        if not self._operations:
            raise LineageError(f"job {self.job_name!r} run {self.run_id}: no operation recorded")
        return AddFieldLineage(
            self.run(started_at=started_at, ended_at=ended_at, offsets=offsets),
            self.inputs,
            self.operations,
        )

    # -- checks ----------------------------------------------------------------------------

    def _check_new_name(self, name: str, what: str) -> None:
        if not name:
            raise LineageError(f"an {what} needs a name")
        if name in self._inputs:
            raise LineageError(f"{what} {name!r}: an input already has this name")
        if name in self._operations:
            raise LineageError(f"{what} {name!r}: an operation already has this name")

    def _input(self, source: InputHandle | str, reader: str) -> InputHandle:
        key = source.name if isinstance(source, InputHandle) else source
        handle = self._inputs.get(key)
        if handle is None:
            raise LineageError(f"operation {reader!r} reads {key!r}, which is not an input")
        return handle

    def _output_path(self, key: str, writer: str) -> str:
        if self._outputs is None:
            return key
        return self._outputs.find(key, f"operation {writer!r}: the dataset")

    def _check_reference(self, ref: InputField, reader: str) -> None:
        """``ref`` names a field an input has (when its paths are known) or an output of an
        earlier operation that did not write it into the dataset."""
        if not isinstance(ref, InputField):
            raise LineageError(f"operation {reader!r} reads {ref!r}, which is not an InputField")
        if ref.origin in self._inputs:
            known = self._inputs[ref.origin].known
            if known is not None and ref.field not in known:
                raise LineageError(
                    f"operation {reader!r} reads {ref.field!r} from input {ref.origin!r}, "
                    f"which has no such field ({known.listing()})"
                )
            return
        producer = self._operations.get(ref.origin)
        if producer is None:
            raise LineageError(
                f"operation {reader!r} reads {ref.field!r} from {ref.origin!r}, "
                "which is neither an input nor an earlier operation"
            )
        if producer.operation.writes:
            raise LineageError(
                f"operation {reader!r} reads {ref.field!r} from {ref.origin!r}, which writes "
                "it into the dataset; read the field that operation was given instead"
            )
        if ref.field not in producer.outputs:
            raise LineageError(
                f"operation {reader!r} reads {ref.field!r} from operation {ref.origin!r}, "
                f"which has no such output ({producer.outputs.listing()})"
            )

    def _add(self, op: FieldOperation) -> OperationHandle:
        self._check_new_name(op.name, "operation")
        if not isinstance(op.transformation, Transformation):
            raise LineageError(f"operation {op.name!r}: transformation must be a Transformation")
        if not in_openlineage_vocabulary(op.transformation):
            t = op.transformation
            raise LineageError(
                f"operation {op.name!r}: {t.type.name} {t.subtype.name} is not in OpenLineage's "
                f"vocabulary: {t.subtype.name} is {default_type(t.subtype).name}"
            )
        for ref in op.inputs:
            self._check_reference(ref, op.name)
        seen: set[str] = set()
        for out in op.outputs:
            if not out:
                raise LineageError(f"operation {op.name!r} has an empty output name")
            if out in seen:
                raise LineageError(f"operation {op.name!r} outputs {out!r} twice")
            seen.add(out)
            if op.writes and self._outputs is not None and out not in self._outputs:
                raise LineageError(
                    f"operation {op.name!r} writes {out!r}, which the dataset has no field "
                    f"of ({self._outputs.listing()})"
                )
        handle = OperationHandle(op, _Paths(op.outputs))
        self._operations[op.name] = handle
        return handle
