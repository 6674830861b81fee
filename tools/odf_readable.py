"""Can a reader that knows only ODF's own schema read these datasets? Decode every block of each
dataset given with Python bindings that the pinned ``flatc`` generates from ODF's official
flatbuffers schema (vendored as tests/data/opendatafabric.fbs), and report, per dataset, how many
blocks decode and which events they hold.

    python tools/odf_readable.py DIR [DIR ...]

Exit 0 when every block of every dataset decodes as one of ODF's events, 1 otherwise. The
bindings share nothing with odf_chain's schema or codec but the bytes: this is what kamu sees.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OFFICIAL_SCHEMA = ROOT / "tests" / "data" / "opendatafabric.fbs"
NAMESPACE = "odf_official_bindings"
KIND_METADATA_BLOCK = 0x400000


def _bindings(work: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from gen_flatbuffers import find_flatc

    schema = work / "opendatafabric.fbs"
    schema.write_text(f"namespace {NAMESPACE};\n" + OFFICIAL_SCHEMA.read_text())
    subprocess.run(
        [find_flatc(), "--python", "-o", str(work / "out"), str(schema)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(work / "out"))


def _official(name: str):
    return getattr(importlib.import_module(f"{NAMESPACE}.{name}"), name)


def check(directory: Path) -> tuple[Counter, list[str]]:
    """The events of ``directory``'s blocks as the official bindings name them, and the blocks
    they cannot read (file name and why)."""
    kinds = {v: k for k, v in vars(_official("MetadataEvent")).items() if not k.startswith("_")}
    events: Counter = Counter()
    unreadable: list[str] = []
    for path in sorted((directory / "blocks").iterdir()):
        data = path.read_bytes()
        try:
            manifest = _official("Manifest").GetRootAs(data, 0)
            if manifest.Kind() != KIND_METADATA_BLOCK:
                raise ValueError(f"manifest kind {manifest.Kind():#x}")
            content = manifest.ContentAsNumpy().tobytes()
            block = _official("MetadataBlock").GetRootAs(content, 0)
            name = kinds.get(block.EventType())
            if name is None or name == "NONE":
                raise ValueError(f"event type {block.EventType()} is not one of ODF's")
            table = block.Event()
            event = _official(name)()
            event.Init(table.Bytes, table.Pos)
            events[name] += 1
        except Exception as exc:  # any failure is what a plain ODF reader would meet
            unreadable.append(f"{path.name}: {exc}")
    return events, unreadable


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as work:
        _bindings(Path(work))
        failed = False
        for arg in argv:
            events, unreadable = check(Path(arg))
            total = sum(events.values()) + len(unreadable)
            listed = ", ".join(f"{k} {n}" for k, n in sorted(events.items()))
            print(f"{arg}: {sum(events.values())}/{total} blocks read by ODF's bindings ({listed})")
            for line in unreadable:
                print(f"  cannot read {line}")
            failed |= bool(unreadable)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
