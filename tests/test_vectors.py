"""The ODF reference vectors: a sha3-256 chain must reproduce kamu's block bytes exactly.

Expected values come only from ``tests/data/odf-reference-blocks.json`` (a copy of
``shared/vectors/odf-reference-blocks.json``, published by the ODF reference implementation) and
from ``hashlib`` directly, never from odf_chain itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.events import AddData, MetadataBlock, SetDataSchema
from odf_chain.format import codec
from odf_chain.format.codec import decode_block, encode_block
from odf_chain.format.multihash import Multihash

# A verbatim copy, so the tests need nothing outside the repository; when the shared folder
# sits beside the repo, test_vector_copy_matches_shared_file checks the copy is still exact.
VECTORS_PATH = Path(__file__).resolve().parent / "data" / "odf-reference-blocks.json"
SHARED_VECTORS_PATH = (
    Path(__file__).resolve().parents[2] / "shared" / "vectors" / "odf-reference-blocks.json"
)

VECTORS = json.loads(VECTORS_PATH.read_text())
CASES = VECTORS["cases"]

SYSTEM_TIME = datetime(2020, 1, 1, 12, 0, 0, tzinfo=UTC)
SEQUENCE_NUMBER = 117


def _event(spec: dict):
    if spec["kind"] == "AddData":
        return AddData()
    if spec["kind"] == "SetDataSchema":
        return SetDataSchema(raw_arrow_schema=base64.b64decode(spec["raw_arrow_schema_base64"]))
    raise AssertionError(f"vector file has an unexpected event kind {spec['kind']}")


def _block(case: dict) -> MetadataBlock:
    return MetadataBlock(
        system_time=SYSTEM_TIME,
        prev_block_hash=Multihash.digest("sha3-256", b"prev"),
        sequence_number=SEQUENCE_NUMBER,
        event=_event(case["event"]),
    )


def test_vectors_come_from_the_repository():
    assert VECTORS_PATH.is_relative_to(Path(__file__).resolve().parents[1])


def test_vector_copy_matches_shared_file():
    if not SHARED_VECTORS_PATH.exists():
        pytest.skip(f"{SHARED_VECTORS_PATH} not present")
    assert VECTORS_PATH.read_bytes() == SHARED_VECTORS_PATH.read_bytes()


def test_vector_file_has_both_cases():
    assert [c["event"]["kind"] for c in CASES] == ["AddData", "SetDataSchema"]


def test_common_header_matches_what_the_vectors_assume():
    header = VECTORS["common_block_header"]
    assert header["system_time"] == "2020-01-01T12:00:00Z"
    assert datetime.fromisoformat(header["system_time"].replace("Z", "+00:00")) == SYSTEM_TIME
    assert header["sequence_number"] == SEQUENCE_NUMBER
    expected_prev = header["prev_block_hash"].rsplit("= ", 1)[1]
    # Independently: multihash = 0x16 (sha3-256) 0x20 (32 bytes) + digest, base16 with 'f'.
    assert expected_prev == "f1620" + hashlib.sha3_256(b"prev").hexdigest()
    assert str(Multihash.digest("sha3-256", b"prev")) == expected_prev


def test_multihash_example():
    (expected,) = VECTORS["multihash_examples"].values()
    assert str(Multihash.digest("sha3-256", b"multihash")) == expected
    assert expected == "f1620" + hashlib.sha3_256(b"multihash").hexdigest()


@pytest.mark.parametrize("case", CASES, ids=[c["event"]["kind"] for c in CASES])
def test_v3_bytes_match_reference(case):
    data = encode_block(_block(case))
    assert hashlib.sha3_256(data).hexdigest() == case["v3_sha3_256_hex"]


@pytest.mark.parametrize("case", CASES, ids=[c["event"]["kind"] for c in CASES])
def test_v2_legacy_bytes_match_reference(case):
    data = codec._encode_legacy_v2(_block(case))
    assert hashlib.sha3_256(data).hexdigest() == case["v2_sha3_256_hex"]


@pytest.mark.parametrize("case", CASES, ids=[c["event"]["kind"] for c in CASES])
def test_both_forms_decode_to_the_block(case):
    block = _block(case)
    v3 = encode_block(block)
    v2 = codec._encode_legacy_v2(block)
    assert v2 != v3
    assert decode_block(v3) == block
    assert decode_block(v2) == block
    assert codec.read_manifest(v3)[0] == 3
    assert codec.read_manifest(v2)[0] == 2


@pytest.mark.parametrize("case", CASES, ids=[c["event"]["kind"] for c in CASES])
def test_block_hash_is_hash_of_stored_bytes(case):
    data = encode_block(_block(case))
    assert codec.block_hash(data, "sha3-256") == Multihash(
        "sha3-256", bytes.fromhex(case["v3_sha3_256_hex"])
    )


def test_set_data_schema_vector_arrow_schema():
    (case,) = [c for c in CASES if c["event"]["kind"] == "SetDataSchema"]
    block = decode_block(encode_block(_block(case)))
    expected = pa.schema(
        [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.bool_(), nullable=False)]
    )
    schema = block.event.to_arrow()
    assert schema.equals(expected)
    assert [f.nullable for f in schema] == [False, False]
