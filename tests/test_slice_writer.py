"""The one-pass slice writer: the hashes it computes while writing are the hashes of the file it
wrote (physical: computed here with blake3/hashlib on the file's bytes; logical: recomputed by
reading the file back, as ``verify --deep`` does), the system columns are what ODF says, the
input's chunking does not matter, slices roll over at a target size, and a wide schema is laid
out in time linear in its width."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain import Dataset
from odf_chain.errors import SchemaError
from odf_chain.events import AddData
from odf_chain.format.multihash import BLAKE3, SHA3_256
from odf_chain.slice_writer import DICTIONARY_PAGE_BYTES, SliceSpec, slice_schema, write_slices
from odf_chain.slices import logical_hash, parquet_logical_hash
from odf_chain.state import Vocabulary
from tests.helpers import multihash_name

REPO = Path(__file__).resolve().parent.parent
VOCAB = Vocabulary()
WHEN = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
N = 1_000


def _write(
    data: pa.Table | list[pa.RecordBatch],
    *,
    schema: pa.Schema | None = None,
    algorithm: str = BLAKE3,
    first_offset: int = 0,
    row_group_rows: int = 300,
    target: int | None = None,
    dictionary_page_bytes: int = DICTIONARY_PAGE_BYTES,
) -> list[tuple[object, bytes]]:
    """Write ``data`` into in-memory files; return each slice's facts with the file's bytes."""
    source_schema = data.schema if isinstance(data, pa.Table) else data[0].schema
    spec = SliceSpec(
        schema or slice_schema(source_schema, None, VOCAB),
        VOCAB,
        first_offset,
        WHEN,
        algorithm,
        row_group_rows=row_group_rows,
        target_slice_bytes=target,
        dictionary_page_bytes=dictionary_page_bytes,
    )
    sinks: list[io.BytesIO] = []

    def open_sink(index: int) -> io.BytesIO:
        assert index == len(sinks)
        sinks.append(io.BytesIO())
        return sinks[-1]

    facts = write_slices(data, spec, open_sink)
    assert len(facts) == len(sinks)
    return [(f, s.getvalue()) for f, s in zip(facts, sinks, strict=True)]


def _check_file(facts, data: bytes, algorithm: str = BLAKE3) -> pa.Table:
    """The facts are the file's: its hashes, size, rows and offsets; return its rows."""
    assert str(facts.physical_hash) == multihash_name(data, algorithm)
    assert facts.size == len(data)
    parquet = pq.ParquetFile(io.BytesIO(data))
    assert facts.logical_hash == parquet_logical_hash(parquet, algorithm)
    table = parquet.read()
    assert facts.num_rows == table.num_rows
    offsets = table.column("offset").to_pylist()
    assert offsets == list(range(facts.offsets.start, facts.offsets.end + 1))
    return table


# -- the logical hash of the batches as they pass is the one read back from the file -------------

_rng = np.random.default_rng(3)
_holes = _rng.random(N) < 0.6  # null-heavy: 60% nulls


def _struct_of(values: pa.Array, mask: np.ndarray) -> pa.Array:
    """A struct whose null rows keep values in their fields (as arrays built by hand do); a
    Parquet file has no value there, its reader gives nulls."""
    return pa.StructArray.from_arrays(
        [values, pa.array(np.arange(N, dtype=np.int32))], names=["v", "n"], mask=pa.array(mask)
    )


COLUMNS = {
    "dictionary": pa.array(
        [None if h else f"w{i % 5}" for i, h in enumerate(_holes)]
    ).dictionary_encode(),
    "string_view": pa.array(
        [None if h else f"a longer string than twelve bytes {i}" for i, h in enumerate(_holes)],
        pa.string_view(),
    ),
    "binary_view": pa.array([None if i % 3 else b"b" * (i % 20) for i in range(N)]).cast(
        pa.binary_view()
    ),
    "struct_nulls": _struct_of(pa.array(np.arange(N, dtype=np.float64)), _holes),
    "nested_struct": pa.StructArray.from_arrays(
        [_struct_of(pa.array([f"s{i}" for i in range(N)]), _rng.random(N) < 0.3)],
        names=["inner"],
        mask=pa.array(_rng.random(N) < 0.3),
    ),
    "list_of_struct": pa.array(
        [
            None if i % 7 == 0 else [{"x": i, "y": None if i % 2 else "y"}] * (i % 3)
            for i in range(N)
        ]
    ),
    "struct_of_list": pa.array(
        [
            None if i % 5 == 0 else {"l": None if i % 4 == 0 else list(range(i % 4))}
            for i in range(N)
        ]
    ),
    "list_null_ranges": pa.ListArray.from_arrays(  # null lists over non-empty ranges
        pa.array(np.arange(N + 1, dtype=np.int32) * 2),
        pa.array(np.arange(2 * N, dtype=np.int64)),
        mask=pa.array(_holes),
    ),
    "map_of_struct": pa.array(
        [None if i % 6 == 0 else [(f"k{i}", None if i % 4 == 0 else {"z": i})] for i in range(N)],
        pa.map_(pa.string(), pa.struct([("z", pa.int64())])),
    ),
    "fixed_size_list": pa.array(
        [None if i % 9 == 0 else [i, None] for i in range(N)], pa.list_(pa.int64(), 2)
    ),
    "large_list": pa.array(
        [None if h else [i] for i, h in enumerate(_holes)], pa.large_list(pa.int16())
    ),
    "floats": pa.array(np.where(_holes, np.nan, _rng.normal(size=N)), mask=_rng.random(N) < 0.2),
    "all_null": pa.nulls(N, pa.string()),
    "seconds": pa.array(np.arange(N, dtype=np.int64), pa.timestamp("s")),  # stored as ms
}


@pytest.mark.parametrize("name", list(COLUMNS))
@pytest.mark.parametrize("algorithm", [BLAKE3, SHA3_256])
def test_hashes_are_those_of_the_file_written(name: str, algorithm: str) -> None:
    """Before (main): the writer read its file back to hash it; a struct with null rows hashed
    differently in memory (its fields kept values) than read back (nulls)."""
    table = pa.table({"id": pa.array(range(N), pa.int64()), name: COLUMNS[name]})
    [(facts, data)] = _write(table, algorithm=algorithm, first_offset=41)
    back = _check_file(facts, data, algorithm)
    assert facts.offsets.start == 41 and facts.offsets.end == 41 + N - 1
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups == 4  # 300-row groups
    assert back.column("id").to_pylist() == list(range(N))


def test_sliced_and_chunked_input_writes_the_same_file() -> None:
    """A table, the same rows sliced out of a bigger one, re-chunked unevenly, or as a stream
    of record batches: one file, byte for byte (the writer gathers rows into row groups)."""
    big = pa.table({n: COLUMNS[n] for n in ("dictionary", "struct_nulls", "list_of_struct")})
    bigger = pa.concat_tables([big.slice(N - 77), big, big.slice(0, 123)])
    sliced = bigger.slice(77, N)
    batches = big.to_batches(max_chunksize=97)
    parts = [
        *big.slice(0, 1).to_batches(),
        *big.slice(1, 500).to_batches(max_chunksize=13),
        *big.slice(501).to_batches(max_chunksize=256),
    ]
    uneven = pa.Table.from_batches(parts, schema=big.schema)
    files = {
        name: _write(data)[0]
        for name, data in {
            "table": big,
            "sliced": sliced,
            "batches": batches,
            "uneven": uneven,
        }.items()
    }
    assert len({data for _, data in files.values()}) == 1
    facts, data = files["batches"]
    _check_file(facts, data)
    # and the logical hash is the table's own, as logical_hash gives it without any file
    assert facts.logical_hash == logical_hash(_check_file(facts, data), BLAKE3)


def test_system_columns_are_odf_s() -> None:
    event = pa.array([datetime(2025, 1, d + 1, tzinfo=UTC) for d in range(N % 28)] * 100)[:N]
    table = pa.table({"event_time": event, "x": pa.array(range(N), pa.int32())})
    [(facts, data)] = _write(table, first_offset=1_000_000)
    back = _check_file(facts, data)
    schema = back.schema
    assert schema.names[:4] == ["offset", "op", "system_time", "event_time"]
    assert schema.field("offset").type == pa.int64() and not schema.field("offset").nullable
    assert schema.field("op").type == pa.int32() and not schema.field("op").nullable
    assert schema.field("system_time").type == pa.timestamp("ms", tz="UTC")
    assert back.column("offset").to_pylist() == list(range(1_000_000, 1_000_000 + N))
    assert set(back.column("op").to_pylist()) == {0}
    assert set(back.column("system_time").to_pylist()) == {WHEN}
    assert back.column("event_time").equals(pa.chunked_array([event]))
    assert facts.max_event_time == max(event.to_pylist())
    # without an event time column, the system time stands in for it
    [(facts, data)] = _write(pa.table({"x": [1, 2, 3]}))
    back = _check_file(facts, data)
    assert set(back.column("event_time").to_pylist()) == {WHEN}
    assert facts.max_event_time == WHEN


def test_a_column_of_distinct_values_gives_up_its_dictionary_early() -> None:
    """A few distinct values keep their dictionary; mostly distinct ones stop building one at
    DICTIONARY_PAGE_BYTES (pyarrow's own limit, 1 MiB, spent a third of a task's writing time
    on dictionaries that were then dropped)."""
    rows = 200_000
    rng = np.random.default_rng(5)
    table = pa.table(
        {
            "station": pa.array([f"station-{i % 97}" for i in range(rows)]),
            "reading": pa.array(rng.integers(0, 2**62, rows)),
        }
    )
    [(facts, data)] = _write(table, row_group_rows=rows)
    _check_file(facts, data)
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    chunks = {metadata.column(i).path_in_schema: metadata.column(i) for i in range(4, 6)}
    station, reading = chunks["station"], chunks["reading"]
    assert station.has_dictionary_page
    assert station.data_page_offset - station.dictionary_page_offset < 4096  # 97 short strings
    assert reading.has_dictionary_page
    dictionary_bytes = reading.data_page_offset - reading.dictionary_page_offset
    assert DICTIONARY_PAGE_BYTES <= dictionary_bytes < DICTIONARY_PAGE_BYTES + 4096
    # the limit is the spec's: pyarrow's own would keep 8x as much dictionary
    [(facts, data)] = _write(table, row_group_rows=rows, dictionary_page_bytes=1 << 20)
    reading = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(5)
    assert reading.data_page_offset - reading.dictionary_page_offset >= 1 << 20


def test_a_value_the_stored_type_would_change_names_the_column() -> None:
    days = pa.array([0, 86_400_000, 86_400_001], pa.date64())  # 1970-01-02 plus 1 ms
    with pytest.raises(SchemaError, match="column 'day': values of type date64"):
        _write(pa.table({"day": days}))
    with pytest.raises(SchemaError, match="column 'x' holds nulls"):
        required = pa.schema([pa.field("x", pa.int64(), nullable=False)])
        _write(
            pa.table({"x": [1, None]}),
            schema=slice_schema(required, None, VOCAB),
        )


def test_no_rows_no_slice() -> None:
    assert _write(pa.table({"x": pa.array([], pa.int64())})) == []


# -- rolling over to a new slice -----------------------------------------------------------------


def test_slices_roll_over_at_the_target_size() -> None:
    n = 20_000
    table = pa.table({"r": pa.array(np.random.default_rng(5).random(n))})  # ~8 bytes a row
    written = _write(table, first_offset=7, row_group_rows=2_000, target=40_000)
    assert 3 <= len(written) <= 5
    start = 7
    for facts, data in written[:-1]:
        assert 40_000 <= facts.size < 40_000 + 2 * 2_000 * 8  # closed at the first group past it
        _check_file(facts, data)
        assert facts.offsets.start == start
        start = facts.offsets.end + 1
    last, data = written[-1]
    _check_file(last, data)
    assert last.offsets.start == start and last.offsets.end == 7 + n - 1


def test_dataset_write_with_a_target_appends_one_add_data_per_slice(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"k": pa.array([0], pa.int64())}))
    head_moves = ds.state.sequence_number
    n = 3 * (1 << 20) + 5  # three full row groups and a bit
    table = pa.table({"k": pa.array(np.random.default_rng(9).integers(0, 1 << 60, n))})
    blocks = ds.write(table, target_slice_bytes=1, transaction=("job", 1))
    adds = [b.block.event for b in blocks if isinstance(b.block.event, AddData)]
    assert len(adds) == 4  # one slice per row group: each is past a 1-byte target
    assert [a.new_data.offset_interval.start for a in adds] == [
        1,
        1 + (1 << 20),
        1 + (2 << 20),
        1 + (3 << 20),
    ]
    assert adds[-1].new_data.offset_interval.end == n
    assert len({b.block.system_time for b in blocks}) == 1  # one transaction
    assert ds.state.sequence_number == head_moves + len(blocks)
    assert [a.extra is not None for a in adds] == [True, False, False, False]
    assert len(os.listdir(tmp_path / "ds" / "data")) == 5
    report = ds.verify(deep=True)
    assert report.ok and report.problems == [], [p.line() for p in report.problems]
    # the default: one slice, however many row groups
    assert len([b for b in ds.write(table) if isinstance(b.block.event, AddData)]) == 1


# -- wide tables -------------------------------------------------------------------------------


def test_second_write_of_a_wide_table_is_laid_out_like_the_first(tmp_path: Path) -> None:
    """The second write of a wide table in another column order is laid out like the schema in
    force (its cost, once quadratic in the column count, is measured by tools/bench_write.py)."""
    table = pa.table({f"c{i}": pa.array([i], pa.int64()) for i in range(5_000)})
    ds = Dataset.create(tmp_path / "ds")
    ds.write(table)
    ds.write(table.select(table.column_names[::-1]))  # another order: laid out like the first
    assert ds.state.num_slices == 2 and ds.state.schema.names[4:6] == ["c0", "c1"]


# -- memory --------------------------------------------------------------------------------------

_MEMORY = textwrap.dedent(
    """
    import sys
    import numpy as np
    import pyarrow as pa
    from odf_chain import Dataset

    table = pa.table({"b": pa.array(np.ones(int(sys.argv[2]), dtype=np.int8))})
    ds = Dataset.create(sys.argv[1])
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    assert pool.max_memory() - before < 1 << 20
    ds.write(table)
    print(pool.max_memory() - before)
    """
)


def test_system_columns_take_one_row_group_of_memory(tmp_path: Path) -> None:
    """8 Mi rows of one byte each: the system columns of the whole table would take 20 bytes a
    row (160 MiB, plus the event time); built per row group they take one group's worth."""
    rows = 8 << 20
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY, str(tmp_path / "ds"), str(rows)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    peak = int(result.stdout.split()[-1])
    assert peak < 100 << 20, f"{peak / (1 << 20):.0f} MiB"


def test_watermark_is_the_latest_event_time_of_all_slices(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    days = [date(2025, 5, 1), None, date(2025, 4, 30)]
    ds.write(pa.table({"event_time": pa.array(days, pa.date32()), "x": [1, 2, 3]}))
    assert ds.state.watermark == datetime(2025, 5, 1, tzinfo=UTC)
