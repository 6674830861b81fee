"""odf-chain audit: the report model of a real chain (writes with lineage, a schema change,
transaction pairs, a derived dataset's pins, receipts), its verdict on a tampered copy, the
HTML's escaping and self-containment, and a real render in headless Chromium."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.dataset import Dataset
from odf_chain.events import AddData, TransformationSubtype as Sub
from odf_chain.lineage import LineageRecorder
from odf_chain.receipt import write_receipt
from odf_chain.views.audit import build_audit
from odf_chain.views.audit_html import render_html
from tests.cli_run import run_main

EVIL_FIELD = "<script>alert('field')</script>"
EVIL_JOB = "<img src=x onerror=alert(1)>&job"


@dataclass(frozen=True)
class Built:
    root: Path
    readings: Path  # root dataset: Seed, schema, write, schema (new column), write
    daily: Path  # reads readings (pinned at its head)
    readings_head: str  # what daily pinned
    receipt: Path  # of daily at its head
    other_receipt: Path  # of readings: another dataset


def _write_readings(ds: Dataset, version: int, rows: int, extra: bool) -> None:
    rec = LineageRecorder(EVIL_JOB, run_id=f"load-{version}")
    raw = rec.external_input("csv", f"file:///landing/part-{version}.csv")
    names = ["station", "temp_f", "raw"] + ([EVIL_FIELD] if extra else [])
    read = rec.read("read", raw, names)
    celsius = rec.transform("to celsius", [read["temp_f"]], ["temperature_c"])
    rec.drop("drop raw", [read["raw"]])
    out = {"station": read["station"], "temperature_c": celsius["temperature_c"]}
    columns = {
        "station": [f"s{i % 3}" for i in range(rows)],
        "temperature_c": pa.array([float(i) for i in range(rows)]),
    }
    if extra:
        out[EVIL_FIELD] = read[EVIL_FIELD]
        columns[EVIL_FIELD] = pa.array(range(rows), pa.int64())
    rec.write("write", out)
    ds.write(pa.table(columns), lineage=rec, evolve=extra, transaction=("loader", version))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("audit")
    with contextlib.chdir(root):
        readings = Dataset.create("readings")
        _write_readings(readings, 1, 5, extra=False)
        _write_readings(readings, 2, 7, extra=True)
        state = readings.state
        daily = Dataset.create("daily")
        rec = LineageRecorder("rollup", run_id="r-1")
        src = rec.dataset_input(
            "readings", state.dataset_id, state.head, uri="readings", fields=state.field_paths
        )
        groups = rec.transform("group", [src["station"]], ["g"], subtype=Sub.GROUP_BY)
        rec.transform(
            "mean", [src["temperature_c"], groups["g"]], ["mean_c"],
            subtype=Sub.AGGREGATION, writes=True,
        )  # fmt: skip
        rec.write("write", {"station": src["station"]})
        daily.write(
            pa.table({"station": ["s0", "s1", "s2"], "mean_c": [1.0, 2.0, 3.0]}), lineage=rec
        )
        write_receipt(daily.receipt(), root / "daily.json")
        write_receipt(readings.receipt(), root / "readings.json")
    return Built(
        root,
        root / "readings",
        root / "daily",
        str(state.head),
        root / "daily.json",
        root / "readings.json",
    )


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text (outside tags)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parsed(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    tags.close()
    return tags


# -- the model ----------------------------------------------------------------------------------


def test_model_of_a_root_dataset(built: Built) -> None:
    report = build_audit(Dataset.open(built.readings), deep=True)
    assert report.verdict.ok and report.verdict.errors == 0
    assert "every row (--deep)" in report.verdict.checks
    assert report.verdict.rows_checked == 12
    assert report.kind == "root" and report.at_sequence_number == 4
    timeline = report.timeline
    assert timeline is not None and timeline.elided == 0 and not timeline.last
    assert [r.event for r in timeline.first] == [
        "Seed", "SetDataSchema", "AddData", "SetDataSchema", "AddData",
    ]  # fmt: skip
    writes = [r for r in timeline.first if "write" in r.kinds]
    assert [r.rows for r in writes] == [5, 7]
    assert all({"lineage", "transaction"} <= set(r.kinds) for r in writes)
    assert [r.detail for r in writes] == ["transaction loader v1", "transaction loader v2"]
    assert all(f"lineage of {EVIL_JOB} run load-" in r.summary for r in writes)
    assert timeline.rows == 12 and timeline.bytes == sum(r.size or 0 for r in writes) > 0
    # the schema history: the second version adds the one column, as a v2 path
    assert [s.sequence_number for s in report.schemas] == [1, 3]
    assert report.schemas[0].initial and not report.schemas[1].initial
    (added,) = report.schemas[1].added
    assert added.endswith(EVIL_FIELD) and not report.schemas[1].removed
    assert EVIL_FIELD in [name for name, _, _ in report.schemas[1].fields]
    # external sources as upstream, each read by its run
    assert sorted(u.uri for u in report.upstream) == [
        "file:///landing/part-1.csv",
        "file:///landing/part-2.csv",
    ]
    assert report.receipts == () and report.notes == ()


def test_model_of_a_dataset_reading_another(built: Built) -> None:
    report = build_audit(Dataset.open(built.daily), receipts=[built.receipt])
    assert report.verdict.ok
    (pin,) = report.upstream
    assert (pin.name, pin.block_hash, pin.uri) == (
        "readings",
        built.readings_head,
        str(built.readings),
    )
    assert pin.dataset_id == str(Dataset.open(built.readings).state.dataset_id)
    (receipt,) = report.receipts
    assert receipt.held and receipt.signed is None and receipt.messages == ()
    assert receipt.sequence_number == report.at_sequence_number
    # the lineage graph spans the sources, readings and daily, with drops as notes
    graph = report.lineage
    assert graph is not None
    keys = {d.key for d in graph.datasets}
    assert {pin.dataset_id, "file:///landing/part-1.csv", "file:///landing/part-2.csv"} <= keys
    own = next(d for d in graph.datasets if d.own)
    assert sorted(n.label for n in own.nodes) == ["mean_c", "station"]
    readings = next(d for d in graph.datasets if d.key == pin.dataset_id)
    assert not readings.external and not readings.own
    assert {(n.kind, n.label) for n in readings.nodes} >= {("drop", "drop raw")}
    by_id = {n.id: (d.key, n.label) for d in graph.datasets for n in d.nodes}
    pairs = {(by_id[e.source], by_id[e.target]) for e in graph.edges}
    assert ((readings.key, "temperature_c"), (own.key, "mean_c")) in pairs
    assert (("file:///landing/part-1.csv", "temp_f"), (readings.key, "temperature_c")) in pairs


def test_a_receipt_of_another_dataset_fails(built: Built) -> None:
    report = build_audit(Dataset.open(built.daily), receipts=[built.receipt, built.other_receipt])
    assert not report.verdict.ok
    held = {Path(r.source).name: r.held for r in report.receipts}
    assert held == {"daily.json": True, "readings.json": False}
    bad = next(r for r in report.receipts if not r.held)
    assert any("dataset id differs" in m for m in bad.messages)


def test_timeline_is_bounded(built: Built) -> None:
    report = build_audit(Dataset.open(built.readings), ends=1)
    t = report.timeline
    assert t is not None
    assert [r.sequence_number for r in t.first] == [0]
    assert [r.sequence_number for r in t.last] == [4]
    assert t.elided == 3 and t.blocks == 5
    assert t.elided_rows == 5  # the first write; the second is the last block shown
    assert dict(t.elided_kinds) == {"schema": 2, "write": 1, "lineage": 1, "transaction": 1}
    page = render_html(report)
    assert "… 3 blocks not shown" in page


def test_at_describes_an_earlier_block(built: Built) -> None:
    report = build_audit(Dataset.open(built.readings), at="2")
    assert report.at_sequence_number == 2
    assert report.timeline is not None and report.timeline.blocks == 3
    assert [s.sequence_number for s in report.schemas] == [1]


# -- the page -----------------------------------------------------------------------------------


def test_strings_from_the_chain_render_as_text(built: Built) -> None:
    page = render_html(build_audit(Dataset.open(built.readings)))
    parsed = _parsed(page)
    assert not [t for t, _ in parsed.tags if t in ("script", "img")]
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    text = "".join(parsed.text)
    assert EVIL_FIELD in text and EVIL_JOB in text  # shown, as text
    assert "&lt;script&gt;" in page and EVIL_FIELD not in page


def test_page_is_self_contained(built: Built) -> None:
    page = render_html(build_audit(Dataset.open(built.daily), receipts=[built.receipt]))
    parsed = _parsed(page)
    tags = [t for t, _ in parsed.tags]
    assert "link" not in tags and "script" not in tags and "iframe" not in tags
    assert tags.count("svg") == 1
    for tag, attrs in parsed.tags:
        for name in ("src", "href", "xlink:href", "srcset", "action", "data"):
            assert attrs.get(name) is None, (tag, name, attrs.get(name))
    assert "http://" not in page and "https://" not in page and "@import" not in page


# -- the command ---------------------------------------------------------------------------------


def test_cli_writes_the_page_and_exits_0(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = run_main(["audit", built.daily, "--receipt", built.receipt, "-o", out])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OK: 0 errors")
    page = out.read_text(encoding="utf-8")
    assert 'id="verdict-word">OK<' in page and "<svg" in page
    to_stdout = run_main(["audit", built.daily])
    assert to_stdout.returncode == 0 and to_stdout.stdout.startswith("<!DOCTYPE html>")


def test_cli_user_errors_exit_2(built: Built, tmp_path: Path) -> None:
    missing = run_main(["audit", built.daily, "--receipt", tmp_path / "none.json"])
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    bad_ref = run_main(["audit", built.daily, "--at", "99"])
    assert bad_ref.returncode == 2 and "Traceback" not in bad_ref.stderr
    no_dir = run_main(["audit", tmp_path / "nothing"])
    assert no_dir.returncode == 2


def test_flipped_slice_bit_fails_naming_the_block(built: Built, tmp_path: Path) -> None:
    copy = tmp_path / "readings"
    shutil.copytree(built.readings, copy)
    entries = Dataset.open(copy).blocks()
    last = next(e for e in reversed(entries) if isinstance(e.block.event, AddData))
    data = copy / "data" / str(last.block.event.new_data.physical_hash)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    out = tmp_path / "report.html"
    done = run_main(["audit", copy, "-o", out])
    assert done.returncode == 1
    assert done.stdout.startswith("FAILED: ")
    report = build_audit(Dataset.open(copy))
    assert not report.verdict.ok
    seq = last.block.sequence_number
    assert any(p.sequence_number == seq for p in report.verdict.problems if p.severity == "error")
    page = out.read_text(encoding="utf-8")
    assert 'id="verdict-word">FAILED<' in page
    rows = [r for r in page.split('<tr class="problem">')[1:]]
    assert any(f'<td class="num">{seq}</td>' in r and "ERROR" in r for r in rows)
    # and its row in the timeline is marked, the others not
    assert page.count('<tr class="block broken">') == 1
    assert f'<tr class="block broken"><td class="num">{seq}</td>' in page


def test_a_damaged_block_still_gets_a_page(built: Built, tmp_path: Path) -> None:
    """A chain that cannot be read to its head: the verdict and problems are shown, the parts
    that need the chain say why they are missing, and the exit status is 1, not 2."""
    copy = tmp_path / "readings"
    shutil.copytree(built.readings, copy)
    entries = Dataset.open(copy).blocks()
    block = copy / "blocks" / str(entries[3].hash)
    raw = bytearray(block.read_bytes())
    raw[40] ^= 0x01
    block.write_bytes(bytes(raw))
    out = tmp_path / "report.html"
    done = run_main(["audit", copy, "-o", out])
    assert done.returncode == 1, done.stderr
    report = build_audit(Dataset.open(copy))
    assert any(p.rule == "block-hash" and p.sequence_number == 3 for p in report.verdict.problems)
    assert report.timeline is None and report.notes
    assert "not to its name" in report.notes[0]
    page = out.read_text(encoding="utf-8")
    assert 'id="verdict-word">FAILED<' in page and "block-hash" in page


# -- a real browser ------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("no chromium on PATH (apt-get install chromium; tools/setup.sh does as root)")
    return found


def _browse(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_chromium_renders_the_page(built: Built, tmp_path: Path) -> None:
    chromium = _chromium()
    page = tmp_path / "report.html"
    page.write_text(
        render_html(build_audit(Dataset.open(built.daily), receipts=[built.receipt])),
        encoding="utf-8",
    )
    dom = _browse(
        chromium, tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--dump-dom",
        page.as_uri(),
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the page's console (errors, uncaught exceptions) as Chromium logs it: silent
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    parsed = _parsed(dom.stdout)
    assert "OK" in "".join(parsed.text)
    ids = {attrs.get("id") for _, attrs in parsed.tags}
    assert {"verdict", "verdict-word", "timeline", "lineage", "upstream", "receipts"} <= ids
    assert sum(t == "svg" for t, _ in parsed.tags) == 1
    assert sum(t == "path" and "edge" in (a.get("class") or "") for t, a in parsed.tags) >= 3
    shot = tmp_path / "shot.png"
    done = _browse(
        chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000",
        page.as_uri(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


# -- a derived dataset, reproduced by Spark ------------------------------------------------------


@pytest.mark.spark
def test_derived_dataset_reproduced(spark, tmp_path: Path) -> None:
    from odf_chain.spark import derive

    sensors = Dataset.create(tmp_path / "sensors")
    sensors.write(pa.table({"station": ["a", "b", "a"], "temp": [1.25, 2.5, 3.75]}))
    stations = Dataset.create(tmp_path / "stations")
    stations.write(pa.table({"station": ["a", "b"], "region": ["north", "south"]}))
    sql = (
        "SELECT s.region, SUM(r.temp) AS total FROM sensors r "
        "JOIN stations s ON r.station = s.station GROUP BY s.region"
    )
    out = tmp_path / "by_region"
    derive(sql, {"sensors": sensors, "stations": stations}, out, create=True, spark=spark)
    page = tmp_path / "report.html"
    done = run_main(["audit", out, "--reproduce", "-o", page], spark=spark)
    assert done.returncode == 0, done.stdout + done.stderr
    html = page.read_text(encoding="utf-8")
    assert "<h2>Reproduction</h2>" in html and ">reproduced<" in html
    report = build_audit(Dataset.open(out))
    assert report.kind == "derivative"
    assert report.timeline is not None
    kinds = dict(report.timeline.kinds)
    assert kinds["derive"] == 1 and kinds["transform"] == 1
    pins = {u.dataset_id: u.block_hash for u in report.upstream if u.dataset_id}
    assert pins == {
        str(sensors.state.dataset_id): str(sensors.state.head),
        str(stations.state.dataset_id): str(stations.state.head),
    }
    names = {u.name for u in report.upstream if u.dataset_id}
    assert names == {"sensors", "stations"}


def test_a_long_chain_gives_a_page_of_the_same_size(tmp_path: Path) -> None:
    """60 writes: the page shows 25 blocks at each end and counts the 12 between, by kind."""
    ds = Dataset.create(tmp_path / "long")
    for i in range(60):
        ds.write(pa.table({"n": pa.array([i] * (i + 1), pa.int64())}))
    report = build_audit(ds)
    t = report.timeline
    assert t is not None and t.blocks == 62  # Seed, SetDataSchema, 60 AddData
    assert (len(t.first), len(t.last), t.elided) == (25, 25, 12)
    assert t.last[-1].sequence_number == 61 and t.first[-1].sequence_number == 24
    assert dict(t.elided_kinds) == {"write": 12}
    assert t.elided_rows == sum(range(24, 36))  # the writes of blocks 25..36 held i + 1 rows
    assert t.rows == sum(range(1, 61))
    page = render_html(report)
    assert page.count('<tr class="block">') == 50 and "… 12 blocks not shown" in page


def test_lineage_picture_is_capped_per_dataset(built: Built) -> None:
    """With room for one field per dataset, the rest are counted, and no edge is drawn to a
    field left out."""
    from odf_chain.views.audit_graph import lineage_graph
    from odf_chain.views.audit_svg import lineage_svg
    from odf_chain.views.lineage import LineageView

    ds = Dataset.open(built.daily)
    state = ds.state
    view = LineageView.build(ds.lineage(), ds.location, state.sequence_number, str(state.head))
    full, capped = lineage_graph(view), lineage_graph(view, max_fields=1)
    assert all(len(d.nodes) == 1 for d in capped.datasets)
    assert [d.hidden for d in capped.datasets] == [len(d.nodes) - 1 for d in full.datasets]
    shown = {d.nodes[0].id for d in capped.datasets}
    assert all(e.source in shown and e.target in shown for e in capped.edges)
    assert capped.hidden_edges == len(full.edges) - len(capped.edges) > 0
    svg = lineage_svg(full)
    assert svg.count('<path class="edge') == len(full.edges)
    assert svg.count('<g class="node') == sum(len(d.nodes) for d in full.datasets)
    assert "more</text>" in lineage_svg(capped)
