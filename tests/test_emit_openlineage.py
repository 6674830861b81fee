"""Live OpenLineage emission (odf_chain.emit) against a real HTTP server on 127.0.0.1: what one
write sends, what a backend that is down or slow leaves in the outbox, and who sends it later."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import Dataset
from odf_chain.emit import config, live_run, outbox, send_outbox
from odf_chain.errors import NewColumnsError, OdfChainError
from odf_chain.export.openlineage import openlineage_events
from odf_chain.gc import collect_garbage_path
from odf_chain.state import lineage_of
from odf_chain.verify import verify_path
from tests.cli_run import run_main
from tests.openlineage_server import DownBackend, LineageServer
from tests.test_export_openlineage import rebuild
from tests.test_fs_storage import BACKENDS

RETRY_NONE = '{"total": 0}'


@pytest.fixture
def ol_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """No OpenLineage setting at all (no variable, no openlineage.yml where the client looks),
    and every OPENLINEAGE variable put back afterwards, those the client adds itself too (it
    copies OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__TRANSPORTS__DEFAULT_HTTP__*)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    for key in saved:
        monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(config.TIMEOUT_VARIABLE, "3")
    yield monkeypatch
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    os.environ.update(saved)


@pytest.fixture
def down() -> Iterator[DownBackend]:
    """A backend that is down, its port kept bound (no other worker's server can take it)."""
    with DownBackend() as backend:
        yield backend


def http_transport(env: pytest.MonkeyPatch, url: str, timeout: float = 2.0) -> None:
    """The client's own structured configuration: an HTTP transport without retries."""
    env.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
    env.setenv("OPENLINEAGE__TRANSPORT__URL", url)
    env.setenv("OPENLINEAGE__TRANSPORT__TIMEOUT", str(timeout))
    env.setenv("OPENLINEAGE__TRANSPORT__RETRY", RETRY_NONE)


def queued(path: Path) -> list[str]:
    folder = path / "info" / outbox.OUTBOX_DIR
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def table(n: int = 3, extra: bool = False) -> pa.Table:
    columns = {"id": pa.array(range(n), pa.int64()), "name": [f"n{i}" for i in range(n)]}
    if extra:
        columns["more"] = [1.0] * n
    return pa.table(columns)


# -- configuration and the outbox, without Spark -------------------------------------------------


def test_nothing_configured_builds_no_client(ol_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert config.client() is None
    ol_env.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    assert config.client() is not None
    ol_env.setenv("OPENLINEAGE_DISABLED", "true")
    assert config.client() is None
    ol_env.delenv("OPENLINEAGE_DISABLED")
    ol_env.delenv("OPENLINEAGE_URL")
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        ol_env.delenv(key)  # what the client copied from OPENLINEAGE_URL
    (tmp_path / "openlineage.yml").write_text(
        "transport:\n  type: http\n  url: http://127.0.0.1:9\n"
    )
    assert config.client().transport.kind == "http"
    (tmp_path / "openlineage.yml").write_text("transport:\n  type: console\n")
    assert config.client().transport.kind == "console"  # asked for: it is configured


def test_outbox_orders_start_before_complete_and_queues_once(tmp_path: Path) -> None:
    dataset = Dataset.create(tmp_path / "d")
    storage = dataset.storage
    run = str(uuid.uuid4())

    def event(kind: str, time: str, run_id: str = run) -> dict:
        return {"eventType": kind, "eventTime": time, "run": {"runId": run_id}}

    other = str(uuid.uuid4())
    outbox.put(storage, event("COMPLETE", "2026-01-01T00:00:01+00:00"))
    outbox.put(storage, event("START", "2026-01-01T00:00:01+00:00"))
    outbox.put(storage, event("START", "2026-01-01T00:00:00+00:00", other))
    outbox.put(storage, event("START", "2026-01-01T00:00:05+00:00"))  # queued already: kept
    (tmp_path / "d" / "info" / outbox.OUTBOX_DIR / "stray.txt").write_text("x")
    assert [(e.run_id, e.event_type) for e in outbox.pending(storage)] == [
        (other, "START"),
        (run, "START"),
        (run, "COMPLETE"),
    ]
    assert outbox.pending(storage)[1].event["eventTime"] == "2026-01-01T00:00:01+00:00"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_outbox_on_every_storage_backend(backend: str, tmp_path: Path) -> None:
    storage = BACKENDS[backend](tmp_path)
    run = str(uuid.uuid4())
    for kind, time in (("COMPLETE", "01"), ("START", "00")):
        event = {"eventType": kind, "eventTime": f"2026-01-01T00:00:{time}+00:00"}
        outbox.put(storage, {**event, "run": {"runId": run}})
    assert [e.name for e in outbox.pending(storage)] == [
        f"{run}.START.json",
        f"{run}.COMPLETE.json",
    ]
    outbox.remove(storage, f"{run}.START.json")
    assert [e.event_type for e in outbox.pending(storage)] == ["COMPLETE"]
    outbox.discard_run(storage, run)
    assert outbox.pending(storage) == []


def test_emit_says_when_nothing_is_configured(ol_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dataset = Dataset.create(tmp_path / "d")
    done = run_main(["lineage", tmp_path / "d", "--emit"])
    assert done.returncode == 0 and "0 OpenLineage event(s) sent, 0 left" in done.stdout
    run = str(uuid.uuid4())
    event = {"eventType": "START", "eventTime": "2026-01-01T00:00:00+00:00", "run": {"runId": run}}
    outbox.put(dataset.storage, event)
    done = run_main(["lineage", tmp_path / "d", "--emit"])
    assert done.returncode == 2 and "OpenLineage is not configured" in done.stderr
    done = run_main(["lineage", tmp_path / "d", "--emit", "--json"])
    assert done.returncode == 2 and "--emit sends the outbox: no --json" in done.stderr


def test_a_slow_backend_costs_the_bound_and_the_event_waits(
    ol_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dataset = Dataset.create(tmp_path / "d")
    dataset.write(table())
    state = dataset.refresh()
    with LineageServer() as server:
        server.hold.set()  # every request waits (the transport's timeout is longer)
        http_transport(ol_env, server.url, timeout=30)
        ol_env.setenv(config.TIMEOUT_VARIABLE, "0.5")
        run = live_run(dataset.storage, "job", str(uuid.uuid4()), state.system_time)
        run.start(state)  # returns after the bound, the send still hanging
        assert run.last is not None and not run.last.finished
        assert queued(tmp_path / "d") == [f"{run.run_id}.START.json"]
        # the backend answers at last: the hanging send completes and removes its entry;
        # a delivery now waits for it (one delivery at a time) and finds nothing to send again
        server.release.set()
        server.hold.clear()
        result = send_outbox(dataset.storage, timeout=None)
        assert result.left == 0 and queued(tmp_path / "d") == []
        assert server.arrived == 1  # never sent twice


def test_a_backend_that_is_down_costs_the_bound_with_the_clients_own_retries(
    ol_env: pytest.MonkeyPatch, tmp_path: Path, down: DownBackend
) -> None:
    dataset = Dataset.create(tmp_path / "d")
    state = dataset.refresh()
    ol_env.setenv("OPENLINEAGE_URL", down.url)  # retries with backoff
    ol_env.setenv(config.TIMEOUT_VARIABLE, "0.5")
    run = live_run(dataset.storage, "job", str(uuid.uuid4()), state.system_time)
    run.start(state)  # returns after the bound: the client's retries go on in the background
    assert run.last is not None and not run.last.finished
    assert queued(tmp_path / "d") == [f"{run.run_id}.START.json"]


# -- Spark writers -------------------------------------------------------------------------------


def spark_rows(spark, n: int = 5, extra: bool = False):
    df = spark.createDataFrame([(i, f"n{i}") for i in range(n)], "id long, name string")
    return df.withColumn("more", df.id * 2.0) if extra else df


def test_one_write_sends_one_start_and_one_complete(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from odf_chain.spark import write

    with LineageServer() as server:
        ol_env.setenv("OPENLINEAGE_URL", server.url)
        result = write(spark_rows(spark), tmp_path / "d", create=True, job_name="emit-test")
    (start,) = server.of_type("START")
    (complete,) = server.of_type("COMPLETE")
    assert len(server.events) == 2 and set(server.paths) == {"/api/v1/lineage"}
    for event in server.events:
        rebuild(event)  # the client's own classes accept it
    assert start["run"]["runId"] == complete["run"]["runId"] == result.lineage.run.run_id
    assert start["eventTime"] <= complete["eventTime"]
    assert start["job"] == complete["job"] and complete["job"]["name"] == "emit-test"
    (out,) = complete["outputs"]
    assert out["facets"]["version"]["datasetVersion"] == str(result.head)
    assert set(out["facets"]["columnLineage"]["fields"]) >= {"id", "name"}
    assert [f["name"] for f in out["facets"]["schema"]["fields"]][-2:] == ["id", "name"]
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 5
    # the file export of the same chain tells the same run
    exported = openlineage_events(Dataset.open(tmp_path / "d"))
    assert exported[-1].run.runId == complete["run"]["runId"]
    assert exported[-1].outputs[0].facets["version"].datasetVersion == str(result.head)
    assert queued(tmp_path / "d") == []


def test_a_write_of_no_rows_completes_at_the_head_it_left(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from odf_chain.spark import write

    first = write(spark_rows(spark), tmp_path / "d", create=True)  # nothing configured yet
    with LineageServer() as server:
        ol_env.setenv("OPENLINEAGE_URL", server.url)
        empty = write(spark.createDataFrame([], "id long, name string"), tmp_path / "d")
    assert empty.rows == 0 and empty.head == first.head
    start, complete = server.events
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    (out,) = complete["outputs"]
    assert out["facets"]["version"]["datasetVersion"] == str(first.head)
    assert "columnLineage" not in out["facets"]


def test_a_backend_that_is_down_gets_the_events_with_the_next_write(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path, down: DownBackend
) -> None:
    from odf_chain.spark import write

    http_transport(ol_env, down.url)
    first = write(spark_rows(spark), tmp_path / "d", create=True)  # succeeds, backend down
    assert Dataset.open(tmp_path / "d").refresh().head == first.head
    run = first.lineage.run.run_id
    assert queued(tmp_path / "d") == [f"{run}.COMPLETE.json", f"{run}.START.json"]
    # the outbox is no leftover: verify reports nothing, gc removes nothing
    report = verify_path(tmp_path / "d")
    assert report.ok and not report.warnings, report.problems
    assert collect_garbage_path(str(tmp_path / "d"), min_age=0).removed == []
    assert len(queued(tmp_path / "d")) == 2
    done = run_main(["lineage", tmp_path / "d", "--emit"])  # still down: nothing sent
    assert done.returncode == 1 and "0 OpenLineage event(s) sent, 2 left" in done.stdout
    assert "not sent: ConnectionError" in done.stderr
    with down.up() as server:
        second = write(spark_rows(spark), tmp_path / "d")
    assert [(e["run"]["runId"], e["eventType"]) for e in server.events] == [
        (run, "START"),
        (run, "COMPLETE"),
        (second.lineage.run.run_id, "START"),
        (second.lineage.run.run_id, "COMPLETE"),
    ]
    assert set(server.counts().values()) == {1}
    assert queued(tmp_path / "d") == []


def test_a_slow_backend_never_holds_the_write_and_emit_sends_later(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from odf_chain.spark import write

    with LineageServer() as server:
        server.hold.set()  # slower than the transport's timeout: each send times out
        http_transport(ol_env, server.url, timeout=0.5)
        result = write(spark_rows(spark), tmp_path / "d", create=True)
        assert Dataset.open(tmp_path / "d").refresh().head == result.head
        assert len(queued(tmp_path / "d")) == 2
        server.hold.clear()
        done = run_main(["lineage", tmp_path / "d", "--emit"], spark=spark)
    assert done.returncode == 0, done.stderr
    assert "2 OpenLineage event(s) sent, 0 left" in done.stdout
    assert [e["eventType"] for e in server.events] == ["START", "COMPLETE"]
    assert queued(tmp_path / "d") == []


def test_a_failed_write_sends_start_and_fail(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from odf_chain.spark import write

    with LineageServer() as server:
        write(spark_rows(spark), tmp_path / "d", create=True)  # nothing configured
        assert server.arrived == 0  # nothing sent, nothing queued
        assert not (tmp_path / "d" / "info" / outbox.OUTBOX_DIR).exists()
        ol_env.setenv("OPENLINEAGE_URL", server.url)
        with pytest.raises(NewColumnsError):
            write(spark_rows(spark, extra=True), tmp_path / "d")  # a new column, no evolve
    start, fail = server.events
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert start["run"]["runId"] == fail["run"]["runId"]
    assert "NewColumnsError" in fail["run"]["facets"]["errorMessage"]["message"]
    rebuild(fail)
    assert queued(tmp_path / "d") == []


def test_a_failed_first_write_leaves_no_dataset_and_no_outbox(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path, down: DownBackend
) -> None:
    from odf_chain.spark import write

    http_transport(ol_env, down.url)  # down: START and FAIL queued
    rows = spark_rows(spark)
    twice = rows.select("id", "name", rows.id.alias("name"))
    with pytest.raises(OdfChainError, match="name"):
        write(twice, tmp_path / "new", create=True)  # refused after START, before any job
    assert not (tmp_path / "new").exists()


def test_ingest_and_derive_emit_their_runs(
    spark, ol_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from odf_chain.spark import derive
    from odf_chain.spark.ingest import ingest_files

    csv = tmp_path / "in.csv"
    csv.write_text("id,name\n1,a\n2,b\n")
    with LineageServer() as server:
        ol_env.setenv("OPENLINEAGE_URL", server.url)
        ingest_files(spark, tmp_path / "raw", [str(csv)], "csv", create=True)
        raw = Dataset.open(tmp_path / "raw")
        ingested = [lineage_of(e.block.event) for e in raw.blocks()]
        (run,) = [lineage for lineage in ingested if lineage is not None]
        derived = derive(
            "SELECT name, count(*) AS n FROM raw GROUP BY name",
            {"raw": raw},
            tmp_path / "out",
            create=True,
            spark=spark,
        )
    ingest_start, ingest_done, derive_start, derive_done = server.events
    assert [e["eventType"] for e in server.events] == ["START", "COMPLETE"] * 2
    assert ingest_start["run"]["runId"] == ingest_done["run"]["runId"] == run.run.run_id
    assert ingest_done["job"]["name"] == "odf-chain ingest"
    assert derive_start["run"]["runId"] == derive_done["run"]["runId"]
    assert derive_done["job"]["name"] == "odf-chain derive"
    (out,) = derive_done["outputs"]
    assert out["facets"]["version"]["datasetVersion"] == str(derived.blocks[-1].hash)
    assert "columnLineage" in out["facets"]
    (pinned,) = derive_done["inputs"]
    assert pinned["name"] == raw.refresh().dataset_id.to_did()
    assert pinned["facets"]["version"]["datasetVersion"] == str(raw.refresh().head)
