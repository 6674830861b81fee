"""The user-facing handle on one dataset (a local directory or a ``pyarrow.fs`` URI)."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from odf_chain import chain, replay, slice_reader, slices
from odf_chain.chain import BlockEntry
from odf_chain.errors import (
    NotFoundError,
    OdfChainError,
    RuleViolation,
    SchemaError,
    StaleBaseError,
    StorageError,
    UnsyncedCommitError,
)
from odf_chain.events import (
    DatasetKind,
    MetadataEvent,
    OffsetInterval,
    Seed,
)
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import BLAKE3, Multihash, check_algorithm
from odf_chain.index.update import IndexBatch
from odf_chain.state import EMPTY, DatasetState
from odf_chain.storage import LocalStorage, Storage, create_storage, local_path, open_storage

if TYPE_CHECKING:  # pyarrow.compute (~90 ms): the caller who builds a filter has it
    import pyarrow.compute as pc

    # the writing side is imported by the methods that write: reads start fast
    from odf_chain.lineage.recorder import LineageRecorder

if TYPE_CHECKING:
    import pyarrow.dataset as pads

    # verify and receipts are imported by the methods using them: reading needs neither
    from odf_chain.receipt import Receipt
    from odf_chain.transaction import Transaction
    from odf_chain.verify import VerifyReport


class Dataset:
    """An ODF dataset: a metadata chain under ``blocks/`` and Parquet slices under ``data/``.

    The handle caches the state at the head it last saw; an append re-reads ``refs/head`` and
    folds any blocks another writer added in the meantime (a handle on the head it set itself
    has the head move check that under the head lock, and re-reads only when it moved), so a
    stale handle never appends on top of an old head, and one whose head was moved back off
    its line is refused. The first state comes from the derived index (a checked
    snapshot, see :mod:`odf_chain.index.read`), not from a fold of the whole chain.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._state: DatasetState = EMPTY
        self._index_batch = IndexBatch()
        self._own_head: Multihash | None = None  # the head this handle's last commit set
        self._flush_at_end: weakref.finalize | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        location: str | Path,
        hash: str = BLAKE3,
        *,
        filesystem: pafs.FileSystem | None = None,
        key_file: str | Path | None = None,
        single_writer: bool = False,
    ) -> Dataset:
        """Create the layout at ``location`` and append the Seed with a fresh ``did:odf`` id.

        ``location`` is a local path or a ``pyarrow.fs`` URI (``s3://bucket/sales``), or a path
        in ``filesystem`` when one is given (a filesystem configured in code). On S3, GCS and
        Azure the head moves by compare-and-swap; a filesystem without conditional writes is
        refused unless ``single_writer=True`` declares that one writer only ever writes here.

        ``key_file``: keep the id's private key there (PKCS#8 PEM, mode 0600) to sign receipts
        later; without it the key is dropped. The file must be new and outside the dataset. It
        is written before the dataset and removed if the create fails, so a failed create
        leaves no key for a dataset that does not exist.
        """
        check_algorithm(hash)
        if key_file is None:
            dataset = cls(create_storage(location, filesystem, single_writer=single_writer))
            dataset._append(Seed(dataset_id=DatasetId.generate()), algorithm=hash)
            return dataset
        from odf_chain.format.did import generate_key
        from odf_chain.receipt import check_key_path, create_key_file

        local = filesystem is None or isinstance(filesystem, pafs.LocalFileSystem)
        root = local_path(location) if local else None
        key_path = check_key_path(key_file, root)
        key = generate_key()
        create_key_file(key_path, key)
        try:
            dataset = cls(create_storage(location, filesystem, single_writer=single_writer))
            dataset._append(Seed(dataset_id=DatasetId.of_key(key)), algorithm=hash)
        except UnsyncedCommitError:
            raise  # the dataset exists, its id that key's: the key stays
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(key_path)
            raise
        return dataset

    @classmethod
    def lay_out(
        cls, location: str | Path, hash: str = BLAKE3, *, kind: DatasetKind = DatasetKind.ROOT
    ) -> tuple[Dataset, chain.PreparedBlock]:
        """The layout of a new dataset at ``location`` and its Seed (of ``kind``), built and
        checked but not written: a writer that creates the dataset commits the Seed with its
        first transaction, so a write that fails creates no dataset (:meth:`abandon_layout`
        then removes the empty folders). Until that commit the location is not a dataset."""
        check_algorithm(hash)
        dataset = cls(create_storage(location))
        seed = Seed(dataset_id=DatasetId.generate(), dataset_kind=kind)
        return dataset, chain.prepare(EMPTY, seed, algorithm=hash)

    def abandon_layout(self) -> None:
        """Remove the empty folders :meth:`lay_out` made, when no head was ever written there;
        anything that holds a file, or a head, is left alone."""
        if self.storage.read_head() is None:
            self.storage.remove_empty_layout()

    @classmethod
    def open(
        cls,
        location: str | Path,
        *,
        filesystem: pafs.FileSystem | None = None,
        single_writer: bool = False,
    ) -> Dataset:
        """Open an existing dataset: checks that it has a head; the state is read lazily.
        ``single_writer``: as for :meth:`create` (reading never needs it)."""
        dataset = cls(open_storage(location, filesystem, single_writer=single_writer))
        chain.read_head(dataset.storage)
        return dataset

    @property
    def path(self) -> Path | str:
        """The directory of a local dataset; the URI of one on another filesystem."""
        storage = self.storage
        return storage.root if isinstance(storage, LocalStorage) else storage.location

    @property
    def location(self) -> str:
        return self.storage.location

    # -- reading ------------------------------------------------------------------------------

    def refresh(self) -> DatasetState:
        """Catch up with the head on disk (folding only the blocks not seen yet)."""
        return self._catch_up(chain.read_head(self.storage))

    def _refresh_for_writing(self) -> tuple[DatasetState, str | None]:
        """:meth:`refresh`, and the head log's last head read just before the head: what a
        transaction checks a rollback against (:func:`chain.check_not_rolled_back`), so the
        head is read once before the head move, not twice."""
        logged = self.storage.logged_head()  # first: a line past the head means it moved on
        return self._catch_up(chain.read_head(self.storage), writing=True), logged

    def _catch_up(self, head: Multihash, *, writing: bool = False) -> DatasetState:
        """The state at ``head``, folding only the blocks after the handle's. A head that left
        the handle's line (moved back by hand, or to another branch) is refused: to a writer
        as ``head-rollback`` whatever the head log says (the handle saw its blocks as the
        head, a write now would orphan them), to a reader as not an ancestor (a new handle
        reads that head)."""
        if self._state.head is None:
            self._state = replay.head_state(self.storage, head)
        elif head != self._state.head:
            new_entries = []
            seen, ours = self._state.sequence_number, self._state.head
            for entry in chain.walk_back(self.storage, head, stop_at=ours):
                if entry.block.sequence_number <= seen:  # past our head without meeting it
                    if writing:
                        raise chain.left_the_line(self.storage, self._state, head)
                    raise NotFoundError(f"block {ours} is not an ancestor of {head}")
                new_entries.append(entry)
            new_entries.reverse()
            self._state = replay.fold(new_entries, self._state)
        return self._state

    @property
    def state(self) -> DatasetState:
        """The state at the head."""
        return self.refresh()

    @property
    def hash_algorithm(self) -> str:
        return self.state.hash_algorithm or BLAKE3

    def blocks(self) -> list[BlockEntry]:
        """Every block, oldest first, each checked against its hash: reads the whole chain
        (O(n)); :meth:`log` walks back from the head only as far as asked."""
        return replay.load_chain(self.storage)

    def log(self, limit: int | None = None) -> Iterator[BlockEntry]:
        """Blocks newest first, each checked against its hash, read one at a time as the
        caller asks (at most ``limit``): what ``odf-chain log`` streams."""
        return chain.newest_first(self.storage, limit)

    def state_at(self, ref: replay.Ref = "head", *, verified: bool = False) -> DatasetState:
        """The state as of ``ref`` (see :mod:`odf_chain.replay`), through the index: a bounded
        number of blocks, whatever the chain's length. The index is trusted for one thing it
        cannot prove without a fold: that the blocks it names below the head are the head's
        ancestors (``chain-verify`` checks that, and fails when they are not). ``verified``:
        answer from one full fold of the chain walked back from the head instead (O(chain
        length), nothing taken from the index)."""
        return replay.state_at(self.storage, ref, verified=verified)

    def _slices_at(
        self, at: replay.Ref
    ) -> tuple[pa.Schema, list[slice_reader.NamedSlice], DatasetState]:
        state, found = replay.listed_slices_at(self.storage, at)
        if state.schema is None:
            raise NotFoundError(f"{self.location} has no schema at block {state.sequence_number}")
        self.storage.check_layout()
        return state.schema, slice_reader.named_listing(self.storage, found), state

    def to_pyarrow_dataset(
        self,
        at: replay.Ref = "head",
        *,
        check: slice_reader.SliceCheck = "hash",
        changelog: bool = False,
    ) -> pads.Dataset:
        """The data as of block ``at`` as a ``pyarrow.dataset.Dataset``: exactly the slices the
        chain names up to it, read with the schema in force there (a slice from before an
        evolution reads its newer columns as nulls). For pandas, DuckDB and polars::

            ds.to_table(at=7).to_pandas()
            duckdb.sql("select * from data").df()  # with data = ds.to_pyarrow_dataset()
            polars.scan_pyarrow_dataset(ds.to_pyarrow_dataset())

        Each slice is opened first as verify opens it (a regular file of the dataset: no
        symlink, no FIFO) and checked as ``check`` says, before the dataset is returned:
        ``"hash"`` (the default) reads the whole file and compares its size and physical hash
        (BLAKE3 or SHA3-256, as the chain's) with the AddData that added it; ``"size"``
        compares its size only, reading nothing; ``None`` checks nothing more. A slice that
        fails is an :class:`IntegrityError` naming its file and that block.

        The dataset returned is lazy: pyarrow reads the files again when it is scanned, so a
        file replaced *after* this call returns is read as it then is, and an error while
        decoding it is pyarrow's own. :meth:`to_table` has neither gap: it decodes the very
        bytes it checked.

        A derivative dataset's slices are a changelog (rows appended and retracted run by run:
        :mod:`odf_chain.derived`), which a lazy dataset cannot fold: it is refused unless
        ``changelog=True`` asks for the ledger as it is stored; :meth:`to_table` folds it."""
        import pyarrow.dataset as pads

        slice_reader.check_argument(check)
        schema, pieces, state = self._slices_at(at)
        if state.dataset_kind == DatasetKind.DERIVATIVE and not changelog:
            raise OdfChainError(
                f"{self.location} is a derivative dataset: its slices are a changelog that a "
                "pyarrow dataset cannot fold; use to_table() for its rows, or "
                "changelog=True for the ledger"
            )
        slice_reader.check_files(self.storage, pieces, check)
        return pads.dataset(
            [piece.path for piece in pieces],
            schema=schema,
            format="parquet",
            filesystem=self.storage.filesystem,
        )

    def to_table(
        self,
        at: replay.Ref = "head",
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        check: slice_reader.SliceCheck = "hash",
        changelog: bool = False,
        threads: int = slice_reader.READ_THREADS,
    ) -> pa.Table:
        """The data as of block ``at`` (see :meth:`to_pyarrow_dataset`) as one table, in chain
        order, with only ``columns`` and the rows ``filter`` keeps (a ``pyarrow.compute``
        expression such as ``pc.field("station") == "a"``), both pushed down to the Parquet
        reader.

        Each slice is read into memory once, checked, and decoded from those same bytes (no
        window between check and use), ``threads`` slices at a time (by default one, see
        :data:`slice_reader.READ_THREADS`): at most ``threads`` slices' bytes are held beside
        the result.
        ``check="hash"`` (the default) compares the size and physical hash of the bytes with
        the AddData that added the slice, ``"size"`` their size only (a trusted pipeline that
        still wants truncations caught), ``None`` nothing (a trusted pipeline). Whatever the
        check, a slice that fails it or does not decode is an :class:`IntegrityError`, one
        that cannot be read a :class:`StorageError`, each naming the slice's file and the
        block (sequence number and hash) that added it; with several threads, the first such
        slice in chain order.

        A derivative dataset's rows are its changelog folded (:func:`odf_chain.derived.fold`:
        each retraction cancels the row it names), so the table is the query's answer over the
        inputs as block ``at`` pins them; the surviving rows keep their system columns.
        ``columns`` and ``filter`` then apply after the fold. ``changelog=True`` gives the
        ledger as stored instead (with its ``op`` column)."""
        slice_reader.check_argument(check)
        slice_reader.thread_count(threads)
        schema, pieces, state = self._slices_at(at)
        if state.dataset_kind != DatasetKind.DERIVATIVE or changelog:
            return slice_reader.read_table(
                self.storage,
                pieces,
                schema,
                columns=columns,
                filter=filter,
                check=check,
                threads=threads,
            )
        from odf_chain import derived

        ledger = slice_reader.read_table(self.storage, pieces, schema, check=check, threads=threads)
        live = derived.fold(ledger, state.vocab)
        if filter is not None:
            live = live.filter(filter)
        return live if columns is None else live.select(list(columns))

    def lineage(
        self, at: replay.Ref = "head", *, follow_inputs: bool = True, verified: bool = False
    ) -> replay.LineageReplay:
        """The field graph as of block ``at``, across the datasets it read when reachable;
        ``verified`` as for :meth:`state_at`."""
        return replay.lineage_at(self.storage, at, follow_inputs=follow_inputs, verified=verified)

    def schema_history(self, *, verified: bool = False) -> list[replay.SchemaChange]:
        """Every SetDataSchema, oldest first, with the diff from the schema before it;
        ``verified`` as for :meth:`state_at`."""
        return replay.schema_history(self.storage, verified=verified)

    def verify(
        self,
        *,
        check_data: bool = True,
        receipts: Iterable[Receipt | str | Path] = (),
        deep: bool = False,
        reproduce: bool = False,
        recursive: bool = False,
        inputs: Mapping[str, str] | None = None,
        spark=None,
    ) -> VerifyReport:
        """Check blocks, rules and data; with ``receipts`` (Receipt objects or receipt files),
        also that the chain still holds each receipt's block (see :mod:`odf_chain.receipt`);
        ``deep`` also reads every row of every slice (see :mod:`odf_chain.verify`).
        ``reproduce`` re-runs every derive run with its engine (:mod:`odf_chain.engines`: Spark,
        with ``spark`` or the active session) and compares; ``recursive`` reproduces derivative
        inputs too; ``inputs`` (alias -> location) opens inputs that moved."""
        from odf_chain.verify import verify

        report = verify(self.storage, check_data=check_data, receipts=receipts, deep=deep)
        if reproduce:
            from odf_chain import derived, engines

            rerun = engines.reproducer(derived.ENGINE)
            rerun(self, report, recursive=recursive, inputs=inputs, spark=spark)
        return report

    def receipt(self, *, key_file: str | Path | None = None) -> Receipt:
        """A receipt of the head, to keep outside the writer's reach and verify with later;
        signed when ``key_file`` holds this dataset's key (any other key is refused)."""
        from odf_chain.receipt import Receipt, load_key

        state = self.refresh()
        head = state.head
        if head is None or state.dataset_id is None or state.system_time is None:
            raise NotFoundError(f"{self.location}: no Seed, nothing to take a receipt of")
        path = self.path
        location = str(path.absolute()) if isinstance(path, Path) else path
        taken = Receipt(state.dataset_id, state.sequence_number, head, state.system_time, location)
        if key_file is not None:
            taken = taken.signed(load_key(key_file), f"key file {key_file}")
        return taken

    # -- writing ------------------------------------------------------------------------------

    def _append(
        self,
        event: MetadataEvent,
        *,
        algorithm: str | None = None,
        logged_head: str | chain.Unread | None = chain.UNREAD,
    ) -> BlockEntry:
        """``event`` as a transaction of its own (a new dataset's Seed, or any event);
        ``logged_head`` as :meth:`Transaction.begin` takes it."""
        from odf_chain.transaction import Transaction

        if self._state.head is None:
            tx = Transaction.create(self.storage, chain.prepare(EMPTY, event, algorithm=algorithm))
        else:
            tx = self._begin(self._state, logged_head=logged_head)
            tx.add(event)
        self._state = self._commit(tx)
        return tx.prepared[-1].entry

    def _begin(self, state: DatasetState, **options: Any) -> Transaction:
        """A transaction of this handle's, whose index update may wait for its next commits
        (:class:`~odf_chain.index.update.IndexBatch`): what waits is written by :meth:`flush`,
        and, best effort, when the handle is collected or the process exits (the finalizer
        runs in whichever thread collects it, with its own storage handle's batch: a
        ``Dataset(storage)`` sharing a storage with a live handle is not a use it serves)."""
        from odf_chain.transaction import Transaction

        if self._flush_at_end is None:
            self._flush_at_end = weakref.finalize(self, self._index_batch.flush, self.storage, 0.0)
        return Transaction.begin(self.storage, state, index_batch=self._index_batch, **options)

    def flush(self) -> None:
        """Write the derived index's updates this handle deferred (at most three blocks'), so
        that readers need not catch up with them, waiting up to 1 s for the head lock. Never
        needed for correctness: a reader that finds the index behind the head folds the blocks
        between."""
        self._index_batch.flush(self.storage)

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *_: object) -> None:
        self.flush()

    def append(self, event: MetadataEvent) -> BlockEntry:
        """Append one event after checking every rule. Raises before writing if one is broken.

        A handle whose state is the head it set itself does not read the head and the head log
        first (where the store locks the head): the head move checks both under the lock, and
        when either has moved (another writer, a rollback, a log to repair) nothing is written
        and the append is made again the checked way, reading them first."""
        own = self._own_head
        if own is not None and own == self._state.head and self.storage.locks_head:
            try:
                return self._append(event, logged_head=chain.AT_THE_MOVE)
            except (StaleBaseError, RuleViolation):  # the state may be behind: read it
                pass
        with self.storage.batch():  # the head log and the head: one root, two folders
            _, logged = self._refresh_for_writing()
        return self._append(event, logged_head=logged)  # the commit is a batch of its own

    def _commit(self, tx: Transaction) -> DatasetState:
        state = tx.commit()
        self._own_head = state.head
        return state

    def set_schema(self, schema: pa.Schema) -> BlockEntry | None:
        """Declare the data schema before (or between) writes; system columns are added.

        Returns the new block, or None when that schema is already in force.
        """
        state, logged = self._refresh_for_writing()
        tx = self._begin(state, logged_head=logged)
        block = tx.declare_schema(slices.with_system_fields(schema, state.vocab))
        if block is None:
            return None
        self._state = self._commit(tx)
        return block.entry

    def write(
        self,
        table: pa.Table | pa.RecordBatch | pa.RecordBatchReader | Any,
        *,
        lineage: LineageRecorder | None = None,
        evolve: bool = False,
        transaction: tuple[str, int] | None = None,
        target_slice_bytes: int | None = None,
        event_time: str | None = None,
    ) -> list[BlockEntry]:
        """Append ``table`` as one Parquet slice (or several, see ``target_slice_bytes``);
        return the blocks appended.

        ``table`` is a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame, or
        anything that speaks the Arrow C stream interface
        (``__arrow_c_stream__``: polars DataFrames, DuckDB results, ...); it is read whole into
        memory. Anything else is an :class:`OdfChainError` naming what was given.

        A pandas DataFrame's named index (``df.groupby("k").sum()``'s ``k``, a MultiIndex's
        levels, a named RangeIndex) becomes columns after the others, as pyarrow stores it; an
        unnamed RangeIndex (row positions) is dropped. Any other unnamed index (left by a
        filter or a sort) is refused rather than guessed at, as is an index named like a
        column: name it (``df.rename_axis("row")``) or drop it
        (``df.reset_index(drop=True)``).

        ``evolve``: allow columns (or struct fields) the schema in force lacks; without it such
        a write raises :class:`NewColumnsError` naming them, before any file is written (a
        misspelt column would otherwise be added for good). Missing nullable columns become
        nulls either way; the first write to a dataset without a schema sets it.

        A column whose type widens into the declared one (int32 into int64, float32 into
        float64, ...: :mod:`odf_chain.schema.widening`) is cast to it as it is written, with no
        SetDataSchema; another type is refused with :class:`TypeChangeError`, naming the field,
        before any file is written.

        ``transaction=(app_id, version)``: the pair is recorded on the (first) AddData, and a
        write whose version is not above the last one the chain records for ``app_id`` appends
        nothing and returns ``[]`` (a retried job whose first attempt did commit), before any
        file is written. That last version is proved against the chain (a walk back from the
        head to the block that recorded it; to the Seed for an app id never seen), never taken
        from the index alone: a skipped write is data not written.

        ``lineage``: the field operations that produced ``table``, recorded by hand; they are
        carried by the write's first AddData (its extra attributes, ``odf-chain.dev/field-
        lineage``: an event every ODF reader can decode), and its input fields are checked
        against the datasets they name when those are reachable.

        ``target_slice_bytes``: by default the table becomes one slice, however large; with a
        target, a new slice begins at the first row group (1 Mi rows) at or past it, each slice
        with its own AddData, offsets contiguous, all in the same move of the head.

        ``event_time``: the column holding event times (timestamps or dates). It keeps its
        name: on a dataset without a schema, a SetVocab naming it as the event time column is
        appended first, in the same transaction; a dataset whose vocabulary already names it
        needs none; a dataset whose schema is set with another event time column refuses it
        (rule ``vocab-before-schema``), before any file is written. Without it, the column the
        vocabulary names (``event_time`` by default) is the event time; a table without that
        column gets the transaction's system time there.

        Adds the system columns; when the slice's schema differs from the one in force,
        prepares a SetDataSchema and checks it by the evolution rules *before* writing any
        file; writes the slice in one pass (:mod:`odf_chain.slice_writer`: hashed as written,
        never read back) and stores it as ``data/<physical hash>``; then appends the
        SetDataSchema (if any) and the AddData together, with one move of the head: both
        become visible, or neither. If another writer appended meanwhile, raises
        :class:`ConflictError` and removes the slices this call created. An empty table appends
        nothing.
        """
        from odf_chain import rules, slice_writer
        from odf_chain.schema.evolution import check_new_columns
        from odf_chain.schema.widening import adopt_schema, refuse_narrowing

        started_at = chain.now()
        table = as_arrow_table(table)
        if transaction is not None:
            transaction = rules.transaction_argument(transaction)
        state, logged = self._refresh_for_writing()
        if table.num_rows == 0:
            return []
        tx = self._begin(state, transaction=transaction, logged_head=logged)
        if tx.already_recorded:
            self._state = tx.base
            return []
        if event_time is not None and event_time not in table.schema.names:
            raise SchemaError(f"event time column {event_time!r} is not in the table")
        tx.name_event_time(event_time)
        source = table.replace_schema_metadata(slices.own_metadata(table.schema))
        columns = zip(source.schema.names, source.columns, strict=True)
        schema = slice_writer.slice_schema(
            source.schema,
            tx.state.schema,
            tx.state.vocab,
            with_nulls={name for name, column in columns if column.null_count},
        )
        # a column of a narrower type is cast to the declared one as it is written; any other
        # type is refused here, before any file or block, naming the field (not a block)
        refuse_narrowing(adopt_schema(schema, tx.state.schema)[1], f"{self.location}: the table")
        check_new_columns(tx.state.schema, schema, evolve=evolve, dataset=self.location)
        tx.declare_schema(schema)  # checked by the evolution rules before any file is written
        state = tx.state
        offsets = OffsetInterval(state.next_offset, state.next_offset + table.num_rows - 1)
        if lineage is not None:  # checked by every rule before any file is written ...
            settled_lineage = replay.settle_lineage(
                lineage.event(started_at=started_at, ended_at=tx.system_time, offsets=offsets),
                state.schema,
            )
            tx.describe_run(settled_lineage)
        spec = slice_writer.SliceSpec(
            schema,
            state.vocab,
            state.next_offset,
            tx.system_time,
            tx.algorithm,
            target_slice_bytes=target_slice_bytes,
        )
        filesystem = self.storage.filesystem
        staged: list[str] = []
        sinks: list[BinaryIO] = []

        def open_sink(_: int) -> BinaryIO:
            if sinks:  # the slice before is complete: one open file at a time
                sinks[-1].close()
            staged.append(str(self.storage.stage_file(".parquet")))
            sinks.append(filesystem.open_output_stream(staged[-1], compression=None))
            return sinks[-1]

        with tx:
            try:
                try:
                    written = slice_writer.write_slices(source, spec, open_sink)
                    for sink in sinks:
                        sink.close()
                except OSError as exc:
                    raise StorageError(
                        f"dataset {self.location}: cannot write the data slice "
                        f"{staged[-1] if staged else 'in staging'}: "
                        f"{slices.os_reason(exc)}"
                    ) from exc
                except pa.ArrowException as exc:
                    raise SchemaError(f"cannot write the slice as Parquet: {exc}") from None
                if lineage is not None:  # ... and recorded as ending when its slices are written
                    run = replace(settled_lineage.run, ended_at=chain.now(tx.system_time))
                    tx.describe_run(replace(settled_lineage, run=run))
                for facts in written:
                    tx.add_slice(
                        physical_hash=facts.physical_hash,
                        logical_hash=facts.logical_hash,
                        size=facts.size,
                        num_rows=facts.num_rows,
                        watermark=facts.max_event_time,
                    )
                for path, facts in zip(staged, written, strict=True):
                    tx.commit_data(path, str(facts.physical_hash), facts.size)
                self._state = self._commit(tx)
            except BaseException:
                for sink in sinks:
                    with contextlib.suppress(OSError):
                        sink.close()
                for path in staged:
                    self.storage.discard(path)
                raise
        return [p.entry for p in tx.prepared]


def _from_pandas(frame: Any) -> pa.Table:
    """A pandas DataFrame as Arrow, its index kept as columns the way pyarrow keeps it.

    A named index (``df.groupby("k").sum()``'s ``k``, each named level of a MultiIndex) is
    data: it becomes columns after the others, under its names, as ``Table.from_pandas`` and
    ``to_parquet`` store it. Dropping it lost the group key, and the next write holding ``k``
    was refused as a new column. A named RangeIndex is kept too (pyarrow would keep it only as
    pandas metadata, which slices do not carry): the user named it.

    An unnamed RangeIndex is row positions, not data: dropped (pyarrow keeps no column for it
    either). Any other unnamed index (left by a filter, a sort, ``index=[...]``) is refused, as
    is an index named like a column: pyarrow would store them as ``__index_level_0__`` columns,
    a name nobody chose that would then stay in the dataset's schema; whether such an index is
    data only its owner knows."""
    import pandas as pd  # the caller has it: it gave a DataFrame

    index = frame.index
    names = list(index.names)
    if isinstance(index, pd.RangeIndex) and names == [None]:
        return pa.Table.from_pandas(frame, preserve_index=False)
    what = "index" if len(names) == 1 else "MultiIndex"
    named = [str(name) for name in names if name is not None]
    if len(set(named)) < len(named):  # pyarrow would name all but one __index_level_<n>__
        raise OdfChainError(
            f"Dataset.write: levels of the DataFrame's MultiIndex share a name ({names}): "
            "name each level apart (df.rename_axis([...])), or drop the index "
            "(df.reset_index(drop=True))"
        )
    for level, name in enumerate(names):
        where = "" if len(names) == 1 else f"level {level} of "
        if name is None:
            kind = "" if len(names) > 1 else " and is no RangeIndex (as a filter or a sort left)"
            raise OdfChainError(
                f"Dataset.write: {where}the DataFrame's {what} has no name{kind}: name it "
                "to keep it as a column (df.rename_axis(...)), or drop it "
                "(df.reset_index(drop=True))"
            )
        if str(name) in {str(column) for column in frame.columns}:
            raise OdfChainError(
                f"Dataset.write: {where}the DataFrame's {what} is named {name!r}, as a column "
                "is: rename one of them (df.rename_axis(...)), or drop the index "
                "(df.reset_index(drop=True))"
            )
    return pa.Table.from_pandas(frame, preserve_index=True)


def as_arrow_table(data: Any) -> pa.Table:
    """``data`` as a pyarrow Table (see :meth:`Dataset.write` for what is taken)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    kind = type(data)
    try:
        if kind.__module__.split(".")[0] == "pandas" and kind.__name__ == "DataFrame":
            return _from_pandas(data)
        if hasattr(data, "__arrow_c_stream__"):
            return pa.table(data)
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        ValueError,  # pandas: duplicate column names
        TypeError,  # pandas: a sparse column
    ) as exc:
        raise SchemaError(f"cannot read the {kind.__qualname__} as Arrow data: {exc}") from None
    raise OdfChainError(
        f"Dataset.write takes a pyarrow Table, RecordBatch or RecordBatchReader, a pandas "
        f"DataFrame, or an object with __arrow_c_stream__ (polars, DuckDB); got "
        f"{kind.__module__}.{kind.__qualname__}"
    )
