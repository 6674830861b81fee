"""One write's run as OpenLineage hears of it while it happens: START when it begins, COMPLETE
once the head moved (a post-commit hook of its transaction), FAIL when it raises.

Each event is built by :mod:`odf_chain.export.openlineage` (as the file export builds it, same
run id, same facets), queued in the dataset's outbox, then delivered within the bound
(:mod:`odf_chain.emit.delivery`); older events still queued go first. Nothing here ever raises
into the write: an event that cannot be built is logged and dropped, one that cannot be sent
stays queued.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from openlineage.client.serde import Serde

from odf_chain import chain
from odf_chain.chain import BlockEntry
from odf_chain.emit import config, delivery, outbox
from odf_chain.events import AddData, ExecuteTransform, LineageRun, OffsetInterval
from odf_chain.export.chain_view import InputOpener, LineageRunBlock
from odf_chain.export.openlineage import (
    DEFAULT_JOB_NAMESPACE,
    RunFacts,
    end_event,
    openlineage_run_id,
    run_facts,
    start_event,
)
from odf_chain.state import DatasetState, lineage_of
from odf_chain.storage import Storage

log = logging.getLogger(__name__)


def _new_data(entry: BlockEntry):
    event = entry.block.event
    return event.new_data if isinstance(event, AddData | ExecuteTransform) else None


@dataclass
class LiveRun:
    """The run a writer is about to do (its job name, run id and start time, decided before it
    begins, and recorded in its lineage). Made by :func:`live_run`; without an OpenLineage
    configuration every method does nothing."""

    storage: Storage
    job_name: str
    run_id: str  # as the chain records it
    started_at: datetime
    client: Any = None
    namespace: str = DEFAULT_JOB_NAMESPACE
    timeout: float = config.DEFAULT_TIMEOUT
    key: str | None = None
    ended: bool = False
    last: delivery.Delivery | None = None  # what the last delivery did (for tests and logs)

    @property
    def enabled(self) -> bool:
        return self.client is not None

    def _ol_run_id(self, key: str) -> str:
        return openlineage_run_id(key, LineageRun(self.job_name, self.run_id, self.started_at))

    def _base(self, key: str) -> RunFacts:
        return RunFacts(
            key=key, job_name=self.job_name, run_id=self._ol_run_id(key), started_at=self.started_at
        )

    def _send(self, event) -> None:
        try:
            outbox.put(self.storage, json.loads(Serde.to_json(event)))
        except Exception:  # no room for it: it cannot be promised, so it is not sent either
            log.warning("OpenLineage: cannot queue the %s event", event.eventType, exc_info=True)
            return
        self.last = done = delivery.deliver(self.storage, self.client, self.timeout)
        if not done.finished:
            log.warning(
                "OpenLineage: delivery to the backend still running after %s s; what it does "
                "not send stays in the outbox of %s for the next write or odf-chain lineage --emit",
                self.timeout,
                self.storage.location,
            )
        elif done.left:
            log.warning(
                "OpenLineage: %d event(s) left in the outbox of %s (%s); the next write or "
                "odf-chain lineage --emit sends them",
                done.left,
                self.storage.location,
                done.error or f"not sent within {self.timeout} s",
            )

    # -- the three moments ----------------------------------------------------------------------

    def start(self, state: DatasetState) -> None:
        """START, on the state the run begins on (a new dataset's: after its Seed)."""
        if not self.enabled or state.dataset_id is None:
            return
        self.key = state.dataset_id.to_did()
        try:
            event = start_event(self._base(self.key), self.namespace)
        except Exception:
            log.warning("OpenLineage: cannot build the START event", exc_info=True)
            return
        self._send(event)

    def committed(
        self,
        storage: Storage,
        before: DatasetState,
        steps: Sequence[tuple[BlockEntry, DatasetState]],
    ) -> None:
        """COMPLETE: a post-commit hook (:data:`odf_chain.transaction.PostCommitHook`)."""
        if not self.enabled or self.ended or not steps:
            return
        self.ended = True
        after = steps[-1][1]
        if after.dataset_id is None or after.head is None:
            return
        try:
            facts = self._facts(after.dataset_id.to_did(), steps)
            event = end_event(facts, self.namespace, opener=InputOpener())
        except Exception:
            log.warning("OpenLineage: cannot build the COMPLETE event", exc_info=True)
            return
        self._send(event)

    def unchanged(self, state: DatasetState) -> None:
        """COMPLETE of a run that appended nothing: the dataset's version is its head."""
        if not self.enabled or self.ended or self.key is None:
            return
        self.ended = True
        facts = replace(
            self._base(self.key),
            ended_at=chain.now(),
            schema=state.schema,
            version=None if state.head is None else str(state.head),
        )
        try:
            event = end_event(facts, self.namespace)
        except Exception:
            log.warning("OpenLineage: cannot build the COMPLETE event", exc_info=True)
            return
        self._send(event)

    def failed(self, error: BaseException, *, discard: bool = False) -> None:
        """FAIL, with the error's message; only for a run that began (sent its START).
        ``discard``: the write leaves no dataset (a new one's first write failed), so its
        events are sent within the bound or not at all, and no outbox stays behind."""
        if not self.enabled or self.ended or self.key is None:
            return
        self.ended = True
        try:
            facts = replace(self._base(self.key), ended_at=chain.now())
            event = end_event(facts, self.namespace, error=error)
        except Exception:
            log.warning("OpenLineage: cannot build the FAIL event", exc_info=True)
        else:
            self._send(event)
        if discard:
            with contextlib.suppress(Exception):
                outbox.discard_run(self.storage, self._ol_run_id(self.key))

    # -- the facts of a committed run -------------------------------------------------------------

    def _facts(self, key: str, steps: Sequence[tuple[BlockEntry, DatasetState]]) -> RunFacts:
        """The run as the committed blocks tell it: its lineage where a block is or carries it
        (the file export's facts, so the same facets), the schema in force for its data, its
        slices, and the new head as the dataset's version."""
        head = steps[-1][0].hash
        data = [entry for entry, _ in steps if _new_data(entry) is not None]
        slices = tuple(_new_data(entry) for entry in data)
        offsets = None
        if slices:
            offsets = OffsetInterval(
                slices[0].offset_interval.start,  # type: ignore[union-attr]
                slices[-1].offset_interval.end,  # type: ignore[union-attr]
            )
        for entry, state in steps:
            lineage = lineage_of(entry.block.event)
            if lineage is None:
                continue
            later = tuple(e for e in data if e.block.sequence_number >= entry.block.sequence_number)
            facts = run_facts(key, LineageRunBlock(entry, lineage, state.schema, later))
            return replace(
                facts,
                run_id=self._ol_run_id(key),
                version=str(head),
                slices=slices,
                offsets=offsets if facts.offsets is None else facts.offsets,
            )
        return replace(
            self._base(key),
            ended_at=chain.now(),
            schema=steps[-1][1].schema,
            version=str(head),
            slices=slices,
            offsets=offsets,
        )


def live_run(storage: Storage, job_name: str, run_id: str, started_at: datetime) -> LiveRun:
    """The run about to be written to ``storage``; it emits only when OpenLineage is
    configured (:func:`odf_chain.emit.config.client`)."""
    try:
        client = config.client()
    except Exception:  # a broken configuration never fails a write
        log.warning("OpenLineage: the client's configuration is broken", exc_info=True)
        client = None
    return LiveRun(
        storage,
        job_name,
        run_id,
        started_at,
        client=client,
        namespace=config.job_namespace(),
        timeout=config.timeout(),
    )
