"""The logical hash of a slice: the digest of its Arrow IPC stream, whatever the Parquet file
looks like. Computed here independently (a buffered IPC stream, hashed by blake3/hashlib)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.format.multihash import BLAKE3, SHA3_256, HashingSink
from odf_chain.slices import logical_hash

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
