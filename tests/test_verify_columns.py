"""Verify's bulk path (blocks decoded as columns, rules run a run at a time) is the block by block
verify, only faster.

- The column decoder vouches only for blocks ``decode_block`` decodes, and then gives exactly
  its values: on varied blocks (hypothesis), on every single-byte change of an AddData block and
  on truncations. It does vouch for the plain shape (else the fast path would never be taken).
- Verify reports exactly the same problems, block count and bytes hashed with the bulk path as
  without it (a storage that offers no one-pass read, as an object store), on chains that break
  each rule at the start, middle and end of a run of AddData blocks, across a snapshot
  boundary, with non-plain blocks in between, and with ExtraAttributes the decoder refuses.
- ``state.apply_plain_run`` is the fold of ``state.apply`` over the same blocks.
- The helper processes (reading a share of the block files; judging ExtraAttributes) answer
  exactly what the in-process code answers, on damaged directories too.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from odf_chain import block_parts, chain, helper_process, replay, walked
from odf_chain.block_parts import Part
from odf_chain.chain_fold import refold
from odf_chain.chain_walk import walk_chain
from odf_chain.dataset import Dataset
from odf_chain.errors import FormatError
from odf_chain.events import (
    AddData,
    Checkpoint,
    DataSlice,
    MetadataBlock,
    OffsetInterval,
    Seed,
    SetInfo,
    SourceState,
)
from odf_chain.format import codec, extra_json
from odf_chain.format.codec import decode_block, encode_block
from odf_chain.format.columns import decode_columns
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash
from odf_chain.index.read import open_index, rebuild
from odf_chain.index.records import SNAPSHOT_INTERVAL
from odf_chain.rules import plain_run_passes
from odf_chain.state import EMPTY, TRANSACTION_KEY, apply, apply_plain_run
from odf_chain.storage import block_pass
from odf_chain.storage.base import MAX_BLOCK_BYTES
from odf_chain.storage.block_pass import Hashes
from odf_chain.storage.local import LocalStorage
from odf_chain.verify import verify
from odf_chain.walked import BLOCK_NAMES, BlockFiles
from tests.test_codec import ADD_DATA, BLOCKS, JSON_OBJECTS, TIMES

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


# -- the column decoder against decode_block -------------------------------------------------------


def _decoded_values(block: MetadataBlock) -> tuple:
    event = block.event
    assert isinstance(event, AddData)
    data = event.new_data
    extra = event.extra
    return (
        block.sequence_number,
        _micros(block.system_time),
        None if block.prev_block_hash is None else bytes(block.prev_block_hash),
        event.prev_offset,
        None if data is None else data.offset_interval.start,
        None if data is None else data.offset_interval.end,
        None if data is None else data.size,
        None if data is None else bytes(data.logical_hash),
        None if data is None else bytes(data.physical_hash),
        None if event.new_watermark is None else _micros(event.new_watermark),
        extra is not None and TRANSACTION_KEY in extra,
    )


def _column_values(blocks: list[bytes]) -> list[tuple | None]:
    """Each block's values as the columns have them, or None where they do not vouch for it."""
    raw = decode_columns(blocks)
    c = raw.judged(extra_json.judge(raw.extras))
    out: list[tuple | None] = []
    for i in range(len(blocks)):
        if not c.plain[i]:
            out.append(None)
            continue
        sliced = bool(c.has_data[i])
        if not sliced:  # the columns of a missing slice are zeros, which the rules rely on
            assert c.start[i] == c.end[i] == c.size[i] == 0
        out.append(
            (
                int(c.sequence_number[i]),
                int(c.system_time_us[i]),
                c.prev_hash[i].tobytes() if c.has_prev[i] else None,
                int(c.prev_offset[i]) if c.has_prev_offset[i] else None,
                int(c.start[i]) if sliced else None,
                int(c.end[i]) if sliced else None,
                int(c.size[i]) if sliced else None,
                c.logical_hash[i].tobytes() if sliced else None,
                c.physical_hash[i].tobytes() if sliced else None,
                int(c.watermark_us[i]) if c.has_watermark[i] else None,
                bool(c.has_transaction[i]),
            )
        )
    return out


def _agree(blocks: list[bytes]) -> list[bool]:
    """Check every block; return which ones the columns vouched for."""
    vouched = []
    for data, values in zip(blocks, _column_values(blocks), strict=True):
        if values is None:
            vouched.append(False)
            continue
        decoded = decode_block(data)  # must not raise: the columns vouched for the block
        assert _decoded_values(decoded) == values
        vouched.append(True)
    return vouched


def _encode(block: MetadataBlock, version: int) -> bytes:
    """The current layout, or the legacy one (manifest version 2: Timestamps unaligned)."""
    return encode_block(block) if version == 3 else codec._encode_legacy_v2(block)


def _is_plain_shape(block: MetadataBlock) -> bool:
    event = block.event
    return (
        isinstance(event, AddData)
        and event.prev_checkpoint is None
        and event.new_checkpoint is None
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        BLOCKS | st.builds(MetadataBlock, TIMES, st.none(), st.integers(0, 9), ADD_DATA),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([2, 3]),
)
def test_columns_agree_with_the_decoder_on_varied_blocks(blocks, version) -> None:
    encoded = [_encode(b, version) for b in blocks]
    vouched = _agree(encoded)
    for block, plain in zip(blocks, vouched, strict=True):
        assert plain == _is_plain_shape(block), block


def _plain_block(extra: dict | None = None, **changes) -> MetadataBlock:
    event = AddData(
        prev_offset=99,
        new_data=DataSlice(
            Multihash.digest(BLAKE3, b"l"),
            Multihash.digest(BLAKE3, b"p"),
            OffsetInterval(100, 149),
            4096,
        ),
        new_watermark=datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        extra={"odf-chain.dev/source": {"uri": "s3://b/k.parquet", "size": 12}}
        if extra is None
        else extra,
    )
    return MetadataBlock(
        datetime(2031, 5, 6, 8, tzinfo=UTC),
        Multihash.digest(BLAKE3, b"prev"),
        17,
        replace(event, **changes),
    )


@pytest.mark.parametrize("version", [2, 3])
def test_every_single_byte_change_of_a_plain_block_is_decoded_as_the_decoder_does(version) -> None:
    original = _encode(_plain_block(), version)
    variants = [original]
    for i in range(len(original)):
        for flip in (0x01, 0x80, 0xFF):
            changed = bytearray(original)
            changed[i] ^= flip
            variants.append(bytes(changed))
    variants += [original[:n] for n in range(len(original))]  # every truncation
    vouched = _agree(variants)
    assert vouched[0]  # the original is plain
    assert 0 < sum(vouched) < len(variants)  # many changes are values, many break the layout


def test_columns_vouch_for_the_plain_shape_and_for_nothing_else() -> None:
    plain = [
        _plain_block(),
        _plain_block(extra={}),
        _plain_block(prev_offset=None, new_watermark=None, extra={"a": [1, {"b": None}]}),
        _plain_block(extra={TRANSACTION_KEY: {"app_id": "job", "version": 3}}),
        replace(_plain_block(), prev_block_hash=None, sequence_number=0),
        replace(_plain_block(), event=replace(_plain_block().event, extra=None)),
        _plain_block(new_source_state=SourceState("poll", "odf/etag", "\u00e9\u2603")),
        _plain_block(new_source_state=SourceState(value="v")),
        _plain_block(new_data=None),  # a poll that found nothing: its watermark, its state
        _plain_block(new_data=None, new_watermark=None, prev_offset=None, extra={}),
    ]
    other = [
        _plain_block(prev_checkpoint=Multihash.digest(BLAKE3, b"c")),
        _plain_block(new_checkpoint=Checkpoint(Multihash.digest(BLAKE3, b"c"), 1)),
        replace(_plain_block(), event=SetInfo(description="x")),
        _plain_block(extra=_nested(extra_json.MAX_DEPTH + 1)),  # the decoder decides
    ]
    assert _agree([encode_block(b) for b in plain]) == [True] * len(plain)
    assert _agree([encode_block(b) for b in other]) == [False] * len(other)
    assert _agree([encode_block(_plain_block(extra=_nested(extra_json.MAX_DEPTH)))]) == [True]


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


EXTRA = {"odf-chain.dev/src": 1234567}
# Same-length rewrites of ExtraAttributes text (every offset in the block stays valid) that the
# block decoder refuses.
REFUSED_TEXTS = {
    "an array": lambda t: b"[" + t[1:-1].replace(b":", b",") + b"]",
    "cut short": lambda t: t[:-1] + b" ",
    "NaN": lambda t: t.replace(b"1234567", b"NaN4567"),
    "not UTF-8": lambda t: t.replace(b"1234567", b'"\xff\xfe456"'),
}


@pytest.mark.parametrize("where", ["source_name", "kind", "value"])
def test_a_source_state_string_that_is_not_utf8_is_not_vouched_for(where: str) -> None:
    data = encode_block(_plain_block(new_source_state=SourceState(**{where: "abcd"})))
    changed = data.replace(b"abcd", b"ab\xc3(")
    with pytest.raises(FormatError):
        decode_block(changed)
    assert _agree([data, changed, data]) == [True, False, True]


def _refuse_extra(data: bytes, how: str) -> bytes:
    start = data.index(b'{"odf-chain.dev/src"')
    text = data[start : data.index(b"}", start) + 1]
    new = REFUSED_TEXTS[how](text)
    assert len(new) == len(text) and data.count(text) == 1
    return data.replace(text, new)


@pytest.mark.parametrize("how", list(REFUSED_TEXTS))
def test_extra_attributes_the_decoder_refuses_are_not_vouched_for(how: str) -> None:
    data = encode_block(_plain_block(extra=EXTRA))
    changed = _refuse_extra(data, how)
    with pytest.raises(FormatError):
        decode_block(changed)
    assert _agree([data, changed]) == [True, False]


# -- verify with and without the bulk path ---------------------------------------------------------


class _ByName(LocalStorage):
    """The same dataset read block by block, as on an object store (no one-pass read)."""

    def read_all_blocks(self, hashes: Hashes) -> None:
        return None


def _compare(root: Path) -> list[str]:
    bulk = verify(LocalStorage(root), check_data=False)
    by_name = verify(_ByName(root), check_data=False)
    assert [p.line() for p in bulk.problems] == [p.line() for p in by_name.problems]
    assert (bulk.head, bulk.blocks_checked, bulk.bytes_hashed) == (
        by_name.head,
        by_name.blocks_checked,
        by_name.bytes_hashed,
    )
    return sorted({p.rule for p in bulk.errors})


BASE_TIME = datetime(2030, 1, 1, tzinfo=UTC)
ROWS = 10


def _run_events(
    count: int, algorithm: str = BLAKE3, quiet: frozenset[int] | set[int] = frozenset()
) -> list[AddData]:
    """``count`` AddData events as an hourly ingest writes them, offsets from 0; those at the
    positions ``quiet`` found nothing new (no slice: the watermark and a source state)."""
    events = []
    following = 0  # the next offset
    for i in range(count):
        data = None
        if i not in quiet:
            data = DataSlice(
                Multihash.digest(algorithm, b"logical %d" % i),
                Multihash.digest(algorithm, b"physical %d" % i),
                OffsetInterval(following, following + ROWS - 1),
                1000 + i,
            )
        events.append(
            AddData(
                prev_offset=None if following == 0 else following - 1,
                new_data=data,
                new_watermark=BASE_TIME + timedelta(hours=i),
                new_source_state=SourceState("poll", "odf/etag", f"v{i}") if data is None else None,
                extra={"odf-chain.dev/source": {"inputs": [{"uri": f"s3://in/{i}.csv"}]}},
            )
        )
        following += 0 if data is None else ROWS
    return events


def _write_chain(
    root: Path,
    events: list,
    times: dict[int, datetime] | None = None,
    numbers: dict[int, int] | None = None,
    algorithm: str = BLAKE3,
    patch: Callable[[int, bytes], bytes] = lambda i, data: data,
    schema: bool = True,
    dataset: Dataset | None = None,
) -> None:
    """A Seed and a schema (unless not ``schema``) written by the library (or ``dataset`` as
    it is), then ``events`` as raw blocks (no rule checked, no fsync), each linked to the one
    before; ``times``/``numbers`` override by position, and ``patch`` changes a block's bytes
    before they are hashed and linked."""
    if dataset is None:
        dataset = Dataset.create(root, algorithm)
        if schema:
            dataset.set_schema(pa.schema([("v", pa.int64())]))
    state = dataset.refresh()
    head = state.head
    seq = state.sequence_number
    for i, event in enumerate(events):
        seq += 1
        block = MetadataBlock(
            (times or {}).get(i, BASE_TIME + timedelta(hours=i, minutes=5)),
            head,
            (numbers or {}).get(i, seq),
            event,
        )
        data = patch(i, encode_block(block))
        head = Multihash.digest(algorithm, data)
        (root / "blocks" / str(head)).write_bytes(data)
    LocalStorage(root).compare_and_swap_head(str(state.head), str(head))


def _mutations(n: int) -> dict[str, Callable[[list, int], tuple[list, dict, dict]]]:
    """Ways to break (or merely vary) the block at position k of a run of ``n`` events."""

    def event_change(**changes):
        def mutate(events, k):
            events = list(events)
            events[k] = replace(events[k], **changes)
            return events, {}, {}

        return mutate

    def data_change(**changes):
        def mutate(events, k):
            events = list(events)
            events[k] = replace(events[k], new_data=replace(events[k].new_data, **changes))
            return events, {}, {}

        return mutate

    def transaction(value, also_next=False):
        def mutate(events, k):
            events = list(events)
            for j in (k, k + 1) if also_next and k + 1 < n else (k,):
                events[j] = replace(events[j], extra={TRANSACTION_KEY: value})
            return events, {}, {}

        return mutate

    def insert(event):
        def mutate(events, k):
            return [*events[:k], event, *events[k:]], {}, {}

        return mutate

    return {
        "nothing": lambda events, k: (events, {}, {}),
        "sequence number +1": lambda events, k: (events, {}, {k: 2 + k + 1}),
        "sequence number repeated": lambda events, k: (events, {}, {k: 2 + k - 1}),
        "system time back": lambda events, k: (
            events,
            {
                k: BASE_TIME + timedelta(hours=k - 1, minutes=4)
                if k
                else datetime(2000, 1, 1, tzinfo=UTC)
            },
            {},
        ),
        "system time same": lambda events, k: (
            events,
            {k: BASE_TIME + timedelta(hours=k - 1, minutes=5)},
            {},
        ),
        "prev_offset missing": event_change(prev_offset=None),
        "prev_offset off": event_change(prev_offset=12345),
        "start gap": lambda events, k: data_change(
            offset_interval=OffsetInterval(_next(events[k]) + 1, _next(events[k]) + ROWS - 1)
        )(events, k),
        "end before start": lambda events, k: data_change(
            offset_interval=OffsetInterval(_next(events[k]) + 1, _next(events[k]))
        )(events, k),
        "huge offsets": lambda events, k: data_change(
            offset_interval=OffsetInterval(_next(events[k]), 2**64 - 1)
        )(events, k),
        "watermark dropped": event_change(new_watermark=None),
        "watermark back": lambda events, k: event_change(
            new_watermark=BASE_TIME + timedelta(hours=k - 2)
        )(events, k),
        "logical hash sha3": data_change(logical_hash=Multihash.digest(SHA3_256, b"x")),
        "physical hash sha3": data_change(physical_hash=Multihash.digest(SHA3_256, b"x")),
        "transaction": transaction({"app_id": "job", "version": 1}),
        "transaction repeated": transaction({"app_id": "job", "version": 1}, also_next=True),
        "transaction malformed": transaction({"app_id": "job", "version": "one"}),
        "checkpoint": event_change(new_checkpoint=Checkpoint(Multihash.digest(BLAKE3, b"c"), 9)),
        "source state": event_change(new_source_state=SourceState("src", "etag", "v1")),
        "no data": event_change(new_data=None),
        "new data": lambda events, k: event_change(
            new_data=DataSlice(
                Multihash.digest(BLAKE3, b"l"),
                Multihash.digest(BLAKE3, b"p"),
                OffsetInterval(_next(events[k]), _next(events[k]) + ROWS - 1),
                10,
            )
        )(events, k),
        "info between": insert(SetInfo(description="between")),
        "second seed": insert(Seed(DatasetId(bytes(32)))),
    }


def _next(event: AddData) -> int:
    """The offset the event's slice starts at (or would)."""
    return 0 if event.prev_offset is None else event.prev_offset + 1


N = 24
_DATA_MUTATIONS = {
    "start gap",
    "end before start",
    "huge offsets",
    "logical hash sha3",
    "physical hash sha3",
    "no data",
}


@pytest.mark.parametrize(
    ("around", "mutation"),
    [
        (around, mutation)
        for around in ("slices", "slice-less neighbours", "slice-less")
        for mutation in _mutations(N)
        if around != "slice-less" or mutation not in _DATA_MUTATIONS  # it has no slice to change
    ],
)
@pytest.mark.parametrize("k", [0, 1, N // 2, N - 1])
def test_bulk_verify_reports_what_block_by_block_verify_reports(
    tmp_path: Path, mutation: str, k: int, around: str
) -> None:
    """Each mutation of block ``k`` in a run of AddData that all add a slice, or with blocks
    without one (a third of them, and k's neighbours), or of such a block."""
    quiet = set() if around == "slices" else {i for i in range(N) if i % 3 == 2}
    if around == "slice-less neighbours":
        quiet = (quiet | {k - 1, k + 1}) - {k}
    elif around == "slice-less":
        quiet.add(k)
    events, times, numbers = _mutations(N)[mutation](_run_events(N, quiet=quiet), k)
    _write_chain(tmp_path / "ds", events, times, numbers)
    rules = _compare(tmp_path / "ds")
    # changes that break no rule: the rest break one, in both
    valid = {"nothing", "info between", "system time same", "transaction", "source state"}
    if k == 0:  # no watermark is set before the first AddData
        valid |= {"watermark dropped", "watermark back"}
    if all(i in quiet for i in range(k)):  # no slice before it: it has no prev_offset
        valid.add("prev_offset missing")
    if k == N - 1:  # nothing after the last block to hold it to what it promised
        valid |= {"huge offsets", "transaction repeated", "checkpoint", "no data", "new data"}
    if around != "slice-less":  # a slice in its place, from where the old one started
        valid.add("new data")
    assert bool(rules) == (mutation not in valid), (mutation, rules)


def _fork(root: Path, position: int, copies: int = 1) -> None:
    """Blocks beside the chain's block at ``position`` (0: the Seed): the same predecessor,
    sequence number and time, other data (what writers that lost the race leave behind)."""
    entry = Dataset.open(root).blocks()[position]
    for n in range(copies):
        event = replace(
            entry.block.event,
            new_data=replace(
                entry.block.event.new_data,
                physical_hash=Multihash.digest(BLAKE3, b"lost %d %d" % (position, n)),
            ),
        )
        data = encode_block(replace(entry.block, event=event))
        (root / "blocks" / str(Multihash.digest(BLAKE3, data))).write_bytes(data)


def test_the_walk_takes_a_run_whole_and_stops_at_forks(tmp_path: Path) -> None:
    """The walk leaps over runs of plain blocks (each naming the next as its predecessor, by
    sequence number): a clean chain is one run; a fork (blocks sharing a sequence number)
    cuts it, and verify reports what it reports block by block."""
    clean = tmp_path / "clean"
    _write_chain(clean, _run_events(N))
    clean_storage = LocalStorage(clean)
    runs = BlockFiles(clean_storage.read_all_blocks(BLOCK_NAMES), clean_storage.read_block).runs()
    assert len(runs.order) == N and runs.run_end[0] == N - 1
    assert [int(runs.run_end[at]) for at in range(N)] == [N - 1] * N

    forked = tmp_path / "forked"
    _write_chain(forked, _run_events(N))
    for position, copies in ((3, 1), (4 + N // 2, 3), (N + 1, 2)):  # the head's too
        _fork(forked, position, copies)
    forked_storage = LocalStorage(forked)
    files = BlockFiles(forked_storage.read_all_blocks(BLOCK_NAMES), forked_storage.read_block)
    runs = files.runs()
    assert len(runs.order) == N + 6
    # every block's predecessor row, inside a run or at its end (a fork): the row named by it
    named = {files.name(k): k for k in range(len(files))}
    for k in runs.order.tolist():
        assert runs.prev[k] == named.get(files.prev_name(k), -1)  # type: ignore[arg-type]
    assert (runs.prev[runs.order] >= 0).all()  # every predecessor was read, rightly named
    assert len(np.unique(runs.run_end)) >= 4  # each fork cuts the run at least once
    assert _compare(forked) == []
    report = verify(LocalStorage(forked), check_data=False)
    assert report.blocks_checked == N + 2
    assert [w.rule for w in report.warnings] == ["orphan-block"] * 6


def test_entries_of_blocks_that_are_not_files_are_reported_from_the_one_listing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ds"
    _write_chain(root, _run_events(N))
    blocks = root / "blocks"
    os.mkfifo(blocks / ("f1e20" + "ab" * 32))
    (blocks / "elsewhere").symlink_to(tmp_path)
    (blocks / "folder").mkdir()
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "link").symlink_to(tmp_path)
    assert _compare(root) == []
    report = verify(LocalStorage(root), check_data=False)
    assert [(w.path, w.message.split(")")[0]) for w in report.warnings] == [
        ("blocks/elsewhere", "not a regular file (a symlink"),
        (f"blocks/f1e20{'ab' * 32}", "not a regular file (a FIFO"),
        ("blocks/folder", "not a regular file (a directory"),
        ("data/link", "not a regular file (a symlink"),
    ]


def test_bulk_verify_across_snapshot_places(tmp_path: Path) -> None:
    n = 2 * SNAPSHOT_INTERVAL + 30
    for k in (
        SNAPSHOT_INTERVAL - 2,
        SNAPSHOT_INTERVAL - 1,
        SNAPSHOT_INTERVAL,
        2 * SNAPSHOT_INTERVAL - 1,
    ):
        root = tmp_path / f"ds{k}"
        events = _run_events(n)
        events[k] = replace(events[k], prev_offset=7)
        _write_chain(root, events)
        assert _compare(root) == ["offsets"]
    clean = tmp_path / "clean"
    _write_chain(clean, _run_events(n))
    assert _compare(clean) == []


def test_bulk_verify_of_a_sha3_chain(tmp_path: Path) -> None:
    _write_chain(tmp_path / "ds", _run_events(40, SHA3_256), algorithm=SHA3_256)
    assert _compare(tmp_path / "ds") == []


@pytest.mark.parametrize("how", list(REFUSED_TEXTS))
def test_bulk_verify_when_extra_attributes_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    events = _run_events(30)
    events[10] = replace(events[10], extra=EXTRA)
    _write_chain(
        tmp_path / "ds", events, patch=lambda i, data: _refuse_extra(data, how) if i == 10 else data
    )
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 4)
    for helper_min in (10**9, 1):  # judged in-process, then by the helper process
        monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", helper_min)
        assert "block-format" in _compare(tmp_path / "ds")


QUIET_RUNS = {
    "every block adds a slice": set(),
    "some blocks add none": {0, 1, 7, 8, 9, 20, 49},
    "none before the first slice": set(range(30)),
    "none after the last slice": set(range(3, 50)),
    "no block adds a slice": set(range(50)),
}


@pytest.mark.parametrize("quiet", list(QUIET_RUNS))
def test_apply_plain_run_is_the_fold_of_apply(tmp_path: Path, quiet: str) -> None:
    root = tmp_path / "ds"
    _write_chain(root, _run_events(50, quiet=QUIET_RUNS[quiet]))
    entries = list(
        reversed(list(chain.walk_back(LocalStorage(root), chain.read_head(LocalStorage(root)))))
    )
    state = EMPTY
    for entry in entries[:2]:
        state = chain.advance(state, entry.block, entry.hash)
    run_blocks = [encode_block(e.block) for e in entries[2:]]
    columns = decode_columns(run_blocks)
    columns = columns.judged(extra_json.judge(columns.extras))
    hashes = np.array([list(bytes(e.hash)) for e in entries[2:]], np.uint8)
    assert plain_run_passes(state, columns, hashes) == 50
    folded = state
    for entry in entries[2:]:
        folded = apply(folded, entry.block, entry.hash)
    assert apply_plain_run(state, columns, hashes) == folded
    assert plain_run_passes(EMPTY, columns, hashes) == 0  # no Seed before: the rules decide
    for k in (0, 25, 49):  # one run split in two: the second from the first's state
        first = apply_plain_run(state, columns.rows(0, k + 1), hashes[: k + 1])
        assert plain_run_passes(first, columns.rows(k + 1, 50), hashes[k + 1 :]) == 49 - k
        if k < 49:
            assert apply_plain_run(first, columns.rows(k + 1, 50), hashes[k + 1 :]) == folded


def test_blocks_without_a_slice_are_verified_in_bulk(tmp_path: Path) -> None:
    """A polling ingest that finds nothing new writes AddData without a slice, again and again:
    the walk keeps them as columns (not one decoded block each), and what the index, the data
    checks and the listing of data files take as "blocks with a slice" leaves them out."""
    root = tmp_path / "ds"
    quiet = {i for i in range(200) if i % 4}
    _write_chain(root, _run_events(200, quiet=quiet))
    storage = LocalStorage(root)
    walk = walk_chain(storage, verify(storage, check_data=False))
    assert walk.complete and len(walk.chain) == 202
    assert [i for i, _ in walk.chain.decoded()] == [0, 1]  # the Seed and the schema only
    assert list(walk.chain.with_slices()) == [2 + i for i in range(200) if i not in quiet]
    assert len(walk.chain.slice_names()) == 50
    assert _compare(root) == []
    report = verify(storage, check_data=False)
    assert report.ok and report.blocks_checked == 202
    shutil.rmtree(root / "info", ignore_errors=True)
    rebuild(storage, save=True)  # in bulk: from the walk, by its fold
    state = Dataset.open(root).state
    assert (state.num_slices, state.num_records, state.last_offset) == (50, 500, 499)
    assert state.data_size == sum(1000 + i for i in range(200) if i not in quiet)
    index = open_index(storage, chain.read_head(storage))  # the one the rebuild wrote
    assert index.how == "checked" and index.head == state
    last_slice = 2 + max(i for i in range(200) if i not in quiet)
    assert index.pointers.data.sequence_number == last_slice
    assert index.pointers.watermark.sequence_number == 201
    listed = replay._bulk_slices(storage, chain.read_head(storage), state)  # no fallback
    assert [s.sequence_number for s in listed] == list(walk.chain.with_slices())
    assert [s.data.offset_interval.start for s in listed] == list(range(0, 500, ROWS))


# -- the helper processes ----------------------------------------------------------------------


def test_block_pass_helper_reads_what_the_parent_reads(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "ds"
    _write_chain(root, _run_events(60))
    blocks = root / "blocks"
    names = sorted(p.name for p in blocks.iterdir())
    (blocks / names[3]).write_bytes(b"altered")  # a wrong hash
    (blocks / names[5]).unlink()
    (blocks / names[5]).symlink_to(blocks / names[6])  # never followed
    (blocks / names[7]).unlink()
    os.mkfifo(blocks / names[7])  # never waited on
    (blocks / names[9]).write_bytes(b"\0" * (MAX_BLOCK_BYTES + 1))  # oversized
    (blocks / "notes.txt").write_bytes(b"x")  # not a block name
    storage = LocalStorage(root)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 10**9)
    found = storage.read_all_blocks(BLOCK_NAMES)
    assert found is not None
    alone = found.all()
    with pytest.raises(RuntimeError):  # a pass is read once
        found.all()
    # chunks of 4 names, the helper from the first: it takes every chunk while it has fewer
    # than HELPER_BACKLOG waiting, this process the others
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 4)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 2)
    for backlog in (1, 2, 1000):
        monkeypatch.setattr(block_pass, "HELPER_BACKLOG", backlog)
        shared = storage.read_all_blocks(BLOCK_NAMES)
        assert shared is not None and shared.all() == alone
    assert alone[names[3]] == (b"altered", False)
    assert alone[names[9]] == (None, False)  # left to be read by name, which says why
    assert {names[5], names[7], "notes.txt"}.isdisjoint(alone)  # not listed as block files
    assert sum(ok for _, ok in alone.values()) == len(names) - 4
    assert _compare(root)  # and verify reports the damage the same both ways


def test_block_pass_answer_is_checked() -> None:
    header = struct.Struct("<BI")
    good = header.pack(0, 3) + header.pack(2, 0)
    assert block_pass._parse_frame(good, 2) == [(0, 3), (2, 0)]
    for bad in (good[:-1], good + b"x", good[:4], header.pack(7, 0) * 2, header.pack(2, 1) * 2):
        assert block_pass._parse_frame(bad, 2) is None


def test_a_helper_that_fails_mid_pass_leaves_its_chunks_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper killed after its first answer: every chunk it had not answered is read here,
    and the pass hands out exactly what a pass without a helper does."""
    root = tmp_path / "ds"
    _write_chain(root, _run_events(60))
    storage = LocalStorage(root)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 10**9)
    alone = storage.read_all_blocks(BLOCK_NAMES).all()  # type: ignore[union-attr]
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 4)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 2)
    monkeypatch.setattr(block_pass, "HELPER_BACKLOG", 1000)  # every chunk after the first
    started = block_pass._Helper.__init__

    def start(helper, *args) -> None:  # its first answer taken; then the process is killed
        started(helper, *args)
        parse = helper._parse

        def answer_then_die(raw: bytes, names: list[str]) -> object:
            made = parse(raw, names)
            helper._proc.kill()
            return made

        helper._parse = answer_then_die

    monkeypatch.setattr(block_pass._Helper, "__init__", start)
    found = storage.read_all_blocks(BLOCK_NAMES)
    assert found is not None
    assert found.all() == alone
    assert _compare(root) == []  # verify's parts too: the chunks left are made here


TEXTS = [
    b"{}",
    b'{"a": [1, 2, {"b": null}]}',
    b"[]",
    b"12",
    b'"text"',
    b"{",
    b'{"a": NaN}',
    b'{"a": 1} {"b": 2}',
    b' {"a": 1} \n',
    b'{"a": "\xff"}',
    b'{"odf-chain.dev/transaction": {"app_id": "x", "version": 1}}',
    b'{"odf-chain.dev/transaction": null}',
    json.dumps(_nested(extra_json.MAX_DEPTH)).encode(),
    json.dumps(_nested(extra_json.MAX_DEPTH + 1)).encode(),
    b"[" * 5000 + b"]" * 5000,
]


def test_extra_json_verdicts_follow_the_decoder() -> None:
    verdicts = extra_json.judge(TEXTS)
    for text, verdict in zip(TEXTS, verdicts, strict=True):
        try:
            value = json.loads(text.decode("utf-8"))
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict):
            assert verdict == extra_json.REFUSED, text[:40]
        elif TRANSACTION_KEY in value:
            assert verdict == extra_json.TRANSACTION, text[:40]
        else:
            assert verdict in (extra_json.OBJECT, extra_json.REFUSED), text[:40]
    assert verdicts[-2] == extra_json.REFUSED and verdicts[-3] == extra_json.OBJECT


JSON_EDGES = [
    "",
    " ",
    "\ufeff{}",
    " {} ",
    "\t{}\n\r",
    "{} x",
    "{}{}",
    "{} \u00a0",
    "[1,]",
    '{"a":1,}',
    "01",
    "1e999",
    "-0",
    '"\\ud800"',
    '{"a": "\\u00e9"}',
    "NaN",
    "Infinity",
    "tru",
    '{"a" 1}',
    "\u3000{}",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(JSON_EDGES)
    | JSON_OBJECTS.map(json.dumps)
    | st.text(alphabet=' {}[]":,0123456789.eE+-tfnrulasN\\\t\n\ufeff', max_size=30)
)
def test_loads_object_is_json_loads(text: str) -> None:
    def outcome(load: Callable[[str], object]) -> str:
        try:
            return repr(load(text))  # repr: NaN is not equal to itself
        except (ValueError, RecursionError):
            return "refused"

    assert outcome(extra_json.loads_object) == outcome(json.loads)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        JSON_OBJECTS.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=30), max_size=40
    )
)
def test_extra_json_judges_each_text_alone(texts: list[bytes]) -> None:
    """A text's verdict does not depend on the texts judged with it (a chunk's, any chunk's)."""
    texts = TEXTS + texts
    assert extra_json.judge(texts) == b"".join(extra_json.judge([t]) for t in texts)


def _parts(root: Path, monkeypatch: pytest.MonkeyPatch, *, helper: bool) -> list[Part]:
    """What verify's pass makes of every chunk of 4 files: here, or every chunk but the first
    two by the helper process."""
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 4)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 2 if helper else 10**9)
    monkeypatch.setattr(block_pass, "HELPER_BACKLOG", 1000)
    found = LocalStorage(root).read_all_blocks(BLOCK_NAMES)
    assert found is not None
    return list(found.shares(block_parts.worker()))


def _same_parts(here: list[Part], there: list[Part]) -> None:
    assert len(here) == len(there)
    for a, b in zip(here, there, strict=True):
        assert (a.unread, a.odd) == (b.unread, b.odd)
        assert a.arrays.keys() == b.arrays.keys()
        for key in a.arrays:
            assert a.arrays[key].dtype == b.arrays[key].dtype, key
            assert np.array_equal(a.arrays[key], b.arrays[key]), key


def test_the_helper_makes_the_parts_this_process_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoded, judged and kept in the helper or here: the same arrays, byte for byte, over
    blocks of every kind (refused ExtraAttributes, a transaction, a non-block, a wrong hash, a
    name not in the canonical form, a file left unread)."""
    root = tmp_path / "ds"
    events = _run_events(40)
    events[7] = replace(events[7], extra={TRANSACTION_KEY: {"app_id": "job", "version": 1}})
    for i in (10, 20):
        events[i] = replace(events[i], extra=EXTRA)
    hows = list(REFUSED_TEXTS)
    _write_chain(
        root,
        events,
        patch=lambda i, data: _refuse_extra(data, hows[i % len(hows)]) if i in (10, 20) else data,
    )
    blocks = root / "blocks"
    names = sorted(p.name for p in blocks.iterdir())
    (blocks / names[3]).write_bytes(b"altered")  # a wrong hash
    (blocks / names[9]).write_bytes(b"\0" * (MAX_BLOCK_BYTES + 1))  # oversized: left unread
    (blocks / ("f" + names[12][1:].upper())).write_bytes((blocks / names[12]).read_bytes())
    here = _parts(root, monkeypatch, helper=False)
    there = _parts(root, monkeypatch, helper=True)
    assert any(p.odd for p in here) and any(p.unread for p in here)
    assert not np.concatenate([p.arrays["plain"] for p in here]).all()  # refused ones
    _same_parts(here, there)


def test_a_part_from_the_helper_is_checked(tmp_path: Path) -> None:
    """An answer that is not exactly a part for its chunk is refused (then this process makes
    the chunk's part itself)."""
    root = tmp_path / "ds"
    _write_chain(root, _run_events(6))
    names = sorted(p.name for p in (root / "blocks").iterdir())
    dir_fd = os.open(root / "blocks", os.O_RDONLY)
    try:
        share = block_pass.own_share(dir_fd, names, MAX_BLOCK_BYTES, BLOCK_NAMES)
    finally:
        os.close(dir_fd)
    part = block_parts.part_of(share)
    raw = block_parts.encode(part)
    again = block_parts.parse(raw, names)
    assert again is not None
    _same_parts([part], [again])
    header = json.dumps({"rows": part.rows, "unread": [], "odd": []}).encode()
    body = raw[4 + struct.unpack_from("<I", raw)[0] :]
    lying = [
        raw[:-1],
        raw + b"\0",
        raw[:3],
        b"",
        struct.pack("<I", len(header) + 9) + header + body,
        _reheaded({"rows": part.rows - 1, "unread": [names[0]], "odd": []}, body),
        _reheaded({"rows": part.rows - 1, "unread": ["f" + "0" * 68], "odd": []}, body),
        _reheaded({"rows": part.rows, "unread": [], "odd": [[part.rows, names[0]]]}, body),
        _reheaded({"rows": part.rows, "unread": []}, body),
        _reheaded({"rows": "6", "unread": [], "odd": []}, body),
    ]
    for raw_lie in lying:
        assert block_parts.parse(raw_lie, names) is None
    assert block_parts.parse(raw, names[:-1]) is None  # another chunk's answer


def _reheaded(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<I", len(text)) + text + body


# -- found in review: edges where the two paths once parted -------------------------------------


def test_sequence_numbers_at_the_top_of_uint64(tmp_path: Path) -> None:
    """A block at 2**64-1 breaks sequence-number; the next one, numbered 0, breaks it again
    (an unsigned sum must not wrap it into place)."""
    events = _run_events(6)
    _write_chain(tmp_path / "ds", events, numbers={1: 2**64 - 1, 2: 0, 3: 1, 4: 2})
    assert _compare(tmp_path / "ds") == ["sequence-number"]
    report = verify(LocalStorage(tmp_path / "ds"), check_data=False)
    assert sum(p.rule == "sequence-number" for p in report.errors) >= 2


@pytest.mark.parametrize("helper_min", [10**9, 1])
def test_deep_extra_attributes_with_a_transaction_are_left_to_the_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper_min: int
) -> None:
    """Nesting past MAX_DEPTH is refused whatever else the object holds (a transaction key
    included), so the decoder, wherever it runs, decides: no path crashes, both agree."""
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 2)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", helper_min)
    for depth in (extra_json.MAX_DEPTH + 1, 700, 960, 990, 1200):
        nested: object = "x"
        for _ in range(depth):
            nested = [nested]
        events = _run_events(4)
        events[2] = replace(
            events[2], extra={TRANSACTION_KEY: {"app_id": "job", "version": 1}, "deep": nested}
        )
        root = tmp_path / f"d{depth}"
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(10_000)  # the encoder, to write such a block at all
        try:
            _write_chain(root, events)
            text = json.dumps(events[2].extra).encode()
        finally:
            sys.setrecursionlimit(limit)
        assert extra_json.judge([text]) == bytes([extra_json.REFUSED])
        _compare(root)


def test_the_helper_parses_under_the_callers_digit_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = b'{"n": ' + b"7" * 2000 + b"}"
    texts = [big, b'{"n": 1}', b'{"n": ' + b"7" * 900 + b"}"]
    root = tmp_path / "ds"
    events = _run_events(12)
    for i, digits in ((4, 2000), (8, 900)):
        events[i] = replace(events[i], extra={"n": int("7" * digits)})
    _write_chain(root, events)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(1000)
    try:
        here = extra_json.judge(texts)
        assert here == bytes([extra_json.REFUSED, extra_json.OBJECT, extra_json.OBJECT])
        in_process = _parts(root, monkeypatch, helper=False)
        by_helper = _parts(root, monkeypatch, helper=True)
    finally:
        sys.set_int_max_str_digits(limit)
    _same_parts(in_process, by_helper)
    assert np.concatenate([p.arrays["plain"] for p in by_helper]).sum() == len(events) - 1
    assert extra_json.judge(texts)[0] == extra_json.OBJECT  # the default limit takes 2000


@pytest.mark.parametrize(
    "script",
    [
        "import sys; sys.stdout.write('x' * 9); sys.stdout.flush()",  # not an answer
        "import sys; sys.stdout.buffer.write(bytes(4)); sys.exit(3)",  # an empty one, a failure
        "import time; time.sleep(60)",  # too late: killed
        "raise SystemExit('no')",
    ],
)
def test_a_helper_that_answers_wrongly_leaves_its_chunks_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str
) -> None:
    root = tmp_path / "ds"
    _write_chain(root, _run_events(12))
    storage = LocalStorage(root)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 10**9)
    alone = storage.read_all_blocks(BLOCK_NAMES).all()  # type: ignore[union-attr]
    path = tmp_path / "helper.py"
    path.write_text(script)
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 3)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 2)
    monkeypatch.setattr(helper_process, "seconds_for", lambda files: 3.0)
    worker = block_pass.Worker(str(path), [], lambda share: share, block_pass.SHARES.parse)
    found = storage.read_all_blocks(BLOCK_NAMES)
    assert found is not None
    started = time.monotonic()
    shares = list(found.shares(worker))
    assert time.monotonic() - started < 60  # the time limit holds (bounded, not timed tight)
    got = {
        n: (c, m) for s in shares for n, c, m in zip(s.names, s.contents, s.matches, strict=True)
    }
    assert got == alone


def test_no_helper_process_without_a_python_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "")
    assert not helper_process.available()


def test_slices_whose_hashes_share_the_looked_up_bytes_are_told_apart(tmp_path: Path) -> None:
    """Data files are matched to the chain's slices by a sorted index of 8 hash bytes and then
    the whole hash: two slices sharing those 8 bytes are both the chain's, and an unnamed file
    sharing them too is an orphan, as a lookup by name says."""
    ds = Dataset.create(tmp_path / "ds")
    ds.set_schema(pa.schema([pa.field("id", pa.int64())]))
    shared = bytes(range(8))
    digests = [shared + bytes([k]) * 24 for k in (1, 2, 3)]  # the third one is named by no block
    names = [str(Multihash(BLAKE3, d)) for d in digests]
    for name in names:
        (tmp_path / "ds" / "data" / name).write_bytes(b"x")
    for k, name in enumerate(names[:2]):
        ds.append(
            AddData(
                prev_offset=None if k == 0 else k - 1,
                new_data=DataSlice(
                    logical_hash=Multihash(BLAKE3, bytes(32)),
                    physical_hash=Multihash.from_multibase(name),
                    offset_interval=OffsetInterval(k, k),
                    size=1,
                ),
            )
        )
    report = verify(LocalStorage(tmp_path / "ds"), check_data=False)
    assert [(p.rule, p.path) for p in report.warnings] == [("orphan-data", f"data/{names[2]}")]
    assert report.ok


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=12)
    | st.integers(0, 12).flatmap(
        lambda n: st.integers(0, 2**64 - 1 - n).flatmap(
            lambda low: st.permutations([low + i for i in range(n)])
        )
    )
)
def test_rows_newest_first_as_a_stable_sort_orders_them(numbers: list[int]) -> None:
    """Placed directly when the numbers are a range, each once; else sorted: the same order."""
    rows = np.arange(len(numbers), dtype=np.int64) * 3
    values = np.array(numbers, np.uint64)
    expected = rows[np.argsort(values, kind="stable")[::-1]]
    assert np.array_equal(walked._newest_first(rows, values), expected)


def test_the_pass_reads_in_inode_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names of the canonical form come in the order of their inode numbers (about the order
    they were written: a sweep of the disk on a cold cache), every chunk; others after them,
    judged one by one; every block file once."""
    root = tmp_path / "ds"
    _write_chain(root, _run_events(40))
    blocks = root / "blocks"
    names = sorted(p.name for p in blocks.iterdir())
    (blocks / ("f" + names[3][1:].upper())).write_bytes(b"x")  # not canonical: last
    (blocks / "f123").write_bytes(b"x")  # canonical, another width: last
    (blocks / "notes.txt").write_bytes(b"x")  # not a block name at all
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 8)
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 10**9)
    found = LocalStorage(root).read_all_blocks(BLOCK_NAMES)
    assert found is not None
    listed = [name for share in found.shares() for name in share.names]
    inodes = [os.stat(blocks / name, follow_symlinks=False).st_ino for name in listed]
    assert len(listed) == len(set(listed)) == len(names) + 2
    assert sorted(listed[: len(names)]) == names
    assert inodes[: len(names)] == sorted(inodes[: len(names)])
    assert sorted(listed[len(names) :]) == sorted(["f" + names[3][1:].upper(), "f123"])


@pytest.mark.parametrize("slice_at", [None, 0, 5, 39])
def test_blocks_without_a_slice_before_any_schema(tmp_path: Path, slice_at: int | None) -> None:
    """A poller that finds nothing from the start writes AddData without a slice before any
    schema: they are taken in bulk too, and a slice among them breaks schema-before-data in
    both verifies."""
    quiet = set(range(40)) - {slice_at}
    root = tmp_path / "ds"
    _write_chain(root, _run_events(40, quiet=quiet), schema=False)
    expected = [] if slice_at is None else ["schema-before-data"]
    assert _compare(root) == expected
    storage = LocalStorage(root)
    walk = walk_chain(storage, verify(storage, check_data=False))
    assert [i for i, _ in walk.chain.decoded()] == [0]  # every AddData kept as columns
    seeded = chain.advance(EMPTY, walk.chain[0].block, walk.chain[0].hash)
    run, hashes = walk.chain.plain_run(1, 41)
    assert plain_run_passes(seeded, run, hashes) == (40 if slice_at is None else slice_at)


def test_data_checks_of_a_chain_with_blocks_without_a_slice(tmp_path: Path) -> None:
    """Written by the library: slices, and between them AddData without one (a poll that found
    nothing). Verify checks every slice, deep too, and only the slices; a slice file altered is
    still named."""
    root = tmp_path / "ds"
    dataset = Dataset.create(root)
    for i in range(12):
        if i % 3:
            state = dataset.state
            dataset.append(
                AddData(
                    prev_offset=state.last_offset,
                    new_watermark=BASE_TIME + timedelta(hours=i),
                    new_source_state=SourceState("poll", "odf/etag", f"v{i}"),
                )
            )
        else:
            dataset.write(pa.table({"v": pa.array([i, i + 1], pa.int64())}))
    report = verify(LocalStorage(root), deep=True)
    assert report.ok, [p.line() for p in report.problems]
    assert report.blocks_checked == 14
    victim = sorted((root / "data").iterdir())[1]
    victim.chmod(0o644)
    victim.write_bytes(victim.read_bytes()[:-1] + b"!")
    report = verify(LocalStorage(root))
    assert [p.path for p in report.errors] == [f"data/{victim.name}"]


@given(st.lists(st.booleans(), max_size=40), st.integers(0, 45), st.integers(0, 45))
def test_sliced_ranges_are_the_sliced_positions_in_between(
    sliced: list[bool], start: int, stop: int
) -> None:
    chain_ = walked.WalkedChain()
    chain_._sliced = np.array(sliced, bool)  # what finish() sets from the columns
    ranges = chain_.sliced_ranges(start, stop)
    assert [i for r in ranges for i in r] == [
        i for i in range(start, stop) if i < len(sliced) and sliced[i]
    ]
    assert all(len(r) for r in ranges)
    assert all(a.stop < b.start for a, b in itertools.pairwise(ranges))


def test_nothing_reads_the_columns_released_after_the_fold(tmp_path: Path) -> None:
    """Verify and the index rebuild release the columns only the walk and the fold read; what
    comes after (the index check, data and deep checks, the rebuild's save) must not need them:
    a released column refuses any use, so this chain's verifies and rebuild would raise."""
    root = tmp_path / "ds"
    dataset = Dataset.create(root)
    for i in range(3):
        dataset.write(pa.table({"v": pa.array([i, i + 1], pa.int64())}))
    quiet = AddData(  # a poll that found nothing, again and again (written raw: fast)
        prev_offset=5,
        new_watermark=BASE_TIME,
        new_source_state=SourceState("poll", "odf/etag", "v1"),
    )
    _write_chain(root, [quiet] * (SNAPSHOT_INTERVAL + 10), dataset=dataset)
    for i in range(2):
        dataset.write(pa.table({"v": pa.array([i], pa.int64())}))
    storage = LocalStorage(root)
    for deep in (False, True):
        report = verify(storage, deep=deep)
        assert report.ok, [p.line() for p in report.problems]
    shutil.rmtree(root / "info" / "odf-chain-index")
    index = rebuild(storage, save=True)
    assert index.how == "rebuilt" and index.head == dataset.state
    report = verify(storage)
    assert report.ok and not report.warnings, [p.line() for p in report.problems]
    walk = walk_chain(storage, verify(storage, check_data=False))
    chain_ = walk.chain
    refold(chain_, verify(storage, check_data=False), every=SNAPSHOT_INTERVAL)
    chain_.folded()
    with pytest.raises(RuntimeError, match="was released once the fold was done"):
        chain_.plain_run(2, 4)
