"""Hash-prefix refs through the index's prefix buckets (odf_chain/index/prefixes.py, read by
ChainIndex.blocks_with_prefix): bounded reads, no listing of blocks/, right at segment and
bucket boundaries, after appends and rebuilds, and never wrong when the buckets are damaged,
missing, stale or forged: every candidate is confirmed against the seq table and its block,
and what cannot be believed falls back to the listing."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

from odf_chain import chain, replay
from odf_chain.dataset import Dataset
from odf_chain.errors import AmbiguousRefError, NotFoundError
from odf_chain.events import SetInfo
from odf_chain.index import prefixes, read as index_read, update
from odf_chain.index.records import PREFIX_BATCH
from odf_chain.storage import open_storage
from tests.helpers import multihash_name
from tests.test_index import CountingStorage, append_plain, fast_chain

INDEX = Path("info") / "odf-chain-index"
BUCKETS = INDEX / "prefix"
COVERAGE = INDEX / "prefixes"
RECORD = 20  # 8 digest bytes, sequence number, CRC-32
COVERAGE_HEAD = 8 + 34


class Counting(CountingStorage):
    """The real storage, counting listings of blocks/ too."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.listings = 0

    def block_names_starting(self, prefix: str, limit: int) -> list[str]:
        self.listings += 1
        return self._inner.block_names_starting(prefix, limit)


@pytest.fixture(autouse=True)
def each_commit_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The buckets as each commit's index update keeps them (a handle that defers a few
    commits' updates, and its readers: tests/test_index_batch.py)."""
    monkeypatch.setattr(update, "INDEX_BATCH", 1)


def names_of(root: Path) -> list[str]:
    """Block hashes oldest first, following prev links from refs/head (the reference)."""
    return [str(e.hash) for e in replay.load_chain(open_storage(root))]


def resolved(root: Path, prefix: str) -> tuple[str, Counting]:
    counting = Counting(open_storage(root))
    return str(replay.resolve_ref(counting, prefix)), counting


def bucket_file(name: str) -> str:
    return name[5:8]  # after 'f1e20': the digest's first 3 hex digits


def expected_buckets(names: list[str]) -> dict[str, bytes]:
    """The bucket files as the format says they are, built here from the chain's names."""
    out: dict[str, bytearray] = {}
    for seq, name in enumerate(names):
        body = bytes.fromhex(name[5:21]) + struct.pack("<Q", seq)
        out.setdefault(bucket_file(name), bytearray()).extend(
            body + struct.pack("<I", zlib.crc32(body))
        )
    return {k: bytes(v) for k, v in out.items()}


def bucket_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (root / BUCKETS).iterdir()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 blocks, index (and buckets) written by a rebuild."""
    root = tmp_path_factory.mktemp("prefix") / "ds"
    fast_chain(root, 3000)
    index_read.rebuild(open_storage(root), save=True)
    return root


@pytest.fixture
def built_copy(built: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(built, root)
    return root


def _digest_prefix(name: str, length: int = 12) -> str:
    """``length`` digits of the block's digest, more while all are digits: a number names a
    block by its sequence number (log's rule for the prefixes it prints)."""
    digest, end = name[5:], length
    while end < len(digest) and digest[:end].isdigit():
        end += 1
    return digest[:end]


@pytest.mark.parametrize("k", [0, 1, 1023, 1024, 2047, 2048, 2998, 2999])
def test_prefixes_resolve_from_one_bucket_at_segment_boundaries(built: Path, k: int) -> None:
    names = names_of(built)
    short = _digest_prefix(names[k])
    for prefix in (names[k][:16], short, short.upper(), names[k]):
        found, counting = resolved(built, prefix)
        assert found == names[k], (k, prefix)
        if prefix != names[k]:
            assert counting.listings == 0 and counting.blocks <= 12, (prefix, counting.blocks)
    assert replay.state_at(open_storage(built), short).sequence_number == k


def test_a_lookup_reads_the_records_its_bucket_counts_not_the_file(built_copy: Path) -> None:
    """What a crash (or anyone) left past a bucket's counted records is never read: a bucket
    padded to 64 MiB costs a prefix lookup what the records cost."""
    names = names_of(built_copy)
    bucket = built_copy / BUCKETS / bucket_file(names[1500])
    size = bucket.stat().st_size
    with bucket.open("r+b") as f:
        f.truncate(size + (64 << 20))  # sparse: nothing written
    found, counting = resolved(built_copy, names[1500][:16])
    assert found == names[1500]
    assert counting.derived_bytes <= 1 << 20, counting.derived_bytes  # the table too: 124 KB


def test_a_rebuild_writes_the_buckets_the_format_describes(built: Path) -> None:
    names = names_of(built)
    assert bucket_files(built) == expected_buckets(names)
    coverage = (built / COVERAGE).read_bytes()
    seq, block_hash = struct.unpack_from("<Q34s", coverage)
    assert (seq, "f" + block_hash.hex()) == (2999, names[-1])
    counts = struct.unpack_from("<4096I", coverage, COVERAGE_HEAD)
    assert {f"{b:03x}": c for b, c in enumerate(counts) if c} == {
        b: len(v) // RECORD for b, v in expected_buckets(names).items()
    }


def test_the_writer_streams_in_bounded_memory(built_copy: Path) -> None:
    before = bucket_files(built_copy), (built_copy / COVERAGE).read_bytes()
    storage = open_storage(built_copy)
    names = names_of(built_copy)
    pairs = ((seq, replay.parse_ref(n).block_hash) for seq, n in enumerate(names))
    assert prefixes.write_prefixes(storage, pairs, buffer_bytes=100)  # a flush every 5 records
    assert (bucket_files(built_copy), (built_copy / COVERAGE).read_bytes()) == before
    # out of order: refused, nothing left that a reader would believe
    hashes = [replay.parse_ref(n).block_hash for n in names]
    assert not prefixes.write_prefixes(storage, [(0, hashes[0]), (2, hashes[2])])
    assert not (built_copy / COVERAGE).exists()
    assert resolved(built_copy, names[5][:16])[0] == names[5]  # listed instead


def test_ambiguity_between_two_blocks_of_the_chain(built: Path) -> None:
    names = names_of(built)
    seen: dict[str, int] = {}
    prefix = next(n[:8] for k, n in enumerate(names) if seen.setdefault(n[:8], k) != k)
    sharing = sum(n.startswith(prefix) for n in names)
    counting = Counting(open_storage(built))
    with pytest.raises(AmbiguousRefError, match=rf"'{prefix}': {sharing} blocks"):
        replay.resolve_ref(counting, prefix)
    assert counting.listings == 0


def test_no_block_with_that_prefix_lists_to_say_so(built: Path) -> None:
    names = set(names_of(built))
    missing = next(
        f"f1e20{i:06x}"
        for i in range(1 << 24)
        if not any(n.startswith(f"f1e20{i:06x}") for n in names)
    )
    counting = Counting(open_storage(built))
    with pytest.raises(NotFoundError, match="no block of"):
        replay.resolve_ref(counting, missing)
    assert counting.listings >= 1  # a miss is explained by the listing (orphans, say)


def covered_by(root: Path) -> int:
    """The last block the coverage counts (its first 8 bytes)."""
    return struct.unpack_from("<Q", (root / COVERAGE).read_bytes())[0]


def test_appends_keep_the_buckets_across_a_segment(tmp_path: Path) -> None:
    """Appends bring the buckets up to date once every PREFIX_BATCH blocks: after 1,031 blocks
    (0..1030, past the first seq segment) they hold blocks 0..1023 exactly as the format says,
    and the blocks past them are found through the seq table, without a listing."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    append_plain(ds, 1030)
    names = names_of(root)
    covered = len(names) // PREFIX_BATCH * PREFIX_BATCH - 1
    assert covered_by(root) == covered == 1023
    assert bucket_files(root) == expected_buckets(names[: covered + 1])
    for k in (0, 1023, 1024, 1030):
        found, counting = resolved(root, _digest_prefix(names[k]))
        assert found == names[k] and counting.listings == 0


def test_the_index_command_extends_buckets_left_behind_by_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``odf-chain index`` on an index appends left up to date but for the buckets' last few
    blocks brings the buckets up to the head from the seq table, without rewriting them."""
    root = tmp_path / "ds"
    append_plain(Dataset.create(root), PREFIX_BATCH + 5)
    names = names_of(root)
    assert covered_by(root) == PREFIX_BATCH - 1 < len(names) - 1
    rewrites = []
    real = prefixes.write_prefixes

    def rewrite(*args, **kwargs):
        rewrites.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(prefixes, "write_prefixes", rewrite)
    status = index_read.check_index(str(root))
    assert status.saved and rewrites == []
    assert covered_by(root) == len(names) - 1
    assert bucket_files(root) == expected_buckets(names)


def test_the_coverage_lags_the_head_by_less_than_a_batch(tmp_path: Path) -> None:
    """Append by append, the coverage names the last block that ended a batch of PREFIX_BATCH
    (the Seed before the first): never more than PREFIX_BATCH - 1 blocks behind, and every
    block is found without a listing at every step."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    for n in range(2, 2 * PREFIX_BATCH + 3):  # the chain then has n blocks
        append_plain(ds, 1)
        last = n - 1
        covered = covered_by(root)
        assert covered == max(n // PREFIX_BATCH * PREFIX_BATCH - 1, 0), n
        assert last - covered < PREFIX_BATCH
    names = names_of(root)
    assert bucket_files(root) == expected_buckets(names[: covered_by(root) + 1])
    for k in (0, PREFIX_BATCH - 1, PREFIX_BATCH, len(names) - 1):
        found, counting = resolved(root, _digest_prefix(names[k]))
        assert found == names[k] and counting.listings == 0


def test_a_tail_past_the_coverage_is_matched_through_the_seq_table(built_copy: Path) -> None:
    kept = bucket_files(built_copy), (built_copy / COVERAGE).read_bytes()
    ds = Dataset.open(built_copy)
    append_plain(ds, 5)
    names = names_of(built_copy)
    # the buckets as a writer that did not keep them would have left them: 5 blocks behind
    shutil.rmtree(built_copy / BUCKETS)
    (built_copy / BUCKETS).mkdir()
    for name, data in kept[0].items():
        (built_copy / BUCKETS / name).write_bytes(data)
    (built_copy / COVERAGE).write_bytes(kept[1])
    for k in (2999, 3000, 3004):
        found, counting = resolved(built_copy, names[k][:16])
        assert found == names[k] and counting.listings == 0, k
    # the append that ends the batch brings them up to date
    append_plain(ds, PREFIX_BATCH - len(names) % PREFIX_BATCH)
    assert covered_by(built_copy) == len(names_of(built_copy)) - 1
    assert bucket_files(built_copy) == expected_buckets(names_of(built_copy))


@pytest.mark.parametrize(
    "damage", ["flip", "truncate", "delete-bucket", "delete-coverage", "flip-coverage"]
)
def test_damaged_buckets_fall_back_to_the_listing(built_copy: Path, damage: str) -> None:
    names = names_of(built_copy)
    k = 1500
    bucket = built_copy / BUCKETS / bucket_file(names[k])
    data = bytearray(bucket.read_bytes())
    match damage:
        case "flip":
            data[len(data) // 2] ^= 0x40
            bucket.write_bytes(data)
        case "truncate":
            bucket.write_bytes(data[:-RECORD])
        case "delete-bucket":
            bucket.unlink()
        case "delete-coverage":
            (built_copy / COVERAGE).unlink()
        case "flip-coverage":
            coverage = bytearray((built_copy / COVERAGE).read_bytes())
            coverage[100] ^= 1
            (built_copy / COVERAGE).write_bytes(coverage)
    found, counting = resolved(built_copy, names[k][:16])
    assert found == names[k] and counting.listings >= 1


def _forge(root: Path, bucket: str, key: bytes, seq: int) -> None:
    """Append a record with a valid checksum to ``bucket`` and count it in the coverage (with
    a valid checksum): what someone who can write info/ could do."""
    body = key[:8] + struct.pack("<Q", seq)
    path = root / BUCKETS / bucket
    path.write_bytes(
        (path.read_bytes() if path.exists() else b"") + body + struct.pack("<I", zlib.crc32(body))
    )
    coverage = bytearray((root / COVERAGE).read_bytes())
    at = COVERAGE_HEAD + 4 * int(bucket, 16)
    struct.pack_into("<I", coverage, at, struct.unpack_from("<I", coverage, at)[0] + 1)
    struct.pack_into("<I", coverage, len(coverage) - 4, zlib.crc32(coverage[:-4]))
    (root / COVERAGE).write_bytes(coverage)


def test_a_forged_record_never_makes_a_ref_name_another_block(built_copy: Path) -> None:
    names = names_of(built_copy)
    target, other = 1500, 77
    # a record claiming block 77 has block 1500's digest: the table and block 77 disagree
    _forge(built_copy, bucket_file(names[target]), bytes.fromhex(names[target][5:21]), other)
    assert resolved(built_copy, names[target][:16])[0] == names[target]
    state = replay.state_at(open_storage(built_copy), _digest_prefix(names[target]))
    assert state.sequence_number == target
    # a record for a prefix no block has, pointing at a genuine block: no such block still
    free = next(
        f"{i:06x}" for i in range(1 << 24) if not any(n[5:].startswith(f"{i:06x}") for n in names)
    )
    _forge(built_copy, free[:3], bytes.fromhex(free + "00" * 5), other)
    with pytest.raises(NotFoundError, match="no block of"):
        replay.resolve_ref(open_storage(built_copy), "f1e20" + free)


def test_buckets_of_another_branch_are_not_believed(built_copy: Path) -> None:
    """A rolled-back head: the coverage names a block the seq table no longer has; readers
    list, and the next writer's repair writes the buckets anew from the table."""
    names = names_of(built_copy)
    (built_copy / "refs" / "head").write_text(names[2500])  # an operator restores an old head
    (built_copy / "logs" / "head").unlink(missing_ok=True)
    storage = open_storage(built_copy)
    index_read.open_index(storage, save=True)  # what a writer's hook does first
    found, counting = resolved(built_copy, names[2400][:16])
    assert found == names[2400]
    with pytest.raises(NotFoundError, match="not in its chain"):  # block 2800 is an orphan now
        replay.resolve_ref(open_storage(built_copy), names[2800][:16])
    ds = Dataset.open(built_copy)
    append_plain(ds, 2)
    now = names_of(built_copy)
    assert len(now) == 2503 and covered_by(built_copy) == 2500  # 2501, 2502: past the batch
    assert bucket_files(built_copy) == expected_buckets(now[:2501])
    for k in (2400, 2501, 2502):
        found, counting = resolved(built_copy, now[k][:16])
        assert found == now[k] and counting.listings == 0


def test_an_orphan_is_not_a_candidate(built_copy: Path) -> None:
    """A crashed writer's block file sharing a chain block's prefix neither matches nor makes
    the prefix ambiguous; alone, it is named as not in the chain."""
    names = names_of(built_copy)
    ds = Dataset.open(built_copy)
    state = ds.state
    for attempt in range(200_000):
        prepared = chain.prepare(state, SetInfo(description=f"lost write {attempt}"))
        orphan = multihash_name(prepared.data)
        if orphan[:8] in {n[:8] for n in names}:
            break
    ds.storage.write_block(orphan, prepared.data)
    chain_block = next(n for n in names if n.startswith(orphan[:8]))
    if sum(n.startswith(orphan[:8]) for n in names) == 1:
        assert resolved(built_copy, orphan[:8])[0] == chain_block
    with pytest.raises(NotFoundError, match="not in its chain"):
        replay.resolve_ref(open_storage(built_copy), orphan[:20])


def test_the_index_command_writes_missing_buckets(built_copy: Path) -> None:
    """An index saved before the buckets existed: ``odf-chain index`` writes them (from the
    seq table), and a checked index keeps them."""
    shutil.rmtree(built_copy / BUCKETS)
    (built_copy / COVERAGE).unlink()
    status = index_read.check_index(str(built_copy))
    assert status.how == "checked" and status.saved
    names = names_of(built_copy)
    assert bucket_files(built_copy) == expected_buckets(names)
    found, counting = resolved(built_copy, names[1234][:16])
    assert found == names[1234] and counting.listings == 0


def _index_findings(root: Path) -> tuple[list, list]:
    """Verify's findings about the index: (errors, warnings)."""
    from odf_chain.verify import verify_path

    report = verify_path(root, check_data=False)
    assert not [p for p in report.errors if not p.rule.startswith("index-")], report.errors
    return report.errors, [p for p in report.warnings if p.rule.startswith("index-")]


def _set_count(root: Path, bucket: str, change: int) -> None:
    """Change the coverage's count of ``bucket`` by ``change``, its checksum made valid."""
    coverage = bytearray((root / COVERAGE).read_bytes())
    at = COVERAGE_HEAD + 4 * int(bucket, 16)
    struct.pack_into("<I", coverage, at, struct.unpack_from("<I", coverage, at)[0] + change)
    struct.pack_into("<I", coverage, len(coverage) - 4, zlib.crc32(coverage[:-4]))
    (root / COVERAGE).write_bytes(coverage)


def test_verify_is_silent_about_true_buckets(built: Path) -> None:
    assert _index_findings(built) == ([], [])


@pytest.mark.parametrize("count", ["kept", "lowered", "moved"])
def test_a_record_deleted_from_a_bucket_is_a_mismatch_and_the_lookup_still_answers(
    built_copy: Path, count: str
) -> None:
    """Block k's record cut out of its bucket (the records after it whole and valid). The
    coverage's count kept (the bucket falls short of it), lowered to match (every checksum
    valid), or moved to another bucket with a valid record appended there (every count and
    checksum valid, one record a block still): verify names the bucket; a lookup of block k,
    which its bucket no longer holds, lists blocks/ and still answers, and so does state_at."""
    names = names_of(built_copy)
    buckets = expected_buckets(names)
    # a block whose record is not its bucket's last (3,000 blocks: most buckets hold 0-2)
    k = next(k for k in range(1000, len(names)) if len(buckets[bucket_file(names[k])]) > RECORD)
    name = bucket_file(names[k])
    expected = buckets[name]
    at = next(
        i
        for i in range(0, len(expected), RECORD)
        if expected[i + 8 : i + 16] == struct.pack("<Q", k)
    )
    if at + RECORD == len(expected):  # the last: take the one before it, which is not
        at -= RECORD
        k = struct.unpack_from("<Q", expected, at + 8)[0]
    path = built_copy / BUCKETS / name
    path.write_bytes(expected[:at] + expected[at + RECORD :])
    if count != "kept":
        _set_count(built_copy, name, -1)
    if count == "moved":
        other = next(b for b in sorted(expected_buckets(names)) if b != name)
        last = (built_copy / BUCKETS / other).read_bytes()[-RECORD:]
        _forge(built_copy, other, bytes.fromhex(other + "0" * 13), len(names) - 1)
        assert (built_copy / BUCKETS / other).read_bytes()[-2 * RECORD : -RECORD] == last
    errors, _ = _index_findings(built_copy)
    named = [name, other] if count == "moved" else [name]
    assert sorted((e.rule, e.path) for e in errors) == sorted(
        ("index-mismatch", f"info/odf-chain-index/prefix/{b}") for b in named
    )
    found, counting = resolved(built_copy, names[k][:16])
    assert found == names[k] and counting.listings >= 1
    assert replay.state_at(open_storage(built_copy), _digest_prefix(names[k])).sequence_number == k


def test_an_altered_record_is_a_mismatch(built_copy: Path) -> None:
    names = names_of(built_copy)
    name = bucket_file(names[10])
    path = built_copy / BUCKETS / name
    data = bytearray(path.read_bytes())
    key, seq = data[:8], struct.unpack_from("<Q", data, 8)[0]
    struct.pack_into("<Q", data, 8, seq + 1)  # the same digest said to be the next block's
    struct.pack_into("<I", data, 16, zlib.crc32(bytes(data[:16])))
    path.write_bytes(data)
    errors, _ = _index_findings(built_copy)
    assert len(errors) == 1 and errors[0].path == f"info/odf-chain-index/prefix/{name}"
    assert f"block {seq}" in errors[0].message, errors[0].message
    assert resolved(built_copy, "f1e20" + key.hex())[0] == names[seq]


def test_a_bucket_cut_short_is_a_warning_not_a_mismatch(built_copy: Path) -> None:
    """What a crash can leave (the records that are there are right, the last cut): readers
    list blocks/; verify warns."""
    names = names_of(built_copy)
    name = bucket_file(names[2999])
    path = built_copy / BUCKETS / name
    path.write_bytes(path.read_bytes()[: -RECORD - 3])
    errors, warnings = _index_findings(built_copy)
    assert errors == [] and [(w.rule, w.path) for w in warnings] == [
        ("index-damaged", f"info/odf-chain-index/prefix/{name}")
    ]
    assert resolved(built_copy, names[2999][:16])[0] == names[2999]


def test_the_coverage_encodes_its_counts_as_the_format_describes() -> None:
    """The coverage's counts, given as any sequence, are written as 4,096 little-endian
    32-bit integers after the head and before the CRC, and read back as the same numbers; a
    count list of another length is refused."""
    from odf_chain.index.records import PREFIX_BUCKETS, PrefixCoverage

    counts = [(i * 7919) % 100_000 for i in range(PREFIX_BUCKETS)]
    block = bytes([0x1E, 0x20]) + bytes(range(32))
    raw = PrefixCoverage(41, block, tuple(counts)).encode()
    head = struct.calcsize("<Q34s")
    assert struct.unpack_from("<Q34s", raw) == (41, block)
    assert list(struct.unpack_from(f"<{PREFIX_BUCKETS}I", raw, head)) == counts
    assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    decoded = PrefixCoverage.decode(raw, "prefixes")
    assert (decoded.sequence_number, decoded.block_hash, list(decoded.counts)) == (
        41,
        block,
        counts,
    )
    assert PrefixCoverage(41, block, decoded.counts).encode() == raw
    with pytest.raises(ValueError, match="4096 buckets"):
        PrefixCoverage(41, block, counts[:-1]).encode()
