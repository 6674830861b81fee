"""Dataset identities: ``did:odf:`` DIDs derived from an ed25519 public key.

The binary form (stored in Seed.dataset_id) is the multicodec ``ed25519-pub`` prefix
(varint 0xed = ``ed 01``) followed by the 32-byte public key; the text form is ``did:odf:``
plus the multibase base16 of those bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from odf_chain.errors import FormatError

_ED25519_PUB = b"\xed\x01"
_KEY_SIZE = 32
_PREFIX = "did:odf:"


@dataclass(frozen=True, slots=True)
class DatasetId:
    """The public key that names a dataset for its whole life."""

    public_key: bytes

    def __post_init__(self) -> None:
        if len(self.public_key) != _KEY_SIZE:
            raise FormatError(f"ed25519 public key must be 32 bytes, got {len(self.public_key)}")

    @classmethod
    def generate(cls) -> DatasetId:
        """A fresh identity from a newly generated ed25519 key pair.

        Only the public half names the dataset; the private half is not kept, since odf_chain
        does not sign blocks.
        """
        key = Ed25519PrivateKey.generate().public_key()
        return cls(key.public_bytes(Encoding.Raw, PublicFormat.Raw))

    @classmethod
    def from_bytes(cls, data: bytes) -> DatasetId:
        data = bytes(data)
        if not data.startswith(_ED25519_PUB):
            raise FormatError(
                "dataset id must start with the ed25519-pub multicodec (ed 01), "
                f"got {data[:2].hex()}"
            )
        return cls(data[len(_ED25519_PUB) :])

    @classmethod
    def from_did(cls, text: str) -> DatasetId:
        if not text.startswith(_PREFIX + "f"):
            raise FormatError(f"not a did:odf id in base16 multibase form: {text!r}")
        try:
            raw = bytes.fromhex(text[len(_PREFIX) + 1 :])
        except ValueError:
            raise FormatError(f"invalid hex in dataset id {text!r}") from None
        return cls.from_bytes(raw)

    def __bytes__(self) -> bytes:
        return _ED25519_PUB + self.public_key

    def to_did(self) -> str:
        return _PREFIX + "f" + bytes(self).hex()

    def __str__(self) -> str:
        return self.to_did()
