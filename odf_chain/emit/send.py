"""Sending a dataset's outbox on demand (``odf-chain lineage --emit DIR``)."""

from __future__ import annotations

from odf_chain.emit import config, delivery, outbox
from odf_chain.errors import OdfChainError
from odf_chain.storage.base import DerivedStore


class NotConfiguredError(OdfChainError):
    """OpenLineage is not configured (or disabled), so there is nowhere to send to."""


def send_outbox(storage: DerivedStore, timeout: float | None = None) -> delivery.Delivery:
    """Deliver every event queued in the outbox of ``storage``'s dataset, oldest first, through
    the configured client (waiting at most ``timeout`` seconds; None: until done). Raises
    :class:`NotConfiguredError` when no transport is configured and events wait."""
    client = config.client()
    if client is None:
        waiting = len(outbox.pending(storage))
        if not waiting:
            return delivery.Delivery(finished=True)
        raise NotConfiguredError(
            f"{storage.location}: {waiting} OpenLineage event(s) wait in the outbox, but "
            "OpenLineage is not configured (set OPENLINEAGE_URL, OPENLINEAGE__TRANSPORT__* or "
            "an openlineage.yml) or OPENLINEAGE_DISABLED is true"
        )
    return delivery.deliver(storage, client, timeout)
