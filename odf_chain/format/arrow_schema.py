"""Arrow schemas <-> the *bare* Arrow ``Schema`` flatbuffer stored in ``SetDataSchema``.

ODF's ``SetDataSchema.raw_arrow_schema`` holds what arrow-rs ``schema_to_fb`` emits: a flatbuffer
whose root table is Arrow's ``Schema`` table (``Schema.fbs``). It is *not* an IPC message: there is
no ``0xFFFFFFFF`` continuation marker, no length prefix and no ``Message`` table around it.

pyarrow only speaks IPC messages (``Schema.serialize()`` / ``pa.ipc.read_schema``). Flatbuffer
offsets are relative (uoffsets point forward from where they are stored, a table's soffset points
at its vtable), so a sub-table can be re-rooted, and a bare table can be wrapped in a new
``Message``, by moving bytes around in multiples of 8 (which keeps every alignment) and writing a
new root offset, without a flatbuffers schema or a re-encode. This module does exactly that, by
hand, with ``struct``; pyarrow's own flatbuffer verifier then checks the whole Schema on read.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from odf_chain.errors import FormatError, SchemaError

__all__ = [
    "MAX_NESTING",
    "check_schema",
    "schema_from_bare_flatbuffer",
    "schema_to_bare_flatbuffer",
    "shown_path",
    "too_deep",
]

_CONTINUATION = b"\xff\xff\xff\xff"
_MESSAGE_HEADER_SCHEMA = 1  # MessageHeader union: 1 = Schema
_METADATA_VERSION_V5 = 4  # MetadataVersion enum: 4 = V5
# Message table field ids (Message.fbs)
_MSG_VERSION, _MSG_HEADER_TYPE, _MSG_HEADER = 0, 1, 2
# Arrow reads the metadata length as an int32; keep well clear of it.
_MAX_BARE_LEN = 2**31 - 1024

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


# --------------------------------------------------------------------------------------------
# minimal flatbuffer table access (bounds-checked; every failure is a FormatError)


def _u16(buf: bytes, pos: int, what: str) -> int:
    if pos < 0 or pos + 2 > len(buf):
        raise FormatError(f"malformed Arrow schema: {what} at byte {pos} is outside the buffer")
    return _U16.unpack_from(buf, pos)[0]


def _u32(buf: bytes, pos: int, what: str) -> int:
    if pos < 0 or pos + 4 > len(buf):
        raise FormatError(f"malformed Arrow schema: {what} at byte {pos} is outside the buffer")
    return _U32.unpack_from(buf, pos)[0]


def _i32(buf: bytes, pos: int, what: str) -> int:
    if pos < 0 or pos + 4 > len(buf):
        raise FormatError(f"malformed Arrow schema: {what} at byte {pos} is outside the buffer")
    return _I32.unpack_from(buf, pos)[0]


class _Table:
    """A flatbuffer table located in ``buf``, with its vtable checked to lie inside ``buf``."""

    def __init__(self, buf: bytes, pos: int, what: str) -> None:
        n = len(buf)
        if pos % 4 or pos < 0 or pos + 4 > n:
            raise FormatError(
                f"malformed Arrow schema: {what} table offset {pos} is misaligned or outside "
                f"the {n}-byte buffer"
            )
        vtable = pos - _i32(buf, pos, f"{what} vtable offset")
        if vtable % 2 or vtable < 0 or vtable + 4 > n:
            raise FormatError(
                f"malformed Arrow schema: {what} vtable at byte {vtable} is misaligned or outside "
                f"the {n}-byte buffer"
            )
        vtable_size = _u16(buf, vtable, f"{what} vtable size")
        table_size = _u16(buf, vtable + 2, f"{what} table size")
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > n:
            raise FormatError(
                f"malformed Arrow schema: {what} vtable size {vtable_size} at byte {vtable} "
                f"does not fit the {n}-byte buffer"
            )
        if table_size < 4 or pos + table_size > n:
            raise FormatError(
                f"malformed Arrow schema: {what} table size {table_size} at byte {pos} "
                f"does not fit the {n}-byte buffer"
            )
        self.buf, self.pos, self.what = buf, pos, what
        self.vtable, self.vtable_size, self.size = vtable, vtable_size, table_size

    def field_pos(self, field_id: int) -> int | None:
        """Absolute position of a field, or None when it is absent (left at its default)."""
        entry = 4 + 2 * field_id
        if entry + 2 > self.vtable_size:
            return None
        rel = _u16(self.buf, self.vtable + entry, f"{self.what} vtable entry {field_id}")
        if rel == 0:
            return None
        if rel < 4 or rel >= self.size:
            raise FormatError(
                f"malformed Arrow schema: {self.what} field {field_id} offset {rel} is outside "
                f"its {self.size}-byte table"
            )
        return self.pos + rel


def _root_table(buf: bytes, what: str) -> _Table:
    if len(buf) < 8:
        raise FormatError(
            f"malformed Arrow schema: {len(buf)} bytes is too short for a flatbuffer {what}"
        )
    return _Table(buf, _u32(buf, 0, "root offset"), what)


# --------------------------------------------------------------------------------------------
# what every schema must satisfy: bounded nesting, UTF-8 strings

MAX_NESTING = 64
"""The deepest level a field may sit at, a top-level column being level 1 and each struct, list
or map adding one.

It is Arrow's own limit: its IPC writer (which the logical hash of every slice goes through)
refuses deeper data ("Max recursion depth reached"). Arrow's Parquet reader refuses about 99
struct levels, its IPC reader about 125; before refusing, the Parquet writer spends memory that
grows with the square of the depth (4.7 GB at 800 levels, a crash at 1,200). Real schemas stay
far below.
"""

_SHOWN_LEVELS = 8


def _children(t: pa.DataType) -> list[tuple[str | None, pa.Field]]:
    """The fields nested directly in ``t``, with the path label of each (None: its name)."""
    while pa.types.is_dictionary(t):  # a dictionary encodes its values; no level of its own
        t = t.value_type
    if pa.types.is_map(t):
        return [("[key]", t.key_field), ("[value]", t.item_field)]
    if hasattr(t, "value_field"):  # list, large_list, fixed_size_list, list views, run-end
        return [("[item]", t.value_field)]
    if pa.types.is_struct(t) or pa.types.is_union(t):
        return [(None, t.field(i)) for i in range(t.num_fields)]
    return []


def _decoded(value: bytes, what: str, path: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: {what} {value!r} is not valid UTF-8 ({exc})") from None


def _check_metadata(metadata: dict[bytes, bytes] | None, path: str) -> None:
    for key, value in (metadata or {}).items():
        name = _decoded(key, "metadata key", path)
        _decoded(value, f"the value of metadata key {name!r}", path)


def shown_path(path: list[str]) -> str:
    """A field path for a message, its middle left out when it is long."""
    if len(path) <= _SHOWN_LEVELS:
        return ".".join(path)
    return ".".join(path[:4]) + " ... " + ".".join(path[-3:])


def too_deep(field: str, level: int) -> SchemaError:
    """The error for ``field`` holding fields at ``level``, deeper than :data:`MAX_NESTING`."""
    return SchemaError(
        f"field {field!r} holds fields at level {level}; at most {MAX_NESTING} levels of "
        "structs, lists and maps are allowed (a top-level column is level 1)"
    )


def check_schema(schema: pa.Schema) -> None:
    """Refuse a schema nested deeper than :data:`MAX_NESTING`, or holding a string (a field
    name, a metadata key or value, a timezone) that is not UTF-8; the error names the field.

    pyarrow decodes names and timezones lazily, so a string that is not UTF-8 would otherwise
    raise ``UnicodeDecodeError`` later, wherever it is first read (``odf-chain fields``, an
    export). The walk is iterative and never goes below the limit: its cost is bounded however
    deep the schema is.
    """
    _check_metadata(schema.metadata, "the schema")
    # (path of the parent, position in it, path label if not the name, field); the path's
    # length is the field's level
    stack: list[tuple[list[str], int, str | None, pa.Field]] = [
        ([], i, None, schema.field(i)) for i in reversed(range(len(schema)))
    ]
    while stack:
        parent, position, marker, field = stack.pop()
        try:
            name = field.name
        except UnicodeDecodeError as exc:
            where = f"field #{position}" + (f" of {'.'.join(parent)!r}" if parent else "")
            raise SchemaError(f"{where}: its name is not valid UTF-8 ({exc})") from None
        path = [*parent, marker or name]
        shown = ".".join(path)
        _check_metadata(field.metadata, f"field {shown!r}")
        t = field.type
        while pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_timestamp(t):
            try:
                t.tz  # noqa: B018 (the access is the check)
            except UnicodeDecodeError as exc:
                raise SchemaError(
                    f"field {shown!r}: its timezone is not valid UTF-8 ({exc})"
                ) from None
        children = _children(t)
        if children and len(path) >= MAX_NESTING:
            raise too_deep(shown_path(path), len(path) + 1)
        for i, (label, child) in reversed(list(enumerate(children))):
            stack.append((path, i, label, child))


# --------------------------------------------------------------------------------------------
# pyarrow IPC message -> bare Schema


def _message_flatbuffer(ipc: bytes) -> bytes:
    """The ``Message`` flatbuffer inside an IPC encapsulated message (framing stripped)."""
    pos = 4 if ipc[:4] == _CONTINUATION else 0  # pre-0.15 streams have no continuation marker
    length = _i32(ipc, pos, "IPC metadata length")
    start = pos + 4
    if length <= 0 or start + length > len(ipc):
        raise FormatError(
            f"malformed Arrow schema: IPC metadata length {length} does not fit the "
            f"{len(ipc)}-byte message"
        )
    return ipc[start : start + length]


def _rerooted(message: bytes) -> tuple[bytes, bytes]:
    """The Message's Schema header as a bare flatbuffer: (trimmed form, untrimmed form).

    The untrimmed form keeps every byte and only rewrites the root offset. The trimmed form also
    drops the Message table from the front: a flatbuffers builder writes back to front and the
    Message is built last, so everything below the end of its table belongs to it alone. The cut
    is made at a position that is 4 mod 8 so that, with the new 4-byte root offset in front, all
    retained bytes move by a multiple of 8 and keep their alignment.
    """
    msg = _root_table(message, "Message")
    type_pos = msg.field_pos(_MSG_HEADER_TYPE)
    header_type = message[type_pos] if type_pos is not None else 0
    if header_type != _MESSAGE_HEADER_SCHEMA:
        raise FormatError(
            f"malformed Arrow schema: IPC message header type is {header_type}, expected "
            f"{_MESSAGE_HEADER_SCHEMA} (Schema)"
        )
    ref_pos = msg.field_pos(_MSG_HEADER)
    if ref_pos is None:
        raise FormatError("malformed Arrow schema: IPC Schema message has no header table")
    header = ref_pos + _u32(message, ref_pos, "Message header offset")
    _Table(message, header, "Schema")  # bounds check before pointing a root at it

    untrimmed = _U32.pack(header) + message[4:]
    msg_end = msg.pos + msg.size
    cut = msg_end - ((msg_end - 4) % 8)  # largest position <= msg_end that is 4 mod 8
    if msg.vtable < msg.pos and 4 <= cut <= header:
        trimmed = _U32.pack(header - cut + 4) + message[cut:]
    else:
        trimmed = untrimmed
    return trimmed, untrimmed


def schema_to_bare_flatbuffer(schema: pa.Schema) -> bytes:
    """Encode ``schema`` as the bare Arrow ``Schema`` flatbuffer that ODF stores.

    This is the form other ODF tools (arrow-rs ``schema_to_fb``) write and read, so a
    SetDataSchema written here is readable there. The output depends only on the schema and the
    pyarrow version, so block hashes are reproducible. It is re-read before being returned: the
    trimmed form is only used when it decodes back to exactly ``schema``.
    """
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
    check_schema(schema)  # before pyarrow serializes a schema it could not read back
    trimmed, untrimmed = _rerooted(_message_flatbuffer(schema.serialize().to_pybytes()))
    for candidate in (trimmed, untrimmed):
        try:
            if schema_from_bare_flatbuffer(candidate).equals(schema, check_metadata=True):
                return candidate
        except FormatError:
            pass
    raise FormatError(
        "malformed Arrow schema: pyarrow's IPC schema message does not re-root to an equal schema"
    )


# --------------------------------------------------------------------------------------------
# bare Schema -> pyarrow


def _wrap_in_message(bare: bytes, schema_pos: int) -> bytes:
    """An IPC encapsulated ``Message`` (V5, header = Schema at ``schema_pos`` of ``bare``).

    Layout of the 32-byte prefix that precedes the unchanged bare buffer (32 is a multiple of 8,
    so the bare buffer's relative offsets and alignment stay valid)::

        0  u32 root offset -> 16           16 i32 soffset -> vtable at 4
        4  vtable: u16 10, u16 12,         20 u32 header uoffset -> 32 + schema_pos
           u16 8 (version), u16 10         24 i16 version = V5
           (header_type), u16 4 (header)   26 u8 header_type = Schema, 27 pad
        14 u16 pad                         28 u32 pad
    """
    prefix = struct.pack(
        "<I5HHiIhBBI",
        16,  # root offset: Message table at 16
        10,  # vtable size: 4 + 3 fields * 2
        12,  # table size: soffset + header + version + header_type (+1 pad)
        8,  # field 0 version at table + 8
        10,  # field 1 header_type at table + 10
        4,  # field 2 header at table + 4
        0,  # pad (bodyLength, field 3, is 0 = default: absent)
        16 - 4,  # table soffset: vtable = 16 - 12 = 4
        32 + schema_pos - 20,  # header uoffset, stored at 20
        _METADATA_VERSION_V5,
        _MESSAGE_HEADER_SCHEMA,
        0,
        0,
    )
    assert len(prefix) == 32
    flatbuffer = prefix + bare
    # The metadata length is exact, not padded to 8 as an IPC writer would: Arrow accepts it, and
    # its flatbuffer verifier then sees only bytes that were stored. Zero padding inside the
    # metadata would let a truncated buffer verify (as a different schema: a name cut short
    # would read as NULs). The buffer as a whole is still padded to 8 after the metadata.
    framed = _CONTINUATION + _I32.pack(len(flatbuffer)) + flatbuffer
    return framed + b"\0" * (-len(framed) % 8)


def schema_from_bare_flatbuffer(data: bytes) -> pa.Schema:
    """Decode a bare Arrow ``Schema`` flatbuffer (``SetDataSchema.raw_arrow_schema``).

    Chains come from disk and from other tools, so the bytes are untrusted: the root and its
    vtable are bounds-checked here (for a precise message), and pyarrow's flatbuffer verifier
    checks the rest. Every failure is a :class:`FormatError`.
    """
    try:
        bare = memoryview(data).tobytes()
    except TypeError as e:
        raise TypeError(f"expected bytes, got {type(data).__name__}") from e
    if len(bare) > _MAX_BARE_LEN:
        raise FormatError(f"malformed Arrow schema: {len(bare)} bytes is too large")
    if bare[:4] == _CONTINUATION:
        raise FormatError(
            "malformed Arrow schema: starts with the IPC continuation marker 0xFFFFFFFF; "
            "expected a bare Schema flatbuffer, not an IPC message"
        )
    root = _root_table(bare, "Schema")
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(_wrap_in_message(bare, root.pos)))
        check_schema(schema)
        return schema
    except SchemaError as e:
        raise SchemaError(f"Arrow schema refused: {e}") from None
    except (
        pa.ArrowException,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        OSError,
        NotImplementedError,
        OverflowError,
        UnicodeError,
    ) as e:
        raise FormatError(f"malformed Arrow schema: {e}") from e
