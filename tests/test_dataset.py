"""The Dataset API end to end on real files: blocks, refs and Parquet slices on disk.

Expected values come from the test's own inputs (tables, times measured around calls) and from
hashing the files independently (``blake3`` / ``hashlib``), never from odf_chain's own answers.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from odf_chain.errors import (
    FormatError,
    NewColumnsError,
    NotFoundError,
    OdfChainError,
    RuleViolation,
    SchemaError,
    SchemaEvolutionError,
)
from odf_chain.events import AddData, Seed, SetDataSchema, SetVocab
from odf_chain.format.multihash import Multihash
from tests.helpers import multihash_name, snapshot_tree

MS_UTC = pa.timestamp("ms", tz="UTC")
PREFIX = {"blake3": "f1e20", "sha3-256": "f1620"}


def ts(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def table(ids: list[int], **extra: pa.Array) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), **extra})


def read_head(root: Path) -> str:
    return (root / "refs" / "head").read_text().strip()


def block_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "blocks").iterdir())


def data_file(root: Path, event: AddData) -> Path:
    return root / "data" / str(event.new_data.physical_hash)


def trunc_ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


# -- create ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["blake3", "sha3-256"])
def test_create_writes_a_seed(tmp_path: Path, algorithm: str) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(root, hash=algorithm) if algorithm != "blake3" else Dataset.create(root)
    for sub in ("blocks", "refs", "data"):
        assert (root / sub).is_dir()
    names = block_files(root)
    assert len(names) == 1
    (name,) = names
    raw = (root / "blocks" / name).read_bytes()
    assert name == multihash_name(raw, algorithm)
    assert name.startswith(PREFIX[algorithm])
    assert read_head(root) == name
    assert list((root / "data").iterdir()) == []

    (entry,) = ds.blocks()
    assert isinstance(entry.block.event, Seed)
    assert entry.block.sequence_number == 0
    assert entry.block.prev_block_hash is None
    assert str(entry.hash) == name
    assert entry.size == len(raw)
    did = str(ds.state.dataset_id)
    assert re.fullmatch(r"did:odf:fed01[0-9a-f]{64}", did)
    assert str(entry.block.event.dataset_id) == did
    assert ds.hash_algorithm == algorithm
    assert ds.state.sequence_number == 0
    assert ds.state.schema is None
    # the public key travels in the Seed's bytes
    assert bytes.fromhex(did.removeprefix("did:odf:f")) in raw


def test_each_create_gets_its_own_id(tmp_path: Path) -> None:
    a = Dataset.create(tmp_path / "a").state.dataset_id
    b = Dataset.create(tmp_path / "b").state.dataset_id
    assert a != b


def test_create_refuses_an_existing_dataset(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    Dataset.create(root)
    before = snapshot_tree(root)
    with pytest.raises(OdfChainError, match="already a dataset"):
        Dataset.create(root)
    assert snapshot_tree(root) == before


def test_create_refuses_unknown_hash(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="md5"):
        Dataset.create(tmp_path / "ds", hash="md5")


# -- write ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["blake3", "sha3-256"])
def test_writes_blocks_and_slices(tmp_path: Path, algorithm: str) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(root, hash=algorithm)
    sizes = [3, 4, 1]
    appended = []
    before_first = datetime.now(UTC)
    next_id = 0
    for n in sizes:
        ids = list(range(next_id, next_id + n))
        next_id += n
        appended.append(ds.write(table(ids, name=pa.array([f"n{i}" for i in ids]))))
    after_last = datetime.now(UTC)

    assert [[e.block.event_name for e in blocks] for blocks in appended] == [
        ["SetDataSchema", "AddData"],
        ["AddData"],
        ["AddData"],
    ]
    all_entries = [e for blocks in appended for e in blocks]
    assert [e.block.sequence_number for e in all_entries] == [1, 2, 3, 4]
    assert read_head(root) == str(all_entries[-1].hash)
    assert len(block_files(root)) == 5
    for entry in all_entries:
        raw = (root / "blocks" / str(entry.hash)).read_bytes()
        assert str(entry.hash) == multihash_name(raw, algorithm)

    adds = [e.block.event for e in all_entries if isinstance(e.block.event, AddData)]
    expected_intervals = [(0, 2), (3, 6), (7, 7)]
    assert [(a.new_data.offset_interval.start, a.new_data.offset_interval.end) for a in adds] == (
        expected_intervals
    )
    assert [a.prev_offset for a in adds] == [None, 2, 6]
    assert len(list((root / "data").iterdir())) == 3

    offsets_seen: list[int] = []
    for add, entry, n in zip(adds, [all_entries[1], *all_entries[2:]], sizes, strict=True):
        path = data_file(root, add)
        raw = path.read_bytes()
        assert path.name == multihash_name(raw, algorithm)
        assert add.new_data.size == len(raw)
        assert add.new_data.logical_hash.algorithm == algorithm
        t = pq.read_table(path)
        schema = t.schema
        assert schema.names[:4] == ["offset", "op", "system_time", "event_time"]
        assert schema.field("offset").type == pa.int64()
        assert not schema.field("offset").nullable
        assert schema.field("op").type == pa.int32()
        assert schema.field("system_time").type == MS_UTC
        assert schema.field("event_time").type == MS_UTC
        assert t.num_rows == n
        assert t.column("op").to_pylist() == [0] * n
        system_times = set(t.column("system_time").to_pylist())
        assert system_times == {trunc_ms(entry.block.system_time)}
        (moment,) = system_times
        assert trunc_ms(before_first) <= moment <= after_last
        # no event time in the table: it is the system time
        assert t.column("event_time").to_pylist() == [moment] * n
        offsets_seen += t.column("offset").to_pylist()
    assert offsets_seen == list(range(sum(sizes)))

    state = ds.state
    assert state.num_records == 8
    assert state.num_slices == 3
    assert state.last_offset == 7
    assert state.data_size == sum(data_file(root, a).stat().st_size for a in adds)


def test_user_columns_round_trip(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    t = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "name": pa.array(["a", None, "c"]),
            "s": pa.array([{"x": 1}, {"x": 2}, None], pa.struct([pa.field("x", pa.int32())])),
        }
    )
    (_, add) = ds.write(t)
    stored = pq.read_table(data_file(ds.path, add.block.event))
    assert stored.select(["id", "name", "s"]).to_pylist() == t.to_pylist()
    assert stored.schema.field("s").type == t.schema.field("s").type


def test_event_time_and_watermark(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")

    def write(ids: list[int], times: list[datetime | None]) -> AddData:
        blocks = ds.write(table(ids, event_time=pa.array(times, MS_UTC)))
        event = blocks[-1].block.event
        assert isinstance(event, AddData)
        stored = pq.read_table(data_file(ds.path, event))
        assert stored.column("event_time").to_pylist() == times
        return event

    first = write([1, 2, 3], [ts(2024, 1, 5), ts(2024, 1, 9), ts(2024, 1, 7)])
    assert first.new_watermark == ts(2024, 1, 9)
    assert ds.state.watermark == ts(2024, 1, 9)

    # older data does not move the watermark back
    second = write([4, 5], [ts(2023, 6, 1), ts(2024, 1, 1)])
    assert second.new_watermark == ts(2024, 1, 9)

    third = write([6], [ts(2024, 2, 1, 10, 30)])
    assert third.new_watermark == ts(2024, 2, 1, 10, 30)

    # nulls are ignored; an all-null batch carries the watermark
    fourth = write([7, 8], [None, ts(2024, 2, 2)])
    assert fourth.new_watermark == ts(2024, 2, 2)
    fifth = write([9], [None])
    assert fifth.new_watermark == ts(2024, 2, 2)

    watermarks = [
        e.block.event.new_watermark for e in ds.blocks() if isinstance(e.block.event, AddData)
    ]
    assert watermarks == sorted(watermarks)
    assert ds.verify().ok


def test_watermark_without_event_time_is_the_system_time(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    before = datetime.now(UTC)
    (_, add) = ds.write(table([1]))
    after = datetime.now(UTC)
    watermark = add.block.event.new_watermark
    assert trunc_ms(before) <= watermark <= after
    assert watermark == trunc_ms(add.block.system_time)


def test_nanosecond_event_time(tmp_path: Path) -> None:
    """pandas gives timestamp[ns]; the watermark keeps microseconds (as blocks do)."""
    ds = Dataset.create(tmp_path / "ds")
    ns = [1_700_000_000_123_456_789, 1_600_000_000_000_000_001]
    blocks = ds.write(table([1, 2], event_time=pa.array(ns, pa.timestamp("ns", tz="UTC"))))
    expected = datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert datetime.fromtimestamp(ns[0] // 1000 / 1e6, UTC) == expected
    assert blocks[-1].block.event.new_watermark == expected
    stored = pq.read_table(data_file(ds.path, blocks[-1].block.event))
    assert stored.column("event_time").cast(pa.int64()).to_pylist() == ns
    assert ds.verify().problems == []


def test_event_time_in_another_zone(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    berlin = pa.timestamp("ms", tz="Europe/Berlin")
    blocks = ds.write(table([1], event_time=pa.array([1_700_000_000_000], berlin)))
    assert blocks[-1].block.event.new_watermark == ts(2023, 11, 14, 22, 13, 20)
    assert Dataset.open(ds.path).state.watermark == ts(2023, 11, 14, 22, 13, 20)
    assert ds.verify().problems == []


def test_event_time_option_keeps_the_column_name(tmp_path: Path) -> None:
    """``Dataset.write(event_time="col")``: as the Spark writer, the column keeps its name and a
    SetVocab (before the SetDataSchema, same head move) names it; the watermark follows it."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    first = table(
        [1, 2],
        last_order_ts=pa.array([ts(2024, 1, 2), ts(2024, 1, 1)], MS_UTC),
        event_time=pa.array(["x", "y"]),  # an ordinary column of that name: kept
    )
    blocks = ds.write(first, event_time="last_order_ts")
    assert [type(b.block.event).__name__ for b in blocks] == [
        "SetVocab",
        "SetDataSchema",
        "AddData",
    ]
    assert blocks[0].block.event == SetVocab(event_time_column="last_order_ts")
    assert len({b.block.system_time for b in blocks}) == 1
    state = Dataset.open(root).state
    names = ["offset", "op", "system_time", "last_order_ts", "id", "event_time"]
    assert state.schema.names == names
    assert state.watermark == ts(2024, 1, 2)
    stored = pq.read_table(data_file(root, blocks[-1].block.event))
    assert stored.column("event_time").to_pylist() == ["x", "y"]

    # the vocabulary names it now: the option again, or none, appends no SetVocab
    again = table([3], last_order_ts=pa.array([ts(2024, 1, 5)], MS_UTC), event_time=pa.array(["z"]))
    assert [type(b.block.event).__name__ for b in ds.write(again, event_time="last_order_ts")] == [
        "AddData"
    ]
    later = table([4], last_order_ts=pa.array([ts(2024, 1, 7)], MS_UTC), event_time=pa.array(["w"]))
    assert [type(b.block.event).__name__ for b in ds.write(later)] == ["AddData"]
    assert ds.state.watermark == ts(2024, 1, 7)

    # another column once the schema is set: refused, nothing written
    before = snapshot_tree(root)
    with pytest.raises(RuleViolation) as caught:
        ds.write(later, event_time="event_time")
    assert caught.value.rule == "vocab-before-schema"
    assert "'last_order_ts'" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(SchemaError, match="'nowhere' is not in the table"):
        ds.write(later, event_time="nowhere")
    assert snapshot_tree(root) == before
    assert ds.verify(deep=True).problems == []


def test_types_parquet_stores_differently(tmp_path: Path) -> None:
    """Parquet has no second-resolution timestamps/times and no date64: the declared schema
    must be what the files hold, or the library's own output fails verification."""
    ds = Dataset.create(tmp_path / "ds")
    t = pa.table(
        {
            "at": pa.array([1_700_000_000], pa.timestamp("s", tz="Europe/Berlin")),
            "naive": pa.array([86_400], pa.timestamp("s")),
            "clock": pa.array([3_600], pa.time32("s")),
            "day": pa.array([3 * 86_400_000], pa.date64()),
            "nested": pa.array(
                [{"when": 60}], pa.struct([pa.field("when", pa.timestamp("s", tz="UTC"))])
            ),
        }
    )
    blocks = ds.write(t)
    assert [e.block.event_name for e in blocks] == ["SetDataSchema", "AddData"]
    declared = blocks[0].block.event.to_arrow()
    expected_types = {
        "at": pa.timestamp("ms", tz="Europe/Berlin"),
        "naive": pa.timestamp("ms"),
        "clock": pa.time32("ms"),
        "day": pa.date32(),
        "nested": pa.struct([pa.field("when", pa.timestamp("ms", tz="UTC"))]),
    }
    for name, expected in expected_types.items():
        assert declared.field(name).type == expected, name
    path = data_file(ds.path, blocks[1].block.event)
    assert [(f.name, f.type) for f in pq.read_schema(path)] == [(f.name, f.type) for f in declared]
    stored = pq.read_table(path)
    assert stored.column("at").to_pylist() == [datetime.fromtimestamp(1_700_000_000, UTC)]
    assert stored.column("naive").to_pylist() == [datetime(1970, 1, 2)]
    assert stored.column("day").to_pylist() == [datetime(1970, 1, 4).date()]
    assert stored.column("nested").to_pylist() == [{"when": ts(1970, 1, 1, 0, 1)}]
    assert ds.verify().problems == []
    # the same data again is not a schema change
    assert [e.block.event_name for e in ds.write(t)] == ["AddData"]
    assert ds.verify().problems == []


def test_set_schema_with_second_resolution(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    entry = ds.set_schema(pa.schema([pa.field("at", pa.timestamp("s"))]))
    assert entry.block.event.to_arrow().field("at").type == pa.timestamp("ms")
    blocks = ds.write(pa.table({"at": pa.array([5], pa.timestamp("s"))}))
    assert [e.block.event_name for e in blocks] == ["AddData"]
    assert ds.verify().problems == []


def test_new_nullable_column_appends_set_data_schema(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(table([1, 2]))
    first_files = snapshot_tree(ds.path / "data")
    blocks = ds.write(table([3], score=pa.array([1.5], pa.float64())), evolve=True)
    assert [e.block.event_name for e in blocks] == ["SetDataSchema", "AddData"]
    schema = blocks[0].block.event.to_arrow()
    assert schema.names == ["offset", "op", "system_time", "event_time", "id", "score"]
    assert schema.field("score").type == pa.float64()
    assert schema.field("score").nullable
    assert ds.state.schema_sequence_number == blocks[0].block.sequence_number
    # the old slice is untouched; the new one has the new column
    assert all(snapshot_tree(ds.path / "data")[k] == v for k, v in first_files.items())
    stored = pq.read_table(data_file(ds.path, blocks[1].block.event))
    assert stored.column("score").to_pylist() == [1.5]
    assert stored.column("offset").to_pylist() == [2]


def test_missing_nullable_column_is_filled_with_nulls(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(table([1], name=pa.array(["a"])))
    schema_before = ds.state.schema
    blocks = ds.write(table([2, 3]))
    assert [e.block.event_name for e in blocks] == ["AddData"]
    assert ds.state.schema.equals(schema_before)
    stored = pq.read_table(data_file(ds.path, blocks[0].block.event))
    assert stored.column("name").to_pylist() == [None, None]
    assert stored.column("id").to_pylist() == [2, 3]
    assert stored.schema.names == schema_before.names


def test_same_columns_in_another_order_is_not_a_schema_change(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"id": pa.array([1], pa.int64()), "name": pa.array(["a"])}))
    blocks = ds.write(pa.table({"name": pa.array(["b"]), "id": pa.array([2], pa.int64())}))
    assert [e.block.event_name for e in blocks] == ["AddData"]


def test_incompatible_write_changes_nothing(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(table([1, 2], name=pa.array(["a", "b"])))
    before = snapshot_tree(ds.path)
    state_before = ds.state
    retyped = pa.table({"id": pa.array(["1"]), "name": pa.array(["c"])})
    with pytest.raises(SchemaEvolutionError) as info:
        ds.write(retyped)
    assert info.value.rule == "schema-evolution"
    assert "id" in str(info.value) and "int64" in str(info.value) and "string" in str(info.value)
    assert snapshot_tree(ds.path) == before
    assert Dataset.open(ds.path).state == state_before
    assert ds.verify().problems == []


def test_dropping_a_required_column_is_refused(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.set_schema(
        pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    )
    ds.write(pa.table({"id": pa.array([1], pa.int64()), "name": pa.array(["a"])}))
    before = snapshot_tree(ds.path)
    with pytest.raises(SchemaEvolutionError, match=r"\bid\b.*removed"):
        ds.write(pa.table({"name": pa.array(["b"])}))
    assert snapshot_tree(ds.path) == before


def test_set_schema_before_any_data(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    user = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    entry = ds.set_schema(user)
    assert entry is not None
    assert isinstance(entry.block.event, SetDataSchema)
    assert entry.block.sequence_number == 1
    expected = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("system_time", MS_UTC, nullable=False),
            pa.field("event_time", MS_UTC, nullable=False),
            pa.field("id", pa.int64()),
            pa.field("name", pa.string()),
        ]
    )
    assert ds.state.schema.equals(expected)
    assert entry.block.event.to_arrow().equals(expected)
    # declaring it again changes nothing
    before = snapshot_tree(ds.path)
    assert ds.set_schema(user) is None
    assert snapshot_tree(ds.path) == before
    # data of that shape does not need another SetDataSchema
    blocks = ds.write(pa.table({"id": pa.array([1], pa.int64()), "name": pa.array(["x"])}))
    assert [e.block.event_name for e in blocks] == ["AddData"]
    assert pq.read_table(data_file(ds.path, blocks[0].block.event)).schema.equals(expected)


def test_set_schema_keeps_a_declared_event_time(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.set_schema(pa.schema([pa.field("v", pa.int32()), pa.field("event_time", pa.date32())]))
    assert ds.state.schema.names == ["offset", "op", "system_time", "event_time", "v"]
    assert ds.state.schema.field("event_time").type == pa.date32()


def test_set_schema_evolution_is_checked(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.set_schema(pa.schema([pa.field("id", pa.int64())]))
    before = snapshot_tree(ds.path)
    with pytest.raises(SchemaEvolutionError, match="id"):
        ds.set_schema(pa.schema([pa.field("id", pa.int32())]))
    assert snapshot_tree(ds.path) == before
    entry = ds.set_schema(pa.schema([pa.field("id", pa.int64()), pa.field("x", pa.string())]))
    assert entry is not None and entry.block.sequence_number == 2


# -- strict schemas: a write adds a column only when asked to -----------------------------------


def _refused_without_a_trace(ds: Dataset, write, *fragments: str) -> NewColumnsError:
    """``write()`` raises NewColumnsError naming ``fragments``, and leaves every file of the
    dataset (data/, .staging/, blocks, head) as it was."""
    before = snapshot_tree(ds.path)
    head = read_head(ds.path)
    data_before = sorted(p.name for p in (ds.path / "data").iterdir())
    with pytest.raises(NewColumnsError) as info:
        write()
    message = str(info.value)
    assert message.startswith(f"{ds.path}: new column(s) "), message
    assert message.endswith("; pass evolve=True (--evolve) to add them"), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert sorted(p.name for p in (ds.path / "data").iterdir()) == data_before
    staging = ds.path / ".staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    assert read_head(ds.path) == head
    assert snapshot_tree(ds.path) == before
    return info.value


def test_a_misspelt_column_is_refused_until_evolve(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "sensors")
    ds.write(pa.table({"station": ["a"], "temperature_c": pa.array([12.5], pa.float64())}))
    typo = pa.table({"station": ["b"], "temperature": pa.array([13.0], pa.float64())})
    error = _refused_without_a_trace(
        ds, lambda: ds.write(typo), "new column(s) temperature (did you mean temperature_c?)"
    )
    assert isinstance(error, SchemaEvolutionError) and error.rule == "new-column"
    assert Dataset.open(ds.path).state.schema.names[-1] == "temperature_c"

    blocks = ds.write(typo, evolve=True)
    assert [e.block.event_name for e in blocks] == ["SetDataSchema", "AddData"]
    schema = ds.state.schema
    assert schema.names[-3:] == ["station", "temperature_c", "temperature"]
    assert schema.field("temperature").nullable
    stored = pq.read_table(data_file(ds.path, blocks[1].block.event))
    assert stored.column("temperature").to_pylist() == [13.0]
    assert stored.column("temperature_c").to_pylist() == [None]
    assert ds.verify().problems == []


def test_a_new_struct_field_is_refused_until_evolve(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "sensors")
    where = pa.struct([("lat", pa.float64()), ("lon", pa.float64())])
    ds.write(pa.table({"id": [1], "location": pa.array([{"lat": 1.0, "lon": 2.0}], where)}))
    deeper = pa.struct([("lat", pa.float64()), ("lon", pa.float64()), ("Lon", pa.float64())])
    more = pa.table(
        {"id": [2], "location": pa.array([{"lat": 3.0, "lon": 4.0, "Lon": 5.0}], deeper)}
    )
    _refused_without_a_trace(
        ds, lambda: ds.write(more), "new column(s) location.Lon (did you mean location.lon?);"
    )
    blocks = ds.write(more, evolve=True)
    assert [e.block.event_name for e in blocks] == ["SetDataSchema", "AddData"]
    assert ds.state.schema.field("location").type.equals(deeper)
    stored = pq.read_table(data_file(ds.path, blocks[1].block.event))
    assert stored.column("location").to_pylist() == [{"lat": 3.0, "lon": 4.0, "Lon": 5.0}]


def test_missing_nullable_column_needs_no_evolve(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(table([1], name=pa.array(["a"]), note=pa.array(["n"])))
    schema_before = ds.state.schema
    blocks = ds.write(table([2], name=pa.array(["b"])), evolve=False)
    assert [e.block.event_name for e in blocks] == ["AddData"]
    assert ds.state.schema.equals(schema_before, check_metadata=True)
    stored = pq.read_table(data_file(ds.path, blocks[0].block.event))
    assert stored.column("note").to_pylist() == [None]
    assert stored.column("name").to_pylist() == ["b"]


def test_a_declared_schema_is_explicit_and_writes_are_held_to_it(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.set_schema(pa.schema([pa.field("id", pa.int64())]))
    ds.set_schema(pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())]))
    assert ds.state.schema.names[-2:] == ["id", "name"]  # set_schema needs no evolve
    blocks = ds.write(table([1], name=pa.array(["a"])))
    assert [e.block.event_name for e in blocks] == ["AddData"]
    _refused_without_a_trace(
        ds, lambda: ds.write(table([2], nmae=pa.array(["b"]))), "nmae (did you mean name?)"
    )


# -- state_at -------------------------------------------------------------------------------------


@pytest.fixture
def history(tmp_path: Path) -> dict:
    """Seed, then three writes (the first with its SetDataSchema) and times measured between."""
    ds = Dataset.create(tmp_path / "ds")
    marks = [datetime.now(UTC)]
    entries = list(ds.blocks())
    for ids in ([1, 2], [3, 4, 5], [6]):
        time.sleep(0.002)  # blocks keep whole milliseconds: keep each write in a later one
        entries += ds.write(table(ids))
        marks.append(datetime.now(UTC))
    return {"ds": ds, "entries": entries, "marks": marks}


def test_state_at_each_ref_kind(history: dict) -> None:
    ds, entries, marks = history["ds"], history["entries"], history["marks"]
    records = [0, 0, 2, 5, 6]  # after the Seed, the schema, and each AddData
    assert len(entries) == 5
    for seq, entry in enumerate(entries):
        expected = (seq, entry.hash, records[seq])
        for ref in (seq, str(seq), entry.hash, str(entry.hash)):
            s = ds.state_at(ref)
            assert (s.sequence_number, s.head, s.num_records) == expected, ref
    head = ds.state_at("head")
    assert head.head == entries[-1].hash and head.sequence_number == 4
    assert ds.state_at() == head == ds.state
    assert ds.state_at(2).schema is not None and ds.state_at(1).schema is not None
    assert ds.state_at(0).schema is None
    # times measured between writes select the last block written at or before them
    assert ds.state_at(marks[0].isoformat()).sequence_number == 0
    assert ds.state_at(marks[1].isoformat()).sequence_number == 2
    assert ds.state_at(marks[2]).sequence_number == 3
    assert ds.state_at(marks[3].isoformat().replace("+00:00", "Z")).sequence_number == 4
    # naive times are UTC
    naive = marks[2].replace(tzinfo=None).isoformat()
    assert ds.state_at(naive).sequence_number == 3
    # the same time in another zone names the same block
    other_zone = marks[1].astimezone(timezone(timedelta(hours=-5, minutes=-30))).isoformat()
    assert not other_zone.endswith("+00:00")
    assert ds.state_at(other_zone).sequence_number == 2


def test_state_at_exact_block_time(history: dict) -> None:
    ds, entries = history["ds"], history["entries"]
    schema_entry, add_entry = entries[1], entries[2]
    # a write's SetDataSchema and AddData share one system time: "at or before" takes the later
    assert schema_entry.block.system_time == add_entry.block.system_time
    assert ds.state_at(add_entry.block.system_time.isoformat()).sequence_number == 2
    just_before = add_entry.block.system_time - timedelta(microseconds=1)
    assert ds.state_at(just_before).sequence_number == 0


@pytest.mark.parametrize(
    ("ref", "error", "fragment"),
    [
        ("nonsense", FormatError, "nonsense"),
        ("", FormatError, "unrecognised ref"),
        ("-1", FormatError, "-1"),
        (99, NotFoundError, "99"),
        ("5", NotFoundError, "sequence number 5"),
        (-1, NotFoundError, "-1"),
        ("f1e20" + "ab" * 32, NotFoundError, "f1e20" + "ab" * 32),
        ("f1e20zz" + "ab" * 31, FormatError, "invalid hex"),
        ("f9920" + "ab" * 32, FormatError, "unknown multihash code"),
        ("2001-01-01T00:00:00+00:00", NotFoundError, "2001-01-01"),
    ],
)
def test_bad_refs(history: dict, ref, error: type, fragment: str) -> None:
    ds = history["ds"]
    before = snapshot_tree(ds.path)
    with pytest.raises(error) as info:
        ds.state_at(ref)
    assert fragment in str(info.value)
    assert snapshot_tree(ds.path) == before


def test_state_at_a_multihash_object(history: dict) -> None:
    ds, entries = history["ds"], history["entries"]
    h = Multihash.from_multibase(str(entries[3].hash))
    assert ds.state_at(h).sequence_number == 3


# -- reopening, stale handles ---------------------------------------------------------------------


def test_reopen_gives_the_same_state(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds", hash="sha3-256")
    ds.write(table([1, 2], event_time=pa.array([ts(2024, 1, 1), ts(2024, 1, 2)], MS_UTC)))
    ds.write(
        table([3], extra=pa.array(["x"]), event_time=pa.array([ts(2024, 1, 3)], MS_UTC)),
        evolve=True,
    )
    reopened = Dataset.open(tmp_path / "ds")
    assert reopened.state == ds.state
    assert reopened.state.schema.equals(ds.state.schema)
    assert reopened.state.watermark == ts(2024, 1, 3)
    assert reopened.hash_algorithm == "sha3-256"
    assert [e.hash for e in reopened.blocks()] == [e.hash for e in ds.blocks()]


def test_open_accepts_str_and_reports_non_datasets(tmp_path: Path) -> None:
    Dataset.create(tmp_path / "ds")
    assert Dataset.open(str(tmp_path / "ds")).state.sequence_number == 0
    with pytest.raises(NotFoundError, match=re.escape(str(tmp_path / "nope"))):
        Dataset.open(tmp_path / "nope")


def test_stale_handle_catches_up(tmp_path: Path) -> None:
    a = Dataset.create(tmp_path / "ds")
    b = Dataset.open(tmp_path / "ds")
    a.write(table([1, 2]))
    blocks = b.write(table([3]))  # b has not seen a's write yet
    assert [e.block.event_name for e in blocks] == ["AddData"]
    event = blocks[0].block.event
    assert (event.prev_offset, event.new_data.offset_interval.start) == (1, 2)
    assert a.state == b.state
    assert a.verify().ok


# -- writes that write nothing ---------------------------------------------------------------------


def test_empty_table_writes_nothing(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    before = snapshot_tree(ds.path)
    assert ds.write(table([])) == []
    assert snapshot_tree(ds.path) == before
    ds.write(table([1]))
    before = snapshot_tree(ds.path)
    assert ds.write(table([], name=pa.array([], pa.string()))) == []
    assert snapshot_tree(ds.path) == before


@pytest.mark.parametrize("column", ["offset", "op", "system_time"])
def test_reserved_column_names_are_rejected(tmp_path: Path, column: str) -> None:
    ds = Dataset.create(tmp_path / "ds")
    before = snapshot_tree(ds.path)
    bad = pa.table({"id": pa.array([1], pa.int64()), column: pa.array([7], pa.int64())})
    with pytest.raises(OdfChainError, match=rf"\b{column}\b.*reserved"):
        ds.write(bad)
    with pytest.raises(OdfChainError, match=rf"\b{column}\b.*reserved"):
        ds.set_schema(bad.schema)
    assert snapshot_tree(ds.path) == before


def test_write_takes_what_speaks_arrow_and_names_what_does_not(tmp_path: Path) -> None:
    """pyarrow tables, batches and readers, pandas, and any __arrow_c_stream__ object; a
    mixed-type pandas column and a plain list are refused in one line naming them."""
    import pandas as pd

    from odf_chain.errors import OdfChainError, SchemaError

    class Stream:  # what polars and DuckDB hand over: only the C stream interface
        def __init__(self, table: pa.Table) -> None:
            self._table = table

        def __arrow_c_stream__(self, requested_schema=None):
            return self._table.__arrow_c_stream__(requested_schema)

    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"id": [1], "name": ["a"]}, schema=schema))
    ds.write(pa.record_batch({"id": [2], "name": ["b"]}, schema=schema))
    third = pa.record_batch([[3], ["c"]], schema=schema)
    ds.write(pa.RecordBatchReader.from_batches(schema, [third]))
    labelled = pd.DataFrame({"id": [4, 5], "name": ["d", "e"]}, index=[10, 11])
    with pytest.raises(OdfChainError, match="index has no name"):  # tests/test_pandas_index.py
        ds.write(labelled)
    ds.write(labelled.reset_index(drop=True))
    ds.write(Stream(pa.table({"id": [6], "name": ["f"]}, schema=schema)))
    before = ds.refresh().head
    with pytest.raises(SchemaError, match=r"DataFrame as Arrow data: .*name"):
        ds.write(pd.DataFrame({"id": [7], "name": [object()]}))
    with pytest.raises(OdfChainError, match=r"got builtins\.list$"):
        ds.write([{"id": 8, "name": "h"}])
    assert ds.refresh().head == before
    names = [
        n
        for e in ds.blocks()
        if isinstance(e.block.event, AddData)
        for n in pq.read_table(ds.path / "data" / str(e.block.event.new_data.physical_hash))
        .column("name")
        .to_pylist()
    ]
    assert names == ["a", "b", "c", "d", "e", "f"]
    assert ds.state.schema.names[-2:] == ["id", "name"]  # no pandas index column
    assert ds.verify().ok
