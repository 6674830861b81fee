"""The outbox: OpenLineage events a dataset's writers owe the configured backend, one file each
in ``info/openlineage-outbox/`` (through :class:`~odf_chain.storage.base.DerivedStore`, so on a
local disk and on an object store alike).

An event is put here, durably (temporary file, fsync, rename), *before* it is sent, and removed
once the transport accepted it: a backend that is down, slow or unreachable, or a process that
dies meanwhile, leaves it here for the next emitting write or ``odf-chain lineage --emit DIR``.
A file is named by the run and the event type (``<run id>.<TYPE>.json``), so one event is never
queued twice; an entry already there is kept as it is. Events leave in event-time order, START
before the same run's COMPLETE.

It lives in ``info/`` because nothing in it is chain data: deleting it loses notifications not
yet delivered, never a block, and the START and COMPLETE of every recorded run can be rebuilt
from the chain (``odf-chain export openlineage``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from odf_chain.errors import OdfChainError
from odf_chain.storage.base import DerivedStore

OUTBOX_DIR = "openlineage-outbox"
MAX_EVENT_BYTES = 16 * 1024 * 1024  # an event with a schema of thousands of columns fits
_NAME = re.compile(r"([0-9a-fA-F-]{36})\.([A-Z]+)\.json")
# where an event type sorts among events of one instant
_ORDER = {"START": 0, "RUNNING": 1, "COMPLETE": 2, "ABORT": 2, "FAIL": 2, "OTHER": 3}


@dataclass(frozen=True)
class Entry:
    """One queued event: its file name and the event as JSON."""

    name: str
    event: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.event["run"]["runId"]

    @property
    def event_type(self) -> str:
        return self.event["eventType"]

    def sort_key(self) -> tuple[datetime, int, str]:
        moment = datetime.fromisoformat(self.event["eventTime"])
        return moment, _ORDER.get(self.event_type, 3), self.name


def entry_name(run_id: str, event_type: str) -> str:
    """The file of one (run, event type)."""
    return f"{run_id}.{event_type}.json"


def put(storage: DerivedStore, event: dict[str, Any]) -> str:
    """Queue ``event`` (OpenLineage RunEvent JSON) durably unless its (run, type) is queued
    already; its entry name."""
    name = entry_name(event["run"]["runId"], event["eventType"])
    if storage.read_derived(f"{OUTBOX_DIR}/{name}", MAX_EVENT_BYTES) is None:
        data = json.dumps(event, sort_keys=True).encode("utf-8")
        storage.write_derived(f"{OUTBOX_DIR}/{name}", data, durable=True)
    return name


def pending(storage: DerivedStore) -> list[Entry]:
    """The queued events, oldest first (START before COMPLETE of one instant). A file that is
    not an event (a half-written temporary, a stray) is skipped, never sent nor removed."""
    entries = []
    for name in storage.list_derived(OUTBOX_DIR):
        if not _NAME.fullmatch(name):
            continue
        try:
            raw = storage.read_derived(f"{OUTBOX_DIR}/{name}", MAX_EVENT_BYTES)
            if raw is None:  # sent by another writer meanwhile
                continue
            event = json.loads(raw)
            entry = Entry(name, event)
            entry.sort_key()
        except (OdfChainError, ValueError, KeyError, TypeError):
            continue
        entries.append(entry)
    return sorted(entries, key=Entry.sort_key)


def remove(storage: DerivedStore, name: str) -> None:
    """The entry ``name`` was delivered."""
    storage.remove_derived(f"{OUTBOX_DIR}/{name}")


def discard_run(storage: DerivedStore, run_id: str) -> None:
    """Drop what is queued for ``run_id``, and the outbox folder once empty: a new dataset's
    first write that failed leaves no dataset, so no outbox either."""
    for name in storage.list_derived(OUTBOX_DIR):
        if name.startswith(f"{run_id}."):
            storage.remove_derived(f"{OUTBOX_DIR}/{name}")
    if not storage.list_derived(OUTBOX_DIR):
        storage.remove_derived(OUTBOX_DIR)
