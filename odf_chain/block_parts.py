"""What the walk keeps of one chunk of the pass over ``blocks/``: a :class:`Part`, made here or
in the pass's helper process.

A chunk of block files costs its reads and hashes, its decoding into columns and the parsing of
each block's ExtraAttributes JSON. When the helper only read and this process did the rest for
every chunk, this process did most of the work while the helper waited for chunks, and the JSON
went to a third process through one more pipe. Here the whole of a chunk's work is one step,
:func:`part_of`, done by whichever process takes the chunk (:mod:`odf_chain.storage.block_pass`
hands chunks out by speed), so the two cores share all of it; the helper sends back only what
is kept (about 200 bytes a block, not the blocks' 600), checked by :func:`parse` before it is
used. The helper runs this very file from the caller's own package tree, so both make the same
parts; a helper that fails in any way leaves its chunks to this process.
"""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

if __name__ == "__main__":  # the helper: this file's own package tree, as the caller has it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from odf_chain.format import extra_json
from odf_chain.format.columns import HASH_SIZE, BlockColumns, decode_columns
from odf_chain.storage.block_pass import Share, Worker, serve

_COLUMNS = [f.name for f in fields(BlockColumns)[:-2]]  # all but the texts and their rows
_HEADER = struct.Struct("<I")  # the size of a part's JSON header


@dataclass
class Part:
    """One chunk's blocks as the walk keeps them: per read file (``rows`` of them) its name's
    hash, whether the content hashes to it, its size and its columns, ExtraAttributes judged;
    the names left unread (see block_pass) and those read whose names are not canonical (by
    row in this part)."""

    arrays: dict[str, np.ndarray]
    unread: list[str]
    odd: list[tuple[int, str]]

    @property
    def rows(self) -> int:
        return len(self.arrays["hash_ok"])


def part_of(share: Share) -> Part:
    """Decode, judge and keep one chunk of the pass."""
    read = [i for i, content in enumerate(share.contents) if content is not None]
    unread = [share.names[i] for i, c in enumerate(share.contents) if c is None]
    names = [share.names[i] for i in read]
    hashes, canonical = name_hashes(names)
    odd = [(i, names[i]) for i in np.flatnonzero(~canonical).tolist()]
    contents = [share.contents[i] for i in read]
    columns = decode_columns(contents)
    columns = kept(columns.judged(extra_json.judge(columns.extras)))
    arrays = {
        "name_hashes": hashes,
        "hash_ok": np.array([share.matches[i] for i in read], bool),
        "sizes": np.fromiter(map(len, contents), np.uint32, len(contents)),
    }
    arrays |= {name: getattr(columns, name) for name in _COLUMNS}
    return Part(arrays, unread, odd)


def kept(columns: BlockColumns) -> BlockColumns:
    """What the pass keeps of a chunk's columns: all of them but the logical hash, of which
    the rules read the first byte only (its algorithm's code; the data checks read the block):
    33 bytes a block, 33 MB at a million."""
    return replace(columns, logical_hash=np.ascontiguousarray(columns.logical_hash[:, :1]))


def name_hashes(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The multihash bytes each of ``names`` spells (one row each), and whether it spells one
    in the canonical form (``f`` and lowercase hex; zeros otherwise)."""
    width = 1 + 2 * HASH_SIZE
    hashes = np.zeros((len(names), HASH_SIZE), np.uint8)
    canonical = np.zeros(len(names), bool)
    if all(len(n) == width and n[0] == "f" for n in names):  # one hex parse for all
        digits = "".join([n[1:] for n in names])
        try:
            digests = bytes.fromhex(digits)
        except ValueError:
            digests = b""
        if digests.hex() == digits:
            hashes[:] = np.frombuffer(digests, np.uint8).reshape(-1, HASH_SIZE)
            canonical[:] = True
            return hashes, canonical
    for i, name in enumerate(names):  # some name is not of the form: one by one
        if len(name) == width and name[0] == "f":
            try:
                digest = bytes.fromhex(name[1:])
            except ValueError:
                continue
            if digest.hex() == name[1:]:
                hashes[i] = np.frombuffer(digest, np.uint8)
                canonical[i] = True
    return hashes, canonical


def _shapes() -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each array's dtype and its shape past the rows, as :func:`part_of` makes them."""
    empty = part_of(Share([], [], []))
    return {k: (a.dtype.str, a.shape[1:]) for k, a in empty.arrays.items()}


SHAPES = _shapes()


def encode(part: Part) -> bytes:
    """A part as the helper sends it: a JSON header (names left unread, odd names, the row
    count), then every array's bytes in :data:`SHAPES` order."""
    header = json.dumps({"rows": part.rows, "unread": part.unread, "odd": part.odd}).encode()
    body = b"".join(np.ascontiguousarray(part.arrays[k]).tobytes() for k in SHAPES)
    return _HEADER.pack(len(header)) + header + body


def parse(raw: bytes, names: list[str]) -> Part | None:
    """The part the helper sent for the chunk ``names``; None if it is not one: wrong sizes,
    names that are not the chunk's, rows that do not add up."""
    try:
        (size,) = _HEADER.unpack_from(raw, 0)
        header = json.loads(raw[_HEADER.size : _HEADER.size + size])
        rows, unread = header["rows"], header["unread"]
        odd = [(int(i), str(n)) for i, n in header["odd"]]
    except (struct.error, ValueError, KeyError, TypeError):
        return None
    if (
        not isinstance(rows, int)
        or not isinstance(unread, list)
        or rows + len(unread) != len(names)
    ):
        return None
    if not set(unread) <= set(names) or any(not 0 <= i < rows for i, _ in odd):
        return None
    arrays, at = {}, _HEADER.size + size
    for key, (dtype, tail) in SHAPES.items():
        count = rows * int(np.prod(tail, dtype=np.int64))
        width = np.dtype(dtype).itemsize * count
        if at + width > len(raw):
            return None
        arrays[key] = np.frombuffer(raw, dtype, count, at).reshape((rows, *tail)).copy()
        at += width
    return Part(arrays, unread, odd) if at == len(raw) else None


def worker() -> Worker:
    """The pass's work per chunk: :func:`part_of`, here or in the helper (this file, told the
    JSON parser's limit on integer digits as this process has it)."""
    return Worker(
        script=__file__,
        arguments=[str(sys.get_int_max_str_digits())],
        own=lambda share: part_of(share),
        parse=parse,
    )


def _main(argv: list[str]) -> None:
    sys.set_int_max_str_digits(int(argv[0]))  # the caller's limit, as its decoder has it
    serve(argv[1:], lambda share: encode(part_of(share)))


if __name__ == "__main__":
    from odf_chain import block_parts  # the module, not this __main__: one copy of SHAPES

    block_parts._main(sys.argv[1:])
