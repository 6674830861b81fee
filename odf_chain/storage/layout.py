"""The names both backends give things: the layout's directories, and the bare multibase
names that are joined onto them (so a name can never lead out of its directory)."""

from __future__ import annotations

import re

from odf_chain.errors import OdfChainError
from odf_chain.storage.base import STAGING

# a staging file's suffix (``.parquet``): joined onto a generated name, so no separator
SUFFIX = re.compile(r"[0-9a-zA-Z._-]*")
# what create() lays out (``.staging/`` is made on demand, by the first write)
SUBDIRS = ("blocks", "refs", "data", "checkpoints", "info", "logs")
# every directory of the layout: gc refuses to work through any of them that is not a directory
LAYOUT = ("blocks", "refs", "data", STAGING, "checkpoints", "info", "logs")


def is_name(name: object) -> bool:
    """[0-9a-zA-Z]+: ASCII letters and digits (``str.isalnum`` alone takes any script's). A
    test of each character, so it holds for names joined exactly when it holds for each (a
    listing tests a chunk of names at once); ``bytes.isalnum`` is the ASCII test, and some 40
    times faster than ``str``'s on long strings."""
    return isinstance(name, str) and name.isascii() and name.encode("ascii").isalnum()


def check_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it is a bare multibase string; a name is joined onto a directory, so
    anything else (``..``, ``/``, empty) could escape it and is refused."""
    if not is_name(name):
        raise OdfChainError(f"invalid {what} {name!r}: expected [0-9a-zA-Z]+")
    return name
