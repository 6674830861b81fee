"""Field lineage as pure logic: recording a run's field operations by hand, resolving an
event's operations into field-to-field relations, and the field graph folded from events.

No I/O; imports only events, errors, format and schema.
"""

from odf_chain.errors import LineageError
from odf_chain.lineage.graph import (
    BlockRef,
    EventRef,
    FieldDrop,
    FieldEdge,
    FieldGraph,
    FieldRef,
    FieldUnused,
    IncomingSummary,
    OutgoingSummary,
    Reached,
    RunOperations,
    input_key,
)
from odf_chain.lineage.recorder import InputHandle, LineageRecorder, OperationHandle
from odf_chain.lineage.resolve import (
    Resolution,
    ResolvedDrop,
    ResolvedEdge,
    ResolvedUnused,
    copies_pairwise,
    resolve,
)
from odf_chain.lineage.transformations import (
    INDIRECT_SUBTYPES,
    NEUTRAL,
    SIGNIFICANCE,
    combine,
    combine_all,
    default_type,
    in_openlineage_vocabulary,
    openlineage_form,
    openlineage_names,
    transformation,
)

__all__ = [
    "INDIRECT_SUBTYPES",
    "NEUTRAL",
    "SIGNIFICANCE",
    "BlockRef",
    "EventRef",
    "FieldDrop",
    "FieldEdge",
    "FieldGraph",
    "FieldRef",
    "FieldUnused",
    "IncomingSummary",
    "InputHandle",
    "LineageError",
    "LineageRecorder",
    "OperationHandle",
    "OutgoingSummary",
    "Reached",
    "Resolution",
    "ResolvedDrop",
    "ResolvedEdge",
    "ResolvedUnused",
    "RunOperations",
    "combine",
    "combine_all",
    "copies_pairwise",
    "default_type",
    "in_openlineage_vocabulary",
    "input_key",
    "openlineage_form",
    "openlineage_names",
    "resolve",
    "transformation",
]
