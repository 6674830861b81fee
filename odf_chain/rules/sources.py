"""The rules of a root dataset's sources: SetPollingSource and AddPushSource.

ODF's RFC-011 (push ingest sources) makes the two kinds mutually exclusive: a dataset is fed
either by its one polling source or by its named push sources, so a polling source cannot be set
while a push source is active, nor a push source added while the polling source is (disable the
other first). kamu refuses the same blocks on append, and a read step that gives its columns
both as a DDL schema and as an ODF schema. That sources belong to root datasets is the
dataset-kind rule's (:func:`odf_chain.rules.blocks.check_dataset_kind`).

Not rules (see :mod:`odf_chain.rules`): disabling a source that is not active, and an
AddPushSource that restates the active source of that name; both change nothing, and other ODF
writers may produce them.
"""

from __future__ import annotations

from collections.abc import Mapping

from odf_chain.errors import RuleViolation
from odf_chain.events import AddPushSource, MetadataBlock, SetPollingSource
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState


def check_sources(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    if isinstance(event, SetPollingSource) and state.push_sources:
        names = ", ".join(repr(name) for name in sorted(state.push_sources))
        raise RuleViolation(
            "sources",
            "expected no active push source when a polling source is set (push and polling "
            f"sources are mutually exclusive), found push source {names} active; disable it "
            "first",
        )
    if isinstance(event, AddPushSource) and state.polling_source:
        raise RuleViolation(
            "sources",
            f"expected no active polling source when push source {event.source_name!r} is "
            "added (push and polling sources are mutually exclusive), found one active; "
            "disable it first",
        )
    if isinstance(event, SetPollingSource | AddPushSource):
        read = event.read
        if (
            isinstance(read, Mapping)
            and read.get("ddl_schema") is not None
            and (read.get("schema") is not None)
        ):
            raise RuleViolation(
                "sources",
                f"expected the {type(event).__name__}'s read step to give its columns as "
                "ddl_schema or as schema, found both",
            )
