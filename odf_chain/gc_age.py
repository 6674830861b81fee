"""How old a leftover must be before gc removes it: the default and the check of a given age.

Apart from :mod:`odf_chain.gc` (which re-exports both) so that ``odf-chain gc --help`` can
show the default without loading the chain, storage and verify modules gc itself needs.
"""

from __future__ import annotations

import math
import numbers

from odf_chain.errors import OdfChainError

DEFAULT_MIN_AGE = 600.0
"""Seconds: a writer's staged files or unreferenced data younger than this may still be in use."""


def check_min_age(min_age: object) -> float:
    """``min_age`` if it is a finite number of seconds, 0 or more; else an OdfChainError.

    Every comparison with a NaN is false, so ``age < min_age`` would call every leftover old
    and ``min_age < DEFAULT_MIN_AGE`` would let it past the object-store guard; an infinite or
    negative age is no age a user means either."""
    if (
        isinstance(min_age, bool)
        or not isinstance(min_age, numbers.Real)
        or not math.isfinite(min_age)
        or min_age < 0
    ):
        raise OdfChainError(
            f"gc's minimum age must be a finite number of seconds, 0 or more, not {min_age!r}"
        )
    return float(min_age)
