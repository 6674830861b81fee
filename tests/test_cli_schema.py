"""The schema commands of the real CLI, run by its ``main`` in this process as a subprocess
would run them (tests/cli_run.py; tests/test_cli.py runs the console scripts as processes):
``fields``, ``init --schema``, ``schema --history`` and ``schema check``; and the same field
paths through the library (``Dataset.state_at(ref).field_paths``).

Every expected field path here is typed by hand from README "Field paths" (lakehouse
convention for Arrow/Parquet/DataMine data, DataHub's Avro convention for Avro schemas), never
produced by the code under test."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from tests.cli_run import run_main

# -- hand-typed expectations ----------------------------------------------------------------------

# ODF system columns in the lakehouse convention: offset int64 -> bigint -> long; op int32 -> int;
# system_time/event_time timestamp(ms, UTC) -> Hive timestamp -> [type=int]
LAKE_SYSTEM = [
    "[version=2.0].[type=long].offset",
    "[version=2.0].[type=int].op",
    "[version=2.0].[type=int].system_time",
    "[version=2.0].[type=int].event_time",
]
LAKE_AT_1 = [
    *LAKE_SYSTEM,
    "[version=2.0].[type=long].id",
    "[version=2.0].[type=struct].[type=struct].s",
    "[version=2.0].[type=struct].[type=struct].s.[type=int].a",
]
NAME_PATH = "[version=2.0].[type=string].name"
LAKE_AT_HEAD = [*LAKE_AT_1, NAME_PATH]

# (path, type class, nullable, nativeDataType) for the lakehouse dataset at head
LAKE_FACTS = {
    "[version=2.0].[type=long].offset": ("number", False, "bigint"),
    "[version=2.0].[type=int].op": ("number", False, "int"),
    "[version=2.0].[type=int].system_time": ("time", False, "timestamp"),
    "[version=2.0].[type=int].event_time": ("time", False, "timestamp"),
    "[version=2.0].[type=long].id": ("number", True, "bigint"),
    "[version=2.0].[type=struct].[type=struct].s": ("record", True, "struct<a:int>"),
    "[version=2.0].[type=struct].[type=struct].s.[type=int].a": ("number", True, "int"),
    NAME_PATH: ("string", True, "string"),
}

READING_AVSC = {
    "type": "record",
    "name": "Reading",
    "namespace": "com.acme",
    "fields": [
        {"name": "station", "type": "string"},
        {"name": "temp", "type": ["null", "double"], "default": None},
        {
            "name": "loc",
            "type": {
                "type": "record",
                "name": "Loc",
                "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
# Avro convention, record by short name; system columns under the writer's record name, with
# Avro's types for them (timestamps are longs: timestamp-millis)
READING_PATHS = [
    "[version=2.0].[type=Reading].[type=long].offset",
    "[version=2.0].[type=Reading].[type=int].op",
    "[version=2.0].[type=Reading].[type=long].system_time",
    "[version=2.0].[type=Reading].[type=long].event_time",
    "[version=2.0].[type=Reading].[type=string].station",
    "[version=2.0].[type=Reading].[type=double].temp",
    "[version=2.0].[type=Reading].[type=Loc].loc",
    "[version=2.0].[type=Reading].[type=Loc].loc.[type=double].lat",
    "[version=2.0].[type=Reading].[type=Loc].loc.[type=double].lon",
    "[version=2.0].[type=Reading].[type=array].[type=string].tags",
]
READING_NULLABLE = {
    "[version=2.0].[type=Reading].[type=double].temp",
}

SHOP = {
    "schema": "shop",
    "table_list": [
        {
            "table": "users",
            "fields": [
                {"id": 1, "name": "uid", "type": "INT64", "isRequired": True},
                {"id": 2, "name": "email", "type": "STRING"},
            ],
        },
        {
            "table": "orders",
            "fields": [
                {"id": 1, "name": "oid", "type": "INT64", "isRequired": True, "isAscSortKey": True},
                {"id": 2, "name": "buyer", "type": "users"},
                {"id": 3, "name": "items", "type": "List:STRING"},
                {"id": 4, "name": "qty", "type": "Short"},
            ],
        },
    ],
}
ORDERS_PATHS = [
    *LAKE_SYSTEM,
    "[version=2.0].[type=long].oid",
    "[version=2.0].[type=struct].[type=struct].buyer",
    "[version=2.0].[type=struct].[type=struct].buyer.[type=long].uid",
    "[version=2.0].[type=struct].[type=struct].buyer.[type=string].email",
    "[version=2.0].[type=struct].[type=array].[type=string].items",
    "[version=2.0].[type=int].qty",
]
USERS_PATHS = [
    *LAKE_SYSTEM,
    "[version=2.0].[type=long].uid",
    "[version=2.0].[type=string].email",
]


# -- helpers --------------------------------------------------------------------------------------


def run_raw(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_main(args)


def assert_no_traceback(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stdout and "Traceback" not in p.stderr, p.stderr


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    p = run_raw(*args)
    assert_no_traceback(p)
    return p


@dataclass
class Outcome:
    process: subprocess.CompletedProcess[str]
    fragments: list[str]  # what the one-line error must say
    listing: list[str] | None  # what the case's directory holds afterwards (init only)


def ok(*args: str | Path) -> str:
    p = run(*args)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stderr == ""
    return p.stdout


def one_line_error(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    (line,) = lines
    assert line.startswith("odf-chain: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def write_json(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")
    return path


def avro_record(name: str, *fields: tuple[str, object]) -> dict:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


def field_table(stdout: str) -> tuple[str, list[list[str]]]:
    """The header line and the rows (path, type, nullable|required, native type) of
    ``odf-chain fields`` text output."""
    header, columns, *rows = stdout.splitlines()
    assert columns.split() == ["PATH", "TYPE", "VALUES", "NATIVE", "TYPE"], columns
    parsed = []
    for row in rows:
        cells = row.split(None, 3)
        assert len(cells) == 4, row
        parsed.append(cells)
    return header, parsed


def block_hashes(root: Path) -> list[str]:
    return [str(e.hash) for e in Dataset.open(root).blocks()]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0 Seed; 1 SetDataSchema {id, s: struct<a>}; 2 AddData; 3 SetDataSchema + name; 4 AddData."""
    root = tmp_path_factory.mktemp("cli_schema") / "lake"
    ds = Dataset.create(root)
    s_type = pa.struct([pa.field("a", pa.int32())])
    ds.write(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "s": pa.array([{"a": 1}, None], s_type),
            }
        )
    )
    ds.write(
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "s": pa.array([{"a": 3}], s_type),
                "name": pa.array(["c"], pa.string()),
            }
        ),
        evolve=True,
    )
    return root


# -- fields ---------------------------------------------------------------------------------------


def test_lake_fixture_has_the_blocks_the_tests_assume(lake: Path) -> None:
    kinds = [type(e.block.event).__name__ for e in Dataset.open(lake).blocks()]
    assert kinds == ["Seed", "SetDataSchema", "AddData", "SetDataSchema", "AddData"]


@pytest.mark.parametrize(
    ("at", "seq", "expected"),
    [(["--at", "1"], 1, LAKE_AT_1), (["--at", "head"], 4, LAKE_AT_HEAD), ([], 4, LAKE_AT_HEAD)],
    ids=["at-1", "at-head", "default-head"],
)
def test_fields_text(lake: Path, at: list[str], seq: int, expected: list[str]) -> None:
    # the column added by the second write (`name`) appears at head only
    header, rows = field_table(ok("fields", lake, *at))
    assert header.split() == ["block", str(seq), block_hashes(lake)[seq]]
    assert [r[0] for r in rows] == expected
    for path, type_class, flag, native in rows:
        facts = LAKE_FACTS[path]
        assert (type_class, flag == "nullable", native) == facts, path
        assert flag in ("nullable", "required")


def test_fields_at_a_block_hash(lake: Path) -> None:
    _, rows = field_table(ok("fields", lake, "--at", block_hashes(lake)[1]))
    assert [r[0] for r in rows] == LAKE_AT_1


def test_fields_before_any_schema(lake: Path) -> None:
    out = ok("fields", lake, "--at", "0")
    assert out.splitlines() == [f"block 0  {block_hashes(lake)[0]}", "no schema declared yet"]
    doc = json.loads(ok("fields", lake, "--at", "0", "--json"))
    assert doc["block"] == 0 and doc["fields"] == []


@pytest.mark.parametrize(
    ("ref", "seq", "expected"), [("1", 1, LAKE_AT_1), ("head", 4, LAKE_AT_HEAD)]
)
def test_fields_json(lake: Path, ref: str, seq: int, expected: list[str]) -> None:
    doc = json.loads(ok("fields", lake, "--at", ref, "--json"))
    assert doc["block"] == seq
    assert doc["head"] == block_hashes(lake)[seq]
    assert [f["path"] for f in doc["fields"]] == expected
    for f in doc["fields"]:
        assert isinstance(f["path"], str) and isinstance(f["type"], str)
        assert isinstance(f["native_type"], str) and isinstance(f["nullable"], bool)
        assert (f["type"], f["nullable"], f["native_type"]) == LAKE_FACTS[f["path"]]
        assert f["is_part_of_key"] is False


@pytest.mark.parametrize(("ref", "fragment"), [("99", "99"), ("bogus", "bogus")])
def test_fields_bad_ref(lake: Path, ref: str, fragment: str) -> None:
    one_line_error(run("fields", lake, "--at", ref), fragment)


def test_fields_not_a_dataset(tmp_path: Path) -> None:
    one_line_error(run("fields", tmp_path / "nothing"), "nothing")


# -- the library ----------------------------------------------------------------------------------


def test_state_field_paths_at_two_blocks(lake: Path) -> None:
    ds = Dataset.open(lake)
    assert ds.state_at(1).field_paths == LAKE_AT_1
    assert ds.state_at(2).field_paths == LAKE_AT_1
    assert ds.state_at(3).field_paths == LAKE_AT_HEAD
    assert ds.state_at("head").field_paths == LAKE_AT_HEAD
    assert ds.state_at(block_hashes(lake)[1]).field_paths == LAKE_AT_1
    assert ds.state_at(0).field_paths == []
    facts = {f.path: (f.type, f.nullable, f.native_type) for f in ds.state_at("head").fields}
    assert facts == LAKE_FACTS


def test_avro_dataset_keeps_record_name_through_evolution(tmp_path: Path) -> None:
    avsc = write_json(tmp_path / "reading.avsc", READING_AVSC)
    root = tmp_path / "readings"
    ok("init", root, "--schema", avsc)
    ds = Dataset.open(root)
    assert ds.state.field_paths == READING_PATHS
    # write data shaped like the declared schema, then a slice with one more (nullable) column
    declared = ds.state.schema
    user = pa.schema([f for f in declared if f.name in ("station", "temp", "loc", "tags")])
    rows = {"station": ["a"], "temp": [1.5], "loc": [{"lat": 1.0, "lon": 2.0}], "tags": [["x"]]}
    ds.write(pa.table(rows).cast(user))
    ds.write(
        pa.table({**rows, "humidity": [0.5]}).cast(user.append(pa.field("humidity", pa.float64()))),
        evolve=True,
    )
    humidity = "[version=2.0].[type=Reading].[type=double].humidity"
    assert ds.state_at(1).field_paths == READING_PATHS
    assert ds.state_at("head").field_paths == [*READING_PATHS, humidity]
    # the history names the added column by its Avro-convention path
    history = ok("schema", root, "--history").splitlines()
    assert f"  + {humidity}" in history


# -- init --schema --------------------------------------------------------------------------------


def test_init_with_avsc_then_fields(tmp_path: Path) -> None:
    avsc = write_json(tmp_path / "reading.avsc", READING_AVSC)
    root = tmp_path / "ds"
    out = ok("init", root, "--schema", avsc)
    lines = out.splitlines()
    assert lines[0] == f"created {root}"
    assert "schema      8 fields, declared at block 1" in lines
    doc = json.loads(ok("fields", root, "--json"))
    assert doc["block"] == 1
    assert [f["path"] for f in doc["fields"]] == READING_PATHS
    assert {f["path"] for f in doc["fields"] if f["nullable"]} == READING_NULLABLE
    by_path = {f["path"]: f for f in doc["fields"]}
    assert by_path["[version=2.0].[type=Reading].[type=Loc].loc"]["type"] == "record"
    assert (
        by_path["[version=2.0].[type=Reading].[type=array].[type=string].tags"]["type"] == "array"
    )
    assert by_path["[version=2.0].[type=Reading].[type=string].station"]["type"] == "string"
    # no data yet: the chain is Seed + SetDataSchema and verifies
    kinds = [type(e.block.event).__name__ for e in Dataset.open(root).blocks()]
    assert kinds == ["Seed", "SetDataSchema"]
    assert Dataset.open(root).verify().ok


def test_init_with_avro_in_a_json_file(tmp_path: Path) -> None:
    schema = write_json(tmp_path / "reading.json", READING_AVSC)
    root = tmp_path / "ds"
    ok("init", root, "--schema", schema)
    assert Dataset.open(root).state.field_paths == READING_PATHS


def test_init_with_datamine_table_users(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    out = ok("init", root, "--schema", write_json(tmp_path / "shop.json", SHOP), "--table", "users")
    # 4 system columns + uid, email
    assert "schema      6 fields, declared at block 1" in out.splitlines()
    fields = Dataset.open(root).state.fields
    assert [f.path for f in fields] == USERS_PATHS
    nullable = {f.path: f.nullable for f in fields}
    assert nullable["[version=2.0].[type=long].uid"] is False  # isRequired
    assert nullable["[version=2.0].[type=string].email"] is True


def test_init_with_datamine_table_orders_then_fields_and_history(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    doc = write_json(tmp_path / "shop.json", SHOP)
    out = ok("init", root, "--schema", doc, "--table", "orders")
    # 4 system columns + oid, buyer, items, qty
    assert "schema      8 fields, declared at block 1" in out.splitlines()
    fields = json.loads(ok("fields", root, "--json"))["fields"]
    assert [f["path"] for f in fields] == ORDERS_PATHS
    nullable = {f["path"]: f["nullable"] for f in fields}
    assert nullable["[version=2.0].[type=long].oid"] is False  # isRequired
    assert nullable["[version=2.0].[type=int].qty"] is True
    assert nullable["[version=2.0].[type=struct].[type=struct].buyer.[type=long].uid"] is False
    lines = ok("schema", root, "--history").splitlines()
    assert lines[0].startswith(f"block 1  {block_hashes(root)[1]}  ")
    assert lines[1] == "  initial schema: 8 fields"
    # the initial schema as what it adds to none, in the form later versions take: v2 paths,
    # nested ones after their parents
    assert lines[2:] == [f"  + {path}" for path in ORDERS_PATHS]


def test_init_datamine_single_table_needs_no_table(tmp_path: Path) -> None:
    doc = write_json(
        tmp_path / "users.json", {"schema": "shop", "table_list": [SHOP["table_list"][0]]}
    )
    root = tmp_path / "ds"
    ok("init", root, "--schema", doc)
    assert Dataset.open(root).state.field_paths == USERS_PATHS


def test_init_with_parquet_file(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int64()), "tags": [["x"]]}), tmp_path / "t.parquet"
    )
    root = tmp_path / "ds"
    ok("init", root, "--schema", tmp_path / "t.parquet")
    assert Dataset.open(root).state.field_paths == [
        *LAKE_SYSTEM,
        "[version=2.0].[type=long].id",
        "[version=2.0].[type=struct].[type=array].[type=string].tags",
    ]


def test_table_without_schema(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    one_line_error(run("init", root, "--table", "orders"), "--table", "--schema")
    assert not root.exists()


def _bad_schema_files(tmp: Path) -> dict[str, tuple[Path, list[str], list[str]]]:
    """name -> (schema file, extra args, fragments the one-line error must contain)."""
    files: dict[str, tuple[Path, list[str], list[str]]] = {}

    def add(name: str, filename: str, content: str | bytes, extra=(), fragments=()) -> None:
        path = tmp / filename
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        files[name] = (path, list(extra), [filename, *fragments])

    files["missing"] = (tmp / "missing.avsc", [], ["missing.avsc"])
    add("invalid-json-avsc", "broken.avsc", '{"type": "record", "fields": [')
    add("invalid-json", "broken.json", '{"schema": "s", "table_list": [', fragments=["JSON"])
    add(
        "duplicate-field",
        "dup.avsc",
        json.dumps(avro_record("R", ("a", "long"), ("a", "int"))),
        fragments=["'a'"],
    )
    add("unknown-type", "unk.avsc", json.dumps(avro_record("R", ("a", "Nope"))), fragments=["Nope"])
    add("unknown-suffix", "schema.yaml", "a: int", fragments=[".yaml"])
    add(
        "not-utf8",
        "latin1.avsc",
        json.dumps(avro_record("R", ("caf\u00e9", "int")), ensure_ascii=False).encode("latin-1"),
    )
    add("corrupt-parquet", "bad.parquet", b"PAR1 this is not parquet PAR1", fragments=["Parquet"])
    add(
        "datamine-no-table",
        "shop.json",
        json.dumps(SHOP),
        fragments=["users", "orders"],
    )
    add(
        "datamine-unknown-table",
        "shop2.json",
        json.dumps(SHOP),
        extra=["--table", "nope"],
        fragments=["'nope'", "users", "orders"],
    )
    add(
        "datamine-two-sort-keys",
        "keys.json",
        json.dumps(
            {
                "table": "t",
                "fields": [
                    {"id": 1, "name": "a", "type": "INT32", "isAscSortKey": True},
                    {"id": 2, "name": "b", "type": "INT32", "isDesSortKey": True},
                ],
            }
        ),
        fragments=["'b'"],
    )
    # loadable schema files the dataset still cannot take
    add(
        "reserved-column",
        "reserved.avsc",
        json.dumps(avro_record("R", ("offset", "long"), ("x", "int"))),
        fragments=["offset", "reserved"],
    )
    add("no-columns", "empty.avsc", json.dumps(avro_record("R")), fragments=["no columns"])
    (tmp / "adir.avsc").mkdir()
    files["directory"] = (tmp / "adir.avsc", [], ["adir.avsc"])
    return files


BAD_SCHEMA_CASES = [
    "missing",
    "invalid-json-avsc",
    "invalid-json",
    "duplicate-field",
    "unknown-type",
    "unknown-suffix",
    "not-utf8",
    "corrupt-parquet",
    "datamine-no-table",
    "datamine-unknown-table",
    "datamine-two-sort-keys",
    "reserved-column",
    "no-columns",
    "directory",
]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    """Every bad schema file through ``init --schema`` and through ``schema check`` (as OLD for
    half the cases, as NEW for the other half), run once for the module."""
    base = tmp_path_factory.mktemp("bad_schemas")
    good = write_json(base / "good.avsc", avro_record("R", ("a", "long")))
    jobs: dict[tuple[str, str], tuple[list[str | Path], Path | None, list[str]]] = {}
    for i, case in enumerate(BAD_SCHEMA_CASES):
        case_dir = base / case
        (case_dir / "schemas").mkdir(parents=True)
        path, extra, fragments = _bad_schema_files(case_dir / "schemas")[case]
        init = ["init", case_dir / "ds", "--schema", path, *extra]
        jobs[case, "init"] = (init, case_dir, fragments)
        pair = [path, good] if i % 2 == 0 else [good, path]
        if case not in LOADABLE:
            jobs[case, "check"] = (["schema", "check", *pair, *extra], None, fragments)
    results = {key: run_raw(*job[0]) for key, job in jobs.items()}
    outcomes = {}
    for key, (_, case_dir, fragments) in jobs.items():
        listing = None if case_dir is None else sorted(q.name for q in case_dir.iterdir())
        outcomes[key] = Outcome(results[key], fragments, listing)
    return outcomes


@pytest.mark.parametrize("case", BAD_SCHEMA_CASES)
def test_init_with_bad_schema_creates_nothing(
    bad_runs: dict[tuple[str, str], Outcome], case: str
) -> None:
    outcome = bad_runs[case, "init"]
    assert_no_traceback(outcome.process)
    one_line_error(outcome.process, *outcome.fragments)
    assert outcome.process.stdout == ""
    assert outcome.listing == ["schemas"]  # no dataset directory, not even an empty one


# files that load but that a dataset cannot take: `schema check` gives a verdict on them
LOADABLE = {"reserved-column", "no-columns"}
CHECK_CASES = [case for case in BAD_SCHEMA_CASES if case not in LOADABLE]


@pytest.mark.parametrize("case", CHECK_CASES)
def test_schema_check_with_bad_file_is_an_error_not_a_verdict(
    bad_runs: dict[tuple[str, str], Outcome], case: str
) -> None:
    # exit 2 (an error), never 1 (incompatible) nor 0 (compatible)
    outcome = bad_runs[case, "check"]
    assert_no_traceback(outcome.process)
    one_line_error(outcome.process, *outcome.fragments)
    assert outcome.process.stdout == ""


# -- schema --history -----------------------------------------------------------------------------


def test_history_text(lake: Path) -> None:
    hashes = block_hashes(lake)
    lines = ok("schema", lake, "--history").splitlines()
    assert re.fullmatch(rf"block 1  {hashes[1]}  \d{{4}}-\d\d-\d\dT\S+", lines[0]), lines[0]
    assert lines[1] == "  initial schema: 6 fields"  # 4 system columns + id + s (top level)
    second = next(i for i, line in enumerate(lines) if line.startswith("block 3"))
    # one form for every version: the paths it adds (the first version adds every field)
    assert lines[2:second] == [
        f"  + {path}"
        for path in [
            *LAKE_SYSTEM,
            "[version=2.0].[type=long].id",
            "[version=2.0].[type=struct].[type=struct].s",
            "[version=2.0].[type=struct].[type=struct].s.[type=int].a",
        ]
    ]
    assert re.fullmatch(rf"block 3  {hashes[3]}  \d{{4}}-\d\d-\d\dT\S+", lines[second])
    assert lines[second + 1 :] == ["  + [version=2.0].[type=string].name"]


def test_history_json(lake: Path) -> None:
    hashes = block_hashes(lake)
    doc = json.loads(ok("schema", lake, "--history", "--json"))
    assert [e["block"] for e in doc] == [1, 3]
    assert [e["hash"] for e in doc] == [hashes[1], hashes[3]]
    assert doc[0]["diff"] is None
    assert doc[1]["diff"] == {
        "added": ["[version=2.0].[type=string].name"],
        "removed": [],
        "retyped": [],
        "nullability": [],
    }
    assert [f["name"] for f in doc[0]["fields"]] == [
        "offset",
        "op",
        "system_time",
        "event_time",
        "id",
        "s",
    ]
    assert [f["name"] for f in doc[1]["fields"]][-1] == "name"
    assert doc[0]["system_time"] <= doc[1]["system_time"]


def test_history_without_schema(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    Dataset.create(root)
    assert ok("schema", root, "--history").splitlines() == ["no schema declared yet"]
    assert json.loads(ok("schema", root, "--history", "--json")) == []


# -- schema check ---------------------------------------------------------------------------------

OLD_R = avro_record("R", ("a", "long"), ("b", "string"), ("c", ["null", "int"]))


def check(tmp_path: Path, old: object, new: object, *extra: str, suffix: str = ".avsc"):
    o = write_json(tmp_path / f"old{suffix}", old)
    n = write_json(tmp_path / f"new{suffix}", new)
    return run("schema", "check", o, n, *extra)


def test_check_compatible_avsc(tmp_path: Path) -> None:
    new = avro_record(
        "R",
        ("a", "long"),
        ("b", ["string", "null"]),
        ("c", ["null", "int"]),
        ("d", ["null", "double"]),
    )
    p = check(tmp_path, OLD_R, new)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stderr == ""
    assert p.stdout.splitlines() == [
        "+ [version=2.0].[type=R].[type=double].d",
        "~ [version=2.0].[type=R].[type=string].b: required -> nullable",
        "compatible",
    ]


@pytest.mark.parametrize(
    ("new_fields", "violations"),
    [
        (
            [("a", "string"), ("b", "string"), ("c", ["null", "int"])],
            [
                "VIOLATION [type-change] field [version=2.0].[type=R].[type=long].a changed type "
                "from int64 to string"
            ],
        ),
        (
            [("a", "long"), ("c", ["null", "int"])],
            [
                "VIOLATION [field-removed] field [version=2.0].[type=R].[type=string].b (string) "
                "was removed"
            ],
        ),
        (
            [("a", "long"), ("b", "string"), ("c", ["null", "int"]), ("e", "double")],
            [
                "VIOLATION [new-required-field] new field [version=2.0].[type=R].[type=double].e "
                "is required (double); new fields must be nullable"
            ],
        ),
        (
            [("a", "long"), ("b", "string"), ("c", "int")],
            [
                "VIOLATION [optional-to-required] field [version=2.0].[type=R].[type=int].c "
                "changed from optional to required"
            ],
        ),
        (
            [("a", "int"), ("c", ["null", "int"]), ("e", "double")],
            [
                "VIOLATION [type-change] field [version=2.0].[type=R].[type=long].a changed type "
                "from int64 to int32",
                "VIOLATION [field-removed] field [version=2.0].[type=R].[type=string].b (string) "
                "was removed",
                "VIOLATION [new-required-field] new field [version=2.0].[type=R].[type=double].e "
                "is required (double); new fields must be nullable",
            ],
        ),
    ],
    ids=["retyped", "removed", "new-required", "optional-to-required", "all-three"],
)
def test_check_incompatible_avsc(tmp_path: Path, new_fields: list, violations: list[str]) -> None:
    p = check(tmp_path, OLD_R, avro_record("R", *new_fields))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert [line for line in lines if line.startswith("VIOLATION")] == violations
    assert lines[-1] == f"incompatible: {len(violations)} violation(s)"
    assert "compatible" not in lines


def test_check_nested_avro(tmp_path: Path) -> None:
    old = {**READING_AVSC, "fields": READING_AVSC["fields"]}
    new_loc = {
        "type": "record",
        "name": "Loc",
        "fields": [
            {"name": "lat", "type": "string"},
            {"name": "lon", "type": "double"},
            {"name": "alt", "type": ["null", "double"]},
        ],
    }
    new = {
        **READING_AVSC,
        "fields": [
            READING_AVSC["fields"][0],
            READING_AVSC["fields"][1],
            {"name": "loc", "type": new_loc},
            {"name": "tags", "type": {"type": "array", "items": "long"}},
        ],
    }
    p = check(tmp_path, old, new)
    assert p.returncode == 1
    assert [line for line in p.stdout.splitlines() if line.startswith(("VIOLATION", "+"))] == [
        "+ [version=2.0].[type=Reading].[type=Loc].loc.[type=double].alt",
        "VIOLATION [type-change] field "
        "[version=2.0].[type=Reading].[type=Loc].loc.[type=double].lat "
        "changed type from double to string",
        "VIOLATION [type-change] field "
        "[version=2.0].[type=Reading].[type=array].[type=string].tags [item] "
        "changed type from string to int64",
    ]


def test_check_json_form(tmp_path: Path) -> None:
    new = avro_record("R", ("a", "string"), ("c", ["null", "int"]), ("e", "double"))
    p = check(tmp_path, OLD_R, new, "--json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert doc["compatible"] is False
    assert doc["violations"] == [
        {
            "path": "[version=2.0].[type=R].[type=long].a",
            "rule": "type-change",
            "old": "int64",
            "new": "string",
        },
        {
            "path": "[version=2.0].[type=R].[type=string].b",
            "rule": "field-removed",
            "old": "string",
            "new": None,
        },
        {
            "path": "[version=2.0].[type=R].[type=double].e",
            "rule": "new-required-field",
            "old": None,
            "new": "double",
        },
    ]
    assert doc["diff"]["added"] == ["[version=2.0].[type=R].[type=double].e"]
    assert doc["diff"]["removed"] == ["[version=2.0].[type=R].[type=string].b"]
    assert doc["diff"]["retyped"] == [["[version=2.0].[type=R].[type=long].a", "int64", "string"]]
    # and a compatible pair
    q = check(tmp_path, OLD_R, OLD_R, "--json")
    assert q.returncode == 0
    assert json.loads(q.stdout)["compatible"] is True
    assert json.loads(q.stdout)["violations"] == []


def _shop(orders_fields: list[dict]) -> dict:
    return {
        "schema": "shop",
        "table_list": [SHOP["table_list"][0], {"table": "orders", "fields": orders_fields}],
    }


def test_check_datamine_with_table(tmp_path: Path) -> None:
    orders = SHOP["table_list"][1]["fields"]
    compatible = _shop([*orders, {"id": 5, "name": "note", "type": "STRING"}])
    p = check(tmp_path, SHOP, compatible, "--table", "orders", suffix=".json")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.splitlines() == ["+ [version=2.0].[type=string].note", "compatible"]
    # the other table did not change
    p = check(tmp_path, SHOP, compatible, "--table", "users", suffix=".json")
    assert (p.returncode, p.stdout.splitlines()) == (0, ["compatible"])
    # qty made required, items' element retyped, a required field added
    incompatible = _shop(
        [
            orders[0],
            orders[1],
            {"id": 3, "name": "items", "type": "List:INT64"},
            {"id": 4, "name": "qty", "type": "Short", "isRequired": True},
            {"id": 5, "name": "price", "type": "DOUBLE", "isRequired": True},
        ]
    )
    p = check(tmp_path, SHOP, incompatible, "--table", "orders", suffix=".json")
    assert p.returncode == 1, (p.stdout, p.stderr)
    violations = [line for line in p.stdout.splitlines() if line.startswith("VIOLATION")]
    assert violations == [
        "VIOLATION [optional-to-required] field [version=2.0].[type=int].qty changed from "
        "optional to required",
        "VIOLATION [new-required-field] new field [version=2.0].[type=double].price is required "
        "(double); "
        "new fields must be nullable",
        "VIOLATION [type-change] field "
        "[version=2.0].[type=struct].[type=array].[type=string].items [item] "
        "changed type from string to int64",
    ]
    # without --table the two-table documents are an error, not a verdict
    one_line_error(check(tmp_path, SHOP, incompatible, suffix=".json"), "users", "orders")


def test_check_parquet_pair(tmp_path: Path) -> None:
    s_type = pa.struct([pa.field("a", pa.int32())])
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int64()), "s": pa.array([{"a": 1}], s_type)}),
        tmp_path / "old.parquet",
    )
    s2 = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    pq.write_table(
        pa.table(
            {"id": pa.array([1], pa.int64()), "s": pa.array([{"a": 1, "b": "x"}], s2), "n": [1.0]}
        ),
        tmp_path / "new.parquet",
    )
    p = run("schema", "check", tmp_path / "old.parquet", tmp_path / "new.parquet")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout.splitlines() == [
        # parents before children
        "+ [version=2.0].[type=double].n",
        "+ [version=2.0].[type=struct].[type=struct].s.[type=string].b",
        "~ [version=2.0].[type=struct].[type=struct].s.[type=int].a: int32 -> int64",
        "VIOLATION [type-change] field [version=2.0].[type=struct].[type=struct].s.[type=int].a "
        "changed type from int32 to int64",
        "incompatible: 1 violation(s)",
    ]
    # a file against itself is compatible
    q = run("schema", "check", tmp_path / "old.parquet", tmp_path / "old.parquet")
    assert (q.returncode, q.stdout.splitlines()) == (0, ["compatible"])


def test_check_mixed_file_kinds(tmp_path: Path) -> None:
    # an Avro schema against the Parquet file of the same table: compatible; Avro paths (old side)
    avsc = write_json(
        tmp_path / "r.avsc", avro_record("R", ("a", "long"), ("b", ["null", "string"]))
    )
    pq.write_table(
        pa.table({"a": pa.array([1], pa.int64()), "b": ["x"], "c": [True]}).cast(
            pa.schema(
                [
                    pa.field("a", pa.int64(), False),
                    pa.field("b", pa.string()),
                    pa.field("c", pa.bool_()),
                ]
            )
        ),
        tmp_path / "r.parquet",
    )
    p = run("schema", "check", avsc, tmp_path / "r.parquet")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.splitlines()[-1] == "compatible"


@pytest.mark.parametrize(
    "args",
    [
        ("schema", "check", "one.avsc"),
        ("schema", "check", "a.avsc", "b.avsc", "c.avsc"),
    ],
)
def test_check_usage(args: tuple[str, ...]) -> None:
    one_line_error(run(*args), "schema check OLD NEW")


# -- a chain another ODF writer can produce: events that change nothing --------------------------


def test_a_chain_with_restating_events_opens_reads_and_verifies(tmp_path: Path) -> None:
    """ODF forbids no event that changes nothing, and other ODF writers produce them (a SetVocab
    stating the default names outright, the same vocabulary again, the schema again): such a
    chain opens, replays, verifies, and the schema commands answer."""
    from odf_chain.events import SetDataSchema, SetInfo, SetVocab

    path = tmp_path / "ds"
    ds = Dataset.create(path)
    ds.append(SetVocab(event_time_column="event_time", offset_column="offset"))  # the defaults
    ds.append(SetVocab())  # the vocabulary in force, again
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    ds.append(SetVocab(system_time_column="system_time"))  # after the schema: renames nothing
    ds.append(SetDataSchema.from_arrow(ds.state.schema))  # the schema in force, again
    ds.append(SetInfo(description="d"))
    ds.append(SetInfo(description="d"))
    ds.write(pa.table({"id": pa.array([3], pa.int64())}))

    opened = Dataset.open(path)
    assert opened.state.schema.names == ["offset", "op", "system_time", "event_time", "id"]
    assert opened.state.num_records == 3
    assert opened.to_table().column("id").to_pylist() == [1, 2, 3]
    report = opened.verify(deep=True)
    assert report.ok, [p.line() for p in report.problems]
    assert "[version=2.0].[type=long].id" in ok("fields", path)
    assert "event_time" in ok("schema", path)
    p = run("verify", path)
    assert p.returncode == 0, (p.stdout, p.stderr)
