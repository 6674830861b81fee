#!/usr/bin/env python3
"""Make docs/audit-report.png: a screenshot of ``odf-chain audit`` on a small, realistic chain.

Builds (without Spark) a ``readings`` dataset fed by CSV files, written twice by a loader that
records field lineage and a transaction pair, its schema widened by a new column on the second
write; then a ``daily`` dataset computed from ``readings`` (pinned at its head), written twice
the same way; takes a receipt of ``daily``, writes the report with ``odf-chain audit --deep``
and screenshots it with headless Chromium (Debian's ``chromium``).

    python tools/audit_screenshot.py [OUT_DIR]   # default: a temporary directory

The PNG goes to docs/audit-report.png; the HTML and datasets stay in OUT_DIR.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

from odf_chain.dataset import Dataset
from odf_chain.events import TransformationSubtype as Sub
from odf_chain.lineage import LineageRecorder
from odf_chain.receipt import write_receipt

ROOT = Path(__file__).resolve().parent.parent
PNG = ROOT / "docs" / "audit-report.png"


def build(base: Path) -> Path:
    """The two datasets under ``base``; returns the directory of ``daily``."""
    with contextlib.chdir(base):
        readings = Dataset.create("readings")
        for version, (day, rows, humid) in enumerate(
            (("2026-11-01", 1200, False), ("2026-11-02", 1300, True)), start=1
        ):
            rec = LineageRecorder("load-readings", run_id=f"load-{day}")
            raw = rec.external_input("sensors_csv", f"file:///landing/sensors-{day}.csv")
            names = ["station", "temp_f", "event_time", "raw_line"] + (["humidity"] * humid)
            read = rec.read("read csv", raw, names)
            celsius = rec.transform("to celsius", [read["temp_f"]], ["temperature_c"])
            rec.drop("drop raw line", [read["raw_line"]])
            out = {
                "station": read["station"],
                "temperature_c": celsius["temperature_c"],
                "event_time": read["event_time"],
            }
            columns = {
                "station": [f"st-{i % 24:02d}" for i in range(rows)],
                "temperature_c": pa.array([10.0 + (i % 17) / 2 for i in range(rows)]),
                "event_time": pa.array(
                    [f"{day}T{(i // 60) % 24:02d}:{i % 60:02d}:00Z" for i in range(rows)],
                    pa.string(),
                ).cast(pa.timestamp("ms", tz="UTC")),
            }
            if humid:
                out["humidity"] = read["humidity"]
                columns["humidity"] = pa.array([40 + i % 50 for i in range(rows)], pa.int32())
            rec.write("write", out)
            readings.write(
                pa.table(columns), lineage=rec, evolve=humid, transaction=("loader", version)
            )

        daily = Dataset.create("daily")
        state = readings.state
        for version, (day, with_max) in enumerate((("2026-11-01", False), ("2026-11-02", True))):
            rec = LineageRecorder("daily-rollup", run_id=f"rollup-{day}")
            src = rec.dataset_input(
                "readings", state.dataset_id, state.head, uri="readings", fields=state.field_paths
            )
            days = rec.transform("day of", [src["event_time"]], ["day"])
            groups = rec.transform(
                "group by station, day", [src["station"], days["day"]], ["g"], subtype=Sub.GROUP_BY
            )
            rec.transform(
                "mean", [src["temperature_c"], groups["g"]], ["mean_c"],
                subtype=Sub.AGGREGATION, writes=True,
            )  # fmt: skip
            columns = {
                "station": [f"st-{i:02d}" for i in range(24)],
                "day": pa.array([day] * 24),
                "mean_c": pa.array([13.5 + i / 10 for i in range(24)]),
            }
            if with_max:
                rec.transform(
                    "max", [src["temperature_c"], groups["g"]], ["max_c"],
                    subtype=Sub.AGGREGATION, writes=True,
                )  # fmt: skip
                columns["max_c"] = pa.array([18.0 + i / 10 for i in range(24)])
            rec.write("write", {"station": src["station"], "day": days["day"]})
            daily.write(
                pa.table(columns), lineage=rec, evolve=with_max, transaction=("rollup", version + 1)
            )
        write_receipt(daily.receipt(), base / "daily-receipt.json")
    return base / "daily"


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="audit-"))
    out.mkdir(parents=True, exist_ok=True)
    daily = build(out)
    report = out / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", "audit", daily.name, "--deep",
         "--receipt", "daily-receipt.json", "-o", str(report)],
        cwd=out,
    )  # fmt: skip
    if done.returncode != 0:
        print(f"odf-chain audit exited {done.returncode}", file=sys.stderr)
        return 1
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 1
    subprocess.run(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={PNG}", "--window-size=1280,1800", report.as_uri()],
        check=True, capture_output=True,
    )  # fmt: skip
    print(f"{PNG}: {PNG.stat().st_size:,} bytes (report: {report})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
