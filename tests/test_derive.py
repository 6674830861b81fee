"""Derivative datasets written by Spark (odf_chain.spark.derive): the chain they make, and their
answer after inputs grow, against DuckDB's answer to the same SQL over the inputs' rows."""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain import Dataset, chain
from odf_chain.derived import DERIVE_KEY, RunRecord, answer_digest, slice_digest_columns
from odf_chain.errors import (
    NotFoundError,
    OdfChainError,
    RuleViolation,
    SchemaError,
    TypeChangeError,
)
from odf_chain.events import DatasetKind, ExecuteTransform, Seed, SetDataSchema, SetTransform
from odf_chain.format.multihash import Multihash
from odf_chain.slices import parquet_logical_hash
from odf_chain.spark import derive
from odf_chain.state import LINEAGE_KEY
from tests.helpers import multihash_name
from tests.test_official_bindings import _content, odf  # noqa: F401 (odf: a fixture)

SQL = """
SELECT r.station, s.region, CAST(r.event_time AS DATE) AS day,
       COUNT(*) AS n, SUM(r.temp) AS total, AVG(r.temp) AS mean,
       CASE WHEN MAX(r.temp) > 30 THEN 'hot' ELSE 'mild' END AS kind
FROM sensors r JOIN stations s ON r.station = s.station
GROUP BY r.station, s.region, CAST(r.event_time AS DATE)
"""
DUCK_SQL = SQL.replace(
    "CAST(r.event_time AS DATE)", "CAST(r.event_time AT TIME ZONE 'UTC' AS DATE)"
)


def _readings(rows: list[tuple[str, int, int, float]]) -> pa.Table:
    return pa.table(
        {
            "station": [r[0] for r in rows],
            "event_time": pa.array(
                [datetime(2026, 1, r[1], r[2], tzinfo=UTC) for r in rows], pa.timestamp("ms", "UTC")
            ),
            # quarter degrees: exact in binary, so sums do not depend on the order of addition
            "temp": [r[3] for r in rows],
        }
    )


STATIONS = pa.table({"station": ["a", "b", "c"], "region": ["north", "south", "north"]})
FIRST = [("a", 1, 1, 20.25), ("a", 1, 5, 22.5), ("b", 1, 3, 31.0), ("c", 2, 8, 10.75)]
MORE = [("a", 1, 9, 35.5), ("b", 2, 4, 12.0), ("d", 2, 1, 1.0)]  # a new reading for day 1 of a


def _duck(sensors: Dataset, stations: Dataset) -> set[tuple]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("sensors", sensors.to_table())
    con.register("stations", stations.to_table())
    return {tuple(r) for r in con.execute(DUCK_SQL).fetchall()}


def _rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    return [tuple(r[c] for c in columns) for r in table.select(columns).to_pylist()]


@pytest.fixture
def inputs(tmp_path):
    sensors = Dataset.create(tmp_path / "sensors")
    sensors.write(_readings(FIRST))
    stations = Dataset.create(tmp_path / "stations")
    stations.write(STATIONS)
    return sensors, stations


def test_derive_then_grow_then_derive_equals_duckdb(spark, inputs, tmp_path):
    sensors, stations = inputs
    out = tmp_path / "daily"
    phases: list[str] = []
    first = derive(
        SQL,
        {"sensors": sensors, "stations": stations},
        out,
        create=True,
        spark=spark,
        progress=phases.append,
    )
    assert first.appended == 3 and first.retracted == 0 and first.reproducible
    assert phases == [
        "pinning 2 inputs at their heads",
        "running the query",
        "comparing its 3 rows with the answer in force",
        "writing the changes (0 retracted, 3 appended)",
        "committing",
    ]
    daily = Dataset.open(out)
    columns = ["station", "region", "day", "n", "total", "mean", "kind"]
    assert sorted(_rows(daily.to_table(), columns)) == sorted(_duck(sensors, stations))

    sensors.write(_readings(MORE))
    second = derive(SQL, {"sensors": sensors, "stations": stations}, out, spark=spark)
    # day 1 of a changed (retracted and appended again), b gained day 2; d has no station
    assert (second.retracted, second.appended) == (1, 2)
    answer = daily.to_table()
    assert sorted(_rows(answer, columns)) == sorted(_duck(sensors, stations))
    assert len(answer) == 4
    # the answer as of the first run is still there, at the first run's block
    first_run = first.blocks[-1].block.sequence_number
    assert len(daily.to_table(at=first_run)) == 3

    blocks = daily.blocks()
    events = [type(e.block.event) for e in blocks]
    assert events[:3] == [Seed, SetTransform, SetDataSchema]
    assert events.count(ExecuteTransform) == 2
    assert blocks[0].block.event.dataset_kind == DatasetKind.DERIVATIVE
    transform = blocks[1].block.event
    assert [i["alias"] for i in transform.inputs] == ["sensors", "stations"]
    assert transform.inputs[0]["dataset_ref"] == sensors.state.dataset_id.to_did()
    assert transform.transform["engine"] == "spark"
    assert transform.transform["version"] == spark.version
    assert transform.transform["queries"][0]["query"] == SQL

    runs = [e.block.event for e in blocks if isinstance(e.block.event, ExecuteTransform)]
    sensor_pins = [r.query_inputs[0] for r in runs]
    heads = [e.hash for e in sensors.blocks() if e.block.event.__class__.__name__ == "AddData"]
    assert sensor_pins[0].prev_block_hash is None and sensor_pins[0].prev_offset is None
    assert sensor_pins[0].new_block_hash == heads[0] and sensor_pins[0].new_offset == 3
    assert sensor_pins[1].prev_block_hash == heads[0] and sensor_pins[1].prev_offset == 3
    assert sensor_pins[1].new_block_hash == heads[1] and sensor_pins[1].new_offset == 6
    station_pins = [r.query_inputs[1] for r in runs]
    assert station_pins[1].prev_block_hash == station_pins[1].new_block_hash
    record = RunRecord.of(runs[1])
    assert record is not None and (record.retracted, record.appended) == (1, 2)
    assert record.answer_rows == 4 and DERIVE_KEY in runs[1].extra
    assert record.input_uris["sensors"] == sensors.location

    ledger = daily.to_table(changelog=True)
    assert sorted(ledger.column("op").to_pylist()) == [0] * 5 + [1]
    assert daily.verify().ok


def test_nothing_new_appends_nothing(spark, inputs, tmp_path):
    sensors, stations = inputs
    out = tmp_path / "daily"
    derive(SQL, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    before = Dataset.open(out).state.head
    again = derive(SQL, {"sensors": sensors, "stations": stations}, out, spark=spark)
    assert again.blocks == [] and "nothing appended" in again.message
    assert Dataset.open(out).refresh().head == before


def test_new_input_block_with_the_same_answer_records_a_run_without_data(spark, inputs, tmp_path):
    sensors, stations = inputs
    out = tmp_path / "daily"
    derive(SQL, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    stations.write(pa.table({"station": ["z"], "region": ["east"]}))  # joins nothing
    run = derive(SQL, {"sensors": sensors, "stations": stations}, out, spark=spark)
    assert len(run.blocks) == 1 and run.appended == run.retracted == 0
    event = run.blocks[0].block.event
    assert isinstance(event, ExecuteTransform) and event.new_data is None
    assert event.query_inputs[1].new_offset == 3 and event.query_inputs[1].prev_offset == 2


def test_a_changed_query_is_a_new_set_transform_and_replaces_the_answer(spark, inputs, tmp_path):
    sensors, stations = inputs
    out = tmp_path / "daily"
    derive(SQL, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    simpler = "SELECT station, COUNT(*) AS n FROM sensors GROUP BY station"
    run = derive(simpler, {"sensors": sensors, "stations": stations}, out, spark=spark)
    kinds = [type(b.block.event).__name__ for b in run.blocks]
    assert kinds[0] == "SetTransform" and kinds[-1] == "ExecuteTransform"
    table = Dataset.open(out).to_table()
    assert sorted(_rows(table, ["station", "n"])) == [("a", 2), ("b", 1), ("c", 1)]
    # the old answer's other columns stay in the schema (no field is ever removed), as nulls
    assert table.column("region").null_count == 3


def test_refusals(spark, inputs, tmp_path):
    sensors, stations = inputs
    with pytest.raises(NotFoundError, match="create"):
        derive(SQL, {"sensors": sensors, "stations": stations}, tmp_path / "none", spark=spark)
    assert not (tmp_path / "none").exists()
    with pytest.raises(OdfChainError, match="root dataset"):
        derive("SELECT * FROM s", {"s": stations}, sensors, spark=spark)
    with pytest.raises(OdfChainError, match="not a SQL identifier"):
        derive("SELECT 1", {"bad-name": stations}, tmp_path / "x", create=True, spark=spark)
    with pytest.raises(Exception, match=r"(?i)table or view.*cannot be found|UNRESOLVED"):
        derive("SELECT * FROM nowhere", {"s": stations}, tmp_path / "y", create=True, spark=spark)
    assert not (tmp_path / "y").exists()
    with pytest.raises(OdfChainError, match="derivative"):
        Dataset.create(tmp_path / "z")  # a root dataset reads as before ...
        derive("SELECT station FROM s", {"s": stations}, tmp_path / "d", create=True, spark=spark)
        Dataset.open(tmp_path / "d").to_pyarrow_dataset()  # ... a derivative's ledger does not
    _ = RuleViolation
    with pytest.raises(SchemaError, match="reserved for ODF system columns"):
        derive("SELECT * FROM s", {"s": stations}, tmp_path / "star", create=True, spark=spark)
    assert not (tmp_path / "star").exists()


def test_a_changed_query_that_changes_a_columns_type_is_refused(spark, inputs, tmp_path):
    """COUNT(*) AS x, then AVG(temp) AS x: the double answer is not cast into the int64 the
    dataset declares (2.0 would pass as 2, 2.5 fail later as a raw Arrow error): refused, the
    dataset as it was."""
    sensors, _ = inputs
    out = tmp_path / "typed"
    count = "SELECT station, COUNT(*) AS x FROM r GROUP BY station"
    derive(count, {"r": sensors}, out, create=True, spark=spark)
    before = Dataset.open(out).state.head
    average = "SELECT station, AVG(temp) AS x FROM r GROUP BY station"
    with pytest.raises(TypeChangeError, match="'x' is double, the dataset's is int64"):
        derive(average, {"r": sensors}, out, spark=spark)
    assert Dataset.open(out).state.head == before


# -- chain-verify --reproduce ---------------------------------------------------------------


def _two_runs(spark, inputs, tmp_path, sql: str = SQL):
    sensors, stations = inputs
    out = tmp_path / "daily"
    derive(sql, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    sensors.write(_readings(MORE))
    derive(sql, {"sensors": sensors, "stations": stations}, out, spark=spark)
    return Dataset.open(out)


@contextlib.contextmanager
def _conf(spark, **settings):
    saved = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def test_every_run_reproduces_whatever_the_parallelism(spark, inputs, tmp_path):
    daily = _two_runs(spark, inputs, tmp_path)
    for settings in (
        {},
        {"spark.sql.shuffle.partitions": "7", "spark.sql.adaptive.enabled": "false"},
        {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "true"},
    ):
        with _conf(spark, **settings):
            report = daily.verify(reproduce=True, spark=spark)
        assert report.ok, [p.line() for p in report.problems]
        assert [r.verdict for r in report.runs] == ["reproduced", "reproduced"], settings


def test_a_repartitioned_input_reproduces(spark, inputs, tmp_path):
    sensors, stations = inputs
    # the input written in many small slices: Spark reads it in another partitioning
    rows = FIRST + MORE
    for row in rows:
        sensors.write(_readings([row]))
    out = tmp_path / "daily"
    derive(SQL, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    report = Dataset.open(out).verify(reproduce=True, spark=spark)
    assert [r.verdict for r in report.runs] == ["reproduced"] and report.ok


def test_rand_is_not_reproducible_and_says_so(spark, inputs, tmp_path):
    sensors, _ = inputs
    out = tmp_path / "noisy"
    sql = "SELECT station, temp + rand() AS t FROM sensors"
    result = derive(sql, {"sensors": sensors}, out, create=True, spark=spark)
    assert result.nondeterministic == ("rand()",) and not result.reproducible
    report = Dataset.open(out).verify(reproduce=True, spark=spark)
    assert report.ok  # a warning, not an error
    assert [r.verdict for r in report.runs] == ["not reproducible"]
    assert [p.rule for p in report.warnings] == ["not-reproducible"]
    assert "rand()" in report.warnings[0].message


def _forge(dataset: Dataset, *, retractions_too: bool = False, redigest: bool = True) -> int:
    """What a forger with write access does to change a derived number so that plain verify
    (and --deep) still pass: take the last run back, rewrite its slice with another value,
    and append the run again with every hash and digest recomputed (and the head log and the
    index, which would tell, removed). Returns the forged block's sequence number."""
    blocks = dataset.blocks()
    last = blocks[-1]
    event = last.block.event
    original = pq.read_table(dataset.path / "data" / str(event.new_data.physical_hash))
    op = original.column("op").to_pylist()
    total = [
        v + 1.0 if o == 0 or retractions_too else v
        for v, o in zip(original.column("total").to_pylist(), op, strict=True)
    ]
    table = original.set_column(original.schema.get_field_index("total"), "total", pa.array(total))
    staged = dataset.path / "forged.parquet"
    pq.write_table(table, staged)
    data = staged.read_bytes()
    name = multihash_name(data)
    shutil.move(staged, dataset.path / "data" / name)
    with pq.ParquetFile(dataset.path / "data" / name) as parquet:
        logical = parquet_logical_hash(parquet, "blake3")
    record = dict(event.extra[DERIVE_KEY])
    vocab = dataset.state.vocab
    if redigest:
        record["slice"] = {
            **record["slice"],
            "digest": answer_digest(table, slice_digest_columns(table.schema, vocab)),
        }
    forged = replace(
        event,
        new_data=replace(
            event.new_data,
            physical_hash=Multihash.from_multibase(name),
            logical_hash=logical,
            size=len(data),
        ),
        extra={DERIVE_KEY: record},
    )
    storage = dataset.storage
    storage.compare_and_swap_head(str(last.hash), str(blocks[-2].hash))
    (dataset.path / "logs" / "head").unlink()
    shutil.rmtree(dataset.path / "info", ignore_errors=True)
    (dataset.path / "blocks" / str(last.hash)).unlink()
    (dataset.path / "data" / str(event.new_data.physical_hash)).unlink()
    state = Dataset.open(dataset.path).refresh()  # a reader that never saw the real head
    _, entry = chain.append(storage, state, forged, system_time=last.block.system_time)
    return entry.block.sequence_number


def test_a_forged_output_slice_is_caught_by_reproduce(spark, inputs, tmp_path):
    daily = _two_runs(spark, inputs, tmp_path)
    forged = _forge(daily)
    daily = Dataset.open(daily.path)
    plain = daily.verify(deep=True)
    assert plain.ok, [p.line() for p in plain.problems]
    report = daily.verify(reproduce=True, spark=spark)
    assert not report.ok
    errors = [p for p in report.errors if p.rule == "reproduce-mismatch"]
    assert errors and errors[0].sequence_number == forged
    assert errors[0].path is not None and errors[0].path.startswith("data/")
    assert "offsets" in errors[0].message
    from tests.cli_run import run_main

    plain_cli = run_main([daily.path], entry="chain-verify")
    assert plain_cli.returncode == 0, plain_cli.stdout
    cli = run_main([daily.path, "--reproduce"], entry="chain-verify", spark=spark)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert f"ERROR block {forged} " in cli.stdout and "[reproduce-mismatch]" in cli.stdout


# -- the commands -----------------------------------------------------------------------------


def test_derive_and_reproduce_commands(spark, inputs, tmp_path):
    from tests.cli_run import run_main

    sensors, stations = inputs
    out = tmp_path / "daily"
    given = ["--input", f"sensors={sensors.path}", "--input", f"stations={stations.path}"]
    missing = run_main(["derive", out, "--sql", SQL, *given])
    assert missing.returncode == 2 and "--create" in missing.stderr and not out.exists()
    bad = run_main(["derive", out, "--sql", SQL, "--input", "sensors", "--create"])
    assert bad.returncode == 2 and "ALIAS=DIR" in bad.stderr
    made = run_main(["derive", out, "--sql", SQL, *given, "--create"], spark=spark)
    assert made.returncode == 0, made.stderr
    assert "3 row(s) appended, 0 retracted" in made.stdout and "ExecuteTransform" in made.stdout
    again = run_main(["derive", out, "--sql", SQL, *given], spark=spark)
    assert again.returncode == 0 and "nothing appended" in again.stdout
    checked = run_main([out, "--reproduce"], entry="chain-verify", spark=spark)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert ": reproduced (3 row(s)" in checked.stdout and "\nOK: " in checked.stdout
    assert "Traceback" not in checked.stderr
    lonely = run_main([out, "--recursive"], entry="chain-verify")
    assert lonely.returncode == 2 and "--reproduce" in lonely.stderr


# -- read by ODF's own bindings -----------------------------------------------------------------


def test_bindings_from_the_official_odf_schema_decode_every_block(spark, inputs, tmp_path, odf):  # noqa: F811
    daily = _two_runs(spark, inputs, tmp_path)
    kinds = odf("MetadataEvent").MetadataEvent
    names = {v: k for k, v in vars(kinds).items() if not k.startswith("_")}
    seen = []
    for entry in daily.blocks():
        data = (daily.path / "blocks" / str(entry.hash)).read_bytes()
        block = odf("MetadataBlock").MetadataBlockT.InitFromPackedBuf(_content(odf, data), 0)
        assert block.sequenceNumber == entry.block.sequence_number
        assert names[block.eventType] == entry.block.event_name
        seen.append(names[block.eventType])
        ours = entry.block.event
        if isinstance(ours, ExecuteTransform):
            pins = block.event.queryInputs
            assert [bytes(p.datasetId) for p in pins] == [
                bytes(i.dataset_id) for i in ours.query_inputs
            ]
            assert [(p.prevOffset, p.newOffset) for p in pins] == [
                (i.prev_offset, i.new_offset) for i in ours.query_inputs
            ]
            assert [bytes(p.newBlockHash) for p in pins] == [
                bytes(i.new_block_hash) for i in ours.query_inputs
            ]
        if isinstance(ours, SetTransform):
            assert block.event.transform.queries[0].query.decode() == SQL
    assert seen.count("ExecuteTransform") == 2 and seen[:2] == ["Seed", "SetTransform"]


def test_a_retraction_of_nothing_is_a_mismatch_not_a_crash(spark, inputs, tmp_path):
    daily = _two_runs(spark, inputs, tmp_path)
    _forge(daily, retractions_too=True)
    daily = Dataset.open(daily.path)
    report = daily.verify(reproduce=True, spark=spark)
    (error,) = [p for p in report.errors if p.rule == "reproduce-mismatch"]
    assert "cannot be read back" in error.message and "retracts a row that is not live" in (
        error.message
    )
    assert [r.verdict for r in report.runs] == ["reproduced", "mismatch"]


# -- field lineage and pinned provenance --------------------------------------------------------


def test_field_lineage_is_captured_and_carried_where_odf_readers_skip_it(spark, inputs, tmp_path):
    sensors, stations = inputs
    daily = _two_runs(spark, inputs, tmp_path)
    runs = [e for e in daily.blocks() if isinstance(e.block.event, ExecuteTransform)]
    assert all(LINEAGE_KEY in r.block.event.extra for r in runs)
    assert not any(e.block.event_name == "AddFieldLineage" for e in daily.blocks())
    replayed = daily.lineage()
    assert replayed.unreachable == []
    src, where = sensors.state.dataset_id.to_did(), stations.state.dataset_id.to_did()
    up = {r.field for r in replayed.graph.upstream(replayed.field("mean"), depth=None)}
    assert replayed.field("temp", src) in up
    up = {r.field for r in replayed.graph.upstream(replayed.field("region"), depth=None)}
    assert replayed.field("region", where) in up
    # the run that wrote an offset is the ExecuteTransform whose slice holds it
    second = runs[1].block.event.new_data.offset_interval
    run = replayed.graph.run_for_offset(replayed.dataset, second.start)
    assert run is not None and run.offsets == second
    assert daily.verify().ok


@pytest.mark.parametrize("unit", ["ms", "ns"])
def test_an_input_read_through_arrow_keeps_its_field_lineage(spark, tmp_path, unit):
    """An input holding timestamps in nanoseconds (pandas' unit) is read through Arrow tasks,
    as Spark's Parquet reader refuses them: the run's field lineage still names the input
    dataset's fields and nothing else, as for an input Spark reads itself (ms), never the list
    of paths the tasks were handed; in a self-join too (Spark gives one side new ids), and
    from a folder whose name URIs must escape."""
    source = Dataset.create(tmp_path / "in #1?%41")
    hours = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (1, 2, 3)]
    at = pa.array(hours, pa.timestamp(unit, "UTC"))
    source.write(pa.table({"station": ["a", "a", "b"], "at": at, "temp": [1.0, 2.0, 3.0]}))
    src = source.state.dataset_id.to_did()
    queries = {
        "grouped": "SELECT station, MAX(at) AS last_at, AVG(temp) AS mean FROM s GROUP BY station",
        "self-join": "SELECT a.station, b.at AS last_at, b.temp AS mean "
        "FROM s a JOIN s b ON a.station = b.station AND a.at < b.at",
    }
    for name, sql in queries.items():
        derive(sql, {"s": source}, tmp_path / name, create=True, spark=spark)
        out = Dataset.open(tmp_path / name)
        replayed = out.lineage()
        assert replayed.unreachable == []
        for field, read in (("last_at", "at"), ("mean", "temp"), ("station", "station")):
            up = {r.field for r in replayed.graph.upstream(replayed.field(field), depth=None)}
            assert replayed.field(read, src) in up, (name, field, up)
            assert {f.dataset for f in up} == {src}, (name, field, up)
        (run,) = [e for e in out.blocks() if isinstance(e.block.event, ExecuteTransform)]
        recorded = run.block.event.extra[LINEAGE_KEY]
        recorded = json.loads(recorded) if isinstance(recorded, str) else recorded
        assert [i.get("dataset_id") for i in recorded["inputs"]] == [src], recorded["inputs"]


def test_lineage_offset_names_the_input_blocks_and_offsets_the_run_read(spark, inputs, tmp_path):
    import json

    from tests.cli_run import run_main

    sensors, stations = inputs
    daily = _two_runs(spark, inputs, tmp_path)
    runs = [e for e in daily.blocks() if isinstance(e.block.event, ExecuteTransform)]
    second = runs[1].block.event
    offset = second.new_data.offset_interval.end
    answer = run_main(["lineage", daily.path, "mean", "--offset", offset, "--json"])
    assert answer.returncode == 0, answer.stderr
    doc = json.loads(answer.stdout)
    assert doc["run"]["block"]["sequence_number"] == runs[1].block.sequence_number
    came_from = {(f["dataset"], f["name"]) for f in doc["from"]}
    assert (sensors.state.dataset_id.to_did(), "temp") in came_from  # and join/group keys
    assert {d for d, _ in came_from} <= {
        sensors.state.dataset_id.to_did(),
        stations.state.dataset_id.to_did(),
    }
    read = {c["alias"]: c for c in doc["consumed"]}
    assert read["sensors"]["dataset_id"] == sensors.state.dataset_id.to_did()
    assert read["sensors"]["new_block_hash"] == str(second.query_inputs[0].new_block_hash)
    assert read["sensors"]["prev_block_hash"] == str(second.query_inputs[0].prev_block_hash)
    assert (read["sensors"]["read_offsets"], read["sensors"]["new_offsets"]) == ([0, 6], [4, 6])
    assert read["stations"]["new_offsets"] is None  # nothing new in stations for that run
    assert read["sensors"]["location"] == sensors.location
    text = run_main(["lineage", daily.path, "--offset", offset])
    assert text.returncode == 0, text.stderr
    assert "read     sensors" in text.stdout and "offsets 0..6 (new since its last run: 4..6)" in (
        text.stdout
    )


def test_recursive_reproduces_a_derivative_input_first(spark, inputs, tmp_path):
    daily = _two_runs(spark, inputs, tmp_path)
    regions = tmp_path / "regions"
    sql = "SELECT region, SUM(n) AS n FROM daily GROUP BY region"
    derive(sql, {"daily": daily}, regions, create=True, spark=spark)
    assert sorted(_rows(Dataset.open(regions).to_table(), ["region", "n"])) == [
        ("north", 4),
        ("south", 2),
    ]
    alone = Dataset.open(regions).verify(reproduce=True, spark=spark)
    assert [r.dataset for r in alone.runs] == [str(regions)]
    both = Dataset.open(regions).verify(reproduce=True, recursive=True, spark=spark)
    assert both.ok, [p.line() for p in both.problems]
    assert [(r.dataset, r.verdict) for r in both.runs] == [
        (daily.location, "reproduced"),
        (daily.location, "reproduced"),
        (str(regions), "reproduced"),
    ]


def test_log_says_what_a_transform_and_a_run_are(spark, inputs, tmp_path):
    from tests.cli_run import run_main

    daily = _two_runs(spark, inputs, tmp_path)
    shown = run_main(["log", daily.path, "--full"])
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[3]: line for line in shown.stdout.splitlines()[1:]}
    assert (
        f"spark {spark.version} over sensors, stations: SELECT r.station" in lines["SetTransform"]
    )
    runs = [line for line in shown.stdout.splitlines() if "ExecuteTransform" in line]
    assert "2 inputs read to offsets 6, 2" in runs[0]  # newest first
    assert "2 inputs read to offsets 3, 2" in runs[1]


def test_deep_verify_checks_the_slice_digest_a_run_recorded(spark, inputs, tmp_path):
    daily = _two_runs(spark, inputs, tmp_path)
    assert daily.verify(deep=True).ok
    forged = _forge(daily, redigest=False)  # the hashes recomputed, the recorded digest not
    daily = Dataset.open(daily.path)
    assert daily.verify().ok
    deep = daily.verify(deep=True)
    (error,) = deep.errors
    assert error.rule == "data-digest" and error.sequence_number == forged
    assert "the run recorded" in error.message and error.path.startswith("data/")


def test_the_spark_engine_is_found_by_name():
    from odf_chain import engines
    from odf_chain.errors import OdfChainError as Refused
    from odf_chain.spark.reproduce import reproduce

    assert engines.reproducer("spark") is reproduce
    with pytest.raises(Refused, match="no engine 'flink' installed"):
        engines.reproducer("flink")


def test_reproduce_an_input_that_moved(spark, inputs, tmp_path):
    from tests.cli_run import run_main

    sensors, stations = inputs
    out = tmp_path / "daily"
    derive(SQL, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    record = RunRecord.of(Dataset.open(out).blocks()[-1].block.event)
    assert record.input_uris["sensors"] == str(sensors.path.absolute())  # wherever run from
    moved = tmp_path / "elsewhere" / "sensors"
    shutil.copytree(sensors.path, moved)
    shutil.rmtree(sensors.path)
    lost = Dataset.open(out).verify(reproduce=True, spark=spark)
    (error,) = lost.errors
    assert error.rule == "reproduce-input" and "input sensors cannot be opened" in error.message
    found = Dataset.open(out).verify(reproduce=True, inputs={"sensors": str(moved)}, spark=spark)
    assert found.ok and [r.verdict for r in found.runs] == ["reproduced"]
    wrong = Dataset.open(out).verify(
        reproduce=True, inputs={"sensors": str(stations.path)}, spark=spark
    )
    assert "the transform reads" in wrong.errors[0].message
    cli = run_main(
        [out, "--reproduce", "--input", f"sensors={moved}"], entry="chain-verify", spark=spark
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    lonely = run_main([out, "--input", f"sensors={moved}"], entry="chain-verify")
    assert lonely.returncode == 2 and "go with --reproduce" in lonely.stderr


def test_deep_verify_refuses_a_changelog_that_does_not_fold(spark, inputs, tmp_path):
    daily = _two_runs(spark, inputs, tmp_path)
    assert daily.verify(deep=True).ok
    forged = _forge(daily, retractions_too=True)  # every hash and digest recomputed
    daily = Dataset.open(daily.path)
    assert daily.verify().ok
    deep = daily.verify(deep=True)
    (error,) = deep.errors
    assert error.rule == "data-changelog" and error.sequence_number == forged
    assert "retracts a row that is not live" in error.message


# -- what a run starts from is proved against the chain ---------------------------------------


def test_a_forged_index_does_not_decide_where_a_run_starts(spark, inputs, tmp_path):
    """The head snapshot names the first run as the last one (a genuine block, so the index
    reader's checks pass): a run taking its pins from that would read rows twice and the rules,
    judged on the same state, would not object. The transaction proves them by the chain."""
    from odf_chain.index.records import Pointer
    from tests.test_trust import head_snapshot, write_head_snapshot

    sensors, stations = inputs
    daily = _two_runs(spark, inputs, tmp_path)
    first, second = [e for e in daily.blocks() if isinstance(e.block.event, ExecuteTransform)]
    genuine = head_snapshot(daily.path)
    stale = Pointer(first.block.sequence_number, first.hash)
    write_head_snapshot(daily.path, replace(genuine, pointers=replace(genuine.pointers, run=stale)))
    assert Dataset.open(daily.path).state.last_run_inputs == first.block.event.query_inputs

    sensors.write(_readings([("c", 3, 2, 4.5)]))
    derive(SQL, {"sensors": sensors, "stations": stations}, daily.path, spark=spark)
    third = Dataset.open(daily.path).blocks()[-1].block.event
    assert isinstance(third, ExecuteTransform)
    [(was, now)] = [
        (b, c)
        for b, c in zip(second.block.event.query_inputs, third.query_inputs, strict=True)
        if c.dataset_id == sensors.state.dataset_id
    ]
    assert (now.prev_block_hash, now.prev_offset) == (was.new_block_hash, was.new_offset)
    assert sorted(_rows(Dataset.open(daily.path).to_table(), ["station", "n"])) == sorted(
        (r[0], r[3]) for r in _duck(sensors, stations)
    )
    report = Dataset.open(daily.path).verify()
    assert not [p for p in report.errors if p.rule != "index-mismatch"], report.errors


def test_an_answer_is_compared_in_the_stored_types_or_refused():
    """derived.comparable casts an answer into the types the dataset stores where only width
    or unit differ (int32 into int64, inside a struct too), and refuses a change of kind at
    any depth (a double inside a struct or a list is not cast into an int64: 2.0 would pass
    as 2); derived.changes refuses system columns' names in any case, as Spark takes them."""
    from odf_chain.derived import changes, comparable
    from odf_chain.state import Vocabulary

    def struct(kind):
        return pa.struct([("v", kind)])

    widened = comparable(
        pa.table({"s": pa.array([{"v": 2}], struct(pa.int32())), "n": pa.array([1], pa.int32())}),
        pa.schema([("s", struct(pa.int64())), ("n", pa.int64())]),
    )
    assert widened.schema == pa.schema([("s", struct(pa.int64())), ("n", pa.int64())])
    changed = [
        (pa.array([{"v": 2.0}], struct(pa.float64())), struct(pa.int64())),
        (pa.array([[2.0]], pa.list_(pa.float64())), pa.list_(pa.int64())),
        (pa.array([2.0]), pa.int64()),
        (pa.array(["2"]), pa.int64()),
    ]
    for given, stored in changed:
        with pytest.raises(TypeChangeError, match="a column's type never changes"):
            comparable(pa.table({"x": given}), pa.schema([("x", stored)]))
    for name in ("op", "OFFSET", "System_Time"):
        answer = pa.table({name: [1], "v": [2]})
        with pytest.raises(SchemaError, match="reserved for ODF system columns"):
            changes(None, answer, Vocabulary(), datetime(2026, 1, 1, tzinfo=UTC))
