#!/usr/bin/env python3
"""Build a long chain fast, for benchmarks at ten million blocks: a few microseconds a block.

    python tools/quick_chain.py DIR N [--slice-less K]

``Dataset.create`` and ``set_schema`` write the Seed and the schema as any writer does. The
AddData blocks that follow (``N`` in all) are one real encoding (``codec.encode_block``) with
the fields that differ from block to block patched in place: the sequence number, the
predecessor's hash, the offsets, the slice's two hashes and its size. Their places in the bytes
are found by encoding the block again with one field changed at a time and comparing, and
checked: the block at every 65,536th place is encoded for real and must match byte for byte.
Every block is hashed and linked like any other, and ``verify`` checks every rule on them; what
is constant is their system time and watermark (which the rules allow to stay equal) and their
extra attributes. ``--slice-less K`` puts K AddData blocks without a slice after each one
with a slice (a watermark and a source state, what a poll that found nothing new writes), their
offsets carried over. Files are written without fsync (a scratch chain), the head set once at the
end. ``tools/bench_verify.py --quick`` and ``tools/bench_scale.py`` build their largest chains
with it: a million blocks built block by block with every rule run in memory takes 10-15
minutes here, ten million would take hours.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from datetime import timedelta
from pathlib import Path

import blake3
import pyarrow as pa

if __package__ in (None, ""):  # run as a script: the checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odf_chain.dataset import Dataset
from odf_chain.events import AddData, DataSlice, MetadataBlock, OffsetInterval, SourceState
from odf_chain.format.codec import encode_block
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.state import SOURCE_KEY
from odf_chain.storage import open_storage

ROWS = 50_000
SCHEMA = pa.schema([("event_time", pa.timestamp("ms", tz="UTC")), ("amount", pa.float64())])
_CODE = bytes(Multihash.digest(BLAKE3, b""))[:2]


def _digest(kind: bytes, i: int) -> bytes:
    return _CODE + blake3.blake3(kind + i.to_bytes(8, "little")).digest()


class _Template:
    """Block ``i``'s bytes: the real encoding of one block, its varying fields patched."""

    def __init__(self, moment, extra, shared=None, *, sliced: bool = True) -> None:
        self._moment, self._extra, self._shared, self._sliced = moment, extra, shared, sliced
        self.rows = ROWS if shared is None else 1
        self.FIELDS = ("seq", "prev", "prev_offset")
        if sliced:
            self.FIELDS += ("start", "end")
        if sliced and shared is None:
            self.FIELDS += ("logical", "physical", "size")
        # each field found by its own distinct value, changed alone to another
        base = self._probe(1)
        self.bytes = self.encode(base)
        self.places: dict[str, tuple[int, int]] = {}
        for name in self.FIELDS:
            changed = dict(base)
            changed[name] = self._probe(2)[name]
            other = self.encode(changed)
            if len(other) != len(self.bytes):
                raise RuntimeError(f"field {name} changes the block's length")
            diff = [k for k in range(len(other)) if other[k] != self.bytes[k]]
            raw = self.raw(name, base[name])
            start = self.bytes.find(raw)
            if not diff or start < 0 or not (start <= diff[0] and diff[-1] < start + len(raw)):
                raise RuntimeError(f"field {name} not found in the encoding")
            self.places[name] = (start, len(raw))

    def _probe(self, k: int) -> dict:
        """Values no two fields share (and ``k`` = 2 changes every one of them)."""
        v = self.values(3, _CODE + bytes([k] * 32))
        for n, name in enumerate(("seq", "prev_offset", "start", "end", "size")):
            if name in self.FIELDS:
                v[name] = int.from_bytes(bytes([16 * k + n + 1] * 7), "little")
        if "logical" in self.FIELDS:
            v["logical"] = _CODE + bytes([k + 100] * 32)
            v["physical"] = _CODE + bytes([k + 150] * 32)
        return v

    def values(self, i: int, prev: bytes) -> dict:
        rows = self.rows
        start = i * rows
        if self._shared is not None:  # every block names the one real slice
            return {
                "seq": i,
                "prev": prev,
                "prev_offset": start - 1,
                "start": start,
                "end": start + rows - 1,
                "logical": bytes(self._shared.logical_hash),
                "physical": bytes(self._shared.physical_hash),
                "size": self._shared.size,
            }
        return {
            "seq": i,
            "prev": prev,
            "prev_offset": start - 1,
            "start": start,
            "end": start + rows - 1,
            "logical": _digest(b"logical", i),
            "physical": _digest(b"physical", i),
            "size": 4_000_000 + i,
        }

    @staticmethod
    def raw(name: str, value) -> bytes:
        return value if isinstance(value, bytes) else struct.pack("<Q", value)

    def encode(self, v: dict) -> bytes:
        event = AddData(
            prev_offset=v["prev_offset"],
            new_data=DataSlice(
                logical_hash=Multihash.from_bytes(v["logical"]),
                physical_hash=Multihash.from_bytes(v["physical"]),
                offset_interval=OffsetInterval(v["start"], v["end"]),
                size=v["size"],
            )
            if self._sliced
            else None,
            new_watermark=self._moment,
            new_source_state=None if self._sliced else SourceState("poll", "odf/etag", "W/1"),
            extra=self._extra,
        )
        prev = Multihash.from_bytes(v["prev"])
        return encode_block(MetadataBlock(self._moment, prev, v["seq"], event))

    def patched(self, v: dict) -> bytes:
        out = bytearray(self.bytes)
        for name, (start, width) in self.places.items():
            out[start : start + width] = self.raw(name, v[name])
        return bytes(out)


def build(
    root: Path, n: int, *, report: bool = True, shared_slice: bool = False, slice_less: int = 0
) -> None:
    """A Seed, a schema and AddData blocks up to ``n`` blocks in all. ``shared_slice``: a
    real one-row slice first (``Dataset.write``), then every block names it with one-row
    offsets of its own (what ``tools/bench_scale.py`` reads); else 50,000-row offsets naming
    slices that are not there (a structural benchmark's chain). ``slice_less``: after each
    block with a slice, that many without one."""
    dataset = Dataset.create(root)
    shared = None
    if shared_slice:
        written = dataset.write(pa.table({"id": pa.array([0], pa.int64()), "v": ["x"]}))
        shared = written[-1].block.event.new_data
    else:
        dataset.set_schema(SCHEMA)
    state = dataset.refresh()
    first, moment = state.head, state.system_time + timedelta(hours=1)
    extra = {SOURCE_KEY: {"format": "parquet", "inputs": [{"uri": "s3://landing/sales/"}]}}
    templates = [_Template(moment, extra, shared), _Template(moment, extra, shared, sliced=False)]
    period = slice_less + 1
    done = 0 if shared is None else 1  # data blocks already written
    # the first data block by the encoder (no previous offset), then the template
    head = bytes(state.head)
    fd = os.open(root / "blocks", os.O_RDONLY | os.O_DIRECTORY)
    began = time.monotonic()
    try:
        for k in range(done, done + n - (state.sequence_number + 1)):
            seq = state.sequence_number + 1 + k - done
            template = templates[k % period != 0]
            # a slice-less block's prev_offset is the end of the slice before it
            v = template.values(k // period + (k % period != 0), head)
            v["seq"] = seq
            if k == 0:
                data = _first_block(template, v)
            else:
                data = template.patched(v)
                if k % 65_536 <= period and data != template.encode(v):
                    raise RuntimeError(f"block {seq}: the patched bytes differ from the encoding")
            head = _CODE + blake3.blake3(data).digest()
            name = "f" + head.hex()
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
            try:
                os.write(out, data)
            finally:
                os.close(out)
            if report and k % 500_000 == 0 and k > done:
                rate = k / (time.monotonic() - began)
                print(f"  {k:,} blocks, {rate:,.0f}/s", file=sys.stderr, flush=True)
    finally:
        os.close(fd)
    open_storage(root).compare_and_swap_head(str(first), str(Multihash.from_bytes(head)))


def _first_block(template: _Template, v: dict) -> bytes:
    """The first data block has no previous offset: encoded for real."""
    event = AddData(
        prev_offset=None,
        new_data=DataSlice(
            logical_hash=Multihash.from_bytes(v["logical"]),
            physical_hash=Multihash.from_bytes(v["physical"]),
            offset_interval=OffsetInterval(0, ROWS - 1),
            size=v["size"],
        ),
        new_watermark=template._moment,
        extra=template._extra,
    )
    prev = Multihash.from_bytes(v["prev"])
    return encode_block(MetadataBlock(template._moment, prev, v["seq"], event))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("blocks", type=lambda text: int(float(text)))
    parser.add_argument(
        "--slice-less", type=int, default=0, help="blocks without a slice after each with one"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    build(args.dir, args.blocks, slice_less=args.slice_less)
    print(f"built {args.blocks:,} blocks in {time.perf_counter() - started:.1f} s")
