"""Multihash values and their multibase base16 text form.

A multihash is ``varint(code) varint(length) digest``; its text form is multibase base16
lowercase: ``f`` followed by the hex of those bytes. Two algorithms are accepted: BLAKE3-256
(code 0x1e), odf_chain's default, and SHA3-256 (0x16), ODF's, for interoperability. Any other
code is refused rather than carried along unchecked, because a hash we cannot recompute proves
nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import BinaryIO

import blake3

from odf_chain.errors import FormatError
from odf_chain.format.algorithms import BLAKE3, SHA3_256

_CODES: dict[str, int] = {BLAKE3: 0x1E, SHA3_256: 0x16}
_NAMES: dict[int, str] = {code: name for name, code in _CODES.items()}
_DIGEST_SIZE = 32
_SHORT_FORM_SIZE = 2 + _DIGEST_SIZE
_CHUNK = 1 << 20


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128, as multiformats use it."""
    if value < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """Read one varint at ``pos``; return (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise FormatError("truncated varint in multihash")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise FormatError("varint too long in multihash")


def check_algorithm(algorithm: str) -> str:
    if algorithm not in _CODES:
        raise FormatError(
            f"unknown hash algorithm {algorithm!r}: expected one of {', '.join(sorted(_CODES))}"
        )
    return algorithm


def _hasher(algorithm: str):  # -> blake3.blake3 | hashlib._Hash
    return blake3.blake3() if check_algorithm(algorithm) == BLAKE3 else hashlib.sha3_256()


class HashingSink:
    """A write-only file object that hashes what is written to it, without keeping it: lets a
    serializer (Arrow IPC, say) stream into a digest instead of a buffer that is then copied."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._hasher = _hasher(algorithm)
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        self._hasher.update(data)
        n = memoryview(data).nbytes
        self.size += n
        return n

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def multihash(self) -> Multihash:
        return Multihash(self.algorithm, self._hasher.digest())


@dataclass(frozen=True, slots=True)
class Multihash:
    """A self-describing digest: which algorithm, and the 32 digest bytes."""

    algorithm: str
    digest_bytes: bytes

    def __post_init__(self) -> None:
        check_algorithm(self.algorithm)
        if len(self.digest_bytes) != _DIGEST_SIZE:
            raise FormatError(
                f"{self.algorithm} digest must be {_DIGEST_SIZE} bytes, "
                f"got {len(self.digest_bytes)}"
            )

    @property
    def code(self) -> int:
        return _CODES[self.algorithm]

    @classmethod
    def digest(cls, algorithm: str, data: bytes) -> Multihash:
        hasher = _hasher(algorithm)
        hasher.update(data)
        return cls(algorithm, hasher.digest())

    @classmethod
    def digest_stream(cls, algorithm: str, stream: BinaryIO) -> tuple[Multihash, int]:
        """Hash a file-like object in chunks; return the multihash and the number of bytes."""
        hasher = _hasher(algorithm)
        size = 0
        while chunk := stream.read(_CHUNK):
            hasher.update(chunk)
            size += len(chunk)
        return cls(algorithm, hasher.digest()), size

    @classmethod
    def from_bytes(cls, data: bytes) -> Multihash:
        """Parse the binary multihash form, refusing unknown codes and wrong lengths."""
        data = bytes(data)
        if len(data) == _SHORT_FORM_SIZE and data[1] == _DIGEST_SIZE and data[0] in _NAMES:
            # both varints are one byte (codes and length below 0x80): the common case,
            # parsed without the general varint loop (every block carries several hashes)
            return cls(_NAMES[data[0]], data[2:])
        code, pos = decode_varint(data)
        if code not in _NAMES:
            raise FormatError(
                f"unknown multihash code 0x{code:x}: expected 0x1e (blake3) or 0x16 (sha3-256)"
            )
        length, pos = decode_varint(data, pos)
        digest = data[pos:]
        if length != len(digest):
            raise FormatError(
                f"multihash length field says {length} bytes but {len(digest)} follow"
            )
        return cls(_NAMES[code], digest)

    @classmethod
    def from_multibase(cls, text: str) -> Multihash:
        """Parse the ``f<hex>`` text form."""
        if not text.startswith("f"):
            raise FormatError(f"not a base16 multibase string (must start with 'f'): {text!r}")
        try:
            raw = bytes.fromhex(text[1:])
        except ValueError:
            raise FormatError(f"invalid hex in multihash {text!r}") from None
        if text[1:] != raw.hex():
            raise FormatError(f"multihash must be lowercase base16: {text!r}")
        return cls.from_bytes(raw)

    def __bytes__(self) -> bytes:
        # both codes and the digest length are below 0x80: each varint is that one byte
        return bytes((_CODES[self.algorithm], _DIGEST_SIZE)) + self.digest_bytes

    def to_multibase(self) -> str:
        return "f" + bytes(self).hex()

    def __str__(self) -> str:
        return self.to_multibase()

    def __repr__(self) -> str:
        return f"Multihash({self.to_multibase()!r})"
