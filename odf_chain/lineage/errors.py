"""The error of the lineage layer.

Kept here until it joins :mod:`odf_chain.errors`: it is an :class:`OdfChainError`, so the CLI
catches it with every other failure, and a :class:`ValueError`, since it reports a bad argument
(an unknown field, a duplicate operation name) rather than bad stored bytes.
"""

from __future__ import annotations

from odf_chain.errors import OdfChainError


class LineageError(OdfChainError, ValueError):
    """Field lineage that cannot be recorded or resolved; the message names the operation and
    the field."""
