"""The light install: every import is declared (tools/check_imports.py), the CLI loads only
what a command needs, and a command that needs Spark, run where PySpark is absent, names the
extra to install in one line.

The install itself (``pip install .`` in a fresh venv, no extras) is proved by
tools/smoke_core.sh, which CI runs; here PySpark is made absent for one process by
``sys.modules["pyspark"] = None`` (what ``import pyspark`` and ``find_spec`` then see is
what they see without it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import Dataset

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pyarrow", "numpy", "pandas", "pyspark", "py4j", "openlineage", "fastavro", "obstore")


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _loaded_by(argv: list[str], *, block: tuple[str, ...] = ()) -> tuple[int, set[str], str]:
    """``main(argv)`` of ``odf-chain`` in a fresh interpreter: its exit code, the top-level
    packages and odf_chain modules it loaded, and its stderr."""
    code = (
        "import json, sys\n"
        f"for name in {block!r}: sys.modules[name] = None\n"
        "from odf_chain.cli import main\n"
        "try:\n"
        "    code = main(json.loads(sys.argv[1]))\n"
        "except SystemExit as exc:\n"
        "    code = exc.code or 0\n"
        "names = {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
        "names |= {m for m in sys.modules if m.startswith('odf_chain.')}\n"
        "print(json.dumps([code, sorted(names)]), file=sys.__stdout__)\n"
    )
    done = _python(code, json.dumps(argv))
    assert done.returncode == 0, done.stderr
    exit_code, names = json.loads(done.stdout.strip().splitlines()[-1])
    return exit_code, set(names), done.stderr


def test_every_import_is_declared() -> None:
    done = subprocess.run(
        [sys.executable, "tools/check_imports.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout


def test_the_checker_finds_an_undeclared_import(tmp_path: Path) -> None:
    """numpy out of the core's list (as it was): each module importing it is named."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import check_imports
    finally:
        sys.path.remove(str(ROOT / "tools"))
    text = (ROOT / "pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    numpy = [r for r in project["dependencies"] if r.startswith("numpy")]
    assert len(numpy) == 1
    without = tmp_path / "pyproject.toml"
    without.write_text(text.replace(f'"{numpy[0]}",', "", 1))
    found = check_imports.problems(without)
    assert "odf_chain/row_digest.py:" in "\n".join(found)
    assert all("imports numpy, not declared by the core" in line for line in found), found
    # and a core dependency nobody imports is dead weight
    extra = tmp_path / "extra.toml"
    extra.write_text(text.replace("dependencies = [\n", 'dependencies = [\n    "six",\n', 1))
    assert check_imports.problems(extra) == [
        "pyproject.toml: the core declares six, which odf_chain never imports"
    ]


def test_the_core_does_not_declare_spark_or_test_tools() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for name in ("pyspark", "pytest", "pandas", "deltalake", "obstore", "moto", "acryl-datahub"):
        assert name not in core, name
    extras = project["optional-dependencies"]
    assert any(r.startswith("pyspark") for r in extras["spark"])
    assert any(r.startswith("obstore") for r in extras["cloud"])
    assert any(r.startswith("deltalake") for r in extras["bench"])
    # dev, what tools/setup.sh installs, is the union: the tests' commands keep working
    assert extras["dev"] == ["odf_chain[spark,cloud,test,bench]"]


def test_version_imports_no_library_module() -> None:
    code, names, _ = _loaded_by(["--version"])
    assert code == 0
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    # the CLI's own modules, and the few light ones its parsers name (hashes, gc's default)
    ours = {n for n in names if n.startswith("odf_chain.") and not n.startswith("odf_chain.cli")}
    assert ours <= {
        "odf_chain.errors",
        "odf_chain.format",
        "odf_chain.format.algorithms",
        "odf_chain.gc_age",
    }, ours


def test_help_imports_no_library_module() -> None:
    """--help builds the whole parser: every command's module, none of the library."""
    code, names, _ = _loaded_by(["--help"])
    assert code == 0
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    assert "odf_chain.cli.ingest" in names and "odf_chain.dataset" not in names


def test_log_imports_neither_spark_nor_pandas_nor_openlineage(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"a": [1, 2]}))
    for argv in (["log", "-n", "1"], ["schema"], ["fields"]):
        code, names, err = _loaded_by([*argv, str(tmp_path / "ds")])
        assert code == 0, err
        assert "odf_chain.chain" in names  # the probe sees what a command loads
        loaded = names & {"pyspark", "py4j", "pandas", "openlineage", "obstore"}
        assert not loaded, (argv, sorted(loaded))
        if argv[0] == "log":  # the chain alone: no index, no fold, no reading side; and, the
            # block shown holding no schema, neither pyarrow nor flatbuffers (with its numpy)
            heavy = {"odf_chain.rules", "odf_chain.index.read", "odf_chain.dataset", "pyarrow"}
            heavy |= {"numpy", "flatbuffers"}
            assert not names & heavy, sorted(names & heavy)


@pytest.mark.parametrize(
    "argv",
    [
        ["ingest", "{ds}", "{ds}/nothing.csv", "--format", "csv"],
        ["derive", "{ds}-out", "--create", "--input", "a={ds}", "--sql", "SELECT * FROM a"],
        ["verify", "--reproduce", "{ds}"],
    ],
)
def test_a_spark_command_without_pyspark_names_the_extra(tmp_path: Path, argv) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"a": [1]}))
    given = [a.format(ds=tmp_path / "ds") for a in argv]
    code, names, err = _loaded_by(given, block=("pyspark",))
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"odf-chain: error: 'odf-chain {argv[0]}")
    assert err.rstrip().endswith("needs PySpark, not installed: pip install 'odf_chain[spark]'")
    assert not (tmp_path / "ds-out").exists()
    assert "odf_chain.dataset" not in names  # refused before the command started its work


def test_chain_verify_reproduce_without_pyspark_names_the_extra(tmp_path: Path) -> None:
    Dataset.create(tmp_path / "ds")
    done = _python(
        "import sys\n"
        "sys.modules['pyspark'] = None\n"
        "from odf_chain.cli import chain_verify_main\n"
        "sys.exit(chain_verify_main(sys.argv[1:]))\n",
        "--reproduce",
        str(tmp_path / "ds"),
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "chain-verify: error: 'chain-verify --reproduce' needs PySpark, not installed: "
        "pip install 'odf_chain[spark]'\n"
    )
