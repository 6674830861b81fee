"""odf-chain export datahub|openlineage: one library call each, run by the CLI's ``main`` in this
process as a subprocess would run it (tests/cli_run.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("datahub.emitter.mcp")  # the chains below come from the DataHub tests

from odf_chain.export.datahub import write_datahub_file
from odf_chain.export.openlineage import write_openlineage_file
from tests.cli_run import run_main
from tests.test_export_datahub import build_chains, datahub_check


def export(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_main(["export", *args], cwd=cwd)


def test_export_commands_write_what_the_library_writes(tmp_path: Path) -> None:
    chains = build_chains(tmp_path)
    out = export("datahub", "summary", "-o", "summary.json", cwd=tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    (tmp_path / "lib").mkdir()
    count = write_datahub_file(chains.summary, tmp_path / "lib" / "summary.json")
    assert out.stdout == f"wrote {count} metadata change proposals to summary.json\n"
    assert (tmp_path / "summary.json").read_bytes() == (tmp_path / "lib/summary.json").read_bytes()
    check = datahub_check(tmp_path / "summary.json")
    assert check.returncode == 0, check.stdout + check.stderr

    out = export("openlineage", "summary", "-o", "summary.jsonl", "--at", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    count = write_openlineage_file(chains.summary, tmp_path / "lib" / "summary.jsonl", at="3")
    assert out.stdout == f"wrote {count} OpenLineage run events to summary.jsonl\n"
    lines = (tmp_path / "summary.jsonl").read_text().splitlines()
    assert len(lines) == count and all(json.loads(line)["eventType"] for line in lines)


def test_no_indirect_is_the_librarys_indirect_false(tmp_path: Path) -> None:
    chains = build_chains(tmp_path)
    (tmp_path / "lib").mkdir()
    for target, name, write in [
        ("datahub", "summary.json", write_datahub_file),
        ("openlineage", "summary.jsonl", write_openlineage_file),
    ]:
        out = export(target, "summary", "-o", name, "--no-indirect", cwd=tmp_path)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        write(chains.summary, tmp_path / "lib" / name, indirect=False)
        assert (tmp_path / name).read_bytes() == (tmp_path / "lib" / name).read_bytes()
        write(chains.summary, tmp_path / "lib" / f"default-{name}")
        assert (tmp_path / name).read_bytes() != (tmp_path / "lib" / f"default-{name}").read_bytes()
    check = datahub_check(tmp_path / "summary.json")
    assert check.returncode == 0, check.stdout + check.stderr


def test_without_o_or_with_dash_the_export_goes_to_stdout(tmp_path: Path) -> None:
    chains = build_chains(tmp_path)
    (tmp_path / "lib").mkdir()
    for target, name, write in [
        ("datahub", "summary.json", write_datahub_file),
        ("openlineage", "summary.jsonl", write_openlineage_file),
    ]:
        write(chains.summary, tmp_path / "lib" / name)
        expected = (tmp_path / "lib" / name).read_text(encoding="utf-8")
        for output in ([], ["-o", "-"]):
            out = export(target, "summary", *output, cwd=tmp_path)
            assert (out.returncode, out.stderr) == (0, ""), out.stderr
            assert out.stdout == expected
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == []


def test_a_failed_export_leaves_the_old_file_whole(tmp_path: Path) -> None:
    build_chains(tmp_path)
    (tmp_path / "out.json").write_text("old\n")
    out = export("datahub", "summary", "-o", "out.json", "--at", "99", cwd=tmp_path)
    assert out.returncode == 2
    assert (tmp_path / "out.json").read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.json")] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("datahub", "nowhere", "-o", "x.json"), "not a dataset"),
        (("openlineage", "summary", "-o", "x.jsonl", "--at", "99"), "no block"),
        (("datahub", "summary", "--at", "nope"), "unrecognised ref"),
        (("graphml", "summary", "-o", "x"), "invalid choice"),
    ],
)
def test_export_errors_are_one_line(tmp_path: Path, args, message) -> None:
    build_chains(tmp_path)
    out = export(*args, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert message in out.stderr
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.jsonl").exists()
