"""The engines that re-run a derivative dataset's transform, found by name.

A SetTransform names its engine (``spark``); ``Dataset.verify(reproduce=True)`` asks for that
engine here. Engines are registered as Python entry points in the group ``odf_chain.engines``
(``pyproject.toml``), the packaging convention for plugins, so the core of odf_chain never
imports Spark: an engine sits on top of it and is found at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from odf_chain.errors import OdfChainError

GROUP = "odf_chain.engines"

Reproducer = Callable[..., None]
"""``reproducer(dataset, report, *, recursive, **options)``: re-run every run of ``dataset``
and add a verdict per run (and problems) to ``report``."""


def reproducer(engine: str) -> Reproducer:
    """The reproducer of ``engine``; OdfChainError when none is installed."""
    found = entry_points(group=GROUP, name=engine)
    for point in found:
        loaded: Any = point.load()
        return loaded
    raise OdfChainError(
        f"no engine {engine!r} installed to re-run the transform (entry point group {GROUP}; "
        "reinstall odf-chain: pip install -e .)"
    )
