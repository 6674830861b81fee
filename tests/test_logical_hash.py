"""The logical hash of a slice: the digest of an Arrow IPC stream of its rows in fixed batches
of 65,536 rows, whatever the Parquet file looks like and however it is read. Computed here
independently (batches built from Python values, a buffered IPC stream, blake3/hashlib)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain import Dataset
from odf_chain.format.multihash import BLAKE3, SHA3_256, HashingSink
from odf_chain.slices import LOGICAL_BATCH_ROWS, LogicalHasher, logical_hash, parquet_logical_hash

TABLE = pa.table(
    {
        "id": pa.array(range(10_000), pa.int64()),
        "name": pa.array([f"n{i}" if i % 7 else None for i in range(10_000)]),
        "point": pa.array([{"x": float(i), "y": -float(i)} for i in range(10_000)]),
    }
)


def _ipc_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
        writer.write_table(table.replace_schema_metadata(None).combine_chunks())
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        (BLAKE3, lambda data: "f1e20" + blake3.blake3(data).hexdigest()),
        (SHA3_256, lambda data: "f1620" + hashlib.sha3_256(data).hexdigest()),
    ],
)
def test_logical_hash_is_the_digest_of_the_ipc_stream(algorithm, expected) -> None:
    assert str(logical_hash(TABLE, algorithm)) == expected(_ipc_stream(TABLE))


def test_logical_hash_ignores_how_the_file_is_laid_out(tmp_path: Path) -> None:
    pq.write_table(TABLE, tmp_path / "a.parquet", compression="zstd", row_group_size=1_000)
    pq.write_table(TABLE, tmp_path / "b.parquet", compression="snappy")
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert a.column("id").num_chunks > b.column("id").num_chunks  # really laid out differently
    assert logical_hash(a, BLAKE3) == logical_hash(b, BLAKE3) == logical_hash(TABLE, BLAKE3)
    changed = TABLE.set_column(0, "id", pa.array([*range(9_999), 0], pa.int64()))
    assert logical_hash(changed, BLAKE3) != logical_hash(TABLE, BLAKE3)


def test_hashing_sink_counts_and_hashes_what_it_is_given() -> None:
    sink = HashingSink(BLAKE3)
    for part in (b"abc", memoryview(b"defg"), pa.py_buffer(b"hij")):
        assert sink.write(part) == len(bytes(part))
    assert sink.size == 10
    assert str(sink.multihash()) == "f1e20" + blake3.blake3(b"abcdefghij").hexdigest()


# -- many batches, nulls, and what readers leave under them -----------------------------------

N = 150_000
VALUES = {
    "id": ([None if i % 7 == 3 else i for i in range(N)], pa.int64()),
    "x": ([None if i % 5 == 0 else i / 4 for i in range(N)], pa.float64()),
    "ok": ([None if i % 11 == 0 else i % 3 == 0 for i in range(N)], pa.bool_()),
    "s": ([None if i % 4 == 0 else f"s{i % 1000}" for i in range(N)], pa.string()),
}
BIG = pa.table({name: pa.array(values, t) for name, (values, t) in VALUES.items()})


def _expected_stream() -> bytes:
    """Batches of exactly 65,536 rows (the last shorter), each built from Python values."""
    sink = pa.BufferOutputStream()
    schema = BIG.schema.remove_metadata()
    with pa.ipc.new_stream(sink, schema) as writer:
        for start in range(0, N, 65_536):
            writer.write_batch(
                pa.record_batch(
                    {n: pa.array(v[start : start + 65_536], t) for n, (v, t) in VALUES.items()}
                )
            )
    return sink.getvalue().to_pybytes()


def test_logical_hash_of_many_rows_is_the_digest_of_fixed_batches() -> None:
    assert LOGICAL_BATCH_ROWS == 65_536
    expected = "f1e20" + blake3.blake3(_expected_stream()).hexdigest()
    assert str(logical_hash(BIG, BLAKE3)) == expected
    # however the table is chunked
    rechunked = pa.Table.from_batches(BIG.to_batches(max_chunksize=1_000))
    assert str(logical_hash(rechunked, BLAKE3)) == expected


@pytest.mark.parametrize(
    "layout",
    [
        {"compression": "zstd"},
        {"compression": "snappy", "row_group_size": 7_000},
        {"use_dictionary": False, "row_group_size": 33_333},
        {"compression": "none", "use_dictionary": False, "data_page_size": 1_000},
    ],
    ids=["zstd", "small-row-groups", "plain", "small-pages"],
)
def test_file_hash_is_the_rows_hash(tmp_path: Path, layout: dict) -> None:
    """Read back from any layout, in any batch size, the rows hash as the table did. A plain
    (not dictionary) encoded file read in small batches leaves the previous batch's values
    under nulls (the reader reuses its buffers): the hash must not see them."""
    expected = "f1e20" + blake3.blake3(_expected_stream()).hexdigest()
    path = tmp_path / "slice.parquet"
    pq.write_table(BIG, path, **layout)
    with pq.ParquetFile(path) as parquet:
        assert str(parquet_logical_hash(parquet, BLAKE3)) == expected
        for batch_size in (1_000, 4_096):
            hasher = LogicalHasher(parquet.schema_arrow, BLAKE3)
            for batch in parquet.iter_batches(batch_size=batch_size):
                hasher.update(batch)
            assert str(hasher.multihash()) == expected


def test_dictionary_columns_hash_as_their_values(tmp_path: Path) -> None:
    """Parquet readers rebuild a dictionary per row group: its content follows the layout, so
    the hash is taken of the values."""
    words = pa.array([None if i % 9 == 0 else ["x", "y", "z"][i % 3] for i in range(N)])
    table = pa.table({"w": words.dictionary_encode()})
    hashes = set()
    for rows in (5_000, 100_000):
        pq.write_table(table, tmp_path / f"{rows}.parquet", row_group_size=rows)
        with pq.ParquetFile(tmp_path / f"{rows}.parquet") as parquet:
            assert pa.types.is_dictionary(parquet.schema_arrow.field("w").type)
            hashes.add(parquet_logical_hash(parquet, BLAKE3))
    assert hashes == {logical_hash(pa.table({"w": words}), BLAKE3)}


def test_view_layouts_hash_as_their_plain_layout(tmp_path: Path) -> None:
    """string_view/binary_view are an in-memory layout: a write of them works (found by review:
    Arrow's take has no kernel for them) and hashes as the plain column does."""
    plain = pa.table({"s": pa.array(["a", None, "ccc"]), "b": pa.array([b"x", b"", None])})
    views = pa.table(
        {"s": plain["s"].cast(pa.string_view()), "b": plain["b"].cast(pa.binary_view())}
    )
    assert logical_hash(views, "blake3") == logical_hash(plain, "blake3")
    ds = Dataset.create(tmp_path / "ds")
    ds.write(views)
    assert ds.verify(deep=True).ok


# -- columns without nulls are hashed without a copy: the bytes must be the copy's -----------------

M = 140_000
DENSE = {
    "i8": ([i % 100 - 50 for i in range(M)], pa.int8()),
    "i16": ([i % 30_000 for i in range(M)], pa.int16()),
    "fsb3": ([(i % 65_536).to_bytes(3, "big") for i in range(M)], pa.binary(3)),
    "u32": ([i * 7 for i in range(M)], pa.uint32()),
    "i64": ([i * 1_000_003 for i in range(M)], pa.int64()),
    "f32": ([i / 8 for i in range(M)], pa.float32()),
    "f64": ([i / 3 for i in range(M)], pa.float64()),
    "ts": ([i * 1_000 for i in range(M)], pa.timestamp("us", tz="UTC")),
    "d32": ([i % 20_000 for i in range(M)], pa.date32()),
    "dec": ([i * 3 for i in range(M)], pa.decimal128(12, 0)),
    "fsb": ([(i % 65_536).to_bytes(2, "big") * 2 for i in range(M)], pa.binary(4)),
    "s": ([f"v{i % 977}" * (i % 4) for i in range(M)], pa.string()),
    "ls": ([f"w{i % 13}" for i in range(M)], pa.large_string()),
    "b": ([bytes([i % 256]) * (i % 3) for i in range(M)], pa.binary()),
    "flag": ([i % 3 == 0 for i in range(M)], pa.bool_()),  # no nulls, but copied: bits
    "lst": ([[i, i + 1][: i % 3] for i in range(M)], pa.list_(pa.int32())),  # nested: copied
}


@pytest.mark.parametrize("skip", [0, 1, 3, 65_535, 70_001])  # last batches of odd lengths
@pytest.mark.parametrize("chunk", [1_000, 65_536, 99_999])
def test_columns_without_nulls_hash_as_fresh_copies(skip: int, chunk: int) -> None:
    """Sliced at odd rows and chunked every way, so that buffers start mid-way and batches
    span chunks: the hash is the digest of batches of exactly 65,536 rows built from Python
    values (fresh buffers)."""
    whole = pa.table({n: pa.array(v, t) for n, (v, t) in DENSE.items()})
    data = pa.Table.from_batches(whole.to_batches(max_chunksize=chunk)).slice(skip)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, whole.schema) as writer:
        for start in range(skip, M, 65_536):
            end = min(start + 65_536, M)
            writer.write_batch(
                pa.record_batch({n: pa.array(v[start:end], t) for n, (v, t) in DENSE.items()})
            )
    expected = "f1e20" + blake3.blake3(sink.getvalue().to_pybytes()).hexdigest()
    assert str(logical_hash(data, BLAKE3)) == expected
