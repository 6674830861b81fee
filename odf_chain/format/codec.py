"""Stored block bytes <-> :class:`MetadataBlock`.

A stored block is a ``Manifest`` flatbuffer (kind 0x400000, version 3) whose ``content`` is the
nested ``MetadataBlock`` flatbuffer. Its hash is taken over exactly these bytes, so the encoder
must build them the way the ODF reference implementation does: for every table, first create its
vectors, strings and sub-tables in schema field order (depth first), then start the table and add
its fields in schema field order; scalars equal to their default are omitted, optional scalars
are written whenever present. ``tests/test_vectors.py`` holds us to the reference bytes.

Version 2 manifests (Timestamp structs written with 1-byte alignment) are read too.

This module is the envelope (the manifest around the block, the block's header fields, the
errors a caller sees); the per-event work is split by job: :mod:`~odf_chain.format.block_encoder`
builds the block, :mod:`~odf_chain.format.block_decoder` reads its tables,
:mod:`~odf_chain.format.timestamp` holds the struct both use.
"""

from __future__ import annotations

import struct

from odf_chain.errors import FormatError
from odf_chain.format.block_decoder import EVENT_READERS, TableReader, as_hash
from odf_chain.format.events import MetadataBlock
from odf_chain.format.multihash import Multihash

MANIFEST_KIND_METADATA_BLOCK = 0x400000
MANIFEST_VERSION = 3
READABLE_VERSIONS = (2, 3)

#: The table reader blocks are rooted with: a module attribute, so that a test can decode with
#: another reader (every event reader reaches its sub-tables through the root's class).
_Reader = TableReader


_ENVELOPE = struct.Struct("<I6xHHHHHiIiq")
"""The Manifest's bytes before its content's padding and length: the root offset, the 6 bytes
that align it, the vtable (its size, the table's, the offsets of kind, version and content),
then the table (its vtable offset, the content's offset, version, kind)."""


def _wrap_manifest(content: bytes, version: int) -> bytes:
    """The Manifest around ``content``, byte for byte what ``flatbuffers.Builder`` makes of
    ``Start; AddKind; AddVersion; AddContent; Finish`` (the reference implementation's layout;
    ``tests/test_codec.py`` compares the two for every content length mod 8 and more), packed
    here because the builder took ~12 us of an append to place five fields.

    The builder writes backwards: the content vector last in the buffer (its bytes padded to 4,
    its length before them), then the table's fields in the reverse of their order (kind, an
    int64, aligned to 8 over the vector: 4 bytes of padding when the vector's 4 + length +
    padding is not a multiple of 8), the vtable, and the root offset, whose alignment works out
    to 6 bytes for every length."""
    size = len(content)
    tail = -size % 4
    gap = 4 if (4 + size + tail) % 8 else 0
    return b"".join(
        (
            _ENVELOPE.pack(
                20, 10, 20 + gap, 12, 8, 4, 10, 16 + gap, version, MANIFEST_KIND_METADATA_BLOCK
            ),
            bytes(gap),
            size.to_bytes(4, "little"),
            content,
            bytes(tail),
        )
    )


def encode_block(block: MetadataBlock, version: int = MANIFEST_VERSION) -> bytes:
    """The bytes to store (and hash) for ``block``.

    Only the current manifest version is written; the legacy layout exists for reading old
    chains (and, in tests, to prove we read it the way the reference implementation wrote it).
    """
    if version != MANIFEST_VERSION:
        raise FormatError(f"can only write manifest version {MANIFEST_VERSION}, not {version}")
    from odf_chain.format.block_encoder import BlockEncoder, check_block  # readers need none

    check_block(block)
    try:
        return _wrap_manifest(BlockEncoder(timestamp_alignment=4).block(block), version)
    except (struct.error, OverflowError, TypeError) as exc:
        # flatbuffers packs with struct: an integer outside its field's range lands here.
        raise FormatError(
            f"cannot encode block {block.sequence_number}: a value is out of range for its "
            f"field ({exc})"
        ) from None


def _encode_legacy_v2(block: MetadataBlock) -> bytes:
    """Manifest version 2: Timestamp structs at 1-byte alignment. For tests only."""
    from odf_chain.format.block_encoder import BlockEncoder

    return _wrap_manifest(BlockEncoder(timestamp_alignment=1).block(block), 2)


def _root(buf: bytes, what: str) -> TableReader:
    if len(buf) < 8:
        raise FormatError(f"{what} is too short ({len(buf)} bytes) to be a flatbuffer")
    (root,) = struct.unpack_from("<I", buf, 0)
    return _Reader(buf, root)


def read_manifest(data: bytes) -> tuple[int, bytes]:
    """Check the manifest envelope; return (version, nested MetadataBlock bytes)."""
    manifest = _root(data, "block")
    kind = manifest.scalar(0, "q", 0)
    if kind != MANIFEST_KIND_METADATA_BLOCK:
        raise FormatError(
            f"unknown manifest kind 0x{kind:x}: expected 0x{MANIFEST_KIND_METADATA_BLOCK:x} "
            "(metadata block)"
        )
    version = manifest.scalar(1, "i", 0)
    if version not in READABLE_VERSIONS:
        raise FormatError(
            f"unsupported manifest version {version}: this reader knows versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    content = manifest.ubytes(2)
    if content is None:
        raise FormatError("manifest has no content")
    return version, content


def decode_block(data: bytes) -> MetadataBlock:
    """Parse stored block bytes. Any malformation raises :class:`FormatError`."""
    data = bytes(data)
    try:
        _, content = read_manifest(data)
        block = _root(content, "block content")
        system_time = block.timestamp(0)
        if system_time is None:
            raise FormatError("block has no system_time")
        event_type = block.scalar(3, "B", 0)
        reader = EVENT_READERS.get(event_type)
        if reader is None:
            raise FormatError(f"unknown event type id {event_type}")
        event_table = block.table(4)
        if event_table is None:
            raise FormatError("block has no event")
        return MetadataBlock(
            system_time=system_time,
            prev_block_hash=as_hash(block.ubytes(1)),
            sequence_number=block.scalar(2, "Q", 0),
            event=reader(event_table),
        )
    except FormatError:
        raise
    except (
        struct.error,
        IndexError,
        ValueError,
        TypeError,
        UnicodeDecodeError,
        KeyError,
        RecursionError,  # deeply nested tables or ExtraAttributes JSON in crafted input
    ) as exc:
        raise FormatError(f"corrupt block: {exc}") from None


def block_hash(data: bytes, algorithm: str) -> Multihash:
    """The hash of stored block bytes (never of a re-encoding)."""
    return Multihash.digest(algorithm, data)
