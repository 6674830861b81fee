"""Sending what a dataset's outbox holds through the configured OpenLineage client, within a
bound.

One delivery at a time per dataset in a process (a lock per location), oldest event first, and
it stops at the first event the transport refuses: a COMPLETE never overtakes its START. It
runs in a daemon thread that the caller waits for at most ``timeout`` seconds; a delivery still
running then (a slow backend, the transport's retries) goes on in the background and starts no
new send once its time is up, and what it did not send stays queued. So a backend that is down
or slow costs a write at most ``timeout`` per delivery, never a failure.

Delivered means the transport's ``emit`` returned (for HTTP: a 2xx answer), and the entry is
removed right after. Each (run, event type) is therefore sent once, unless the process dies
between the backend's acknowledgement and the removal, or two processes deliver one outbox at
the same moment: then that event is sent again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)

from odf_chain.emit import outbox
from odf_chain.storage.base import DerivedStore

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass
class Delivery:
    """What one delivery did: events sent, events left queued, and why the first one left
    could not be sent (None: it was not tried, its time was up)."""

    sent: list[str] = field(default_factory=list)
    left: int = 0
    error: str | None = None
    finished: bool = False  # False: still running when the caller stopped waiting


def _lock(location: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(location, threading.Lock())


def as_event(event: Mapping[str, Any]) -> RunEvent:
    """A queued event as the client's RunEvent: the facets stay JSON, which the client's
    serializer writes back unchanged, so what is sent is what was queued (plus what the
    client's own configuration adds: tags, environment facets)."""

    def facets(node: Mapping[str, Any], key: str = "facets") -> dict[str, Any]:
        return dict(node.get(key) or {})

    return RunEvent(
        eventType=RunState(event["eventType"]),
        eventTime=event["eventTime"],
        run=Run(runId=event["run"]["runId"], facets=facets(event["run"])),
        job=Job(
            namespace=event["job"]["namespace"],
            name=event["job"]["name"],
            facets=facets(event["job"]),
        ),
        inputs=[
            InputDataset(
                namespace=d["namespace"],
                name=d["name"],
                facets=facets(d),
                inputFacets=facets(d, "inputFacets"),
            )
            for d in event.get("inputs") or []
        ],
        outputs=[
            OutputDataset(
                namespace=d["namespace"],
                name=d["name"],
                facets=facets(d),
                outputFacets=facets(d, "outputFacets"),
            )
            for d in event.get("outputs") or []
        ],
        producer=event["producer"],
    )


def _deliver(storage: DerivedStore, client: Any, until: float | None, result: Delivery) -> None:
    lock = _lock(storage.location)
    wait = -1 if until is None else max(0.0, until - time.monotonic())
    if not lock.acquire(timeout=wait):
        result.left = len(outbox.pending(storage))
        result.finished = True
        return
    try:
        entries = outbox.pending(storage)
        for i, entry in enumerate(entries):
            if until is not None and time.monotonic() >= until:
                result.left = len(entries) - i
                break
            try:
                client.emit(as_event(entry.event))
            except Exception as exc:  # the transport's failure: the event stays queued
                result.left = len(entries) - i
                result.error = f"{type(exc).__name__}: {exc}"
                break
            outbox.remove(storage, entry.name)
            result.sent.append(entry.name)
    finally:
        lock.release()
        result.finished = True


def deliver(storage: DerivedStore, client: Any, timeout: float | None) -> Delivery:
    """Send the queued events of ``storage``'s dataset through ``client``, waiting at most
    ``timeout`` seconds (None: until done); never raises."""
    result = Delivery()
    until = None if timeout is None else time.monotonic() + timeout

    def run() -> None:
        try:
            _deliver(storage, client, until, result)
        except Exception as exc:  # the outbox itself unreadable: nothing sent, nothing lost
            result.error = f"{type(exc).__name__}: {exc}"
            result.finished = True

    if timeout is None:
        run()
        return result
    worker = threading.Thread(target=run, name="odf-chain-openlineage", daemon=True)
    worker.start()
    worker.join(timeout)
    return result
