"""odf_chain on a real standalone Spark cluster: a master and a worker started from pyspark's
own launcher (tests/spark_cluster.py), executors in JVMs of their own with their own Python
workers. An ``odf-chain ingest --master spark://…`` and a derived ``odf_chain.spark.write``
with captured lineage run as driver processes against it; the datasets are then checked here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from odf_chain.dataset import Dataset
from odf_chain.spark import read
from odf_chain.state import lineage_of
from odf_chain.verify import verify_path
from tests.spark_cluster import ConnectServer, SparkCluster, cluster_env, java_missing

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(java_missing() is not None, reason=str(java_missing())),
]


@pytest.fixture(scope="module")
def cluster():
    started = SparkCluster(cores=2, memory="2g")
    started.start()
    yield started
    started.stop()


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cluster_env(),
        timeout=600,
    )


def test_ingest_and_a_derived_write_on_a_standalone_cluster(cluster, spark, tmp_path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.csv").write_text("station,temp\na,10.0\na,14.0\nb,3.0\n")
    (inputs / "b.csv").write_text("station,temp\nb,7.5\nc,-2.0\n")
    upstream, derived = tmp_path / "readings", tmp_path / "hottest"

    ingest = _run(
        "-m",
        "odf_chain.cli",
        "ingest",
        str(upstream),
        str(inputs / "a.csv"),
        str(inputs / "b.csv"),
        "--format",
        "csv",
        "--create",
        "--master",
        cluster.url,
        cwd=tmp_path,
    )
    assert ingest.returncode == 0, ingest.stderr[-3000:] + cluster.log()
    assert "ingested   5 rows from 2 input files" in ingest.stdout
    raw = Dataset.open(upstream)
    assert raw.state.num_records == 5 and verify_path(upstream).ok

    derive = _run(
        str(ROOT / "tests/scripts/cluster_derive.py"),
        cluster.url,
        str(upstream),
        str(derived),
        cwd=tmp_path,
    )
    assert derive.returncode == 0, derive.stderr[-3000:] + cluster.log()
    summary = json.loads(derive.stdout.strip().splitlines()[-1])
    assert summary["executors"] >= 1  # the work ran on the cluster's executors
    assert summary["rows"] == 3 and summary["slices"] == 1
    assert summary["lineage_inputs"] == [str(raw.state.head)]  # pinned at the upstream head
    hottest = Dataset.open(derived)
    kinds = [e.block.event_name for e in hottest.blocks()]
    assert kinds == ["Seed", "SetDataSchema", "AddData"]  # the AddData carries the lineage
    (lineage,) = [c for e in hottest.blocks() if (c := lineage_of(e.block.event)) is not None]
    assert lineage.run.job_name == "hottest"
    assert verify_path(derived).ok
    rows = read(spark, derived).orderBy("station").select("station", "hottest").collect()
    assert [(r.station, r.hottest) for r in rows] == [("a", 14.0), ("b", 7.5), ("c", -2.0)]


def test_a_write_through_spark_connect(tmp_path) -> None:
    """A Connect session has no JVM plan to read: capture warns and the write goes on without
    field lineage; lineage recorded by hand is appended as usual."""
    server = ConnectServer()
    server.start()
    try:
        done = _run(
            str(ROOT / "tests/scripts/connect_write.py"),
            server.url,
            str(tmp_path / "ds"),
            cwd=tmp_path,
        )
    finally:
        log = server.log()
        server.stop()
    assert done.returncode == 0, done.stderr[-3000:] + log
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert "connect" in summary["connect"]  # a Connect session, not a classic one
    assert any("Spark Connect" in w for w in summary["warnings"]), summary["warnings"]
    assert summary["first"] == {"rows": 3, "lineage": False}
    assert summary["second"] == {"rows": 3, "lineage": True}
    dataset = Dataset.open(tmp_path / "ds")
    kinds = [e.block.event_name for e in dataset.blocks()]
    assert kinds == ["Seed", "SetDataSchema", "AddData", "AddData"]
    assert [lineage_of(e.block.event) is not None for e in dataset.blocks()][2:] == [False, True]
    assert dataset.verify().ok and dataset.state.num_records == 6
