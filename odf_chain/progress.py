"""Who hears how a long operation goes, for the operations a reader does not ask for: an index
rebuild (a dataset copied without ``info/``, a chain built by another tool) reads every block,
minutes at ten million, and should not look like a hang. The command line listens on a
terminal (:func:`odf_chain.cli.common.run_command`); a library caller may too. Imports nothing,
so setting a listener costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

Listener = Callable[[str, bool], None]
"""Called with what is going on, and whether that ends a step (else it is a running count,
which the next call replaces)."""

LISTENER: ContextVar[Listener | None] = ContextVar("odf_chain_progress", default=None)


def tell(what: str, *, done: bool = True) -> None:
    listener = LISTENER.get()
    if listener is not None:
        listener(what, done)
