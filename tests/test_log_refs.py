"""``odf-chain log`` as git's (newest first, streaming, ``-n``, short hashes that fit 100 columns,
``--full``), refs by hash prefix and ``HEAD`` wherever a ref is taken, and usage errors in one
line. The CLI runs by its ``main`` in this process, answering as the process would
(tests/cli_run.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from odf_chain import chain, replay
from odf_chain.dataset import Dataset
from odf_chain.errors import AmbiguousRefError, FormatError, NotFoundError, RuleViolation
from odf_chain.events import AddData, SetInfo, SourceState
from odf_chain.index import read as index_read
from odf_chain.storage import FsStorage, open_storage
from tests.cli_run import run_main
from tests.helpers import multihash_name, snapshot_tree
from tests.test_index import BOUND, CountingStorage, fast_chain

LONG_SOURCE = "s3://landing-zone/" + "/".join(f"partition-{i:02d}" for i in range(12))
WIDE_INFO = "Ventes 販売データ — line one\nline two \u202etxet desrever"
MANY_FIELDS = [f"measurement_{i:02d}_with_a_rather_long_name" for i in range(40)]
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_main(args)


def one_line_error(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    (line,) = p.stderr.splitlines()
    assert line.startswith("odf-chain: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def columns(text: str) -> int:
    """Terminal columns: wide East Asian characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


@pytest.fixture(scope="module")
def awkward_log_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed; a 41-column schema; 2 rows; an AddData whose source name is long; a SetInfo with a
    newline, wide characters and a right-to-left override; a narrower write's AddData (6
    blocks)."""
    root = tmp_path_factory.mktemp("log") / "ds"
    ds = Dataset.create(root)
    measurements = {name: pa.array([0.5, 1.5]) for name in MANY_FIELDS}
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())} | measurements))
    ds.append(
        AddData(
            prev_offset=ds.state.last_offset,
            new_watermark=ds.state.watermark,
            new_source_state=SourceState(LONG_SOURCE, "odf/etag", "e1"),
        )
    )
    ds.append(SetInfo(description=WIDE_INFO))
    ds.write(pa.table({"id": pa.array([3], pa.int64())}))
    return root


def chain_names(root: Path) -> list[str]:
    """Block hashes oldest first, by following prev links from refs/head in the files."""
    return [str(e.hash) for e in Dataset.open(root).blocks()]


# -- log ------------------------------------------------------------------------------------------


def test_log_n_3_prints_a_header_and_three_entries_newest_first_in_100_columns(
    awkward_log_dataset: Path,
) -> None:
    names = chain_names(awkward_log_dataset)
    p = run("log", awkward_log_dataset, "-n", "3")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    header, *lines = p.stdout.splitlines()
    assert header.split() == ["SEQ", "BLOCK", "SYSTEM", "TIME", "(UTC)", "EVENT", "SUMMARY"]
    assert len(lines) == 3
    blocks = {str(e.hash): e.block for e in Dataset.open(awkward_log_dataset).blocks()}
    for line, seq in zip(lines, [5, 4, 3], strict=True):
        assert len(line) <= 100 and columns(line) <= 100, (len(line), line)
        fields = line.split()
        assert fields[0] == str(seq)
        # the digest's hex without the header every block shares: 12 digits (more only when
        # those are all digits, which would read as a sequence number)
        assert names[seq][:5] == "f1e20" and names[seq][5:].startswith(fields[1])
        assert len(fields[1]) == 12 or (fields[1][:-1].isdigit() and not fields[1].isdigit())
        block = blocks[names[seq]]
        assert (
            fields[2]
            == block.system_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        )
        assert fields[3] == block.event_name
    assert lines[0].split()[3:5] == ["AddData", "offsets"]
    assert "SetInfo" in lines[1] and "販売データ" in lines[1]
    assert "\n" not in lines[1] and "\\n" in lines[1] and "\u202e" not in lines[1]
    assert "\\u202e" in run("log", awkward_log_dataset, "--full").stdout  # escaped, not dropped


def test_log_lines_of_long_summaries_end_in_an_ellipsis_and_full_shows_them_whole(
    awkward_log_dataset: Path,
) -> None:
    short = run("log", awkward_log_dataset).stdout.splitlines()[1:]
    full = run("log", awkward_log_dataset, "--full").stdout.splitlines()[1:]
    names = chain_names(awkward_log_dataset)
    assert len(short) == len(full) == len(names) == 6
    for s, f, seq in zip(short, full, range(5, -1, -1), strict=True):
        assert len(s) <= 100 and columns(s) <= 100, s
        assert f.split()[:2] == [str(seq), names[seq]]
        # the short line is the full one with the hash cut to 12 and the summary cut to fit
        s_summary, f_summary = s.split(None, 5)[5], f.split(None, 5)[5]
        if s_summary.endswith("…"):
            assert f_summary.startswith(s_summary[:-1].rstrip()) and len(f_summary) > 30
        else:
            assert s_summary == f_summary
    schema_line, source_line = short[4], short[2]
    assert "SetDataSchema" in schema_line and schema_line.endswith("…")
    assert "AddData" in source_line and source_line.endswith("…")
    assert LONG_SOURCE in full[2] and ", ".join(MANY_FIELDS) in full[4]
    assert max(map(len, full)) > 200  # --full does not cut


def test_log_streams_the_newest_blocks_before_reading_older_ones(
    awkward_log_dataset: Path, tmp_path: Path
) -> None:
    """With the Seed's file gone, -n 3 never reaches it; without -n the newer lines are out
    before the error about the missing block."""
    root = tmp_path / "ds"
    shutil.copytree(awkward_log_dataset, root)
    seed = chain_names(awkward_log_dataset)[0]
    (root / "blocks" / seed).unlink()
    p = run("log", root, "-n", "3")
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 4, p.stderr
    p = run("log", root)
    assert [line.split()[0] for line in p.stdout.splitlines()] == ["SEQ", "5", "4", "3", "2", "1"]
    one_line_error(p, seed, "missing")


def test_log_json_keeps_full_hashes_and_times(awkward_log_dataset: Path) -> None:
    blocks = json.loads(run("log", awkward_log_dataset, "-n", "2", "--json").stdout)
    names = chain_names(awkward_log_dataset)
    assert [b["hash"] for b in blocks] == [names[5], names[4]]
    assert blocks[1]["event"]["description"] == WIDE_INFO


def test_log_n_0_prints_nothing_and_a_negative_n_is_a_usage_error(
    awkward_log_dataset: Path,
) -> None:
    p = run("log", awkward_log_dataset, "-n", "0")
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    p = run("log", awkward_log_dataset, "-n", "-1")
    assert p.returncode == 2 and "0 or more" in p.stderr and p.stdout == ""


# -- refs in the CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [16, 12, 8])
def test_schema_and_fields_take_a_hash_prefix(awkward_log_dataset: Path, length: int) -> None:
    names = chain_names(awkward_log_dataset)
    for seq in (1, 4):
        prefix = names[seq][:length]
        if sum(n.startswith(prefix) for n in names) > 1:
            continue  # 8 characters can be shared by chance: the ambiguity test covers that
        for command in ("schema", "fields"):
            p = run(command, awkward_log_dataset, "--at", prefix)
            assert p.returncode == 0, p.stderr
            assert p.stdout.splitlines()[0] == f"block {seq}  {names[seq]}"


def test_the_short_hash_log_prints_is_a_ref(awkward_log_dataset: Path) -> None:
    names = chain_names(awkward_log_dataset)
    lines = [line.split() for line in run("log", awkward_log_dataset).stdout.splitlines()[1:]]
    for seq, short, time, *_ in lines:
        p = run("fields", awkward_log_dataset, "--at", short, "--json")
        assert p.returncode == 0, p.stderr
        assert (json.loads(p.stdout)["block"], json.loads(p.stdout)["head"]) == (
            int(seq),
            names[int(seq)],
        )
        # the time it prints names the last block of that millisecond
        p = run("fields", awkward_log_dataset, "--at", time, "--json")
        assert json.loads(p.stdout)["block"] == max(int(s) for s, _, t, *_ in lines if t == time)


def test_an_upper_case_prefix_is_the_same_ref(awkward_log_dataset: Path) -> None:
    names = chain_names(awkward_log_dataset)
    p = run("schema", awkward_log_dataset, "--at", names[2][:16].upper())
    assert p.returncode == 0 and p.stdout.startswith(f"block 2  {names[2]}\n"), p.stderr


@pytest.mark.parametrize("head", ["HEAD", "Head", "head"])
def test_head_in_any_case(awkward_log_dataset: Path, head: str) -> None:
    names = chain_names(awkward_log_dataset)
    p = run("schema", awkward_log_dataset, "--at", head)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"block 5  {names[5]}"


def test_export_and_lineage_take_a_prefix(awkward_log_dataset: Path, tmp_path: Path) -> None:
    names = chain_names(awkward_log_dataset)
    out = tmp_path / "dh.json"
    p = run("export", "datahub", awkward_log_dataset, "-o", out, "--at", names[2][:16])
    assert p.returncode == 0, p.stderr
    fields = {
        f["fieldPath"]
        for mcp in json.loads(out.read_text())
        if mcp["aspectName"] == "schemaMetadata"
        for f in mcp["aspect"]["json"]["fields"]
    }
    assert any(path.endswith(".measurement_00_with_a_rather_long_name") for path in fields)
    p = run("lineage", awkward_log_dataset, "--at", names[3][:16], "--json")
    assert p.returncode == 0, p.stderr


def _orphan_sharing(ds: Dataset, target: str, length: int, on_top_of_head: bool) -> str:
    """Store a real block that is not in the chain (a crashed writer's on top of the head, or a
    losing writer's beside the head) whose hash starts with ``target[:length]``: found by
    trying descriptions (4,096 tries on average for 8 characters)."""
    state = ds.state if on_top_of_head else ds.state_at(ds.state.sequence_number - 1)
    for attempt in range(200_000):
        prepared = chain.prepare(state, SetInfo(description=f"lost write {attempt}"))
        name = multihash_name(prepared.data)
        if name.startswith(target[:length]):
            ds.storage.write_block(name, prepared.data)
            return name
    raise AssertionError("no block found with that prefix")  # (1 - 1/4096) ** 200_000 ~ 0


@pytest.fixture(scope="module")
def with_orphans(awkward_log_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("orphans") / "ds"
    shutil.copytree(awkward_log_dataset, root)
    ds = Dataset.open(root)
    names = chain_names(root)
    crashed = _orphan_sharing(ds, names[3], 8, on_top_of_head=True)
    lost = _orphan_sharing(ds, names[5], 8, on_top_of_head=False)
    return {"root": root, "names": names, "crashed": crashed, "lost": lost}


def test_an_orphan_sharing_a_prefix_does_not_make_it_ambiguous(with_orphans: dict) -> None:
    """A ref names a block of the chain: a crashed writer's block file sharing block 3's
    prefix is not a candidate (listing ``blocks/`` used to count it: "2 blocks")."""
    root, names, crashed = with_orphans["root"], with_orphans["names"], with_orphans["crashed"]
    prefix = names[3][:8]
    assert crashed.startswith(prefix) and crashed != names[3]
    before = snapshot_tree(root)
    for command in ("schema", "fields", "lineage"):
        p = run(command, root, "--at", prefix)
        assert p.returncode == 0, p.stderr
    assert run("schema", root, "--at", prefix).stdout.startswith(f"block 3  {names[3]}\n")
    assert snapshot_tree(root) == before


@pytest.mark.parametrize("which", ["crashed", "lost"])
def test_an_orphan_blocks_prefix_says_it_is_not_in_the_chain(
    with_orphans: dict, which: str
) -> None:
    orphan = with_orphans[which]
    one_line_error(run("schema", with_orphans["root"], "--at", orphan[:16]), orphan, "not in")
    one_line_error(run("schema", with_orphans["root"], "--at", orphan), orphan, "not in")


@pytest.mark.parametrize(
    ("ref", "fragments"),
    [
        ("f16200ab", ("no block of", "starts with 'f16200ab'")),  # sha3's header: no block here
        ("f1e20", ("too short", "at least 6")),
        ("abcde", ("too short", "at least 6")),
        ("f1e20ab", ("no block of", "starts with 'f1e20ab'")),  # a digest prefix, as log prints
        ("fXe20abcdef", ("invalid hex",)),
    ],
)
def test_bad_prefixes_are_one_line(
    awkward_log_dataset: Path, ref: str, fragments: tuple[str, ...]
) -> None:
    one_line_error(run("schema", awkward_log_dataset, "--at", ref), *fragments)


# -- refs in the library --------------------------------------------------------------------------


def test_parse_ref_forms() -> None:
    assert replay.parse_ref("HEAD") == replay.parse_ref("head") == replay.parse_ref(" Head ")
    assert replay.parse_ref("f1e20abc").prefix == "f1e20abc"
    assert replay.parse_ref("F1E20ABC").prefix == "f1e20abc"  # multibase's upper-case base16
    assert replay.parse_ref("f1e20abc0123").block_hash is None
    full = "f1e20" + "ab" * 32
    assert str(replay.parse_ref(full).block_hash) == full
    assert replay.parse_ref("abc123").prefix == "abc123"  # a digest's start, without the header
    assert replay.parse_ref("ABC123").prefix == "abc123"
    assert replay.parse_ref("123456").sequence_number == 123456  # digits only: a number
    with pytest.raises(FormatError, match="too short"):
        replay.parse_ref("f1e2a")
    with pytest.raises(FormatError, match="too short"):
        replay.parse_ref("abcde")
    with pytest.raises(FormatError, match="longer than a digest"):
        replay.parse_ref("a" * 66)
    with pytest.raises(FormatError, match="unrecognised ref"):
        replay.parse_ref("²")  # a digit to str.isdigit, not to int()


@pytest.fixture(scope="module")
def long_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5,000 blocks: more than the 4,096 values of a digest's first 3 hex digits, so two of them
    share an 8-character prefix."""
    root = tmp_path_factory.mktemp("long") / "ds"
    fast_chain(root, 5000)
    index_read.rebuild(open_storage(root), save=True)
    return root


def test_prefixes_resolve_with_bounded_reads_and_agree_with_select(long_chain: Path) -> None:
    storage = open_storage(long_chain)
    entries = replay.load_chain(storage)
    for k in (0, 1, 2500, 4999):
        counting = CountingStorage(storage)
        assert replay.state_at(counting, str(entries[k].hash)[:16]).sequence_number == k
        assert counting.blocks <= BOUND, (k, counting.blocks)
        assert replay.select(entries, str(entries[k].hash)[:16]) == k
    # pigeonhole: two of the 5,000 share 8 characters
    seen: dict[str, int] = {}
    for k, entry in enumerate(entries):
        shared = seen.setdefault(str(entry.hash)[:8], k)
        if shared != k:
            break
    prefix = str(entry.hash)[:8]
    with pytest.raises(AmbiguousRefError, match=rf"ambiguous ref '{prefix}': \d+ blocks"):
        replay.state_at(storage, prefix)
    with pytest.raises(AmbiguousRefError, match=rf"ambiguous ref '{prefix}'"):
        replay.select(entries, prefix)
    with pytest.raises(NotFoundError, match="no block of the chain"):
        replay.select(entries[:1], str(entries[1].hash)[:16])


def test_an_ambiguous_prefix_is_one_line_naming_how_many_blocks(long_chain: Path) -> None:
    names = [str(e.hash) for e in replay.load_chain(open_storage(long_chain))]
    seen: dict[str, int] = {}
    prefix = next(n[:8] for k, n in enumerate(names) if seen.setdefault(n[:8], k) != k)
    before = snapshot_tree(long_chain)
    for command in ("schema", "fields"):
        line = one_line_error(run(command, long_chain, "--at", prefix), "ambiguous", prefix)
        sharing = sum(n.startswith(prefix) for n in names)
        assert f" {sharing} blocks " in line and "more characters" in line
    assert snapshot_tree(long_chain) == before
    # longer prefixes tell them apart
    k = seen[prefix]
    p = run("schema", long_chain, "--at", names[k][:16])
    assert p.returncode == 0 and p.stdout.startswith(f"block {k}  {names[k]}\n"), p.stderr


def test_digest_prefixes_without_the_header_resolve_as_the_full_ones(long_chain: Path) -> None:
    storage = open_storage(long_chain)
    entries = replay.load_chain(storage)
    for k in (0, 1, 2500, 4999):
        digest = str(entries[k].hash)[5:]  # after 'f1e20'
        for prefix in (digest[:12], digest[:12].upper(), digest[:8], digest):
            if prefix.isdigit():
                continue  # a number: a sequence number, which log never prints as a hash
            counting = CountingStorage(storage)
            assert replay.state_at(counting, prefix).sequence_number == k
            assert counting.blocks <= BOUND, (k, counting.blocks)
            assert replay.select(entries, prefix) == k


def test_log_prints_digest_prefixes_of_a_sha3_chain_that_resolve(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds", hash="sha3-256")
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    ds.append(SetInfo(description="sha3"))
    names = chain_names_of(ds)
    assert all(name.startswith("f1620") for name in names)  # sha3-256's header
    lines = run("log", tmp_path / "ds").stdout.splitlines()[1:]
    for line in lines:
        seq, short = line.split()[:2]
        assert names[int(seq)][5:].startswith(short)
        p = run("schema", tmp_path / "ds", "--at", short)
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[0] == f"block {seq}  {names[int(seq)]}"
        assert run("diff", tmp_path / "ds", short).returncode == 0


def test_a_short_hash_of_digits_only_is_lengthened_to_its_first_letter() -> None:
    from odf_chain.format.multihash import Multihash
    from odf_chain.views.blocks import short_hash

    digits = Multihash("blake3", bytes.fromhex("1234567890123456" + "7a" * 24))
    assert short_hash(digits) == "12345678901234567a"
    plain = Multihash("blake3", bytes.fromhex("0123456789ab" + "cd" * 26))
    assert short_hash(plain) == "0123456789ab"
    assert replay.parse_ref("12345678901234567a").prefix == "12345678901234567a"


def test_a_losing_writers_block_is_told_apart_without_a_rebuild(
    long_chain: Path, tmp_path: Path
) -> None:
    root = tmp_path / "ds"
    shutil.copytree(long_chain, root)
    ds = Dataset.open(root)
    parent = ds.state_at(2999)  # the loser appended at 3000, as the winner did
    prepared = chain.prepare(parent, SetInfo(description="the losing write"))
    name = multihash_name(prepared.data)
    ds.storage.write_block(name, prepared.data)
    counting = CountingStorage(ds.storage)
    with pytest.raises(NotFoundError, match=r"sequence number 3000\).*not in its chain"):
        replay.state_at(counting, name[:16])
    assert counting.blocks <= 4  # the orphan and the table's block 3000, not a fold of 5,000


def test_a_prefix_on_a_chain_with_a_broken_block_answers_before_it(tmp_path: Path) -> None:
    """The folding fallback (a chain that breaks a rule cannot be indexed) takes prefixes as
    the index does."""
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    good = str(ds.state.head)
    head = chain.load_block(ds.storage, ds.state.head)
    bad = chain.prepare(ds.state, SetInfo(description="x"))
    # the same block bytes with a sequence number that skips one: breaks the sequence rule
    from odf_chain.format.codec import encode_block

    block = bad.entry.block
    data = encode_block(
        type(block)(
            system_time=block.system_time,
            prev_block_hash=head.hash,
            sequence_number=block.sequence_number + 1,
            event=block.event,
        )
    )
    bad_name = multihash_name(data)
    ds.storage.write_block(bad_name, data)
    ds.storage.compare_and_swap_head(good, bad_name)
    assert Dataset.open(tmp_path / "ds").state_at(good[:16]).sequence_number == 2
    with pytest.raises(RuleViolation):
        Dataset.open(tmp_path / "ds").state_at(bad_name[:16])


def test_prefix_listing_on_an_object_store_and_a_plain_filesystem(s3_bucket: str) -> None:
    ds = Dataset.create(f"{s3_bucket}/ds")
    ds.write(pa.table({"id": pa.array([1], pa.int64())}))
    names = chain_names_of(ds)
    storage = ds.storage
    assert isinstance(storage, FsStorage)
    # neither a key below a block's name nor one in a sibling folder is a block
    fs = storage.filesystem
    with fs.open_output_stream(storage.fs_path(f"blocks/{names[1]}x/y")) as f:
        f.write(b"x")
    with fs.open_output_stream(storage.fs_path(f"blocksx/{names[1]}")) as f:
        f.write(b"x")
    for k, name in enumerate(names):
        assert storage.block_names_starting(name[:16], 10) == [name]
        assert ds.state_at(name[:12]).sequence_number == k
    assert storage.block_names_starting("f1e20", 10) == sorted(names)
    assert storage.block_names_starting("f1e20", 2) == sorted(names)[:2]
    with pytest.raises(NotFoundError, match="no block of s3://"):
        ds.state_at("f0" * 8)

    memory = pafs._MockFileSystem()
    plain = Dataset.create("bucket/ds", filesystem=memory, single_writer=True)
    plain.write(pa.table({"id": pa.array([1], pa.int64())}))
    for k, name in enumerate(chain_names_of(plain)):
        assert plain.storage.block_names_starting(name[:10], 10) == [name]
        assert plain.state_at(name[:10]).sequence_number == k


def chain_names_of(ds: Dataset) -> list[str]:
    return [str(e.hash) for e in ds.blocks()]


# -- usage errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment", "hint"),
    [
        ((), "required: COMMAND", "odf-chain --help"),
        (("frobnicate",), "invalid choice: 'frobnicate'", "odf-chain --help"),
        (("log",), "required: dir", "odf-chain log --help"),
        (("log", "DIR", "--bogus"), "unrecognized arguments: --bogus", "odf-chain log --help"),
        (("log", "DIR", "-n", "three"), "'three'", "odf-chain log --help"),
        (("schema",), "required", "odf-chain schema --help"),
        (("init", "X", "--hash", "md5"), "invalid choice: 'md5'", "odf-chain init --help"),
        (("export", "datahub"), "required: dir", "odf-chain export datahub --help"),
        (("lineage", "DIR", "--offset", "x"), "invalid int value", "odf-chain lineage --help"),
        (("--frob",), "required: COMMAND", "odf-chain --help"),
    ],
)
def test_usage_errors_are_one_line_and_a_hint(
    args: tuple[str, ...], fragment: str, hint: str
) -> None:
    p = run(*args)
    assert p.returncode == 2 and p.stdout == ""
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and "Traceback" not in p.stderr, p.stderr
    assert ": error: " in lines[0] and fragment in lines[0], lines
    assert lines[1] == f"try: {hint}"


@pytest.mark.parametrize(
    ("args", "fragment"), [((), "required: dir"), (("DIR", "--bogus"), "--bogus")]
)
def test_chain_verify_usage_errors_are_one_line_and_a_hint(
    args: tuple[str, ...], fragment: str
) -> None:
    p = run_main(args, entry="chain-verify")
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("chain-verify: error: "), p.stderr
    assert fragment in lines[0] and lines[1] == "try: chain-verify --help"


def test_help_and_version_still_exit_0() -> None:
    p = run("log", "--help")
    assert p.returncode == 0 and "--full" in p.stdout and "-n N" in p.stdout
    assert run("--version").returncode == 0


def test_log_times_are_one_utc_format() -> None:
    from odf_chain.views.blocks import log_time

    assert log_time(datetime(2026, 11, 24, 10, 15, 0, 123456, tzinfo=UTC)) == (
        "2026-11-24T10:15:00.123Z"
    )
    assert TIME.fullmatch(log_time(datetime(2026, 1, 2, tzinfo=UTC)))
