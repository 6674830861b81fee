"""Every third-party module odf_chain imports is declared, by the core or by the extra whose
feature imports it.

Walks odf_chain/ with ``ast`` (no import is run), collects the top-level name of every
``import`` and ``from ... import`` that is neither the standard library nor odf_chain itself,
and checks it against pyproject.toml:

- a module under a package listed in ``FEATURES`` (``odf_chain/spark/`` -> ``spark``) may
  import what that extra declares, besides the core;
- a module elsewhere may import only what the core declares, except lazily (inside a function)
  a module named in ``LAZY``: an optional feature the function serves, which raises a one-line
  install hint when the extra is absent;
- every declared dependency of the core and of the feature extras is imported somewhere (no
  dead weight in ``pip install odf_chain``).

Run: ``python tools/check_imports.py`` (exit 1 and one line per problem when any). Tests:
tests/test_install.py.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "odf_chain"

# distribution name (normalized) -> the top-level modules it installs, where they differ
MODULES = {
    "openlineage-python": {"openlineage"},
    "attrs": {"attr", "attrs"},
    "pyspark": {"pyspark", "py4j"},
    "acryl-datahub": {"datahub"},
    "moto": {"moto"},
}

# package of odf_chain -> the extra its modules may import from
FEATURES = {"spark": "spark"}

# (module of odf_chain, third-party module) imported inside a function -> the extra serving it
LAZY = {
    ("storage/conditional.py", "obstore"): "cloud",
    ("dataset.py", "pandas"): None,  # only when the caller handed in a DataFrame: it has pandas
}

# what an extra brings besides its own list: PySpark's "sql" extra
EXTRA_PROVIDES = {"pyspark[sql]": {"pandas", "numpy", "pyarrow"}}


def _distribution(requirement: str) -> tuple[str, str]:
    """``"pyspark[sql]>=3.5"`` -> (``"pyspark"``, ``"pyspark[sql]"``)."""
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?", requirement)
    assert match, requirement
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
    return name, name + (match.group(2) or "")


def declared(pyproject: Path = ROOT / "pyproject.toml") -> dict[str | None, set[str]]:
    """Extra (None: the core) -> the top-level module names its requirements install; an
    extra naming odf_chain's own extras takes theirs."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lists = {None: project["dependencies"], **project.get("optional-dependencies", {})}

    def modules(requirements: list[str]) -> set[str]:
        found: set[str] = set()
        for requirement in requirements:
            name, with_extras = _distribution(requirement)
            if name == "odf-chain":
                for extra in re.findall(r"[\w-]+", with_extras.partition("[")[2]):
                    found |= modules(lists[extra])
                continue
            found |= MODULES.get(name, {name.replace("-", "_")})
            found |= EXTRA_PROVIDES.get(with_extras, set())
        return found

    return {extra: modules(requirements) for extra, requirements in lists.items()}


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, inside a function) of each absolute import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def _type_checking_only(path: Path) -> set[int]:
    """Lines of imports under ``if TYPE_CHECKING:`` (never run)."""
    tree = ast.parse(path.read_text(), str(path))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, ast.Import | ast.ImportFrom):
                        lines.add(sub.lineno)
    return lines


def problems(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    extras = declared(pyproject)
    core = extras[None]
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    used: set[str] = set()
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("format/generated/"):
            # flatc's output: it imports flatbuffers (and numpy, only when asked for arrays)
            used.add("flatbuffers")
            continue
        feature = FEATURES.get(relative.split("/")[0]) if "/" in relative else None
        skip = _type_checking_only(path)
        for module, line, lazy in imports(path):
            if module in stdlib or module == "odf_chain" or line in skip:
                continue
            used.add(module)
            if module in core:
                continue
            if feature is not None and module in extras[feature]:
                continue
            if (relative, module) in LAZY:
                extra = LAZY[relative, module]
                if not lazy:
                    found.append(f"odf_chain/{relative}:{line}: {module} must be imported lazily")
                elif extra is not None and module not in extras[extra]:
                    found.append(f"odf_chain/{relative}:{line}: {module} not in extra [{extra}]")
                continue
            where = f"the core or [{feature}]" if feature else "the core"
            found.append(f"odf_chain/{relative}:{line}: imports {module}, not declared by {where}")
    project = tomllib.loads(pyproject.read_text())["project"]
    for requirement in project["dependencies"]:
        name, _ = _distribution(requirement)
        if not MODULES.get(name, {name.replace("-", "_")}) & used:
            found.append(f"pyproject.toml: the core declares {name}, which odf_chain never imports")
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    if not found:
        print("check_imports: every third-party import of odf_chain is declared")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
