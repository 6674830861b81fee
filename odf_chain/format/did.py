"""Dataset identities: ``did:odf:`` DIDs derived from an ed25519 public key.

The binary form (stored in Seed.dataset_id) is the multicodec ``ed25519-pub`` prefix
(varint 0xed = ``ed 01``) followed by the 32-byte public key; the text form is ``did:odf:``
plus the multibase base16 of those bytes.

The private half of that key is what can sign for the dataset (receipts, see
:mod:`odf_chain.receipt`). This module turns it into bytes and back (PKCS#8 PEM, which openssl,
ssh-keygen and every crypto library read) and signs and checks; where the file lives is the
caller's business, so ``format/`` stays free of I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odf_chain.errors import FormatError

if TYPE_CHECKING:  # cryptography is imported by what signs, verifies or makes keys (~20 ms)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_ED25519_PUB = b"\xed\x01"
_KEY_SIZE = 32
_PREFIX = "did:odf:"
SIGNATURE_SIZE = 64


@dataclass(frozen=True, slots=True)
class DatasetId:
    """The public key that names a dataset for its whole life."""

    public_key: bytes

    def __post_init__(self) -> None:
        if len(self.public_key) != _KEY_SIZE:
            raise FormatError(f"ed25519 public key must be 32 bytes, got {len(self.public_key)}")

    @classmethod
    def generate(cls) -> DatasetId:
        """A fresh identity from a newly generated ed25519 key pair whose private half is
        dropped: blocks are not signed, so a dataset needs no key unless its owner wants to
        sign receipts (then use :func:`generate_key` and :meth:`of_key`)."""
        return cls.of_key(generate_key())

    @classmethod
    def of_key(cls, key: Ed25519PrivateKey) -> DatasetId:
        """The identity a private key signs for."""
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        return cls(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def verify_signature(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this identity's ed25519 signature of ``message``."""
        if len(signature) != SIGNATURE_SIZE:
            return False
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):  # ValueError: bytes that are no curve point
            return False
        return True

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


def generate_key() -> Ed25519PrivateKey:
    """A new ed25519 private key: the secret behind a new dataset id."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate()


def key_to_pem(key: Ed25519PrivateKey) -> bytes:
    """The unencrypted PKCS#8 PEM form (``-----BEGIN PRIVATE KEY-----``) of ``key``."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def key_from_pem(data: bytes, source: str) -> Ed25519PrivateKey:
    """The ed25519 private key in PEM ``data``; ``source`` names the file in errors.

    The bytes are the user's, anything at all: besides its documented ValueError, TypeError and
    UnsupportedAlgorithm, cryptography raises InternalError for keys OpenSSL will not set up (a
    PEM labelled X448 or Ed25519 with a key of the wrong length), and no list of its
    exceptions is promised. So whatever it raises is this file's fault, said as one
    FormatError. RSA keys are not validated (that costs time, and any RSA key is refused)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(data, password=None, unsafe_skip_rsa_key_validation=True)
    except TypeError:  # cryptography's way of saying "this one is encrypted"
        raise FormatError(
            f"key file {source}: the key is encrypted; odf_chain reads unencrypted PKCS#8 PEM"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise FormatError(f"key file {source}: not a PEM private key") from None
    except Exception as exc:  # see above: the file's fault, whatever the type
        # (InternalError's own message blames "another library": no help to the user)
        raise FormatError(
            f"key file {source}: holds a private key that cannot be loaded "
            f"(cryptography: {type(exc).__name__}); odf_chain reads unencrypted PKCS#8 PEM "
            "ed25519 keys"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise FormatError(
            f"key file {source}: holds a {type(key).__name__.lstrip('_')}, "
            "not an ed25519 private key"
        )
    return key
