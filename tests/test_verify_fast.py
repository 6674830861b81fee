"""The fast structural verify is the old one, only faster.

- Every single-byte change of every block file is caught and names that block.
- The block decoder, now reading each table's vtable once, decodes exactly what the previous
  reader built on ``flatbuffers.Table`` decoded (kept here as the oracle), and refuses exactly
  what it refused, on varied and on damaged blocks.
- The short multihash parse agrees with the general varint parse on every two-byte prefix.
- A walk through one ``blocks/`` descriptor reports what one ``read_block`` per block reports,
  on healthy and broken chains (missing, symlinked, oversized, altered and malformed blocks).
"""

from __future__ import annotations

import contextlib
import shutil
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from flatbuffers.table import Table
from hypothesis import HealthCheck, given, settings, strategies as st

from odf_chain.dataset import Dataset
from odf_chain.errors import FormatError
from odf_chain.events import SetInfo
from odf_chain.format import codec
from odf_chain.format.codec import decode_block, encode_block
from odf_chain.format.multihash import Multihash, decode_varint, encode_varint
from odf_chain.storage.base import MAX_BLOCK_BYTES
from odf_chain.storage.block_pass import Hashes
from odf_chain.storage.local import LocalStorage
from odf_chain.verify import verify
from tests.helpers import multihash_name
from tests.test_codec import BLOCKS, LINEAGE_BLOCK

MS_UTC = pa.timestamp("ms", tz="UTC")


def _build(root: Path) -> Dataset:
    """Seed, schema, data, an evolved schema, more data, info: every block kind verify folds."""
    ds = Dataset.create(root)
    ds.write(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "event_time": pa.array([datetime(2024, 1, d, tzinfo=UTC) for d in (1, 2)], MS_UTC),
            }
        )
    )
    ds.write(
        pa.table({"id": pa.array([3], pa.int64()), "note": pa.array(["x"])}),
        evolve=True,
        transaction=("job", 1),
    )
    ds.append(SetInfo(description="sales", keywords=("a", "b")))
    return ds


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fast") / "ds"
    _build(root)
    return root


@pytest.fixture
def pristine_copy(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


# -- every byte of every block -------------------------------------------------------------------


@pytest.mark.slow
def test_every_single_byte_change_of_every_block_is_caught(pristine_copy: Path) -> None:
    names = sorted(p.name for p in (pristine_copy / "blocks").iterdir())
    assert len(names) >= 6
    storage = LocalStorage.open(pristine_copy)
    assert verify(storage, check_data=False).ok
    checked = 0
    for name in names:
        path = pristine_copy / "blocks" / name
        original = path.read_bytes()
        assert multihash_name(original) == name  # the file is the block its name promises
        for i in range(len(original)):
            for flip in (0x01, 0xFF):  # the lowest bit, and every bit
                changed = bytearray(original)
                changed[i] ^= flip
                path.write_bytes(changed)
                report = verify(storage, check_data=False)
                assert not report.ok, f"{name} byte {i} ^ {flip:#x} not caught"
                assert any(p.block_hash == name for p in report.errors), (
                    f"{name} byte {i} ^ {flip:#x}: no error names the block: "
                    f"{[p.line() for p in report.errors]}"
                )
                checked += 1
        path.write_bytes(original)
    assert checked == 2 * sum((pristine_copy / "blocks" / n).stat().st_size for n in names)
    assert verify(storage, check_data=False).ok


# -- the decoder: the previous reader as the oracle ----------------------------------------------


def _previous_timestamp(buf: bytes, pos: int) -> datetime:
    year, ordinal, _, seconds, nanos = struct.unpack_from("<iHHII", buf, pos)
    if not 1 <= ordinal <= 366 or seconds >= 86400 or nanos >= 1_000_000_000:
        raise FormatError("invalid timestamp")
    try:
        day = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=ordinal - 1)
    except (ValueError, OverflowError):
        raise FormatError(f"invalid timestamp year {year}") from None
    if day.year != year:
        raise FormatError(f"invalid timestamp: day {ordinal} of {year}")
    return day + timedelta(seconds=seconds, microseconds=nanos // 1000)


class _PreviousReader:
    """The table reader decode_block used before: every access through flatbuffers.Table."""

    def __init__(self, buf: bytes, pos: int) -> None:
        if not 0 <= pos <= len(buf) - 4:
            raise FormatError("table offset outside the buffer")
        self.buf = buf
        self.tab = Table(buf, pos)
        self.pos = pos
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        if not 0 <= vtable <= len(buf) - 4:
            raise FormatError("vtable offset outside the buffer")

    def _field(self, slot: int) -> int:
        return self.tab.Offset(4 + 2 * slot)

    def scalar(self, slot: int, fmt: str, default: Any = None) -> Any:
        o = self._field(slot)
        return default if not o else struct.unpack_from("<" + fmt, self.buf, self.pos + o)[0]

    def table(self, slot: int) -> _PreviousReader | None:
        o = self._field(slot)
        return None if not o else type(self)(self.buf, self.tab.Indirect(self.pos + o))

    def ubytes(self, slot: int) -> bytes | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self.tab.Vector(o), self.tab.VectorLen(o)
        if start + length > len(self.buf):
            raise FormatError("byte vector runs past the end of the buffer")
        return bytes(self.buf[start : start + length])

    def string(self, slot: int) -> str | None:
        raw = self.ubytes(slot)
        try:
            return None if raw is None else raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("string field is not valid UTF-8") from None

    def vector_tables(self, slot: int) -> list[_PreviousReader] | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self.tab.Vector(o), self.tab.VectorLen(o)
        if start + 4 * length > len(self.buf):
            raise FormatError("vector of tables runs past the end of the buffer")
        return [type(self)(self.buf, self.tab.Indirect(start + 4 * i)) for i in range(length)]

    def strings(self, slot: int) -> tuple[str, ...] | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self.tab.Vector(o), self.tab.VectorLen(o)
        if start + 4 * length > len(self.buf):
            raise FormatError("vector of strings runs past the end of the buffer")
        out = []
        for i in range(length):
            pos = self.tab.Indirect(start + 4 * i)
            (n,) = struct.unpack_from("<I", self.buf, pos)
            if pos + 4 + n > len(self.buf):
                raise FormatError("string runs past the end of the buffer")
            out.append(bytes(self.buf[pos + 4 : pos + 4 + n]).decode("utf-8"))
        return tuple(out)

    def timestamp(self, slot: int) -> datetime | None:
        o = self._field(slot)
        return None if not o else _previous_timestamp(self.buf, self.pos + o)


@contextlib.contextmanager
def _previous_reader() -> Iterator[None]:
    """decode_block with the previous table reader (every event reader goes through it)."""
    saved = codec._Reader
    codec._Reader = _PreviousReader  # type: ignore[misc]
    try:
        yield
    finally:
        codec._Reader = saved  # type: ignore[misc]


def _outcome(decode: Callable[[bytes], Any], data: bytes) -> Any:
    try:
        return decode(data)
    except FormatError:
        return FormatError


def _both(data: bytes) -> tuple[Any, Any]:
    fast = _outcome(decode_block, data)
    with _previous_reader():
        previous = _outcome(decode_block, data)
    return fast, previous


def test_the_oracle_is_the_previous_reader() -> None:
    """The swap really takes: the oracle's reader is the one decoding."""
    seen = []

    class Counting(_PreviousReader):
        def __init__(self, buf: bytes, pos: int) -> None:
            seen.append(pos)
            super().__init__(buf, pos)

    saved = codec._Reader
    codec._Reader = Counting  # type: ignore[misc]
    try:
        assert decode_block(encode_block(LINEAGE_BLOCK)) == LINEAGE_BLOCK
    finally:
        codec._Reader = saved  # type: ignore[misc]
    assert len(seen) > 5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=BLOCKS, data=st.data())
def test_decoder_agrees_with_the_previous_reader(block, data) -> None:
    stored = encode_block(block)
    fast, previous = _both(stored)
    assert fast == previous == block
    # damaged copies: one byte changed, or cut short; both readers accept or refuse alike
    for _ in range(8):
        i = data.draw(st.integers(0, len(stored) - 1))
        value = data.draw(st.integers(0, 255))
        changed = stored[:i] + bytes([value]) + stored[i + 1 :]
        fast, previous = _both(changed)
        assert fast == previous, f"byte {i} = {value}"
    cut = data.draw(st.integers(0, len(stored) - 1))
    assert _both(stored[:cut])[0] == _both(stored[:cut])[1]


def test_decoder_agrees_on_every_byte_of_a_lineage_block() -> None:
    stored = encode_block(LINEAGE_BLOCK)
    refused = 0
    for i in range(len(stored)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF, stored[i] ^ 0x04):
            changed = stored[:i] + bytes([value]) + stored[i + 1 :]
            fast, previous = _both(changed)
            assert fast == previous, f"byte {i} = {value}"
            refused += fast is FormatError
    assert refused > 0  # damage was seen, not only harmless changes


def test_a_vtable_running_past_the_buffer_is_refused_as_before() -> None:
    """A table whose vtable declares more fields than the buffer holds: both readers refuse
    exactly when a field beyond the buffer is asked for."""
    stored = bytearray(encode_block(LINEAGE_BLOCK))
    manifest_vtable = (
        struct.unpack_from("<I", stored, 0)[0]
        - struct.unpack_from("<i", stored, struct.unpack_from("<I", stored, 0)[0])[0]
    )
    for size in (4, 5, 6, 7, 8, 9, 10, 11, 12, 200, 0xFFFF):
        changed = bytearray(stored)
        struct.pack_into("<H", changed, manifest_vtable, size)
        fast, previous = _both(bytes(changed))
        assert fast == previous, size


def test_short_multihash_parse_agrees_with_the_varint_parse() -> None:
    digest = bytes(range(32))

    def general(raw: bytes) -> Any:
        try:
            code, pos = decode_varint(raw)
            length, pos = decode_varint(raw, pos)
            names = {0x1E: "blake3", 0x16: "sha3-256"}
            if code not in names or length != len(raw) - pos:
                return FormatError
            return Multihash(names[code], raw[pos:])
        except FormatError:
            return FormatError

    for algorithm in ("blake3", "sha3-256"):  # the short text form is the varint form
        value = Multihash(algorithm, digest)
        code = {"blake3": 0x1E, "sha3-256": 0x16}[algorithm]
        assert bytes(value) == encode_varint(code) + encode_varint(32) + digest
    for first in range(256):
        for second in range(256):
            for raw in (bytes([first, second]) + digest, bytes([first, second]) + digest[:31]):
                try:
                    parsed: Any = Multihash.from_bytes(raw)
                except FormatError:
                    parsed = FormatError
                assert parsed == general(raw), raw[:2].hex()


# -- the walk through one directory descriptor ----------------------------------------------------


class _OneReadPerBlock(LocalStorage):
    """The storage as verify used it before: each block read by its own read_block (no one
    pass over blocks/, no columns: every block decoded and checked on its own)."""

    @contextlib.contextmanager
    def block_reader(self) -> Iterator[Callable[[str], bytes]]:
        yield self.read_block

    def read_all_blocks(self, hashes: Hashes) -> None:
        return None


def _same_reports(root: Path) -> list[str]:
    fast = verify(LocalStorage(root), check_data=False)  # not open(): it wants blocks/
    slow = verify(_OneReadPerBlock(root), check_data=False)
    assert fast.problems == slow.problems
    assert (fast.head, fast.blocks_checked, fast.bytes_hashed) == (
        slow.head,
        slow.blocks_checked,
        slow.bytes_hashed,
    )
    return [p.rule for p in fast.errors]


def _chain_names(root: Path) -> list[str]:
    return [str(e.hash) for e in Dataset.open(root).blocks()]


def test_walk_reports_as_before_on_a_clean_chain(pristine_copy: Path) -> None:
    assert _same_reports(pristine_copy) == []


@pytest.mark.parametrize("position", [0, 2, -1])
def test_walk_reports_as_before_on_broken_chains(pristine_copy: Path, position: int) -> None:
    names = _chain_names(pristine_copy)
    target = pristine_copy / "blocks" / names[position]
    original = target.read_bytes()
    altered = original[:-1] + bytes([original[-1] ^ 1])
    cases: list[tuple[str, Callable[[], None], str]] = [
        ("missing", target.unlink, "block-missing"),
        ("altered", lambda: target.write_bytes(altered), "block-hash"),
        ("symlink", lambda: (target.unlink(), target.symlink_to("/etc/hostname")), ""),
        ("directory", lambda: (target.unlink(), target.mkdir()), "block-unreadable"),
        ("oversized", lambda: target.write_bytes(b"\0" * (MAX_BLOCK_BYTES + 1)), ""),
        ("not a block", lambda: target.write_bytes(b"not a flatbuffer"), "block-format"),
    ]
    for label, damage, rule in cases:
        damage()
        rules = _same_reports(pristine_copy)
        assert rules, label
        if rule:
            assert rule in rules, (label, rules)
        if target.is_dir() and not target.is_symlink():
            target.rmdir()
        else:
            target.unlink(missing_ok=True)
        target.write_bytes(original)
    assert _same_reports(pristine_copy) == []


def test_walk_reports_as_before_without_blocks_dir(pristine_copy: Path) -> None:
    shutil.rmtree(pristine_copy / "blocks")
    assert "block-missing" in _same_reports(pristine_copy)
    (pristine_copy / "elsewhere").mkdir()
    (pristine_copy / "blocks").symlink_to(pristine_copy / "elsewhere")
    assert _same_reports(pristine_copy)
