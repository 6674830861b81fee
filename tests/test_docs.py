"""The documentation as users meet it: the generated CLI reference is not stale, the README's
quickstart is the docs' quickstart and runs as written, and the README's links lead somewhere.
(The site itself is built with warnings as errors by tools/docs.sh, in CI after the tests.)"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICKSTART_PY = ROOT / "docs" / "start" / "quickstart.py"
QUICKSTART_SH = ROOT / "docs" / "start" / "quickstart.sh"


def test_cli_reference_is_generated_from_the_current_parsers():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_cli_reference_lists_every_command_and_option():
    from odf_chain.cli import build_parser, chain_verify_parser

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    parsers = [build_parser(), chain_verify_parser()]
    while parsers:
        parser = parsers.pop()
        assert f"`{parser.prog}`" in page
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page or f", {option}" in page, (parser.prog, option)
            if action.choices and hasattr(action, "_choices_actions"):
                parsers.extend(action.choices.values())


def test_readme_is_short_and_starts_with_the_setup_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200
    head = "\n".join(lines[:8])
    assert "bash tools/demo.sh" in head and "bash tools/test.sh" in head
    assert "pip install odf_chain" in README.read_text(encoding="utf-8")


def test_readme_quickstart_is_the_docs_quickstart():
    readme = README.read_text(encoding="utf-8")
    assert QUICKSTART_PY.read_text(encoding="utf-8") in readme
    assert QUICKSTART_SH.read_text(encoding="utf-8") in readme


def _shim(bin_dir: Path, name: str, entry: str) -> None:
    script = bin_dir / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"from odf_chain.cli import {entry}\n"
        f"sys.exit({entry}(sys.argv[1:]))\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_quickstart_runs_as_written(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _shim(bin_dir, "odf-chain", "main")
    _shim(bin_dir, "chain-verify", "chain_verify_main")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        PATH=os.pathsep.join([str(bin_dir), os.environ["PATH"]]),
    )
    work = tmp_path / "work"
    work.mkdir()

    py = subprocess.run(
        [sys.executable, str(QUICKSTART_PY)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,
        env=env,
    )
    assert py.returncode == 0, py.stderr
    assert py.stdout.splitlines() == [
        "{'station': ['a', 'b', 'c'], 'temperature_c': [14.2, 13.9, 12.0]}",
        "True []",
    ]

    sh = subprocess.run(
        ["bash", str(QUICKSTART_SH)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,
        env=env,
    )
    # the last command verifies the tampered copy: it fails, naming the block and the rule
    assert sh.returncode == 1, sh.stdout + sh.stderr
    out = sh.stdout
    assert re.search(r"^\s+0\s+[0-9a-f]{12,}\s+\S+\s+Seed", out, re.M)  # a short hash: the digest
    assert "file:///landing/readings.csv" in out
    assert re.search(r"^OK: 4 blocks, 2 slices", out, re.M)
    assert re.search(r"^ERROR block \d+ f\w+ data/f\w+: \[data-hash\]", out, re.M)
    assert re.search(r"^FAILED: 4 blocks", out, re.M)


def test_readme_links_lead_to_files():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing
