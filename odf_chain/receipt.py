"""Receipts: a dataset's head written down where its writer cannot reach it.

A chain proves that nothing *inside* it was altered, but a writer (or anyone with write access)
can roll ``refs/head`` back, truncate the chain, rebuild a suffix with other events or replace
the whole dataset, and the result is again a chain that verifies. A receipt is the outside
anchor: "dataset D had block H at sequence number N". Verifying with it checks that the chain
still holds that block at that position (Certificate Transparency's consistency check): a chain
that extends the receipt's block passes, anything that lost, moved or replaced it fails.

Receipts are small JSON documents (``odf-chain/1``). One can carry an ed25519 signature made
with the private key of the dataset id (opt-in: kept in a key file at create). The signed bytes
are fixed ASCII text, the JSON values verbatim, one field per line (see
:meth:`Receipt.signed_bytes`), so any tool can re-check a signature without odf_chain.

This module also reads and writes the key file: ``format/did.py`` turns keys into bytes and
back, file I/O lives here, above it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from odf_chain.chain import BlockEntry
from odf_chain.errors import FormatError, OdfChainError, StorageError
from odf_chain.events import Seed
from odf_chain.format.did import SIGNATURE_SIZE, DatasetId, key_from_pem, key_to_pem
from odf_chain.format.multihash import Multihash
from odf_chain.storage.user_files import read_regular
from odf_chain.walked import WalkedChain

FORMAT = "odf-chain/1"
MAX_RECEIPT_BYTES = 64 * 1024  # a receipt is ~500 bytes; anything near this is not one
MAX_KEY_BYTES = 16 * 1024  # an ed25519 PKCS#8 PEM is 119 bytes

_FIELDS = ("receipt", "dataset_id", "sequence_number", "block_hash", "system_time")
_OPTIONAL = ("location", "signature")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.(\d{3}|\d{6})Z")
_MAX_SEQUENCE = 2**64 - 1  # uint64 in the block


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``: milliseconds (what odf_chain writes), microseconds when
    the block holds a finer time (another ODF tool's), so the text always equals the block's."""
    utc = moment.astimezone(UTC)
    fraction = f"{utc.microsecond // 1000:03d}"
    if utc.microsecond % 1000:
        fraction = f"{utc.microsecond:06d}"
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}.{fraction}Z"
    )


@dataclass(frozen=True, slots=True)
class Receipt:
    """That a dataset had ``block_hash`` as block ``sequence_number`` (written at
    ``system_time``). ``location`` is informational (datasets move) and not signed; ``source``
    names where the receipt was read from, for messages."""

    dataset_id: DatasetId
    sequence_number: int
    block_hash: Multihash
    system_time: datetime
    location: str | None = None
    signature: bytes | None = None
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.system_time.tzinfo is None:  # local time would sign another instant
            raise FormatError(f"receipt system_time must be timezone-aware: {self.system_time}")
        if not 0 <= self.sequence_number <= _MAX_SEQUENCE:
            raise FormatError(f"receipt sequence_number {self.sequence_number} is out of range")

    def signed_bytes(self) -> bytes:
        """The exact bytes the signature covers: ASCII, one ``name value`` line per field, each
        ending in ``\\n``, values as they appear in the JSON::

            odf-chain/1
            dataset_id did:odf:fed01...
            sequence_number 7
            block_hash f1e20...
            system_time 2026-03-01T12:00:00.123Z

        ``location`` is left out: moving a dataset must not invalidate its receipts.
        """
        return (
            f"{FORMAT}\n"
            f"dataset_id {self.dataset_id.to_did()}\n"
            f"sequence_number {self.sequence_number}\n"
            f"block_hash {self.block_hash}\n"
            f"system_time {format_time(self.system_time)}\n"
        ).encode("ascii")

    def signed(self, key: Ed25519PrivateKey, key_source: str = "the key") -> Receipt:
        """This receipt signed with ``key``, which must be the key of its dataset id: a
        signature by any other key would fail every check, so it is refused here."""
        owner = DatasetId.of_key(key)
        if owner != self.dataset_id:
            raise OdfChainError(
                f"{key_source} is the key of {owner}, not of this dataset ({self.dataset_id}): "
                "it cannot sign its receipts"
            )
        return replace(self, signature=key.sign(self.signed_bytes()))

    @property
    def signature_valid(self) -> bool | None:
        """None when unsigned; else whether the signature is the dataset id's over
        :meth:`signed_bytes`."""
        if self.signature is None:
            return None
        return self.dataset_id.verify_signature(self.signed_bytes(), self.signature)

    def label(self) -> str:
        if self.source:
            return f"receipt {self.source}"
        return f"receipt of block {self.sequence_number}"

    def to_jsonable(self) -> dict:
        doc: dict = {
            "receipt": FORMAT,
            "dataset_id": self.dataset_id.to_did(),
            "sequence_number": self.sequence_number,
            "block_hash": str(self.block_hash),
            "system_time": format_time(self.system_time),
            "location": self.location,
        }
        if self.signature is not None:
            doc["signature"] = "f" + self.signature.hex()
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_jsonable(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "<receipt>") -> Receipt:
        """Parse a receipt strictly: every value must be in the form :meth:`to_json` writes
        (so the signed text can be rebuilt from the JSON values verbatim); unknown or
        duplicated fields are refused. Errors name ``source``."""

        def bad(message: str) -> FormatError:
            return FormatError(f"receipt {source}: {message}")

        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise bad(f"not UTF-8 text (byte {exc.start})") from None
        try:
            doc = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise bad(f"not valid JSON: {str(exc).splitlines()[0]}") from None
        if not isinstance(doc, dict):
            raise bad(f"expected a JSON object, found {type(doc).__name__}")
        missing = [name for name in _FIELDS if name not in doc]
        if missing:
            raise bad(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        unknown = sorted(set(doc) - set(_FIELDS) - set(_OPTIONAL))
        if unknown:
            raise bad(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
        for name in (*_FIELDS, *_OPTIONAL):
            value = doc.get(name)
            wanted = int if name == "sequence_number" else str
            if name in _OPTIONAL and value is None:
                continue
            if type(value) is not wanted:  # bool is an int subclass: refused too
                kind = "an integer" if wanted is int else "a string"
                raise bad(f"field {name} must be {kind}, found {json.dumps(value)[:40]}")
        if doc["receipt"] != FORMAT:
            raise bad(f"unsupported format {doc['receipt']!r} (this odf_chain reads {FORMAT})")
        try:
            dataset_id = DatasetId.from_did(doc["dataset_id"])
            block_hash = Multihash.from_multibase(doc["block_hash"])
        except FormatError as exc:
            raise bad(str(exc)) from None
        if dataset_id.to_did() != doc["dataset_id"]:
            raise bad(f"dataset_id must be lowercase base16: {doc['dataset_id']!r}")
        if str(block_hash) != doc["block_hash"]:  # another spelling of it (a padded varint)
            raise bad(f"block_hash must be written as {block_hash}, found {doc['block_hash']!r}")
        sequence_number = doc["sequence_number"]
        if not 0 <= sequence_number <= _MAX_SEQUENCE:
            raise bad(f"sequence_number {sequence_number} is out of range")
        system_time = _parse_time(doc["system_time"])
        if system_time is None:
            raise bad(
                f"system_time {doc['system_time']!r} is not RFC 3339 UTC as odf-chain writes "
                "it (YYYY-MM-DDTHH:MM:SS.mmmZ)"
            )
        signature = None
        if doc.get("signature") is not None:
            text_sig = doc["signature"]
            if re.fullmatch(f"f[0-9a-f]{{{2 * SIGNATURE_SIZE}}}", text_sig) is None:
                raise bad(
                    f"signature must be 'f' and {2 * SIGNATURE_SIZE} lowercase hex digits "
                    f"(an ed25519 signature), found {text_sig[:40]!r}"
                )
            signature = bytes.fromhex(text_sig[1:])
        return cls(
            dataset_id,
            sequence_number,
            block_hash,
            system_time,
            doc.get("location"),
            signature,
            source,
        )


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """Two values for one field would let two readers see two receipts."""
    doc: dict = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"field {key!r} appears twice")
        doc[key] = value
    return doc


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _parse_time(text: str) -> datetime | None:
    """The datetime of a canonical time string, None for any other form."""
    if _TIME.fullmatch(text) is None:
        return None
    try:
        moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return moment if format_time(moment) == text else None


# -- files ------------------------------------------------------------------------------------


def load_receipt(path: str | Path) -> Receipt:
    """Read and parse one receipt file (regular, at most :data:`MAX_RECEIPT_BYTES`)."""
    return Receipt.from_json(read_regular(path, MAX_RECEIPT_BYTES, "receipt"), str(path))


def load_receipts(items: Iterable[Receipt | str | Path]) -> list[Receipt]:
    """Receipts as given: Receipt objects stay, paths are read."""
    return [item if isinstance(item, Receipt) else load_receipt(item) for item in items]


def _create_new(path: Path, data: bytes, mode: int, what: str) -> None:
    """Create ``path`` holding ``data``, never replacing anything (``O_EXCL``, and a symlink at
    ``path`` counts as existing); fsync the file and its directory."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise StorageError(f"{what} {path} already exists: refusing to overwrite it") from None
    except OSError as exc:
        raise StorageError(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    try:
        try:
            if mode != 0o666:
                os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask allowed
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise StorageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None


def write_receipt(receipt: Receipt, path: str | Path) -> None:
    """Write ``receipt`` to a new file; an existing file is never replaced (a receipt is
    evidence: overwriting an older one would lose it)."""
    _create_new(Path(path), receipt.to_json().encode("ascii"), 0o666, "receipt file")


def check_key_path(path: str | Path, dataset_root: Path | None) -> Path:
    """Refuse a key file location before anything is written: it must be new, in an existing
    directory, and outside the dataset (``dataset_root``; None for a remote dataset), since
    anyone who can read or copy the dataset would then hold the key that signs for it."""
    path = Path(path)
    if "\0" in str(path):  # os.path's functions would raise ValueError
        raise StorageError(f"key file {str(path)!r}: a path cannot hold a NUL byte")
    if dataset_root is not None:
        key = Path(os.path.realpath(path))
        root = Path(os.path.realpath(dataset_root))
        if key == root or root in key.parents:
            raise StorageError(
                f"key file {path} is inside the dataset {dataset_root}: keep it outside, "
                "where the dataset's readers and writers cannot reach it"
            )
    if os.path.lexists(path):
        raise StorageError(f"key file {path} already exists: refusing to overwrite it")
    if not path.parent.is_dir():
        raise StorageError(f"key file {path}: directory {path.parent} does not exist")
    return path


def create_key_file(path: str | Path, key: Ed25519PrivateKey) -> None:
    """Save ``key`` as unencrypted PKCS#8 PEM in a new file of mode 0600."""
    _create_new(Path(path), key_to_pem(key), 0o600, "key file")


def load_key(path: str | Path) -> Ed25519PrivateKey:
    """The ed25519 private key in a key file written by :func:`create_key_file` (or any
    unencrypted PKCS#8 PEM ed25519 key)."""
    return key_from_pem(read_regular(path, MAX_KEY_BYTES, "key file"), str(path))


# -- the check --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """A receipt the chain does not hold; where in the chain, when that block exists."""

    message: str
    sequence_number: int | None = None
    block_hash: str | None = None


@dataclass(frozen=True, slots=True)
class ReceiptCheck:
    findings: tuple[Finding, ...]
    checked: int
    held: int  # receipts without a finding
    signed: int  # receipts whose signature checked out


def check_receipts(
    entries: Sequence[BlockEntry], receipts: Sequence[Receipt], *, complete: bool
) -> ReceiptCheck:
    """Does the chain hold every receipt's block at the receipt's sequence number?

    ``entries``: the blocks verify walked, oldest first (a suffix of the chain when the walk
    stopped early, ``complete`` False: then the dataset id cannot be checked and blocks below
    the walked ones cannot be confirmed). Pure: reads nothing.
    """
    view = _ChainView.of(entries, complete)
    findings: list[Finding] = []
    held = signed = 0
    for receipt in receipts:
        valid = receipt.signature_valid  # once: an ed25519 check costs about half a millisecond
        found = view.problems(receipt, valid)
        findings.extend(found)
        held += not found
        signed += bool(valid)
    return ReceiptCheck(tuple(findings), len(receipts), held, signed)


@dataclass(frozen=True, slots=True)
class _ChainView:
    """The walked blocks, indexed for the check (by position: a block is decoded only when a
    receipt names it)."""

    entries: Sequence[BlockEntry]
    positions_by_seq: dict[int, int]
    positions_by_hash: dict[str, int]
    head_seq: int | None  # None: no block was read
    low_seq: int | None  # the oldest block read
    dataset_id: DatasetId | None  # None: the Seed was not reached
    complete: bool

    @classmethod
    def of(cls, entries: Sequence[BlockEntry], complete: bool) -> _ChainView:
        if isinstance(entries, WalkedChain):  # numbers and names without decoding
            numbers = [entries.sequence_number(i) for i in range(len(entries))]
            names = [entries.name(i) for i in range(len(entries))]
        else:
            numbers = [e.block.sequence_number for e in entries]
            names = [str(e.hash) for e in entries]
        seed = entries[0].block.event if complete and entries else None
        return cls(
            entries,
            {seq: i for i, seq in enumerate(numbers)},
            {name: i for i, name in enumerate(names)},
            numbers[-1] if numbers else None,
            numbers[0] if numbers else None,
            seed.dataset_id if isinstance(seed, Seed) else None,
            complete,
        )

    def by_seq(self, seq: int) -> BlockEntry | None:
        i = self.positions_by_seq.get(seq)
        return None if i is None else self.entries[i]

    def by_hash(self, block_hash: Multihash) -> BlockEntry | None:
        i = self.positions_by_hash.get(str(block_hash))
        return None if i is None else self.entries[i]

    def problems(self, receipt: Receipt, signature_valid: bool | None) -> list[Finding]:
        label, k = receipt.label(), receipt.sequence_number
        out = []
        if signature_valid is False:
            out.append(
                Finding(
                    f"{label}: the signature is not {receipt.dataset_id}'s over this receipt: "
                    "the receipt was altered, or signed with another key"
                )
            )
        if self.dataset_id is not None and self.dataset_id != receipt.dataset_id:
            out.append(
                Finding(
                    f"{label}: dataset id differs: the chain is {self.dataset_id}, the receipt "
                    f"is of {receipt.dataset_id}: a replaced chain"
                )
            )
            return out  # block by block comparisons would only restate it
        found = self.by_seq(k)
        elsewhere = self.by_hash(receipt.block_hash)
        if found is not None and found.hash == receipt.block_hash:
            if found.block.system_time != receipt.system_time:
                out.append(
                    Finding(
                        f"{label}: block {k} was written at "
                        f"{format_time(found.block.system_time)}, the receipt says "
                        f"{format_time(receipt.system_time)}: the receipt was altered",
                        k,
                        str(found.hash),
                    )
                )
        elif elsewhere is not None:  # a block's sequence number is part of its hash
            seq = elsewhere.block.sequence_number
            out.append(
                Finding(
                    f"{label}: block {receipt.block_hash} is block {seq} of the chain, the "
                    f"receipt says block {k}: the receipt was altered",
                    seq,
                    str(elsewhere.hash),
                )
            )
        elif found is not None:
            out.append(
                Finding(
                    f"{label}: block {k} is {found.hash}, receipt says {receipt.block_hash}: "
                    "history rewritten",
                    k,
                    str(found.hash),
                )
            )
        elif self.head_seq is None:
            out.append(Finding(f"{label}: not checked: no block of the chain could be read"))
        elif k > self.head_seq:
            out.append(
                Finding(
                    f"{label}: the chain has no block {k} (head is block {self.head_seq}): "
                    "truncated or rolled back"
                )
            )
        elif self.complete:  # sequence numbers that skip k: the rules say how
            out.append(Finding(f"{label}: the chain has no block {k}"))
        else:
            out.append(
                Finding(
                    f"{label}: not checked: the chain could be read back to block "
                    f"{self.low_seq} only, not to block {k}"
                )
            )
        return out
