"""Shell completion (``odf-chain completion SHELL``): the shell code names both programs, and a
completion request (what bash sends) is answered from the parsers, with nothing run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import run_main


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_shell_code_names_both_programs(shell: str) -> None:
    p = run_main(["completion", shell])
    assert p.returncode == 0, p.stderr
    assert "odf-chain" in p.stdout and "chain-verify" in p.stdout
    assert "_ARGCOMPLETE" in p.stdout  # what the shell sets to ask


def _complete(line: str, tmp_path: Path, entry: str = "main") -> list[str]:
    """Ask the command for completions of ``line`` as bash does (argcomplete's protocol)."""
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "bash",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "_ARGCOMPLETE_IFS": "\n",
    }
    code = f"import sys; from odf_chain.cli import {entry}; sys.exit({entry}())"
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return [word.strip() for word in out.read_text().split("\n")]


def test_subcommands_and_options_complete(tmp_path: Path) -> None:
    assert {"log", "lineage"} <= set(_complete("odf-chain l", tmp_path))
    assert "--no-indirect" in _complete("odf-chain export datahub d --no-", tmp_path)
    assert "--reproduce" in _complete("chain-verify d --rep", tmp_path, "chain_verify_main")
    assert not (tmp_path / "d").exists()  # nothing ran
