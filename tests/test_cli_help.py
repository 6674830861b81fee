"""Every subcommand's --help says what it does and shows how (found by walking the parser that
``odf-chain`` builds from COMMANDS, nested subcommands included); each entry point names
itself in its errors."""

from __future__ import annotations

import argparse
from pathlib import Path

from odf_chain.cli import COMMANDS, build_parser
from tests.cli_run import run_main


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subcommands(sub, (*prefix, name))


def test_every_subcommand_has_a_description_and_an_example() -> None:
    found = list(_subcommands(build_parser()))
    top = {path[0] for path, _ in found}
    assert len(top) == len(COMMANDS)  # each command module registered one command
    assert ("export", "datahub") in {path for path, _ in found}  # nested ones are walked
    for path, _ in found:
        p = run_main([*path, "--help"])
        assert p.returncode == 0, (path, p.stderr)
        usage, _, rest = p.stdout.partition("\n\n")
        assert usage.startswith("usage: odf-chain " + " ".join(path)), path
        description = rest.split("\n\n")[0]
        # a description: a sentence of prose before the argument lists
        assert not description.startswith(("positional arguments:", "options:")), path
        assert len(description.split()) >= 8, (path, description)
        assert "example" in p.stdout.split("options:")[-1], path  # an example after the options
        assert f"odf-chain {path[0]}" in p.stdout.split("example")[-1], path


def test_each_entry_point_names_itself_in_its_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    p = run_main([missing], entry="chain-verify")
    assert p.returncode == 2
    assert p.stderr.startswith("chain-verify: error: "), p.stderr
    assert "odf-chain" not in p.stderr
    p = run_main(["verify", missing])
    assert p.returncode == 2
    assert p.stderr.startswith("odf-chain: error: "), p.stderr
    # usage errors too: argparse's, by the parser's own name
    p = run_main([tmp_path, "--no-such-option"], entry="chain-verify")
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "chain-verify: error: unrecognized arguments: --no-such-option",
        "try: chain-verify --help",
    ]
