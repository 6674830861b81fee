"""Write docs/reference/cli.md from the CLI's own argparse parsers.

    python tools/gen_cli_reference.py           # (re)write the page
    python tools/gen_cli_reference.py --check   # exit 1 if the committed page is stale

The page is built from the parsers' actions (names, metavars, help, defaults), not from
argparse's formatted help, so it reads the same on every Python version. tests/test_docs.py
fails when the committed page differs from what this script writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "cli.md"

HEADER = """\
# CLI reference

Generated from the parsers by `python tools/gen_cli_reference.py`; do not edit by hand.
Refs, output formats and exit codes shared by all commands are described in
[Refs, output and exit codes](conventions.md).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _help(action: argparse.Action, prog: str) -> str:
    if action.help in (None, argparse.SUPPRESS):
        return ""
    params = dict(vars(action), prog=prog)
    for name in list(params):
        if hasattr(params[name], "__name__"):
            params[name] = params[name].__name__
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return action.help % params


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar
    if metavar is None:
        if action.choices is not None:
            metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
        else:
            metavar = action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return ", ".join(f"{opt} {metavar}" for opt in action.option_strings)


def _usage(parser: argparse.ArgumentParser) -> str:
    parts = [parser.prog]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            parts.append("COMMAND ...")
            continue
        text = _name(action).split(", ")[-1] if action.option_strings else _name(action)
        if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
            text += " ..."
        optional = not action.required if action.option_strings else action.nargs == "?"
        if optional:
            text = f"[{text}]"
        parts.append(text)
    return " ".join(parts)


def _section(parser: argparse.ArgumentParser, level: int, summary: str | None) -> list[str]:
    out = ["", f"{'#' * level} `{parser.prog}`", ""]
    text = parser.description or summary
    if text:
        out += [" ".join(text.split()), ""]
    out += ["```", _usage(parser), "```", ""]
    rows = []
    children: list[tuple[argparse.ArgumentParser, str | None]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias
                    continue
                seen.add(id(sub))
                rows.append((f"`{name}`", _cell(helps.get(name) or sub.description or "")))
                children.append((sub, helps.get(name)))
            continue
        desc = _help(action, parser.prog)
        if action.required and action.option_strings:
            desc = f"Required. {desc}"
        rows.append((f"`{_name(action)}`", _cell(desc)))
    if rows:
        out += ["| argument | description |", "|---|---|"]
        out += [f"| {name} | {desc} |" for name, desc in rows]
    if parser.epilog:
        out += ["", " ".join(parser.epilog.split())]
    for sub, summary in children:
        out += _section(sub, min(level + 1, 4), summary)
    return out


def render() -> str:
    from odf_chain.cli import build_parser, chain_verify_parser

    lines = [HEADER.rstrip("\n")]
    lines += _section(build_parser(), 2, None)
    lines += _section(chain_verify_parser(), 2, None)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python tools/gen_cli_reference.py")
            return 1
        print(f"{PAGE.relative_to(ROOT)} is up to date")
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
