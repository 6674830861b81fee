"""A second Python process for work that is independent per item (verify's one pass).

A helper is a script of this package run by path with ``python -I``: it imports what it needs
from the caller's own package tree, is never forked (so no thread, lock or native runtime of
the caller is copied into it), gets its input on stdin and answers on stdout. Whatever goes
wrong with it (it cannot start, exits, is killed, answers too late or in a form the caller does
not accept), the caller does the work itself: a helper only ever saves time. See
:mod:`odf_chain.storage.block_pass`.

Only where it can pay: with a second core to run on, and with ``sys.executable`` a Python
interpreter (not a frozen application or an embedding host such as uWSGI, where it names
another program).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def available() -> bool:
    """Can a helper process run beside this one, and pay?"""
    executable = sys.executable or ""
    return (
        cores() > 1
        and not getattr(sys, "frozen", False)
        and Path(executable).name.startswith("python")
    )


def seconds_for(items: int) -> float:
    """A time limit for a helper's ``items``: generous (a loaded machine is slow), and finite."""
    return 120.0 + items / 1000
