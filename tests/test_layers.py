"""The layers DESIGN.md names hold: the core imports neither the presentation layer
(:mod:`odf_chain.views`) nor Spark, so it reads as core and loads without them."""

from __future__ import annotations

import subprocess
import sys

CORE = (
    "odf_chain.format.codec",
    "odf_chain.storage",
    "odf_chain.chain",
    "odf_chain.transaction",
    "odf_chain.rules",
    "odf_chain.replay",
    "odf_chain.verify",
    "odf_chain.dataset",
    "odf_chain.export.openlineage",
    "odf_chain.export.datahub",
)


def test_the_core_imports_no_view_and_no_spark() -> None:
    probe = (
        "import sys\n"
        f"for name in {CORE!r}: __import__(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('odf_chain.views', 'pyspark', "
        "'odf_chain.spark', 'odf_chain.cli'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_cli_finds_its_views() -> None:
    """The probe sees a view when one is loaded: the lineage command loads its view as it
    runs (the CLI imports a command's modules when it runs, not when it parses)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from odf_chain.cli import main\n"
            "main(['lineage', '/nonexistent/odf_chain-dataset'])\n"
            "print('odf_chain.views.lineage' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.strip() == "True"
