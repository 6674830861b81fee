"""How transformations compose along a path of field operations.

A source field reaches a dataset field through a chain of operations; the edge the graph keeps
summarises the chain in one :class:`Transformation`:

- type: DIRECT only if every step is DIRECT (one step that merely selects, groups or orders rows
  makes the whole relation indirect);
- subtype: the most significant step by :data:`SIGNIFICANCE`;
- masking: any step masks (a hashed value stays hidden whatever follows);
- opaque: any step is opaque (one unknown step makes the exact mapping unknown).

The significance order, least to most: IDENTITY, TRANSFORMATION, AGGREGATION (direct ones, by
how far the value moves from its source: copied, computed, many rows folded into one), then the
indirect ones, SORT, CONDITIONAL, WINDOW, FILTER, GROUP_BY, JOIN (by how much of the output's
rows the input decides: only their order, which branch computes a value, which rows feed a
window, which rows exist, which rows exist and merge, which rows pair up and exist). Every
indirect subtype outranks every direct one, so a chain whose type is INDIRECT because of an
indirect subtype carries that subtype.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from odf_chain.events import Transformation, TransformationSubtype, TransformationType

_S = TransformationSubtype

SIGNIFICANCE: tuple[TransformationSubtype, ...] = (
    _S.IDENTITY,
    _S.TRANSFORMATION,
    _S.AGGREGATION,
    _S.SORT,
    _S.CONDITIONAL,
    _S.WINDOW,
    _S.FILTER,
    _S.GROUP_BY,
    _S.JOIN,
)
_RANK = {subtype: rank for rank, subtype in enumerate(SIGNIFICANCE)}

# OpenLineage's pairing of subtypes with types (column lineage facet 1-2-0).
INDIRECT_SUBTYPES: frozenset[TransformationSubtype] = frozenset(
    {_S.JOIN, _S.FILTER, _S.GROUP_BY, _S.SORT, _S.WINDOW, _S.CONDITIONAL}
)

# The step that changes nothing: composing with it gives the other step back.
NEUTRAL = Transformation()


def default_type(subtype: TransformationSubtype) -> TransformationType:
    """The type OpenLineage pairs with ``subtype``."""
    if subtype in INDIRECT_SUBTYPES:
        return TransformationType.INDIRECT
    return TransformationType.DIRECT


def transformation(
    subtype: TransformationSubtype = _S.IDENTITY,
    *,
    type: TransformationType | None = None,
    masking: bool = False,
    opaque: bool = False,
) -> Transformation:
    """A transformation whose type, unless given, follows from its subtype."""
    kind = default_type(subtype) if type is None else type
    return Transformation(type=kind, subtype=subtype, masking=masking, opaque=opaque)


@functools.lru_cache(maxsize=4096)
def combine(first: Transformation, then: Transformation) -> Transformation:
    """One transformation for ``first`` followed by ``then`` (associative and commutative)."""
    direct = first.type == then.type == TransformationType.DIRECT
    subtype = max(first.subtype, then.subtype, key=_RANK.__getitem__)
    return Transformation(
        type=TransformationType.DIRECT if direct else TransformationType.INDIRECT,
        subtype=subtype,
        masking=first.masking or then.masking,
        opaque=first.opaque or then.opaque,
    )


def combine_all(steps: Iterable[Transformation]) -> Transformation:
    """One transformation for a chain of steps (NEUTRAL for none)."""
    result = NEUTRAL
    for step in steps:
        result = combine(result, step)
    return result
