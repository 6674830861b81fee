"""Multihash / multibase: expected bytes built by hand from hashlib and blake3 directly."""

from __future__ import annotations

import hashlib
import io

import blake3
import pytest
from hypothesis import given, settings, strategies as st

from odf_chain.errors import FormatError
from odf_chain.format.multihash import Multihash, decode_varint, encode_varint

ALGORITHMS = {
    # name: (multihash prefix = varint(code) varint(32), reference digest function)
    "blake3": (b"\x1e\x20", lambda data: blake3.blake3(data).digest()),
    "sha3-256": (b"\x16\x20", lambda data: hashlib.sha3_256(data).digest()),
}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("data", [b"", b"abc", b"multihash", bytes(range(256)) * 17])
def test_digest_matches_reference(algorithm, data):
    prefix, reference = ALGORITHMS[algorithm]
    mh = Multihash.digest(algorithm, data)
    assert mh.algorithm == algorithm
    assert mh.digest_bytes == reference(data)
    assert bytes(mh) == prefix + reference(data)
    assert str(mh) == "f" + (prefix + reference(data)).hex()
    assert mh.to_multibase() == str(mh)


def test_known_sha3_value():
    # NIST SHA3-256("abc")
    expected = "3a985da74fe225b2045c172d6bd390bd855f086e3e9d525b46bfe24511431532"
    assert str(Multihash.digest("sha3-256", b"abc")) == "f1620" + expected


def test_known_blake3_value():
    # BLAKE3 of the empty input (from the BLAKE3 specification's test vectors)
    expected = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert str(Multihash.digest("blake3", b"")) == "f1e20" + expected


def test_code_property():
    assert Multihash.digest("blake3", b"x").code == 0x1E
    assert Multihash.digest("sha3-256", b"x").code == 0x16


@settings(max_examples=200, deadline=None)
@given(algorithm=st.sampled_from(sorted(ALGORITHMS)), data=st.binary(max_size=300))
def test_text_and_binary_round_trip(algorithm, data):
    mh = Multihash.digest(algorithm, data)
    assert Multihash.from_multibase(str(mh)) == mh
    assert Multihash.from_bytes(bytes(mh)) == mh
    prefix, reference = ALGORITHMS[algorithm]
    assert Multihash.from_bytes(prefix + reference(data)) == mh


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, (1 << 20) + 5, 3 * (1 << 20)])
def test_digest_stream_equals_digest(algorithm, size):
    data = (bytes(range(251)) * (size // 251 + 1))[:size]
    mh, n = Multihash.digest_stream(algorithm, io.BytesIO(data))
    assert n == size
    assert mh == Multihash.digest(algorithm, data)
    assert mh.digest_bytes == ALGORITHMS[algorithm][1](data)


# -- varints -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (0x16, b"\x16"),
        (0x7F, b"\x7f"),
        (0x80, b"\x80\x01"),
        (0xED, b"\xed\x01"),
        (300, b"\xac\x02"),
        (16384, b"\x80\x80\x01"),
    ],
)
def test_varint_known_encodings(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


@settings(max_examples=500, deadline=None)
@given(value=st.integers(min_value=0, max_value=2**63), prefix=st.binary(max_size=4))
def test_varint_round_trip(value, prefix):
    encoded = encode_varint(value)
    assert all(b & 0x80 for b in encoded[:-1]) and not encoded[-1] & 0x80
    assert decode_varint(prefix + encoded + b"\xff", len(prefix)) == (
        value,
        len(prefix) + len(encoded),
    )


def test_varint_truncated_and_overlong():
    with pytest.raises(FormatError):
        decode_varint(b"")
    with pytest.raises(FormatError):
        decode_varint(b"\x80\x80")
    with pytest.raises(FormatError):
        decode_varint(b"\xff" * 20 + b"\x01")


# -- bad input -----------------------------------------------------------------------------------

GOOD_HEX = hashlib.sha3_256(b"x").hexdigest()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x12\x20" + bytes(32),  # sha2-256: valid multihash, but not an algorithm we accept
        b"\x00\x20" + bytes(32),  # identity
        b"\xb2\x20" + bytes(32),  # truncated varint code (continuation bit, then the rest)
        b"\x16\x20" + bytes(31),  # one byte short
        b"\x16\x20" + bytes(33),  # one byte long
        b"\x16\x1f" + bytes(31),  # consistent length field, but not 32 bytes
        b"\x1e\x21" + bytes(33),
        b"\x16",
        b"\x16\x80",
    ],
)
def test_from_bytes_rejects(raw):
    with pytest.raises(FormatError):
        Multihash.from_bytes(raw)


def test_unknown_code_is_named():
    with pytest.raises(FormatError, match="0x12"):
        Multihash.from_bytes(b"\x12\x20" + bytes(32))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "f",
        "1620" + GOOD_HEX,  # missing 'f'
        "F1620" + GOOD_HEX,
        "f1620" + GOOD_HEX.upper(),  # uppercase hex
        "F1620" + GOOD_HEX.upper(),
        "b1620" + GOOD_HEX,
        "f1620" + GOOD_HEX[:-1],  # odd length
        "f1620" + GOOD_HEX[:-2],  # short digest
        "f1620" + GOOD_HEX + "00",  # long digest
        "f1620" + GOOD_HEX[:-2] + "zz",  # non-hex
        "f1620 " + GOOD_HEX,
        "f1220" + GOOD_HEX,  # sha2-256
    ],
)
def test_from_multibase_rejects(text):
    with pytest.raises(FormatError):
        Multihash.from_multibase(text)


def test_good_text_is_accepted():
    # Sanity check for the list above: the well-formed string parses.
    assert Multihash.from_multibase("f1620" + GOOD_HEX).digest_bytes == bytes.fromhex(GOOD_HEX)


@pytest.mark.parametrize("algorithm", ["sha2-256", "SHA3-256", "md5", ""])
def test_unknown_algorithm_name(algorithm):
    with pytest.raises(FormatError):
        Multihash.digest(algorithm, b"x")
    with pytest.raises(FormatError):
        Multihash(algorithm, bytes(32))


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_wrong_digest_length(length):
    with pytest.raises(FormatError):
        Multihash("blake3", bytes(length))


@settings(max_examples=500, deadline=None)
@given(raw=st.binary(max_size=40))
def test_random_bytes_only_format_errors(raw):
    try:
        mh = Multihash.from_bytes(raw)
    except FormatError:
        return
    assert bytes(mh) == raw
