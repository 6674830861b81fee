"""The chain's rules: pure checks of one block against the state before it.

Each rule is a small function that raises :class:`RuleViolation` (or its subclass
:class:`SchemaEvolutionError`) naming the rule and saying what was expected and what was found.
They run on every append and again, unchanged, on replay and verify. No I/O here.

Rule names (stable; reports and tests refer to them):

========================  =====================================================================
seed-first                the first block is a Seed at sequence 0 with no predecessor
seed-unique               no Seed after the first block
sequence-number           sequence number = previous + 1
prev-block-hash           prev_block_hash = hash of the previous block
hash-algorithm            every block and slice hash uses the chain's algorithm (so does a
                          lineage input pinned at a block of this very dataset)
system-time               system time never decreases
schema-before-data        a SetDataSchema precedes the first data slice
schema-valid              the SetDataSchema's Arrow schema decodes, every string in it (field
                          names, metadata keys and values, timezones) is UTF-8, and no field
                          sits deeper than 64 levels (the decoder refuses both, naming the
                          field, so nothing else ever sees such a schema); so does its
                          structured form (ODF 0.39's ``schema``) when it has one
schema-forms              a SetDataSchema carrying both forms (``raw_arrow_schema`` and the
                          structured ``schema``) describes one schema with them: the same
                          field names, types and nullability (the first difference is named)
schema-evolution          schema changes follow the evolution rules
offsets                   slices are contiguous: prev_offset = last offset, start = prev + 1,
                          end >= start
watermark                 once set, the watermark is carried and never decreases
checkpoint                prev_checkpoint = the last checkpoint
dataset-kind              AddData, SetPollingSource and AddPushSource only in root datasets,
                          ExecuteTransform and SetTransform only in derivative ones
sources                   push and polling sources are mutually exclusive (ODF RFC-011): no
                          SetPollingSource while a push source is active, no AddPushSource while
                          the polling source is; a source's read step gives its columns as
                          ddl_schema or as schema, not both
transform                 a SetTransform names at least one input, each by dataset id (did:odf)
                          with a unique alias, and holds a TransformSql with an engine and a query
transform-inputs          an ExecuteTransform comes after a SetTransform and pins exactly its
                          inputs, in its order, each starting where the last run that read it
                          stopped (prev block and offset = that run's new ones), offsets never
                          going back
vocab-before-schema       a SetVocab that renames a system column only before the first
                          SetDataSchema (the schema and every slice name the columns as they
                          were); one that restates the vocabulary in force is accepted anywhere
lineage-structure         a lineage event is well formed: input and operation names unique and
                          distinct from each other; each input a pinned dataset (dataset_id and
                          block_hash) or an external source (uri); every input field read from
                          an input or from an output of another operation; no cycles
lineage-writes            a lineage event writes at least one field: some operation writes into
                          the dataset (``writes``) and names an output (CDAP refuses an
                          operation set without a write)
lineage-outputs           every field a lineage operation writes is a v2 path of the schema in
                          force
lineage-data              the offsets a lineage run wrote start at the next offset and are
                          covered by data slices, before any other event: the slice of the block
                          carrying the lineage (an AddData's starts them, an ExecuteTransform's
                          is them) and the slices right after it, which carry none of their own
transaction-version       a transaction pair (extra attribute ``odf-chain.dev/transaction`` of
                          an AddData) has a non-empty string app id and an integer version in
                          0..2**63-1, above the last version recorded for that app id
no-op                     no field lineage without field operations (odf_chain's own record)
========================  =====================================================================

What is not a rule: an ODF event that changes nothing (a SetVocab restating ODF's default names
or the vocabulary in force, a SetDataSchema identical to the schema in force, an AddData with no
slice, checkpoint, new watermark or source state, a SetInfo or SetLicense repeating what is in
force, a DisablePushSource or DisablePollingSource of a source that is not active, an
AddPushSource restating the active source of that name). ODF forbids
none of them and other ODF writers produce them, so a chain holding one opens, replays and
verifies; refusing them would make such a chain unreadable here for no benefit. They are
accepted silently: the fold has no channel for warnings. odf_chain's own writers do not
produce them (a write appends a SetDataSchema or SetVocab only when it changes something, and
nothing at all for an empty input); :meth:`Dataset.append` of such an event appends a harmless
block.

Checks that need other datasets (the input fields of a lineage event against the schemas of the
datasets it read) cannot be pure rules over (state, block): :func:`lineage_input_problems` does
that part, given a way to find those schemas. Append refuses, and verify reports, its findings
under the rule name ``lineage-inputs``, and a pin to a block the input's chain does not have
under ``lineage-input-dangling``; verify warns (``lineage-input-unreachable``) about inputs it
cannot open.

One module per topic, one place per rule: :mod:`.blocks` (the rules on any ODF block),
:mod:`.lineage` (the field lineage event), :mod:`.sources` (a root dataset's sources),
:mod:`.transactions` (transaction-version),
:mod:`.transforms` (a derivative dataset's transform and runs) and
:mod:`.plain_run` (the same rules over a run of plain AddData blocks, for verify). :data:`RULES`
below is their order; :func:`validate` runs them.
"""

from __future__ import annotations

from collections.abc import Callable

from odf_chain.errors import RuleViolation
from odf_chain.events import MetadataBlock
from odf_chain.format.multihash import Multihash
from odf_chain.rules.blocks import (
    check_data,
    check_dataset_kind,
    check_hash_algorithm,
    check_link,
    check_schema,
    check_seed,
    check_sequence,
    check_system_time,
    check_vocab,
)
from odf_chain.rules.lineage import (
    check_lineage_data,
    check_lineage_outputs,
    check_lineage_structure,
    check_lineage_writes,
    check_no_op,
    lineage_input_problems,
)
from odf_chain.rules.plain_run import plain_run_passes
from odf_chain.rules.sources import check_sources
from odf_chain.rules.transactions import (
    MAX_TRANSACTION_VERSION,
    check_transaction,
    transaction_argument,
    transaction_problem,
    transaction_recorded,
)
from odf_chain.rules.transforms import (
    check_run_inputs,
    check_transform,
    transform_input_ids,
    transform_problem,
)
from odf_chain.state import DatasetState

__all__ = [
    "MAX_TRANSACTION_VERSION",
    "RULES",
    "Rule",
    "check_data",
    "check_dataset_kind",
    "check_hash_algorithm",
    "check_lineage_data",
    "check_lineage_outputs",
    "check_lineage_structure",
    "check_lineage_writes",
    "check_link",
    "check_no_op",
    "check_run_inputs",
    "check_schema",
    "check_seed",
    "check_sequence",
    "check_sources",
    "check_system_time",
    "check_transaction",
    "check_transform",
    "check_vocab",
    "lineage_input_problems",
    "plain_run_passes",
    "transaction_argument",
    "transaction_problem",
    "transaction_recorded",
    "transform_input_ids",
    "transform_problem",
    "validate",
]

Rule = Callable[[DatasetState, MetadataBlock, Multihash], None]

RULES: tuple[Rule, ...] = (
    check_seed,
    check_sequence,
    check_link,
    check_hash_algorithm,
    check_system_time,
    check_schema,
    check_data,
    check_dataset_kind,
    check_sources,
    check_transform,
    check_run_inputs,
    check_vocab,
    check_lineage_structure,
    check_lineage_writes,
    check_lineage_outputs,
    check_lineage_data,
    check_transaction,
    check_no_op,
)


def validate(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """Raise the first rule ``block`` breaks, located at the block; return if it breaks none."""
    for rule in RULES:
        try:
            rule(state, block, block_hash)
        except RuleViolation as violation:
            raise violation.at(block.sequence_number, str(block_hash)) from None
