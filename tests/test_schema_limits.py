"""Schema limits: nesting deeper than 64 levels and strings that are not UTF-8 are refused,
naming the field, wherever a schema comes from: a table written, a schema declared, a forged
SetDataSchema block (raw Arrow bytes built by hand with the flatbuffers builder) or ODF's
structured DataSchema. A refused schema costs neither memory nor time, and the CLI reports
it in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.dataset import Dataset
from odf_chain.errors import FormatError, RuleViolation, SchemaError
from odf_chain.events import MetadataBlock, SetDataSchema
from odf_chain.format.codec import encode_block
from odf_chain.format.data_schema import data_schema_to_arrow
from odf_chain.verify import verify_path
from tests import arrow_fb as fb
from tests.helpers import multihash_name, snapshot_tree

REPO = Path(__file__).resolve().parent.parent
# child processes import the odf_chain this run imports
ENV = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)}


def nested_array(levels: int) -> pa.Array:
    """``levels`` structs one inside the other around an int64, built cheaply from arrays
    (a Python dict of the same depth costs gigabytes in pa.array)."""
    array = pa.array([1, 2, 3], pa.int64())
    for _ in range(levels):
        array = pa.StructArray.from_arrays([array], ["f"])
    return array


def forged_block(ds: Dataset, raw_arrow_schema: bytes) -> MetadataBlock:
    state = ds.state
    return MetadataBlock(
        system_time=datetime.now(UTC),
        prev_block_hash=state.head,
        sequence_number=state.sequence_number + 1,
        event=SetDataSchema(raw_arrow_schema=raw_arrow_schema),
    )


def store_as_head(root: Path, block: MetadataBlock) -> str:
    """Write the block under its correct name (computed without odf_chain) and point the head
    at it, as a tool that skipped the rules would."""
    data = encode_block(block)
    name = multihash_name(data)
    (root / "blocks" / name).write_bytes(data)
    (root / "refs" / "head").write_text(name)
    return name


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=ENV,
    )


# -- nesting ---------------------------------------------------------------------------------

_DEEP_WRITE = textwrap.dedent(
    """
    import json, resource, sys, time
    import pyarrow as pa
    from odf_chain.dataset import Dataset

    array = pa.array([1, 2, 3], pa.int64())
    for _ in range({levels}):
        array = pa.StructArray.from_arrays([array], ["f"])
    table = pa.table({{"s": array}})
    ds = Dataset.create(sys.argv[1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    try:
        ds.write(table)
        outcome = {{"error": None, "message": None}}
    except Exception as exc:
        outcome = {{"error": type(exc).__name__, "message": str(exc)}}
    outcome["seconds"] = time.perf_counter() - started
    outcome["peak_growth_mb"] = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    ) / 1024
    print(json.dumps(outcome))
    """
)


@pytest.mark.parametrize("levels", [800, 1200])
def test_deeply_nested_write_is_refused_fast_in_bounded_memory(tmp_path: Path, levels: int) -> None:
    """Before: 800 levels took 4.7 GB inside the Parquet writer before a bare OSError, and 1,200
    aborted the process. Now the schema is refused before anything is encoded. Run in a fresh
    process so that its peak memory says what this write cost."""
    root = tmp_path / "ds"
    run = subprocess.run(
        [sys.executable, "-c", _DEEP_WRITE.format(levels=levels), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=ENV,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["error"] == "SchemaError"
    assert "field 's.f.f.f ... f.f.f' holds fields at level 65" in outcome["message"]
    assert "at most 64 levels" in outcome["message"]
    assert outcome["peak_growth_mb"] < 200, outcome
    assert outcome["seconds"] < 10, outcome
    # nothing was written: the Seed alone, no data, no staging leftovers
    assert len(list((root / "blocks").iterdir())) == 1
    assert list((root / "data").iterdir()) == []
    assert not (root / ".staging").exists() or list((root / ".staging").iterdir()) == []


def test_deepest_allowed_nesting_writes_and_verifies(tmp_path: Path) -> None:
    """The limit is inclusive: a field at level 64 is written, hashed and verified deep."""
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"s": nested_array(63)}))
    report = ds.verify(deep=True)
    assert report.ok, [p.line() for p in report.problems]
    assert report.rows_checked == 3


@pytest.mark.parametrize(
    ("column", "path"),
    [
        (pa.field("s", nested_array(64).type), "s.f.f.f ... f.f.f"),
        (pa.field("l", pa.list_(nested_array(63).type)), "l.[item].f.f ... f.f.f"),
        (
            pa.field("m", pa.map_(pa.string(), nested_array(63).type)),
            "m.[value].f.f ... f.f.f",
        ),
    ],
    ids=["struct", "list", "map"],
)
def test_set_schema_refuses_deep_nesting(tmp_path: Path, column: pa.Field, path: str) -> None:
    ds = Dataset.create(tmp_path / "ds")
    before = snapshot_tree(tmp_path / "ds")
    with pytest.raises(SchemaError) as caught:
        ds.set_schema(pa.schema([column]))
    assert f"field {path!r} holds fields at level 65" in str(caught.value)
    assert snapshot_tree(tmp_path / "ds") == before


@pytest.mark.parametrize("levels", [64, 3000])
def test_forged_deep_schema_block(tmp_path: Path, levels: int) -> None:
    """A SetDataSchema whose raw Arrow schema nests deeper than the limit (pyarrow's own
    reader takes 64 levels; 3,000 are beyond its flatbuffer verifier): refused by the
    schema-valid rule on append and reported by verify, never a crash or RecursionError."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    raw = fb.schema([*fb.system_fields(), fb.nested_struct(b"s", levels)])
    with pytest.raises(RuleViolation) as caught:
        ds.append(SetDataSchema(raw_arrow_schema=raw))
    assert caught.value.rule == "schema-valid"
    if levels == 64:
        assert "field 's.f.f.f ... f.f.f' holds fields at level 65" in str(caught.value)
    name = store_as_head(root, forged_block(ds, raw))
    report = verify_path(root)
    assert [(p.rule, p.block_hash, p.sequence_number) for p in report.errors] == [
        ("schema-valid", name, 1)
    ]


def _structured(levels: int, inner: dict | None = None) -> dict:
    spec = inner or {"kind": "DataTypeInt64"}
    for _ in range(levels):
        spec = {"kind": "DataTypeStruct", "fields": ({"name": "f", "type": spec},)}
    return {"fields": ({"name": "s", "type": spec},)}


def test_structured_data_schema_nesting() -> None:
    """ODF's structured DataSchema (SetDataSchema field id 1) under the same limit."""
    assert data_schema_to_arrow(_structured(63)).field("s").type.num_fields == 1
    with pytest.raises(FormatError, match=r"'s\.f\.f\.f \.\.\. f\.f\.f' holds fields at level 65"):
        data_schema_to_arrow(_structured(64))
    option = {"kind": "DataTypeInt64"}
    for _ in range(5000):  # Options inside Options add no level, but must not recurse forever
        option = {"kind": "DataTypeOption", "inner": option}
    with pytest.raises(FormatError, match="Option directly inside an Option"):
        data_schema_to_arrow({"fields": ({"name": "o", "type": option},)})


# -- strings that are not UTF-8 ----------------------------------------------------------------


def _bad_strings() -> dict[str, tuple[bytes, str]]:
    """Forged schemas, each with one string that is not UTF-8, and what the error names."""
    system = fb.system_fields()
    int64 = fb.int_type(64)
    return {
        "timezone": (
            fb.schema(fb.system_fields(event_time_zone=b"Europe/\xff")),
            "field 'event_time': its timezone is not valid UTF-8",
        ),
        "field name": (
            fb.schema([*system, fb.Field(b"x\xfe", fb.INT, int64)]),
            "field #4: its name is not valid UTF-8",
        ),
        "nested field name": (
            fb.schema(
                [
                    *system,
                    fb.Field(
                        b"s",
                        fb.STRUCT,
                        fb.struct_type,
                        children=(fb.Field(b"a", fb.INT, int64), fb.Field(b"\xc3", fb.INT, int64)),
                    ),
                ]
            ),
            "field #1 of 's': its name is not valid UTF-8",
        ),
        "field metadata key": (
            fb.schema([*system, fb.Field(b"x", fb.INT, int64, metadata=[(b"k\xff", b"v")])]),
            "field 'x': metadata key b'k\\xff' is not valid UTF-8",
        ),
        "field metadata value": (
            fb.schema([*system, fb.Field(b"x", fb.INT, int64, metadata=[(b"doc", b"\x80")])]),
            "field 'x': the value of metadata key 'doc' b'\\x80' is not valid UTF-8",
        ),
        "schema metadata": (
            fb.schema(system, metadata=[(b"odf_chain.avro", b"\xed\xa0\x80")]),
            "the schema: the value of metadata key 'odf_chain.avro'",
        ),
    }


@pytest.mark.parametrize("case", list(_bad_strings()))
def test_append_refuses_strings_that_are_not_utf8(tmp_path: Path, case: str) -> None:
    raw, named = _bad_strings()[case]
    ds = Dataset.create(tmp_path / "ds")
    before = snapshot_tree(tmp_path / "ds")
    with pytest.raises(RuleViolation) as caught:
        ds.append(SetDataSchema(raw_arrow_schema=raw))
    assert caught.value.rule == "schema-valid"
    assert named in str(caught.value)
    assert snapshot_tree(tmp_path / "ds") == before


def test_timezone_that_is_not_utf8_on_disk(tmp_path: Path) -> None:
    """The issue's case: such a block passed the rules and verify, then ``odf-chain fields`` and
    ``export datahub`` ended with "internal error". Now verify reports the block, and every
    command that reads the schema fails in one line, exit code 2."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    raw, named = _bad_strings()["timezone"]
    name = store_as_head(root, forged_block(ds, raw))

    errors = verify_path(root).errors
    assert [(p.rule, p.block_hash, p.sequence_number) for p in errors] == [
        ("schema-valid", name, 1)
    ]
    assert named in errors[0].message
    run = cli("verify", root)
    assert run.returncode == 1 and f"block 1 {name}: [schema-valid]" in run.stdout

    for command in (("fields", root), ("export", "datahub", root, "-o", tmp_path / "out.json")):
        run = cli(*command)
        assert run.returncode == 2, (command, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "internal error" not in lines[0], (command, run.stderr)
        assert named in lines[0] and "rule schema-valid" in lines[0]


def test_write_refuses_metadata_that_is_not_utf8(tmp_path: Path) -> None:
    """A table whose field metadata is not UTF-8 (pyarrow takes any bytes there) is refused
    before anything is written: other ODF tools read these strings as UTF-8."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    before = snapshot_tree(root)
    field = pa.field("x", pa.int64(), metadata={b"doc": b"caf\xe9"})
    with pytest.raises(SchemaError, match=r"field 'x': the value of metadata key 'doc'"):
        ds.write(pa.table({"x": [1]}, schema=pa.schema([field])))
    assert snapshot_tree(root) == before


def test_structured_data_schema_strings_that_are_not_utf8() -> None:
    timestamp = {"kind": "DataTypeTimestamp", "unit": 1, "timezone": b"\xff"}
    with pytest.raises(FormatError, match=r"t: timezone b'\\xff' is not valid UTF-8"):
        data_schema_to_arrow({"fields": ({"name": "t", "type": timestamp},)})
    with pytest.raises(FormatError, match=r"field #0: the name .* is not valid UTF-8"):
        data_schema_to_arrow({"fields": ({"name": b"\xfe", "type": {"kind": "DataTypeInt8"}},)})
