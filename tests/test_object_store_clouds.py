"""Datasets on Azure and GCS, against emulators from the package registries, each on 127.0.0.1
in its own process (tests/azurite_server.py, tests/gcs_server.py), as S3 is tested against moto
(tests/test_object_store.py).

Azurite enforces Azure's ``If-None-Match: *`` and ``If-Match: <ETag>``: the head moves by
compare-and-swap there, and eight writer processes and a killed one lose and duplicate nothing.
fake-gcs-server enforces no generation precondition obstore can send: odf_chain finds that out
before its first write and refuses a second writer, and a declared single writer works."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
import urllib.request

import obstore
import pyarrow as pa
import pytest

from odf_chain import Dataset
from odf_chain.errors import ConflictError, StorageError
from odf_chain.events import AddData
from odf_chain.gc import collect_garbage
from odf_chain.storage import open_storage
from odf_chain.storage.conditional import ConditionalStore
from odf_chain.verify import verify
from tests.test_object_store import SCHEMA, _rows

BACKOFF_CAP = 1.0  # seconds


def _end_to_end(uri: str, *, single_writer: bool = False) -> Dataset:
    """Create, write (and evolve), read back at a block, verify with a receipt, gc an orphan:
    what tests/test_object_store.py does on S3."""
    ds = Dataset.create(uri, single_writer=single_writer)
    ds.write(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    first = ds.refresh().head
    ds.write(pa.table({"id": [4], "name": ["d"], "score": [0.5]}), evolve=True)
    receipt = ds.receipt()
    ds.write(pa.table({"id": [5], "name": ["e"], "score": [1.5]}))
    reopened = Dataset.open(uri)
    state = reopened.state
    assert (state.num_records, state.num_slices, state.next_offset) == (5, 3, 5)
    assert state.head == ds.refresh().head
    assert sorted(r["id"] for r in _rows(reopened)) == [1, 2, 3, 4, 5]
    at_first = reopened.to_table(at=str(first))
    assert sorted(at_first.column("id").to_pylist()) == [1, 2, 3]
    report = reopened.verify(receipts=[receipt])
    assert report.ok and report.slices_checked == 3 and not report.warnings, [
        p.line() for p in report.errors + report.warnings
    ]
    moves = open_storage(uri).read_head_log()
    assert [m.new for m in moves][-1] == str(state.head) and len(moves) == 4
    assert [m.old for m in moves][1:] == [m.new for m in moves][:-1]
    storage = open_storage(uri, single_writer=single_writer)
    orphan = "f1e20" + "ab" * 32
    with storage.filesystem.open_output_stream(storage.fs_path(f"data/{orphan}")) as f:
        f.write(b"left by a crashed writer")
    assert collect_garbage(storage).kept_young == [f"data/{orphan}"]
    assert collect_garbage(storage, min_age=0, single_writer=True).removed == [f"data/{orphan}"]
    assert sorted(storage.data_names()) == sorted(
        str(e.block.event.new_data.physical_hash)
        for e in reopened.blocks()
        if isinstance(e.block.event, AddData)
    )
    assert reopened.verify().ok
    return reopened


# -- Azure (Azurite) ---------------------------------------------------------------------------


def test_azurite_enforces_the_preconditions_obstore_sends(az_container: str) -> None:
    """The emulator itself: a create-only write over an existing blob and a write conditional
    on a replaced ETag are refused (412), as Azure refuses them; odf_chain's own check agrees."""
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    store = obstore.store.from_url(f"{az_container}/raw")
    obstore.put(store, "x", b"first", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, "x", b"second", mode="create")
    meta = obstore.head(store, "x")
    obstore.put(store, "x", b"third", mode={"e_tag": meta["e_tag"]})
    with pytest.raises(PreconditionError):
        obstore.put(store, "x", b"fourth", mode={"e_tag": meta["e_tag"]})
    assert bytes(obstore.get(store, "x").bytes()) == b"third"
    conditional = ConditionalStore.for_uri(f"{az_container}/checked")
    assert conditional is not None and conditional.precondition_gap() is None
    assert list(obstore.list(obstore.store.from_url(f"{az_container}/checked"))) == []


def test_a_dataset_on_azure_end_to_end(az_container: str) -> None:
    uri = f"{az_container}/sales"
    dataset = _end_to_end(uri)
    assert dataset.storage.head_moves_atomically


def _writer(uri: str, writer: int, writes: int, queue) -> None:
    """One writer process: ``writes`` appends of one row each, retried after a lost race
    (tests/test_object_store.py's, with a shorter back-off: one server thread serves all)."""
    acknowledged, conflicts = [], 0
    jitter = random.Random(writer)
    try:
        for n in range(writes):
            for attempt in range(200):
                try:
                    table = pa.table({"writer": [writer], "n": [n]}, schema=SCHEMA)
                    Dataset.open(uri).write(table)
                except ConflictError:  # lost the race: back off (capped, jittered) and retry
                    conflicts += 1
                    time.sleep(jitter.uniform(0, min(BACKOFF_CAP, 0.05 * 2**attempt)))
                    continue
                acknowledged.append(n)
                break
    except Exception as exc:  # said, not lost in a child's stderr: the test fails on it
        queue.put((writer, acknowledged, f"{type(exc).__name__}: {exc}"))
        return
    queue.put((writer, acknowledged, conflicts))


def test_eight_writer_processes_on_azure_lose_and_duplicate_nothing(az_container: str) -> None:
    uri = f"{az_container}/eight"
    Dataset.create(uri).set_schema(SCHEMA)
    writers, writes = 8, 20
    context = multiprocessing.get_context("spawn")  # obstore's runtime does not survive fork
    queue = context.Queue()
    processes = [
        context.Process(target=_writer, args=(uri, w, writes, queue)) for w in range(writers)
    ]
    for p in processes:
        p.start()
    results = [queue.get(timeout=600) for _ in processes]
    for p in processes:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert not [r for r in results if isinstance(r[2], str)], results
    acknowledged = {(w, n) for w, done, _ in results for n in done}
    assert len(acknowledged) == writers * writes
    conflicts = sum(c for *_, c in results)
    dataset = Dataset.open(uri)
    rows = _rows(dataset)
    pairs = [(r["writer"], r["n"]) for r in rows]
    lost = len(acknowledged - set(pairs))
    duplicated = len(pairs) - len(set(pairs))
    print(
        f"{len(acknowledged)} acknowledged, {lost} lost, {duplicated} duplicated, "
        f"{conflicts} lost races"
    )
    assert conflicts > 0  # the writers did race
    assert sorted(pairs) == sorted(acknowledged)  # each acknowledged write exactly once
    assert [r["offset"] for r in rows] == list(range(writers * writes))
    state = dataset.state
    assert state.num_records == state.num_slices == state.next_offset == writers * writes
    report = verify(dataset.storage)
    assert report.ok and report.slices_checked == writers * writes, [
        p.line() for p in report.errors
    ]
    assert not [p.line() for p in report.warnings if p.rule.startswith("orphan")]
    assert len(dataset.storage.data_names()) == writers * writes
    assert len(dataset.storage.read_head_log()) == 2 + writers * writes


def test_a_move_logged_between_the_rollback_checks_reads_is_no_rollback(
    az_container: str, monkeypatch
) -> None:
    """What eight writers on Azurite ran into: a writer checks that the head was not moved back
    (the head log's last line against its head) while another writer moves the head and logs
    it. Read head first and log second, that looked like a rollback (head-rollback, the write
    refused); the log is read first, then the head."""
    from odf_chain import chain

    uri = f"{az_container}/checks"
    Dataset.create(uri).set_schema(SCHEMA)
    Dataset.open(uri).write(pa.table({"writer": [0], "n": [0]}, schema=SCHEMA))
    mine, theirs = Dataset.open(uri), Dataset.open(uri)
    state = mine.state
    storage = mine.storage
    read_head, logged_head = storage.read_head, storage.logged_head
    reads: list[str] = []

    def another_writer_moves_first():  # between this writer's two reads
        reads.append("log")
        theirs.write(pa.table({"writer": [1], "n": [0]}, schema=SCHEMA))
        return logged_head()

    def head():
        reads.append("head")
        return read_head()

    monkeypatch.setattr(storage, "logged_head", another_writer_moves_first)
    monkeypatch.setattr(storage, "read_head", head)
    chain.check_not_rolled_back(storage, state)  # no RuleViolation: the head moved on
    assert reads == ["log", "head"]
    monkeypatch.undo()
    assert Dataset.open(uri).state.num_records == 2 and verify(open_storage(uri)).ok


def _endless_writer(uri: str, queue, hold_at_head_move: bool) -> None:
    """Appends one row after another, saying which each time one is acknowledged. With
    ``hold_at_head_move``, the sixth write says "moving" and waits once its slice and block
    are stored and the head compared, just before the head is replaced."""
    from odf_chain.storage.fs import FsStorage

    check_needed = FsStorage._check_needed

    def hold(self, *args, **kwargs):
        check_needed(self, *args, **kwargs)
        queue.put("moving")
        time.sleep(600)

    n = 0
    while True:
        if n == 5 and hold_at_head_move:
            FsStorage._check_needed = hold
        Dataset.open(uri).write(pa.table({"writer": [99], "n": [n]}, schema=SCHEMA))
        queue.put(n)
        n += 1


@pytest.mark.parametrize("when", ["after_an_acknowledgement", "at_the_head_move"])
def test_a_writer_killed_mid_write_on_azure_loses_nothing_committed(
    az_container: str, when: str
) -> None:
    """SIGKILL during the writer's sixth write: right after the fifth is acknowledged
    (wherever the sixth then is), or with its slice and block stored, just before its head
    move. Every acknowledged write stays, once; verify is OK; gc takes what the killed write
    left; the next writer appends after it."""
    uri = f"{az_container}/killed"
    Dataset.create(uri).set_schema(SCHEMA)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    holding = when == "at_the_head_move"
    process = context.Process(target=_endless_writer, args=(uri, queue, holding))
    process.start()
    acknowledged = [queue.get(timeout=300) for _ in range(5)]
    if holding:
        assert queue.get(timeout=300) == "moving"
    os.kill(process.pid, signal.SIGKILL)  # during the sixth write
    process.join(timeout=60)
    assert process.exitcode == -signal.SIGKILL
    while not queue.empty():  # acknowledged before the kill, read after it
        acknowledged.append(queue.get(timeout=5))
    dataset = Dataset.open(uri)
    committed = [r["n"] for r in _rows(dataset)]
    # every acknowledged write, once; at most the one under way besides (its head move may
    # have landed before it could say so), and not that one when killed before its move
    assert committed[: len(acknowledged)] == acknowledged
    assert committed == list(range(len(committed))) and len(committed) <= len(acknowledged) + 1
    report = verify(dataset.storage)
    assert report.ok, [p.line() for p in report.errors]
    # a block the killed write stored on the head, never named by it: verify warns (it could
    # be a rolled-back head's) and gc keeps it until told to discard it
    descendants = sorted(report.descendants)
    assert len(descendants) <= 1
    if holding:
        assert committed == acknowledged == [0, 1, 2, 3, 4]
        assert len(descendants) == 1 and report.descendants[descendants[0]]  # with its slice
        rules = [p.rule for p in report.warnings]
        assert rules == ["unreferenced-descendants"], [p.line() for p in report.warnings]
    collect_garbage(
        open_storage(uri), min_age=0, single_writer=True, discard_uncommitted=descendants
    )
    storage = open_storage(uri)
    assert storage.leftover_staging() == []
    assert len(storage.data_names()) == len(committed)
    Dataset.open(uri).write(pa.table({"writer": [0], "n": [0]}, schema=SCHEMA))
    after = Dataset.open(uri)
    assert after.state.num_records == len(committed) + 1
    report = verify(after.storage)
    assert report.ok and not report.warnings, [p.line() for p in report.problems]
    print(f"{len(acknowledged)} acknowledged before the kill, {len(committed)} committed")


def test_odf_chain_ingest_to_azure_with_local_spark(spark, az_container, tmp_path) -> None:
    from tests.cli_run import run_ingest
    from tests.test_cli import assert_clean, run_verify

    (tmp_path / "file.csv").write_text(
        "station,temperature_c\n" + "".join(f"s{i},{i / 10}\n" for i in range(50))
    )
    uri = f"{az_container}/ds"
    done = run_ingest(spark, [uri, "file.csv", "--format", "csv", "--create"], cwd=tmp_path)
    assert_clean(done)
    assert done.returncode == 0, done.stderr[-2000:]
    dataset = Dataset.open(uri)
    rows = sorted(_rows(dataset), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(50))
    assert [r["station"] for r in rows[:2]] == ["s0", "s1"] and rows[-1]["temperature_c"] == 4.9
    report = dataset.verify(deep=True)
    assert report.ok and report.rows_checked == 50, [p.line() for p in report.problems]
    checked = run_verify(uri)
    assert checked.returncode == 0 and "OK" in checked.stdout, checked.stdout + checked.stderr


# -- GCS (fake-gcs-server) ---------------------------------------------------------------------


def _objects(gcs_server, bucket_uri: str) -> list[str]:
    bucket = bucket_uri.removeprefix("gs://")
    url = f"{gcs_server.endpoint}/storage/v1/b/{bucket}/o"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return [o["name"] for o in json.load(answer).get("items", [])]


def _upload(gcs_server, bucket_uri: str, name: str, data: bytes, generation: int) -> int:
    """A JSON API media upload under ``ifGenerationMatch``: the status the emulator answers."""
    bucket = bucket_uri.removeprefix("gs://")
    url = (
        f"{gcs_server.endpoint}/upload/storage/v1/b/{bucket}/o"
        f"?uploadType=media&name={name}&ifGenerationMatch={generation}"
    )
    request = urllib.request.Request(url, data=data, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


def test_the_gcs_emulator_enforces_no_generation_precondition(gcs_server, gs_bucket) -> None:
    """The emulator itself. obstore writes through GCS's XML API, whose upload fake-gcs-server
    does not have (a PUT is answered 400, with or without x-goog-if-generation-match); its JSON
    API uploads ignore ifGenerationMatch: a create-only upload (ifGenerationMatch=0) over an
    existing object replaces it, and so does one naming a generation it does not have, where
    GCS answers 412 to both."""
    key = {"gcs_base_url": gcs_server.endpoint, "disable_oauth": True, "client_email": ""}
    key |= {"private_key": "", "private_key_id": ""}  # object_store's own emulator settings
    store = obstore.store.from_url(
        f"{gs_bucket}/raw",
        config={"google_service_account_key": json.dumps(key)},
        client_options={"allow_http": True},
    )
    with pytest.raises(Exception, match="400 Bad Request"):
        obstore.put(store, "x", b"first", mode="create")
    assert _upload(gcs_server, gs_bucket, "raw/y", b"first", 0) == 200
    assert _upload(gcs_server, gs_bucket, "raw/y", b"second", 0) == 200  # GCS: 412
    assert _upload(gcs_server, gs_bucket, "raw/y", b"third", 12345) == 200  # GCS: 412
    # what obstore reads back (it reads through the XML API, which the emulator has)
    assert bytes(obstore.get(store, "y").bytes()) == b"third"
    conditional = ConditionalStore.for_uri(f"{gs_bucket}/checked")
    assert conditional is not None
    assert "400 Bad Request" in (conditional.precondition_gap() or "")


def test_a_second_writer_is_refused_on_the_gcs_emulator(gcs_server, gs_bucket) -> None:
    """Where the store enforces no precondition the head cannot move by compare-and-swap:
    writing is refused before anything is written, as on a filesystem without conditional
    writes, in code and on the command line."""
    from tests.cli_run import run_main
    from tests.test_cli import assert_clean, assert_one_line_error

    uri = f"{gs_bucket}/refused"
    with pytest.raises(StorageError, match=r"does not enforce the conditional writes.*400"):
        Dataset.create(uri)
    assert _objects(gcs_server, gs_bucket) == []  # the check's own object removed too
    refused = run_main(["init", uri])
    assert_one_line_error(refused, "does not enforce the conditional writes", "--single-writer")
    created = run_main(["init", uri, "--single-writer"])
    assert_clean(created)
    assert created.returncode == 0, created.stderr
    with pytest.raises(StorageError, match="does not enforce the conditional writes"):
        Dataset.open(uri).write(pa.table({"x": [1]}))
    assert Dataset.open(uri).state.num_records == 0


def test_a_dataset_on_the_gcs_emulator_end_to_end_with_one_writer(gs_bucket) -> None:
    dataset = _end_to_end(f"{gs_bucket}/sales", single_writer=True)
    assert not dataset.storage.head_moves_atomically  # read, compare, write, read back


def test_odf_chain_ingest_to_gcs_with_local_spark(spark, gs_bucket, tmp_path) -> None:
    from tests.cli_run import run_ingest
    from tests.test_cli import assert_clean, assert_one_line_error, run_verify

    (tmp_path / "file.csv").write_text(
        "station,temperature_c\n" + "".join(f"s{i},{i / 10}\n" for i in range(50))
    )
    uri = f"{gs_bucket}/ds"
    args = [uri, "file.csv", "--format", "csv", "--create"]
    refused = run_ingest(spark, args, cwd=tmp_path)
    assert_one_line_error(refused, "does not enforce the conditional writes", "--single-writer")
    done = run_ingest(spark, [*args, "--single-writer"], cwd=tmp_path)
    assert_clean(done)
    assert done.returncode == 0, done.stderr[-2000:]
    dataset = Dataset.open(uri)
    rows = sorted(_rows(dataset), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(50))
    assert [r["station"] for r in rows[:2]] == ["s0", "s1"] and rows[-1]["temperature_c"] == 4.9
    report = dataset.verify(deep=True)
    assert report.ok and report.rows_checked == 50, [p.line() for p in report.problems]
    checked = run_verify(uri)
    assert checked.returncode == 0 and "OK" in checked.stdout, checked.stdout + checked.stderr
