"""Live OpenLineage emission: every run of ``odf_chain.spark.write``, ingest and derive sends
its START, COMPLETE or FAIL through openlineage-python's own transports, configured as
OpenLineage users configure it (:mod:`~odf_chain.emit.config`), queued first in the dataset's
outbox (:mod:`~odf_chain.emit.outbox`) and delivered within a bound
(:mod:`~odf_chain.emit.delivery`), so a backend that is down or slow never fails or blocks a
write. :mod:`~odf_chain.emit.live_run` ties the three moments to a writer; docs/openlineage.md
tells the whole story.
"""

from __future__ import annotations

from odf_chain.emit.delivery import Delivery
from odf_chain.emit.live_run import LiveRun, live_run
from odf_chain.emit.send import send_outbox

__all__ = ["Delivery", "LiveRun", "live_run", "send_outbox"]
