"""Receipts: a head written down outside the dataset catches a rolled-back, truncated, rewritten
or replaced chain, and passes a chain that extends it; signed receipts are checked against the
dataset id; the key file is kept outside the dataset, new, mode 0600. Real datasets, real
blocks, real files, the console commands run by their ``main`` in this process as a subprocess
would run them (tests/cli_run.py)."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa, x25519
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from odf_chain.dataset import Dataset
from odf_chain.errors import FormatError, NotFoundError, OdfChainError, StorageError
from odf_chain.format.did import DatasetId, generate_key, key_to_pem
from odf_chain.format.multihash import Multihash
from odf_chain.receipt import (
    MAX_KEY_BYTES,
    MAX_RECEIPT_BYTES,
    Receipt,
    check_receipts,
    format_time,
    load_key,
    load_receipt,
    write_receipt,
)
from odf_chain.storage import LocalStorage
from odf_chain.verify import VerifyReport, verify_path
from tests.cli_run import run_main

K = 4  # the receipt's block: the middle of a chain of 8 blocks (0..7)
LAST = 7


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_main(args)


def chain_verify(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_main(args, entry="chain-verify")


def one_line_error(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"{p.args[0]}: error: "), lines[0]  # the program run
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def parse(name: str) -> Multihash:
    return Multihash.from_multibase(name)


def receipt_errors(report: VerifyReport) -> list[str]:
    return [p.message for p in report.errors if p.rule == "receipt"]


@dataclasses.dataclass(frozen=True)
class Built:
    root: Path
    key: Path
    receipt_k: Path  # unsigned, taken when the head was block K
    signed_k: Path  # the same, signed
    receipt_last: Path  # signed, taken at the head (block LAST)
    hashes: list[str]  # block hashes by sequence number


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Seed, SetDataSchema + AddData, then one AddData per write: blocks 0..7; receipts are taken
    as an auditor would, at block 4 and at block 7, into a directory apart from the dataset."""
    base = tmp_path_factory.mktemp("receipts")
    root, keys, kept = base / "ds", base / "keys", base / "auditor"
    keys.mkdir()
    kept.mkdir()
    ds = Dataset.create(root, key_file=keys / "ds.pem")
    n = 0
    while ds.state.sequence_number < LAST:
        n += 1
        ds.write(rows(n))
        if ds.state.sequence_number == K:
            write_receipt(ds.receipt(), kept / "r4.json")
            write_receipt(ds.receipt(key_file=keys / "ds.pem"), kept / "r4-signed.json")
    assert ds.state.sequence_number == LAST
    write_receipt(ds.receipt(key_file=keys / "ds.pem"), kept / "r7-signed.json")
    hashes = [str(e.hash) for e in ds.blocks()]
    return Built(
        root,
        keys / "ds.pem",
        kept / "r4.json",
        kept / "r4-signed.json",
        kept / "r7-signed.json",
        hashes,
    )


@pytest.fixture
def built_copy(built: Built, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(built.root, root)
    return root


def move_head(root: Path, seq: int) -> None:
    """Move the head back to block ``seq`` through the storage's own compare-and-swap: what a
    restored backup of refs/head or an operator's mistake does."""
    storage = LocalStorage.open(root)
    blocks = Dataset.open(root).blocks()
    storage.compare_and_swap_head(str(blocks[-1].hash), str(blocks[seq].hash))


def erase_head_log(root: Path) -> None:
    """What a tamperer who knows odf_chain also does: the head log would show every head that
    no longer is one (a ``head-rollback`` error), so it goes too. Only a receipt kept elsewhere
    is beyond the reach of whoever can write the dataset."""
    (root / "logs" / "head").unlink()


# -- the receipt itself ------------------------------------------------------------------------


def test_receipt_names_the_head_it_was_taken_at(built: Built) -> None:
    doc = json.loads(built.receipt_k.read_text())
    assert set(doc) == {
        "receipt",
        "dataset_id",
        "sequence_number",
        "block_hash",
        "system_time",
        "location",
    }
    entries = Dataset.open(built.root).blocks()
    seed_id = entries[0].block.event.dataset_id
    assert doc["receipt"] == "odf-chain/1"
    assert doc["dataset_id"] == "did:odf:fed01" + seed_id.public_key.hex()
    assert doc["sequence_number"] == K
    assert doc["block_hash"] == built.hashes[K]
    moment = entries[K].block.system_time.astimezone(UTC)
    assert doc["system_time"] == moment.strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}Z"
    )
    assert doc["location"] == str(built.root.absolute())


def test_signature_is_ed25519_over_the_documented_text(built: Built) -> None:
    """Re-checked without odf_chain: the signed text is the JSON values, one per line."""
    doc = json.loads(built.signed_k.read_text())
    text = (
        "odf-chain/1\n"
        f"dataset_id {doc['dataset_id']}\n"
        f"sequence_number {doc['sequence_number']}\n"
        f"block_hash {doc['block_hash']}\n"
        f"system_time {doc['system_time']}\n"
    ).encode("ascii")
    public = Ed25519PublicKey.from_public_bytes(
        bytes.fromhex(doc["dataset_id"][len("did:odf:fed01") :])
    )
    assert doc["signature"].startswith("f") and len(doc["signature"]) == 129
    public.verify(bytes.fromhex(doc["signature"][1:]), text)  # raises if it does not verify
    unsigned = json.loads(built.receipt_k.read_text())
    assert {k: v for k, v in doc.items() if k != "signature"} == unsigned


def test_round_trip_and_finer_times() -> None:
    ident = DatasetId(bytes(range(32)))
    block = Multihash.digest("blake3", b"x")
    for micro in (0, 123000, 123456):
        moment = datetime(2026, 3, 1, 12, 0, 5, micro, tzinfo=UTC)
        receipt = Receipt(ident, 9, block, moment, "s3://bucket/ds")
        again = Receipt.from_json(receipt.to_json())
        assert again == receipt
        assert again.system_time == moment
    assert format_time(datetime(2026, 3, 1, 12, 0, 5, 123456, tzinfo=UTC)) == (
        "2026-03-01T12:00:05.123456Z"
    )
    assert format_time(datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)) == "2026-03-01T12:00:05.000Z"


# -- the four attacks and the two honest cases --------------------------------------------------


def test_original_chain_holds_its_receipts(built: Built) -> None:
    p = chain_verify(
        built.root,
        "--receipt",
        built.receipt_k,
        "--receipt",
        built.signed_k,
        "--receipt",
        built.receipt_last,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "receipts: 3 of 3 held by the chain, 2 with a valid signature" in p.stdout
    report = Dataset.open(built.root).verify(
        receipts=[built.receipt_k, load_receipt(built.signed_k)]
    )
    assert report.ok and report.problems == []
    assert (report.receipts_checked, report.receipts_held, report.receipts_signed) == (2, 2, 1)


def test_extended_chain_holds_older_receipts(built: Built, built_copy: Path) -> None:
    ds = Dataset.open(built_copy)
    ds.write(rows(100))
    ds.write(rows(101))
    assert ds.state.sequence_number == LAST + 2
    p = chain_verify(built_copy, "--receipt", built.signed_k, "--receipt", built.receipt_last)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "receipts: 2 of 2 held by the chain, 2 with a valid signature" in p.stdout


@pytest.mark.parametrize("to", [K - 2, K - 1])
def test_truncated_chain_fails(built: Built, built_copy: Path, to: int) -> None:
    """Head moved back to block ``to`` and every block after it deleted."""
    move_head(built_copy, to)
    for name in built.hashes[to + 1 :]:
        (built_copy / "blocks" / name).unlink()
    assert not verify_path(built_copy).ok  # the head log still shows the heads that went
    erase_head_log(built_copy)
    assert verify_path(built_copy).ok  # without it and without a receipt, nothing can tell
    p = chain_verify(built_copy, "--receipt", built.receipt_k)
    assert p.returncode == 1, p.stdout + p.stderr
    expected = (
        f"[receipt] receipt {built.receipt_k}: the chain has no block {K} (head is block {to}): "
        "truncated or rolled back"
    )
    assert expected in p.stdout
    assert "FAILED" in p.stdout and "receipts: 0 of 1 held" in p.stdout


def test_rolled_back_head_fails(built: Built, built_copy: Path) -> None:
    """The blocks are all still there; only refs/head went back (a restored backup)."""
    move_head(built_copy, K - 1)
    p = cli("verify", built_copy, "--receipt", built.signed_k, "--receipt", built.receipt_last)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"receipt {built.signed_k}: the chain has no block {K} (head is block {K - 1})" in (
        p.stdout
    )
    assert f"receipt {built.receipt_last}: the chain has no block {LAST} (head is block 3)" in (
        p.stdout
    )
    report = Dataset.open(built_copy).verify(receipts=[built.receipt_k])
    assert not report.ok and len(receipt_errors(report)) == 1


def test_rewritten_suffix_fails(built: Built, built_copy: Path) -> None:
    """A chain that verifies, as long as the chain is all there is."""
    rewritten = rewrite_suffix(built_copy)
    assert rewritten[:K] == built.hashes[:K] and rewritten[K] != built.hashes[K]
    erase_head_log(built_copy)
    report = verify_path(built_copy)
    assert not report.errors  # warnings at most: the old suffix is unreferenced
    p = chain_verify(built_copy, "--receipt", built.receipt_k, "--receipt", built.receipt_last)
    assert p.returncode == 1, p.stdout + p.stderr
    for path, seq in ((built.receipt_k, K), (built.receipt_last, LAST)):
        line = next(x for x in p.stdout.splitlines() if f"receipt {path}:" in x)
        assert line.startswith(f"ERROR block {seq} {rewritten[seq]}: [receipt] "), line
        assert (
            f"block {seq} is {rewritten[seq]}, receipt says {built.hashes[seq]}: history rewritten"
        ) in line


def test_replaced_chain_fails(built: Built, built_copy: Path) -> None:
    """A new dataset at the same path, as long as the original and more."""
    shutil.rmtree(built_copy)
    ds = Dataset.create(built_copy)
    for n in range(LAST + 2):
        ds.write(rows(n))
    original = json.loads(built.receipt_k.read_text())["dataset_id"]
    p = chain_verify(built_copy, "--receipt", built.signed_k)
    assert p.returncode == 1, p.stdout + p.stderr
    assert (
        f"receipt {built.signed_k}: dataset id differs: the chain is {ds.state.dataset_id}, "
        f"the receipt is of {original}: a replaced chain"
    ) in p.stdout
    assert p.stdout.count("[receipt]") == 1  # block comparisons would only restate it


def rewrite_suffix(root: Path) -> list[str]:
    """Blocks K.. rebuilt by the library itself, with other rows, on top of block K-1; the new
    block hashes by sequence number."""
    move_head(root, K - 1)
    ds = Dataset.open(root)
    while ds.state.sequence_number < LAST:
        ds.write(rows(-ds.state.sequence_number))
    return [str(e.hash) for e in ds.blocks()]


def test_chain_read_only_partly_still_checks_what_it_can(
    built: Built, built_copy: Path, tmp_path: Path
) -> None:
    """Block 2 missing: the walk stops at block 3; receipts above it are still checked."""
    (built_copy / "blocks" / built.hashes[2]).unlink()
    report = verify_path(built_copy, receipts=[built.receipt_k, built.receipt_last])
    assert [p.rule for p in report.errors] == ["block-missing", "chain-incomplete"]
    assert report.receipts_held == 2
    low = dataclasses.replace(
        load_receipt(built.receipt_k), sequence_number=1, block_hash=parse(built.hashes[1])
    )
    report = verify_path(built_copy, receipts=[dataclasses.replace(low, source="r1.json")])
    assert receipt_errors(report) == [
        "receipt r1.json: not checked: the chain could be read back to block 3 only, not to block 1"
    ]
    rewritten_root = tmp_path / "rewritten"
    shutil.copytree(built.root, rewritten_root)
    rewritten = rewrite_suffix(rewritten_root)
    (rewritten_root / "blocks" / built.hashes[2]).unlink()
    report = verify_path(rewritten_root, receipts=[built.receipt_k])
    assert receipt_errors(report) == [
        f"receipt {built.receipt_k}: block {K} is {rewritten[K]}, receipt says "
        f"{built.hashes[K]}: history rewritten"
    ]


# -- the check on its own (a pure function over walked blocks) ---------------------------------


def test_check_is_pure_over_entries(built: Built) -> None:
    entries = Dataset.open(built.root).blocks()
    good = load_receipt(built.receipt_k)
    assert check_receipts(entries, [good], complete=True).held == 1
    moved = dataclasses.replace(good, sequence_number=K + 1, source="moved.json")
    later = dataclasses.replace(good, system_time=good.system_time + timedelta(milliseconds=1))
    result = check_receipts(entries[:3], [good], complete=True)
    assert [f.message for f in result.findings] == [
        f"receipt {built.receipt_k}: the chain has no block {K} (head is block 2): "
        "truncated or rolled back"
    ]
    result = check_receipts(entries, [moved, later], complete=True)
    assert (result.checked, result.held, result.signed) == (2, 0, 0)
    assert [f.message for f in result.findings] == [
        f"receipt moved.json: block {built.hashes[K]} is block {K} of the chain, the receipt "
        f"says block {K + 1}: the receipt was altered",
        f"receipt {built.receipt_k}: block {K} was written at {format_time(good.system_time)}, "
        f"the receipt says {format_time(later.system_time)}: the receipt was altered",
    ]
    assert check_receipts([], [good], complete=False).findings[0].message == (
        f"receipt {built.receipt_k}: not checked: no block of the chain could be read"
    )


# -- signatures -------------------------------------------------------------------------------


def test_tampered_signed_receipt_fails(built: Built, tmp_path: Path) -> None:
    """Moved to block 3 with block 3's real hash and time: a receipt the chain does hold, but
    not the one that was signed."""
    entries = Dataset.open(built.root).blocks()
    doc = json.loads(built.signed_k.read_text())
    doc |= {
        "sequence_number": 3,
        "block_hash": built.hashes[3],
        "system_time": format_time(entries[3].block.system_time),
    }
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    p = chain_verify(built.root, "--receipt", forged)
    assert p.returncode == 1, p.stdout + p.stderr
    (line,) = [x for x in p.stdout.splitlines() if "[receipt]" in x]
    assert f"receipt {forged}: the signature is not {doc['dataset_id']}'s over this receipt" in (
        line
    )
    # the same change without the signature is a receipt like any other: it proves nothing
    # about who wrote it, and is held
    del doc["signature"]
    forged.write_text(json.dumps(doc))
    assert chain_verify(built.root, "--receipt", forged).returncode == 0


@pytest.mark.parametrize("field", ["dataset_id", "location"])
def test_only_the_documented_fields_are_signed(built: Built, tmp_path: Path, field: str) -> None:
    doc = json.loads(built.signed_k.read_text())
    doc[field] = "did:odf:fed01" + bytes(32).hex() if field == "dataset_id" else "/somewhere/else"
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(doc))
    report = verify_path(built.root, receipts=[moved])
    if field == "location":  # informational: a dataset may move
        assert report.ok and report.receipts_signed == 1
    else:
        assert len(receipt_errors(report)) == 2  # the signature, and the id
        assert "signature" in receipt_errors(report)[0]


def test_receipt_signed_with_another_key_fails(built: Built, tmp_path: Path) -> None:
    good = load_receipt(built.signed_k)
    other = generate_key()
    with pytest.raises(OdfChainError, match=r"is the key of did:odf:.*not of this dataset"):
        good.signed(other)
    forged = dataclasses.replace(good, signature=other.sign(good.signed_bytes()))
    path = tmp_path / "other-key.json"
    write_receipt(forged, path)
    report = Dataset.open(built.root).verify(receipts=[path])
    assert receipt_errors(report) == [
        f"receipt {path}: the signature is not {good.dataset_id}'s over this receipt: the "
        "receipt was altered, or signed with another key"
    ]
    assert report.receipts_signed == 0


def test_receipt_refuses_a_key_of_another_dataset(built: Built, tmp_path: Path) -> None:
    Dataset.create(tmp_path / "other", key_file=tmp_path / "other.pem")
    with pytest.raises(OdfChainError, match=r"other\.pem is the key of"):
        Dataset.open(built.root).receipt(key_file=tmp_path / "other.pem")
    p = cli("receipt", built.root, "--key-file", tmp_path / "other.pem", "-o", tmp_path / "r")
    one_line_error(p, f"key file {tmp_path / 'other.pem'} is the key of", "not of this dataset")
    assert not (tmp_path / "r").exists()


# -- the key file ------------------------------------------------------------------------------


def test_key_file_is_pkcs8_pem_mode_0600_and_names_the_dataset(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive umask: the key must still be private
    try:
        ds = Dataset.create(tmp_path / "ds", key_file=tmp_path / "k.pem")
    finally:
        os.umask(old)
    key_path = tmp_path / "k.pem"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert key_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    key = load_pem_private_key(key_path.read_bytes(), password=None)  # standard, not ours
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert public == ds.state.dataset_id.public_key
    # nothing of the key is inside the dataset
    pem = key_path.read_bytes()
    for path in (tmp_path / "ds").rglob("*"):
        if path.is_file():
            assert pem not in path.read_bytes()


def test_key_file_inside_the_dataset_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with pytest.raises(StorageError, match="inside the dataset"):
        Dataset.create(root, key_file=root / "k.pem")
    assert not root.exists()
    root.mkdir()  # an empty directory may become a dataset; a symlink into it is still inside
    (tmp_path / "alias").symlink_to(root)
    with pytest.raises(StorageError, match="inside the dataset"):
        Dataset.create(root, key_file=tmp_path / "alias" / "k.pem")
    assert list(root.iterdir()) == []
    p = cli("init", tmp_path / "ds2", "--key-file", tmp_path / "ds2" / "sub" / "k.pem")
    one_line_error(p, "inside the dataset")
    assert not (tmp_path / "ds2").exists()


def test_key_file_is_never_overwritten(tmp_path: Path) -> None:
    existing = tmp_path / "k.pem"
    existing.write_bytes(b"precious")
    with pytest.raises(StorageError, match="already exists"):
        Dataset.create(tmp_path / "ds", key_file=existing)
    assert existing.read_bytes() == b"precious"
    assert not (tmp_path / "ds").exists()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    p = cli("init", tmp_path / "ds", "--key-file", tmp_path / "dangling")
    one_line_error(p, "already exists")
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "ds").exists()


def test_failed_create_leaves_no_key(tmp_path: Path) -> None:
    Dataset.create(tmp_path / "ds")
    with pytest.raises(OdfChainError, match="already a dataset"):
        Dataset.create(tmp_path / "ds", key_file=tmp_path / "k.pem")
    assert not (tmp_path / "k.pem").exists()


def test_bad_key_files(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "rsa.pem").write_bytes(
        rsa_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    )
    (tmp_path / "junk.pem").write_bytes(b"not a key\n")
    for name, fragment in (("rsa.pem", "not an ed25519 private key"), ("junk.pem", "not a PEM")):
        with pytest.raises(FormatError, match=fragment) as info:
            load_key(tmp_path / name)
        assert str(tmp_path / name) in str(info.value)
    with pytest.raises(NotFoundError, match="no such file"):
        load_key(tmp_path / "missing.pem")
    assert load_key_round_trip()


def _pkcs8_pem(oid: bytes, key: bytes) -> bytes:
    """A PKCS#8 PEM of the algorithm ``oid`` (its DER content octets) holding ``key`` as
    given, whatever length that algorithm's keys have: built by hand, as a fuzzer would."""

    def der(tag: int, body: bytes) -> bytes:
        assert len(body) < 128  # short-form lengths are all these keys need
        return bytes([tag, len(body)]) + body

    algorithm = der(0x30, der(0x06, oid))
    info = der(0x30, der(0x02, b"\x00") + algorithm + der(0x04, der(0x04, key)))
    armored = base64.encodebytes(info)
    return b"-----BEGIN PRIVATE KEY-----\n" + armored + b"-----END PRIVATE KEY-----\n"


X448, ED25519 = b"\x2b\x65\x6f", b"\x2b\x65\x70"  # 1.3.101.111, 1.3.101.112


def _pem(key) -> bytes:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


BAD_KEY_FILES = {
    # OpenSSL refuses to set these up: cryptography raised InternalError ("internal error")
    "x448-32-bytes.pem": (lambda: _pkcs8_pem(X448, bytes(range(32))), "cannot be loaded"),
    "ed25519-16-bytes.pem": (lambda: _pkcs8_pem(ED25519, bytes(16)), "cannot be loaded"),
    "ed25519-33-bytes.pem": (lambda: _pkcs8_pem(ED25519, bytes(33)), "cannot be loaded"),
    "ec.pem": (lambda: _pem(ec.generate_private_key(ec.SECP256R1())), "not an ed25519"),
    "x25519.pem": (lambda: _pem(x25519.X25519PrivateKey.generate()), "not an ed25519"),
    "public.pem": (
        lambda: (
            generate_key()
            .public_key()
            .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        ),
        "not a PEM private key",
    ),
    "garbage-base64.pem": (
        lambda: b"-----BEGIN PRIVATE KEY-----\n!!not*base64~~\n-----END PRIVATE KEY-----\n",
        "not a PEM private key",
    ),
    "random-der.pem": (
        lambda: (
            b"-----BEGIN PRIVATE KEY-----\n"
            + base64.encodebytes(bytes(range(7, 71)))
            + b"-----END PRIVATE KEY-----\n"
        ),
        "not a PEM private key",
    ),
    "empty.pem": (lambda: b"", "not a PEM private key"),
    "binary.pem": (lambda: bytes(range(256)), "not a PEM private key"),
    "encrypted.pem": (
        lambda: generate_key().private_bytes(
            Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"secret")
        ),
        "encrypted",
    ),
    "huge.pem": (lambda: b"#" * (MAX_KEY_BYTES + 1), "more than a key file can be"),
}


@pytest.mark.parametrize("name", sorted(BAD_KEY_FILES))
def test_a_key_file_that_holds_no_usable_key_is_named(tmp_path: Path, name: str) -> None:
    """Whatever is in a key file, loading it raises an OdfChainError naming it: the X448 PEM of
    32 bytes (found by fuzzing) made cryptography raise InternalError, an internal error."""
    make, fragment = BAD_KEY_FILES[name]
    path = tmp_path / name
    path.write_bytes(make())
    with pytest.raises(OdfChainError, match=f"^key file {path}: ") as info:
        load_key(path)
    assert fragment in str(info.value)


def test_a_key_file_that_is_no_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=rf"^key file {tmp_path}: not a regular file \(a dir"):
        load_key(tmp_path)
    nul = re.escape("key file 'k\\x00.pem': a path cannot hold a NUL byte")
    with pytest.raises(StorageError, match=nul):
        load_key("k\0.pem")
    with pytest.raises(StorageError, match=nul):
        Dataset.create(tmp_path / "ds", key_file="k\0.pem")
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("name", ["x448-32-bytes.pem", "ec.pem", "empty.pem", "huge.pem"])
def test_cli_bad_key_files_are_one_line(built: Built, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_KEY_FILES[name][0]())
    one_line_error(cli("receipt", built.root, "--key-file", path), f"key file {path}: ")
    one_line_error(cli("receipt", built.root, "--key-file", tmp_path), f"key file {tmp_path}: ")
    assert not list(tmp_path.glob("*.json"))


def load_key_round_trip() -> bool:
    key = generate_key()
    return DatasetId.of_key(key) == DatasetId.of_key(
        load_pem_private_key(key_to_pem(key), password=None)  # type: ignore[arg-type]
    )


# -- the CLI ----------------------------------------------------------------------------------


def test_cli_init_receipt_verify(tmp_path: Path) -> None:
    root, key = tmp_path / "ds", tmp_path / "keys" / "ds.pem"
    key.parent.mkdir()
    p = cli("init", root, "--key-file", key)
    assert p.returncode == 0, p.stderr
    assert f"key file    {key}" in p.stdout
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    p = cli("receipt", root)  # stdout, unsigned
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["sequence_number"] == 0 and "signature" not in doc
    p = cli("receipt", root, "--key-file", key, "-o", tmp_path / "r0.json")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("wrote signed receipt of block 0 f1e20")
    before = (tmp_path / "r0.json").read_bytes()
    p = cli("receipt", root, "-o", tmp_path / "r0.json")
    one_line_error(p, f"receipt file {tmp_path / 'r0.json'} already exists")
    assert (tmp_path / "r0.json").read_bytes() == before
    p = cli("verify", root, "--json", "--receipt", tmp_path / "r0.json")
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert report["ok"] is True
    assert report["receipts"] == {"checked": 1, "held": 1, "signed": 1}
    one_line_error(cli("receipt", tmp_path / "nothing"), "not a dataset")


def good_doc(built: Built) -> dict:
    return json.loads(built.signed_k.read_text())


BAD_RECEIPTS = [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: "[1, 2]", "expected a JSON object, found list"),
    (lambda d: {k: v for k, v in d.items() if k != "block_hash"}, "missing field block_hash"),
    (lambda d: d | {"sequence_number": "4"}, "field sequence_number must be an integer"),
    (lambda d: d | {"sequence_number": True}, "field sequence_number must be an integer"),
    (lambda d: d | {"sequence_number": -1}, "sequence_number -1 is out of range"),
    (lambda d: d | {"block_hash": 7}, "field block_hash must be a string"),
    (lambda d: d | {"block_hash": "f00"}, "multihash"),
    (lambda d: d | {"dataset_id": "did:odf:xyz"}, "not a did:odf id"),
    (
        lambda d: d | {"dataset_id": d["dataset_id"].upper().replace("DID:ODF:F", "did:odf:f")},
        "dataset_id must be lowercase",
    ),
    (  # the same hash, its code a padded varint (0x9e 0x00 for 0x1e): one spelling only
        lambda d: d | {"block_hash": d["block_hash"].replace("f1e20", "f9e0020", 1)},
        "block_hash must be written as f1e20",
    ),
    (lambda d: d | {"system_time": "2026-03-01 12:00:00"}, "is not RFC 3339 UTC"),
    (lambda d: d | {"system_time": "2026-02-30T12:00:00.000Z"}, "is not RFC 3339 UTC"),
    (lambda d: d | {"system_time": "2026-03-01T12:00:00.12Z"}, "is not RFC 3339 UTC"),
    (lambda d: d | {"system_time": "2026-03-01T12:00:00.000+00:00"}, "is not RFC 3339 UTC"),
    (lambda d: d | {"system_time": "2026-03-01T12:00:00.120000Z"}, "is not RFC 3339 UTC"),
    (lambda d: d | {"sequence_number": 4.0}, "field sequence_number must be an integer"),
    (lambda d: d | {"location": 5}, "field location must be a string"),
    (lambda d: d | {"receipt": "odf-chain/2"}, "unsupported format 'odf-chain/2'"),
    (lambda d: d | {"signature": "f1234"}, "signature must be 'f' and 128 lowercase hex"),
    (lambda d: d | {"extra": 1}, "unknown field extra"),
    (lambda d: json.dumps(d)[:-1] + ', "sequence_number": 5}', "appears twice"),
    (
        lambda d: json.dumps(d).replace('"sequence_number": 4', '"sequence_number": NaN'),
        "NaN is not JSON",
    ),
]


@pytest.mark.parametrize(("change", "fragment"), BAD_RECEIPTS)
def test_malformed_receipt_is_named(built: Built, tmp_path: Path, change, fragment: str) -> None:
    changed = change(good_doc(built))
    path = tmp_path / "bad.json"
    path.write_text(changed if isinstance(changed, str) else json.dumps(changed))
    with pytest.raises(FormatError, match=f"^receipt {path}: ") as info:
        load_receipt(path)
    assert fragment in str(info.value)


def test_receipt_file_limits(built: Built, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_RECEIPT_BYTES + 1))
    with pytest.raises(FormatError, match="more than a receipt can be"):
        load_receipt(big)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"location": "\xe9"}')
    with pytest.raises(FormatError, match="not UTF-8"):
        load_receipt(latin)
    with pytest.raises(StorageError, match="not a regular file \\(a directory\\)"):
        load_receipt(tmp_path)


def test_cli_bad_receipt_files_are_one_line(built: Built, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"receipt": "odf-chain/1"')
    one_line_error(chain_verify(built.root, "--receipt", bad), f"receipt {bad}: not valid JSON")
    missing = tmp_path / "missing.json"
    one_line_error(
        cli("verify", built.root, "--receipt", built.receipt_k, "--receipt", missing),
        f"receipt {missing}: no such file",
    )
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    one_line_error(chain_verify(built.root, "--receipt", fifo), "not a regular file (a FIFO)")
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    one_line_error(
        chain_verify(built.root, "--receipt", zero), "not a regular file (a character device)"
    )
    key_fifo = tmp_path / "key.pem"
    os.mkfifo(key_fifo)
    one_line_error(cli("receipt", built.root, "--key-file", key_fifo), "key file", "(a FIFO)")
