"""Bad input on real files: damaged blocks, bad refs, damaged data, refused appends, and real
concurrent writers. Each must give a clear error (the right exception type, naming the block or
file) and leave every byte on disk as it was."""

from __future__ import annotations

import multiprocessing as mp
import random
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import flatbuffers
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    RuleViolation,
    SchemaEvolutionError,
)
from odf_chain.events import (
    AddData,
    DataSlice,
    MetadataBlock,
    OffsetInterval,
    Seed,
    SetDataSchema,
    SetInfo,
)
from odf_chain.format.codec import encode_block
from odf_chain.format.did import DatasetId
from odf_chain.format.generated.Manifest import Manifest
from odf_chain.format.multihash import Multihash
from tests.helpers import multihash_name, non_utf8_schema, snapshot_tree

KIND_METADATA_BLOCK = 0x400000  # ODF's manifest kind for a metadata block


def table(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids])})


def make_dataset(root: Path) -> tuple[Dataset, list[str]]:
    """Seed, schema + 2 rows, 3 rows: block hashes oldest first."""
    ds = Dataset.create(root)
    ds.write(table([1, 2]))
    ds.write(table([3, 4, 5]))
    return ds, [str(e.hash) for e in ds.blocks()]


def head_of(root: Path) -> str:
    return (root / "refs" / "head").read_text().strip()


def set_head(root: Path, name: str) -> None:
    (root / "refs" / "head").write_text(name)


def store_block(root: Path, data: bytes) -> str:
    """Store bytes under their correct blake3 name (computed independently)."""
    name = multihash_name(data)
    (root / "blocks" / name).write_bytes(data)
    return name


def manifest(content: bytes, kind: int, version: int) -> bytes:
    """A Manifest table built field by field with the plain flatbuffers builder."""
    b = flatbuffers.Builder(len(content) + 64)
    payload = b.CreateByteVector(content)
    b.StartObject(3)
    b.PrependInt64Slot(0, kind, 0)
    b.PrependInt32Slot(1, version, 0)
    b.PrependUOffsetTRelativeSlot(2, payload, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def content_of(block_bytes: bytes) -> bytes:
    m = Manifest.GetRootAs(block_bytes, 0)
    return bytes(m.Content(j) for j in range(m.ContentLength()))


def _committed(root: Path) -> dict:
    """The dataset's files apart from the derived index (a cache a reader may repair)."""
    return {
        k: v for k, v in snapshot_tree(root).items() if not k.startswith("info/odf-chain-index")
    }


def assert_open_paths_fail(
    root: Path, error: type, *fragments: str, blocks_raises: bool = True
) -> None:
    """Every full read of the chain refuses, naming what is wrong; verify reports it; nothing
    committed changes.

    Since the derived index, ``Dataset.open`` and ``state_at`` read a bounded number of blocks
    and need not meet the damaged one (tests/test_index.py covers what they check); a full fold
    does: rebuilding the index, and ``blocks()`` (which checks hashes and decoding only, so not
    for a rule violation, ``blocks_raises=False``). Verify reports every case.
    """
    from odf_chain.index.read import rebuild
    from odf_chain.verify import verify

    before = _committed(root)
    storage = _storage(root)
    calls = [lambda: rebuild(storage)]
    if blocks_raises:
        calls.append(Dataset(storage).blocks)
    for call in calls:
        with pytest.raises(error) as info:
            call()
        for fragment in fragments:
            assert fragment in str(info.value), (fragment, str(info.value))
    report = verify(storage, check_data=False)
    assert not report.ok
    assert (
        any(
            fragment in str(p) or fragment in repr(p)
            for p in report.problems
            for fragment in fragments
        )
        or not fragments
    ), [str(p) for p in report.problems]
    assert _committed(root) == before


def _storage(root: Path):
    from odf_chain.storage import LocalStorage

    return LocalStorage.open(root)


def verify_errors(root: Path, **kwargs) -> list:
    before = snapshot_tree(root)
    report = Dataset(_storage(root)).verify(**kwargs)
    assert snapshot_tree(root) == before
    assert not report.ok
    return report.errors


# -- damaged block files --------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 2, -1], ids=["seed", "middle", "head"])
@pytest.mark.parametrize("damage", ["truncated", "random-bytes", "empty"])
def test_damaged_block_file(tmp_path: Path, which: int, damage: str) -> None:
    root = tmp_path / "ds"
    _, hashes = make_dataset(root)
    name = hashes[which]
    path = root / "blocks" / name
    original = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(original[: len(original) // 2])
    elif damage == "random-bytes":
        path.write_bytes(random.Random(which).randbytes(len(original)))
    else:
        path.write_bytes(b"")

    assert_open_paths_fail(root, IntegrityError, name)

    errors = verify_errors(root)
    assert any(p.block_hash == name for p in errors)
    assert any(name in p.line() for p in errors)
    assert {p.rule for p in errors if p.block_hash == name} <= {"block-hash", "block-format"}


def test_block_stored_under_another_name(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _, hashes = make_dataset(root)
    data = (root / "blocks" / hashes[-1]).read_bytes()
    fake = "f1e20" + "0123456789abcdef" * 4
    assert fake != multihash_name(data)
    (root / "blocks" / fake).write_bytes(data)
    set_head(root, fake)

    assert_open_paths_fail(root, IntegrityError, fake, "not to its name")

    errors = verify_errors(root)
    # the logged head's name is no longer in the chain: the head log calls that a rollback
    assert sorted(p.rule for p in errors) == ["block-hash", "head-rollback"]
    (problem,) = [p for p in errors if p.rule != "head-rollback"]
    assert problem.rule == "block-hash"
    assert problem.block_hash == fake
    assert problem.sequence_number == len(hashes) - 1
    assert fake in problem.line() and multihash_name(data) in problem.message


def test_valid_block_copied_over_another(tmp_path: Path) -> None:
    """A real block's bytes under a real, older block's name: the chain is broken there."""
    root = tmp_path / "ds"
    _, hashes = make_dataset(root)
    (root / "blocks" / hashes[1]).write_bytes((root / "blocks" / hashes[2]).read_bytes())
    assert_open_paths_fail(root, IntegrityError, hashes[1])
    errors = verify_errors(root)
    assert any(p.block_hash == hashes[1] and p.rule == "block-hash" for p in errors)


@pytest.mark.parametrize(
    ("kind", "version", "fragment"),
    [
        (0x400001, 3, "kind 0x400001"),
        (0, 3, "kind 0x0"),
        (KIND_METADATA_BLOCK, 99, "version 99"),
        (KIND_METADATA_BLOCK, 1, "version 1"),
        (KIND_METADATA_BLOCK, 0, "version 0"),
    ],
)
def test_unknown_manifest_kind_or_version(
    tmp_path: Path, kind: int, version: int, fragment: str
) -> None:
    root = tmp_path / "ds"
    _, hashes = make_dataset(root)
    head_bytes = (root / "blocks" / hashes[-1]).read_bytes()
    content = content_of(head_bytes)
    # the builder reproduces a real block exactly, so only kind/version differ below
    assert manifest(content, KIND_METADATA_BLOCK, 3) == head_bytes
    name = store_block(root, manifest(content, kind, version))
    set_head(root, name)

    assert_open_paths_fail(root, FormatError, name, fragment)

    errors = verify_errors(root)
    assert [p.rule for p in errors] == ["block-format", "chain-incomplete"]
    assert errors[0].block_hash == name
    assert fragment in errors[0].message
    assert name in errors[0].line()


def test_unknown_multihash_code_in_head(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _, hashes = make_dataset(root)
    bad = "f1320" + hashes[-1][5:]  # code 0x13 (sha-512): known to multiformats, not to us
    set_head(root, bad)
    assert_open_paths_fail(root, FormatError, bad, "unknown multihash code 0x13")
    problem, incomplete = verify_errors(root)
    assert (problem.rule, incomplete.rule) == ("head", "chain-incomplete")
    assert problem.path == "refs/head"
    assert "0x13" in problem.message


@pytest.mark.parametrize("text", ["../../etc/passwd", "f1e20 zz", "", "  \n"])
def test_garbage_in_head(tmp_path: Path, text: str) -> None:
    root = tmp_path / "ds"
    make_dataset(root)
    set_head(root, text)
    assert_open_paths_fail(root, FormatError, "head")
    problem, incomplete = verify_errors(root)
    assert (problem.rule, incomplete.rule) == ("head", "chain-incomplete")
    assert problem.path == "refs/head" and "refs/head" in problem.line()


def test_head_pointing_at_a_missing_block(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    make_dataset(root)
    missing = "f1e20" + "ab" * 32
    set_head(root, missing)
    assert_open_paths_fail(root, NotFoundError, missing)
    errors = verify_errors(root)
    assert [p.rule for p in errors] == ["block-missing", "chain-incomplete"]
    assert errors[0].block_hash == missing
    assert "refs/head" in errors[0].message


def test_missing_middle_block(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _, hashes = make_dataset(root)
    (root / "blocks" / hashes[2]).unlink()
    assert_open_paths_fail(root, NotFoundError, hashes[2])
    errors = verify_errors(root)
    missing = [p for p in errors if p.rule == "block-missing"]
    assert len(missing) == 1
    assert missing[0].block_hash == hashes[2]
    assert missing[0].sequence_number == 2
    assert "block 3" in missing[0].message  # the block that refers to it


def test_missing_refs_head(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    make_dataset(root)
    (root / "refs" / "head").unlink()
    assert_open_paths_fail(root, NotFoundError, "refs/head")
    problem, incomplete = verify_errors(root)
    assert (problem.rule, incomplete.rule) == ("head", "chain-incomplete")
    assert problem.path == "refs/head" and "refs/head" in problem.line()


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no blocks/ directory"):
        Dataset.open(tmp_path)
    assert list(tmp_path.iterdir()) == []


# -- damaged data files ---------------------------------------------------------------------------


def _slices(ds: Dataset) -> list[tuple[int, str, str]]:
    return [
        (e.block.sequence_number, str(e.hash), str(e.block.event.new_data.physical_hash))
        for e in ds.blocks()
        if isinstance(e.block.event, AddData)
    ]


@pytest.mark.parametrize(
    ("damage", "rules"),
    [
        ("missing", {"data-missing"}),
        ("truncated", {"data-size"}),  # not hashed: not the file the block names
        ("replaced", {"data-size"}),
        ("same-size-other-bytes", {"data-hash"}),
    ],
)
def test_damaged_data_file(tmp_path: Path, damage: str, rules: set[str]) -> None:
    root = tmp_path / "ds"
    ds, _ = make_dataset(root)
    seq, block_hash, name = _slices(ds)[0]
    path = root / "data" / name
    original = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(original[:-10])
    elif damage == "replaced":
        other = tmp_path / "other.parquet"
        pq.write_table(pa.table({"id": pa.array([9, 9, 9], pa.int64())}), other)
        assert other.read_bytes() != original
        path.write_bytes(other.read_bytes())
        assert pq.read_table(path).num_rows == 3  # a valid Parquet file, just not ours
    else:
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0x01
        path.write_bytes(bytes(damaged))

    # the chain itself is intact: opening works, only verify sees the damage
    assert Dataset.open(root).state.num_records == 5

    errors = verify_errors(root)
    assert {p.rule for p in errors} == rules
    for problem in errors:
        assert problem.sequence_number == seq
        assert problem.block_hash == block_hash
        assert problem.path == f"data/{name}"
        line = problem.line()
        assert f"block {seq}" in line and block_hash in line and f"data/{name}" in line
    # without data checks, the chain verifies
    assert Dataset(_storage(root)).verify(check_data=False).ok


# -- refused appends ------------------------------------------------------------------------------


def _fake_slice(start: int, end: int) -> DataSlice:
    return DataSlice(
        logical_hash=Multihash("blake3", b"\x01" * 32),
        physical_hash=Multihash("blake3", b"\x02" * 32),
        offset_interval=OffsetInterval(start, end),
        size=123,
    )


def _assert_refused(ds: Dataset, event, rule: str, *fragments: str) -> None:
    root = ds.path
    before = snapshot_tree(root)
    head = head_of(root)
    seq = ds.state.sequence_number + 1
    with pytest.raises(RuleViolation) as info:
        ds.append(event)
    assert info.value.rule == rule
    assert info.value.sequence_number == seq
    assert f"block {seq}" in str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert head_of(root) == head
    assert snapshot_tree(root) == before
    assert Dataset.open(root).verify().problems == []


def test_append_second_seed(tmp_path: Path) -> None:
    ds, _ = make_dataset(tmp_path / "ds")
    _assert_refused(ds, Seed(dataset_id=DatasetId.generate()), "seed-unique", "Seed")


def test_append_data_before_schema(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    _assert_refused(ds, AddData(new_data=_fake_slice(0, 4)), "schema-before-data")


@pytest.mark.parametrize(
    ("prev_offset", "start", "end", "fragments"),
    [
        (4, 6, 7, ("start at offset 5", "found 6")),  # gap
        (4, 3, 7, ("start at offset 5", "found 3")),  # overlap
        (4, 5, 4, ("end >= start",)),
        (3, 5, 6, ("prev_offset 4", "found 3")),
        (None, 5, 6, ("prev_offset 4", "found None")),
    ],
)
def test_append_non_contiguous_offsets(
    tmp_path: Path, prev_offset, start: int, end: int, fragments: tuple[str, ...]
) -> None:
    ds, _ = make_dataset(tmp_path / "ds")
    assert ds.state.last_offset == 4
    event = AddData(
        prev_offset=prev_offset,
        new_data=_fake_slice(start, end),
        new_watermark=ds.state.watermark,
    )
    _assert_refused(ds, event, "offsets", *fragments)


def test_append_breaking_schema(tmp_path: Path) -> None:
    ds, _ = make_dataset(tmp_path / "ds")
    broken = pa.schema([f for f in ds.state.schema if f.name != "name"])
    _assert_refused(ds, SetDataSchema.from_arrow(broken), "schema-evolution", "name")


def test_append_assigns_sequence_and_link(tmp_path: Path) -> None:
    """Through append a gap cannot even be expressed: the block always follows the head."""
    ds, hashes = make_dataset(tmp_path / "ds")
    entry = ds.append(SetInfo(description="x"))
    assert entry.block.sequence_number == len(hashes)
    assert str(entry.block.prev_block_hash) == hashes[-1]
    assert head_of(ds.path) == str(entry.hash)


@pytest.mark.parametrize("case", ["gap", "repeat", "wrong-link", "time-back", "second-seed"])
def test_rule_breaking_block_on_disk(tmp_path: Path, case: str) -> None:
    """Blocks made outside the library (well-formed, correctly named) that break a rule are
    refused when the chain is read, and reported by verify at that block."""
    root = tmp_path / "ds"
    ds, hashes = make_dataset(root)
    head = ds.blocks()[-1].block
    earlier = {k: ds.state_at(k) for k in (0, len(hashes) - 2)}  # before anything broke
    prev = Multihash.from_multibase(hashes[-1])
    seq, link, when = head.sequence_number + 1, prev, head.system_time + timedelta(seconds=1)
    event = SetInfo(description="bad")
    rule = {"gap": "sequence-number", "repeat": "sequence-number"}.get(case, "")
    if case == "gap":
        seq += 1
    elif case == "repeat":
        seq -= 1
    elif case == "wrong-link":
        # the walk follows the link, so skipping the head block shows as a sequence gap
        link = Multihash.from_multibase(hashes[-2])
        rule = "sequence-number"
    elif case == "time-back":
        when = head.system_time - timedelta(seconds=1)
        rule = "system-time"
    else:
        event = Seed(dataset_id=DatasetId.generate())
        rule = "seed-unique"
    block = MetadataBlock(system_time=when, prev_block_hash=link, sequence_number=seq, event=event)
    name = store_block(root, encode_block(block))
    set_head(root, name)

    assert_open_paths_fail(root, RuleViolation, name, f"rule {rule}", blocks_raises=False)
    # blocks() checks hashes only: the log of a chain that breaks a rule can still be shown
    walked = hashes[:-1] if case == "wrong-link" else hashes
    assert [str(e.hash) for e in Dataset(_storage(root)).blocks()] == [*walked, name]
    # the states before the broken block are still shown (what an auditor asks), the same as
    # before it was written; the broken block itself is refused, naming it
    for k, state in earlier.items():
        assert Dataset(_storage(root)).state_at(k) == state
    with pytest.raises(RuleViolation, match=name):
        Dataset(_storage(root)).state_at(name)
    errors = verify_errors(root)
    if case == "wrong-link":  # the logged head is skipped: the head log calls that a rollback
        assert [p.rule for p in errors if p.rule == "head-rollback"] == ["head-rollback"]
        errors = [p for p in errors if p.rule != "head-rollback"]
    assert [(p.rule, p.block_hash, p.sequence_number) for p in errors] == [(rule, name, seq)]
    assert name in errors[0].line() and f"block {seq}" in errors[0].line()


@pytest.mark.parametrize("nested", [False, True], ids=["top-level", "nested"])
def test_schema_with_non_utf8_field_name_on_disk(tmp_path: Path, nested: bool) -> None:
    """A correctly named block whose SetDataSchema names a field in bytes that are not UTF-8:
    a clear rule violation at that block on open, and an error in verify's report (verify
    used to crash with UnicodeDecodeError)."""
    root = tmp_path / "ds"
    ds, hashes = make_dataset(root)
    head = ds.blocks()[-1].block
    block = MetadataBlock(
        system_time=head.system_time,
        prev_block_hash=Multihash.from_multibase(hashes[-1]),
        sequence_number=head.sequence_number + 1,
        event=SetDataSchema(raw_arrow_schema=non_utf8_schema(nested)),
    )
    name = store_block(root, encode_block(block))
    set_head(root, name)
    assert_open_paths_fail(root, RuleViolation, name, "rule schema-valid", blocks_raises=False)
    errors = verify_errors(root)
    assert [(p.rule, p.block_hash, p.sequence_number) for p in errors] == [
        ("schema-valid", name, block.sequence_number)
    ]


def test_set_schema_breaking_evolution(tmp_path: Path) -> None:
    ds, _ = make_dataset(tmp_path / "ds")
    before = snapshot_tree(ds.path)
    with pytest.raises(SchemaEvolutionError) as info:
        ds.set_schema(pa.schema([pa.field("id", pa.string()), pa.field("name", pa.string())]))
    assert "id" in str(info.value) and f"block {len(ds.blocks())}" in str(info.value)
    assert snapshot_tree(ds.path) == before


def test_write_breaking_evolution(tmp_path: Path) -> None:
    ds, _ = make_dataset(tmp_path / "ds")
    before = snapshot_tree(ds.path)
    with pytest.raises(SchemaEvolutionError) as info:
        ds.write(pa.table({"id": pa.array([1.5]), "name": pa.array(["x"])}))
    assert "id" in str(info.value) and "double" in str(info.value)
    assert snapshot_tree(ds.path) == before
    assert not list((ds.path / ".staging").iterdir())


# -- concurrent writers ---------------------------------------------------------------------------


def _writer(root: str, ids: list[int], barrier, results, retry: bool) -> None:
    """Runs in a spawned process: open the dataset, wait for the others, write one table."""
    try:
        ds = Dataset.open(root)
        barrier.wait(timeout=600)  # the last spawned process may take a minute to start
        attempts = 0
        while True:
            attempts += 1
            try:
                blocks = ds.write(table(ids))
                results.put(("ok", len(blocks), attempts))
                return
            except ConflictError as exc:
                if not retry or attempts >= 50:
                    results.put(("conflict", str(exc), attempts))
                    return
                ds = Dataset.open(root)
    except BaseException as exc:  # report anything else to the parent
        results.put(("other", f"{type(exc).__name__}: {exc}", 0))


def _run_writers(root: Path, n: int, retry: bool) -> list[tuple]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_writer,
            args=(str(root), list(range(100 * i, 100 * i + 3)), barrier, results, retry),
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=600) for _ in procs]  # loaded 2-core machines start slowly
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def _add_data_blocks(root: Path) -> list:
    return [e for e in Dataset.open(root).blocks() if isinstance(e.block.event, AddData)]


@pytest.mark.parametrize(
    ("n", "start"), [(2, "fresh"), (3, "with-schema"), (4, "fresh"), (4, "with-schema")]
)
def test_concurrent_writers(tmp_path: Path, n: int, start: str) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    if start == "with-schema":
        ds.write(table([-1]))
    adds_before = len(_add_data_blocks(root))

    results = _run_writers(root, n, retry=False)
    kinds = [r[0] for r in results]
    assert set(kinds) <= {"ok", "conflict"}, results
    winners = kinds.count("ok")
    assert winners >= 1
    for kind, detail, _ in results:
        if kind == "conflict":
            assert "head moved" in detail
    report = Dataset.open(root).verify()
    assert report.ok, [p.line() for p in report.problems]
    assert {p.rule for p in report.warnings} <= {"orphan-block", "orphan-data"}
    assert len(_add_data_blocks(root)) - adds_before == winners
    # no writer left half a file behind in staging
    assert not any(p.is_file() for p in (root / ".staging").iterdir())


def test_concurrent_writers_retry_until_all_succeed(tmp_path: Path) -> None:
    n = 4
    root = tmp_path / "ds"
    Dataset.create(root)
    results = _run_writers(root, n, retry=True)
    assert [r[0] for r in results] == ["ok"] * n, results

    ds = Dataset.open(root)
    report = ds.verify()
    assert report.ok, [p.line() for p in report.problems]
    adds = [e.block.event for e in ds.blocks() if isinstance(e.block.event, AddData)]
    assert len(adds) == n
    rows = []
    offsets = []
    for add in adds:
        t = pq.read_table(root / "data" / str(add.new_data.physical_hash))
        rows += t.column("id").to_pylist()
        offsets += t.column("offset").to_pylist()
        interval = add.new_data.offset_interval
        assert t.column("offset").to_pylist() == list(range(interval.start, interval.end + 1))
    assert sorted(rows) == sorted(x for i in range(n) for x in range(100 * i, 100 * i + 3))
    assert offsets == list(range(3 * n))
    assert ds.state.num_records == 3 * n


def test_conflict_error_leaves_nothing_visible(tmp_path: Path) -> None:
    """In one process: a handle whose state is behind loses the head CAS with ConflictError."""
    from odf_chain import chain

    root = tmp_path / "ds"
    ds, hashes = make_dataset(root)
    stale = ds.state
    ds.append(SetInfo(description="moved on"))
    head = head_of(root)
    with pytest.raises(ConflictError) as info:
        chain.append(ds.storage, stale, SetInfo(description="late"))
    assert head in str(info.value) and hashes[-1] in str(info.value)
    assert head_of(root) == head
    assert Dataset.open(root).verify().ok
    assert isinstance(info.value, OdfChainError)


def test_rule_checks_do_not_trust_a_crafted_state(tmp_path: Path) -> None:
    """chain.append on a state that is not the head's: a rule or the CAS stops it."""
    from odf_chain import chain

    root = tmp_path / "ds"
    ds, _ = make_dataset(root)
    before = snapshot_tree(root)
    ahead = replace(ds.state, head=Multihash("blake3", b"\x07" * 32))
    with pytest.raises(ConflictError):
        chain.append(ds.storage, ahead, SetInfo(description="x"))
    # the refused block file is removed again by the writer that made it: nothing is left
    report = Dataset.open(root).verify()
    assert report.ok and report.warnings == []
    assert not {p for p in set(snapshot_tree(root)) - set(before) if p.startswith("blocks/")}
