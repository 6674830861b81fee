"""did:odf dataset identities."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings, strategies as st

from odf_chain.errors import FormatError
from odf_chain.format.did import DatasetId, generate_key, key_from_pem, key_to_pem


def test_generate_gives_32_byte_ed25519_keys():
    ident = DatasetId.generate()
    assert isinstance(ident.public_key, bytes)
    assert len(ident.public_key) == 32
    # It really is an ed25519 public key (loads as one).
    Ed25519PublicKey.from_public_bytes(ident.public_key)


def test_generate_differs_each_call():
    assert DatasetId.generate() != DatasetId.generate()
    assert len({DatasetId.generate().public_key for _ in range(20)}) == 20


def test_did_text_form():
    ident = DatasetId.generate()
    did = ident.to_did()
    assert did.startswith("did:odf:fed01")
    assert did == "did:odf:f" + "ed01" + ident.public_key.hex()
    assert str(ident) == did
    assert DatasetId.from_did(did) == ident


def test_bytes_form():
    ident = DatasetId.generate()
    raw = bytes(ident)
    assert raw.startswith(b"\xed\x01")
    assert raw == b"\xed\x01" + ident.public_key
    assert len(raw) == 34
    assert DatasetId.from_bytes(raw) == ident


def test_known_value():
    key = bytes(range(32))
    ident = DatasetId(key)
    assert (
        ident.to_did()
        == "did:odf:fed01000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    )
    assert DatasetId.from_did(ident.to_did()).public_key == key


@settings(max_examples=200, deadline=None)
@given(key=st.binary(min_size=32, max_size=32))
def test_round_trips(key):
    ident = DatasetId(key)
    assert DatasetId.from_did(ident.to_did()) == ident
    assert DatasetId.from_bytes(bytes(ident)) == ident


KEY_HEX = bytes(range(32)).hex()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "did:odf:",
        "did:odf:f",
        "did:odf:ed01" + KEY_HEX,  # missing multibase 'f'
        "did:key:fed01" + KEY_HEX,
        "odf:fed01" + KEY_HEX,
        "did:odf:fed02" + KEY_HEX,  # wrong multicodec
        "did:odf:f" + KEY_HEX,  # no multicodec at all
        "did:odf:fed01" + KEY_HEX[:-2],  # 31-byte key
        "did:odf:fed01" + KEY_HEX + "00",  # 33-byte key
        "did:odf:fed01" + KEY_HEX[:-1],  # odd hex
        "did:odf:fed01" + KEY_HEX[:-2] + "zz",  # non-hex
    ],
)
def test_from_did_rejects(text):
    with pytest.raises(FormatError):
        DatasetId.from_did(text)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xed",
        b"\xed\x01",
        b"\xed\x01" + bytes(31),
        b"\xed\x01" + bytes(33),
        b"\xed\x02" + bytes(32),
        b"\x01\xed" + bytes(32),
        bytes(34),
    ],
)
def test_from_bytes_rejects(raw):
    with pytest.raises(FormatError):
        DatasetId.from_bytes(raw)


@pytest.mark.parametrize("length", [0, 31, 33])
def test_constructor_rejects_wrong_key_length(length):
    with pytest.raises(FormatError):
        DatasetId(bytes(length))


def test_key_pem_round_trip_names_the_same_dataset():
    key = generate_key()
    pem = key_to_pem(key)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    again = key_from_pem(pem, "k.pem")
    assert DatasetId.of_key(again) == DatasetId.of_key(key)
    assert DatasetId.of_key(key).public_key == key.public_key().public_bytes_raw()


def test_signatures_check_against_the_id_only():
    key, other = generate_key(), generate_key()
    ident = DatasetId.of_key(key)
    signature = key.sign(b"message")
    assert ident.verify_signature(b"message", signature)
    assert not ident.verify_signature(b"messagE", signature)
    assert not ident.verify_signature(b"message", other.sign(b"message"))
    assert not ident.verify_signature(b"message", signature[:-1])
    assert not ident.verify_signature(b"message", bytes(64))
    # a public key that is not a curve point verifies nothing, and raises nothing
    assert not DatasetId(b"\xff" * 32).verify_signature(b"message", signature)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "not a PEM private key"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a PEM"),
    ],
)
def test_key_from_pem_rejects(data, fragment):
    with pytest.raises(FormatError, match=rf"key file k\.pem: {fragment}"):
        key_from_pem(data, "k.pem")


def test_key_from_pem_names_an_encrypted_key():
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        Encoding,
        PrivateFormat,
    )

    pem = generate_key().private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"secret")
    )
    with pytest.raises(FormatError, match=r"key file k\.pem: the key is encrypted"):
        key_from_pem(pem, "k.pem")
