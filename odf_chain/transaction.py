"""One write transaction: what every writer appends with one move of the head, and what happens
when it fails. ``Dataset.write``, ``Dataset.append``, the Spark writer (both its paths) and ingest
go through it, and so does the derived-dataset writer (``odf_chain.spark.derive``).

A writer:

1. **begins** on the head it read (:meth:`Transaction.begin`): a head the head log shows rolled
   back is refused, and a derivative dataset's transformation and last run, and a transaction
   pair, are proved against the chain, not a cache
   (:attr:`Transaction.already_recorded` then says the write is done already);
2. **prepares** blocks on the transaction's state as it learns them, in ODF's order: the SetVocab
   naming the event time column, the SetDataSchema when the schema differs (every rule checked,
   the evolution rules included, before the writer writes a file), then one AddData per slice,
   the first carrying the transaction pair and the run's field lineage
   (:meth:`Transaction.describe_run`: in its extra attributes, so the chain holds only events
   ODF readers know);
3. **moves** each slice it staged into ``data/<hash>`` (:meth:`Transaction.commit_data`);
4. **commits**: one move of the head (:func:`odf_chain.chain.commit`), with the derived index's
   usual update made once the head has moved, under the head lock
   (:class:`odf_chain.index.update.CommitRecording`; a ``Dataset`` handle's may wait for its
   next blocks, :class:`odf_chain.index.update.IndexBatch`), then the post-commit hooks in
   order, each best effort: a hook never fails a write that committed (the index's,
   :func:`update_index`, only where the usual update could not be made: it repairs; for the
   Spark writers and derive, the run's OpenLineage COMPLETE,
   :meth:`odf_chain.emit.LiveRun.committed`, passed in ``hooks``).

The failure policy, one for every writer: anything raised before the head moved withdraws what
the transaction created (its slices in ``data/``, its block files) where that is proven safe
(:func:`odf_chain.chain.withdraw`: under the head lock, against every block committed since the
base), and re-raises. A failed write leaves the dataset as it found it, so a retry starts clean
and an auditor meets no file no block names; a file whose removal cannot be proven safe (a racing
writer may have committed the same bytes) stays, reported by verify and removed by gc. Staged
files are the writer's own (``.staging``), which it discards on the way out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pyarrow as pa

from odf_chain import chain, replay, rules
from odf_chain.chain import BlockEntry, PreparedBlock
from odf_chain.errors import OdfChainError, RuleViolation
from odf_chain.events import AddFieldLineage, MetadataEvent, SetDataSchema
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.index import read as index_read, update as index_update
from odf_chain.slices import add_data_for
from odf_chain.state import DatasetState, lineage_extra, transaction_extra
from odf_chain.storage import Storage

PostCommitHook = Callable[[Storage, DatasetState, Sequence[tuple[BlockEntry, DatasetState]]], None]
"""Called after the head moved with the storage, the state the transaction began on, and each
committed block with the state after it. Must not raise (a raise is swallowed)."""


def update_index(
    storage: Storage, before: DatasetState, steps: Sequence[tuple[BlockEntry, DatasetState]]
) -> None:
    """The index follows the head: the committed blocks appended to it, or, when it cannot be
    appended to (deleted, left stale by a crash, another writer's update still to come), caught
    up or rebuilt and saved. Readers never write the index, so this hook (and ``odf-chain
    index``) is what keeps it current."""
    if not index_update.record_commit(storage, before, steps):
        with contextlib.suppress(OdfChainError):
            index_read.open_index(storage, save=True)


POST_COMMIT_HOOKS: tuple[PostCommitHook, ...] = (update_index,)
"""The hooks every transaction runs unless given others: the index follows the head."""


@dataclass
class Transaction:
    """One write in progress. Build it with :meth:`begin` (or :meth:`create` for a new
    dataset); use it as a context manager so a failure withdraws what it created."""

    storage: Storage
    base: DatasetState
    system_time: datetime
    location: str
    pair: tuple[str, int] | None = None
    hooks: Sequence[PostCommitHook] = POST_COMMIT_HOOKS
    already_recorded: bool = False
    index_batch: index_update.IndexBatch | None = None  # the writer's deferred index updates
    prepared: list[PreparedBlock] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # slices this transaction put in data/
    lineage: AddFieldLineage | None = None  # the run's field lineage, for its first slice
    _slices: int = 0
    _rollback_at_commit: bool | chain.AtTheMove = True  # begin checked it, or leaves it
    _committing: bool = False  # block files may have been written

    # -- beginning --------------------------------------------------------------------------------

    @classmethod
    def begin(
        cls,
        storage: Storage,
        state: DatasetState,
        *,
        transaction: tuple[str, int] | None = None,
        system_time: datetime | None = None,
        hooks: Sequence[PostCommitHook] = POST_COMMIT_HOOKS,
        logged_head: str | chain.Unread | None = chain.UNREAD,
        index_batch: index_update.IndexBatch | None = None,
    ) -> Transaction:
        """A transaction on ``state``, the head as the writer just read it. Refuses a rolled
        back head (rule ``head-rollback``) before anything is written: against
        ``logged_head``, the head log's last head, when the writer read it just before that
        head (:func:`chain.check_not_rolled_back`), else against the log and head read here;
        :data:`chain.AT_THE_MOVE` leaves the check to the head move, under the head lock.
        What a writer decides from is proved against the chain, not taken from the index: a
        derivative dataset's transformation and last run (:func:`replay.proven_derivation`)
        and, with ``transaction``, the app id's last version (:attr:`already_recorded` then
        tells whether this pair was written before, and the writer writes nothing).
        ``index_batch``: a writer that commits again and again (a ``Dataset`` handle) lets
        the index's update wait for a few of its commits
        (:class:`~odf_chain.index.update.IndexBatch`)."""
        chain.check_not_rolled_back(storage, state, logged=logged_head)
        state = replay.proven_derivation(storage, state)  # what a derive run starts from
        recorded = False
        if transaction is not None:
            transaction = rules.transaction_argument(transaction)
            state = replay.proven_transactions(storage, state, transaction[0])
            recorded = rules.transaction_recorded(state, *transaction)
        tx = cls(
            storage,
            state,
            chain.now(state.system_time) if system_time is None else system_time,
            storage.location,
            transaction,
            hooks,
            recorded,
            index_batch,
        )
        tx._rollback_at_commit = logged_head if isinstance(logged_head, chain.AtTheMove) else False
        return tx

    @classmethod
    def create(
        cls,
        storage: Storage,
        seed: PreparedBlock,
        *,
        transaction: tuple[str, int] | None = None,
        hooks: Sequence[PostCommitHook] = POST_COMMIT_HOOKS,
    ) -> Transaction:
        """The first transaction of a new dataset: its Seed (prepared, not yet written) is its
        first block, so a write that fails creates no dataset."""
        if transaction is not None:
            transaction = rules.transaction_argument(transaction)
        tx = cls(
            storage,
            seed.before,
            seed.entry.block.system_time,
            storage.location,
            transaction,
            hooks,
        )
        tx.prepared.append(seed)
        return tx

    # -- preparing --------------------------------------------------------------------------------

    @property
    def state(self) -> DatasetState:
        """The state after every block prepared so far."""
        return self.prepared[-1].after if self.prepared else self.base

    @property
    def algorithm(self) -> str:
        """The chain's hash algorithm (a new chain's is its Seed's, else BLAKE3)."""
        return self.state.hash_algorithm or BLAKE3

    def check(self, event: MetadataEvent) -> PreparedBlock:
        """``event`` built on the current state and checked by every rule, not added: a writer
        refuses what would break a rule before it writes a file."""
        return chain.prepare(self.state, event, system_time=self.system_time)

    def add(self, event: MetadataEvent) -> PreparedBlock:
        """Prepare ``event`` on the current state (every rule checked) as the next block."""
        block = self.check(event)
        self.prepared.append(block)
        return block

    def name_event_time(self, column: str | None) -> PreparedBlock | None:
        """The SetVocab naming ``column`` as the event time column (ODF's way: the column keeps
        its name), unless none is named or the vocabulary in force names it already.

        Renaming the event time column once a schema is set is refused by rule
        ``vocab-before-schema`` (the rows written before would change their event time); the
        refusal is worded here for the writer's option, before anything is written."""
        state = self.state
        if column is None or column == state.vocab.event_time_column:
            return None
        event = replace(state.vocab, event_time_column=column).as_event()
        try:
            return self.add(event)
        except RuleViolation as violation:
            if violation.rule != "vocab-before-schema":
                raise
            in_force = state.vocab.event_time_column
            raise RuleViolation(
                violation.rule,
                f"dataset {self.location}: event_time={column!r}, but the dataset's event time "
                f"column is {in_force!r} since its schema was set at block "
                f"{state.schema_sequence_number}; naming another now would change the event "
                f"time of every row written before (write without event_time= to take "
                f"{in_force!r}, or into a new dataset)",
            ) from None

    def schema_change(self, schema: pa.Schema) -> SetDataSchema | None:
        """The SetDataSchema a write of ``schema`` (system columns included) needs: None when it
        is the schema in force. The one place a writer decides that the schema changes."""
        state = self.state
        if state.schema is not None and schema.equals(state.schema, check_metadata=True):
            return None
        return SetDataSchema.from_arrow(schema)

    def check_schema(self, schema: pa.Schema) -> None:
        """Refuse, before any file is written, a schema the rules refuse (the evolution rules
        among them); adds nothing (the writer declares the schema once its slices exist)."""
        event = self.schema_change(schema)
        if event is not None:
            self.check(event)

    def declare_schema(self, schema: pa.Schema) -> PreparedBlock | None:
        """The SetDataSchema :meth:`schema_change` decides on, checked by every rule and added;
        None when the schema in force stays."""
        event = self.schema_change(schema)
        return None if event is None else self.add(event)

    def describe_run(self, lineage: AddFieldLineage) -> None:
        """The field lineage of the run whose slices follow, checked by every rule on the
        current state before any slice is written (its offsets start at the next offset), and
        carried by the first slice's AddData (:data:`odf_chain.state.LINEAGE_KEY`). Call again
        to amend it (a run's end time is known once its slices are written)."""
        if self._slices:
            raise ValueError("describe_run comes before the run's first slice")
        self.check(lineage)
        self.lineage = lineage

    def add_slice(
        self,
        *,
        physical_hash: Multihash,
        logical_hash: Multihash,
        size: int,
        num_rows: int,
        watermark: datetime | None,
        extra: Mapping[str, Any] | None = None,
    ) -> PreparedBlock:
        """The AddData of the next slice, its offsets after the last; the transaction's first
        slice carries the transaction pair (a write is one head move, so that block is in the
        chain exactly when the whole write is) and the run's lineage (:meth:`describe_run`),
        whose offsets the following slices cover."""
        if self._slices == 0:
            if self.pair is not None:
                extra = {**(extra or {}), **transaction_extra(*self.pair)}
            if self.lineage is not None:
                extra = {**(extra or {}), **lineage_extra(self.lineage)}
        block = self.add(
            add_data_for(
                self.state,
                physical_hash=physical_hash,
                logical_hash=logical_hash,
                size=size,
                num_rows=num_rows,
                watermark=watermark,
                extra=extra or None,
            )
        )
        self._slices += 1
        return block

    # -- committing -------------------------------------------------------------------------------

    def commit_data(self, staged: str, name: str, size: int | None = None) -> None:
        """Move the staged slice ``staged`` into ``data/<name>`` (checked against ``size``);
        one this call creates is withdrawn again if the transaction fails."""
        if self.storage.commit_data(staged, name, size).created:
            self.created.append(name)

    def commit(self) -> DatasetState:
        """Move the head once over every prepared block, then run the post-commit hooks; the
        state after the last block."""
        if self.lineage is not None and not self._slices:
            raise RuleViolation(
                "lineage-data",
                f"dataset {self.location}: the lineage of run {self.lineage.run.run_id!r} "
                "describes slices, and the transaction has none",
            )
        self._committing = True
        before = self.prepared[0].before
        steps = [(p.entry, p.after) for p in self.prepared]
        indexing = None
        if update_index in self.hooks:
            indexing = index_update.CommitRecording(self.storage, before, steps, self.index_batch)
        # the head log was checked when the transaction began (or is, by the move): a rollback
        # since then moved the head off this transaction's base, which the move refuses. The
        # hooks run outside the batch: a repair may rebuild the index (threads, minutes)
        with self.storage.batch():
            after = chain.commit(
                self.storage,
                *self.prepared,
                created_data=self.created,
                check_rollback=self._rollback_at_commit,
                once_moved=None if indexing is None else indexing.record,
            )
        for hook in self.hooks:
            if hook is update_index and indexing is not None and indexing.done:
                continue  # made under the head lock, once the head moved
            with contextlib.suppress(Exception):  # a hook never fails a write that committed
                hook(self.storage, before, steps)
        return after

    def abort(self) -> None:
        """The failure policy (see the module): withdraw the slices this transaction created
        and any of its block files a failed commit left, where that is proven safe (a block
        or slice the chain now names, or that cannot be proven unreferenced, stays)."""
        blocks = [str(p.entry.hash) for p in self.prepared] if self._committing else []
        if self.created or blocks:  # else nothing was written: not even a lock is taken
            chain.withdraw(self.storage, self.base, blocks=blocks, data=self.created)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self.abort()
