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

OpenLineage's vocabulary (column lineage facet 1-2-0 and openlineage-spark's
``TransformationInfo``) pairs each subtype with one type: IDENTITY, TRANSFORMATION and
AGGREGATION are DIRECT; JOIN, GROUP_BY, FILTER, SORT, WINDOW and CONDITIONAL are INDIRECT.
New operations keep to it (:func:`transformation` refuses any other pair). Chains written
before may hold DIRECT CONDITIONAL (a value chosen among candidates, as the Spark capture once
said): :func:`openlineage_form` reads a DIRECT step with an indirect subtype as DIRECT
TRANSFORMATION, which is what openlineage-spark calls a returned value; :func:`combine` does
so first, so every resolved edge, view and export speaks OpenLineage's vocabulary. The bytes
keep what was recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from odf_chain.errors import LineageError
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


def in_openlineage_vocabulary(t: Transformation) -> bool:
    """Is ``t``'s (type, subtype) a pair OpenLineage knows?"""
    return t.type == default_type(t.subtype)


def openlineage_form(t: Transformation) -> Transformation:
    """``t`` in OpenLineage's vocabulary: a DIRECT step with an indirect subtype (DIRECT
    CONDITIONAL in older chains) is DIRECT TRANSFORMATION. An INDIRECT step with a direct
    subtype has no OpenLineage name and is left as it is (:func:`openlineage_names`)."""
    if t.type == TransformationType.DIRECT and t.subtype in INDIRECT_SUBTYPES:
        return Transformation(TransformationType.DIRECT, _S.TRANSFORMATION, t.masking, t.opaque)
    return t


def openlineage_names(t: Transformation) -> tuple[str, str | None]:
    """OpenLineage's ``type`` and ``subtype`` for ``t``; the subtype is None (left out: the
    facet requires only the type) for an INDIRECT step whose subtype is a direct one."""
    t = openlineage_form(t)
    if not in_openlineage_vocabulary(t):
        return t.type.name, None
    return t.type.name, t.subtype.name


def transformation(
    subtype: TransformationSubtype = _S.IDENTITY,
    *,
    type: TransformationType | None = None,
    masking: bool = False,
    opaque: bool = False,
) -> Transformation:
    """A transformation whose type follows from its subtype; a ``type`` given must be that
    one (:class:`LineageError` otherwise: OpenLineage knows no other pair)."""
    kind = default_type(subtype)
    if type is not None and type != kind:
        raise LineageError(
            f"{type.name} {subtype.name} is not in OpenLineage's vocabulary: "
            f"{subtype.name} is {kind.name}"
        )
    return Transformation(type=kind, subtype=subtype, masking=masking, opaque=opaque)


@functools.lru_cache(maxsize=4096)
def combine(first: Transformation, then: Transformation) -> Transformation:
    """One transformation for ``first`` followed by ``then`` (associative and commutative),
    each read in OpenLineage's vocabulary first (:func:`openlineage_form`)."""
    first, then = openlineage_form(first), openlineage_form(then)
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
