"""Helpers the tests share (fixtures live in conftest.py): a directory's snapshot, a block's
file name computed without odf_chain, a schema with a non-UTF-8 field name, and whether
permission bits stop this user."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import blake3
import pyarrow as pa

from odf_chain.events import SetDataSchema

Snapshot = dict[str, bytes | None]


def snapshot_tree(root: Path) -> Snapshot:
    """Every directory (value None) and file (value: its bytes) under ``root``, by relative path.

    Nothing is excluded: lock files, hidden staging directories and all.
    """
    out: Snapshot = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = path.read_bytes() if path.is_file() else None
    return out


def multihash_name(data: bytes, algorithm: str = "blake3") -> str:
    """The multibase (base16) multihash of ``data``, computed without odf_chain:
    ``f`` + hex(varint code, varint length 32, digest)."""
    if algorithm == "blake3":
        return "f1e20" + blake3.blake3(data).hexdigest()
    if algorithm == "sha3-256":
        return "f1620" + hashlib.sha3_256(data).hexdigest()
    raise ValueError(algorithm)


def non_utf8_schema(nested: bool) -> bytes:
    """A well-formed Arrow schema whose (possibly nested) field name is not UTF-8."""
    inner = pa.field("zq", pa.int64())
    schema = pa.schema([pa.field("s", pa.struct([inner]))]) if nested else pa.schema([inner])
    raw = SetDataSchema.from_arrow(schema).raw_arrow_schema
    assert raw.count(b"zq") == 1
    return raw.replace(b"zq", b"\xff\xfe")


def _permission_bits_apply() -> bool:
    """False for root (or anyone with CAP_DAC_OVERRIDE): chmod then stops nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        locked = Path(tmp) / "locked"
        locked.mkdir(mode=0o500)
        try:
            (locked / "probe").touch()
        except PermissionError:
            return True
        finally:
            locked.chmod(0o700)
        return False


PERMISSIONS = _permission_bits_apply()
