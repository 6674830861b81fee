"""Whether and how OpenLineage events are sent: resolved as openlineage-python resolves it, so
a dataset writer needs no setting of its own.

Configured means what the client would send somewhere on purpose: ``OPENLINEAGE_URL``, or a
transport with a ``type`` from ``OPENLINEAGE__TRANSPORT__*`` variables, an ``openlineage.yml``
(``OPENLINEAGE_CONFIG``, the working directory, ``~/.openlineage/``); ``OPENLINEAGE_DISABLED=true``
turns it off. With nothing configured the client falls back to printing events on the console:
that fallback is taken as "not configured", so a write then builds, queues and sends nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from odf_chain.export.openlineage import DEFAULT_JOB_NAMESPACE

DEFAULT_TIMEOUT = 5.0
TIMEOUT_VARIABLE = "ODF_CHAIN_OPENLINEAGE_TIMEOUT"
NAMESPACE_VARIABLE = "OPENLINEAGE_NAMESPACE"

_CLIENT_LOG = "openlineage.client.client"


def _disabled() -> bool:
    return os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true"


def _may_be_configured() -> bool:
    """A cheap look first (no client built, nothing logged): any setting the client reads."""
    if os.environ.get("OPENLINEAGE_URL") or os.environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(key.startswith("OPENLINEAGE__TRANSPORT__") for key in os.environ):
        return True
    places = (Path.cwd() / "openlineage.yml", Path.home() / ".openlineage" / "openlineage.yml")
    return any(place.is_file() for place in places)


class _NoConsoleWarning(logging.Filter):
    """The client warns that it falls back to the console; for us that means "not configured",
    which is no news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "will print events to console" not in record.getMessage()


def client():
    """An ``OpenLineageClient()`` as its configuration gives it, or None when nothing is
    configured (see the module doc) or it is disabled. Without any setting at all (the common
    case: every write asks) no client is built."""
    if _disabled() or not _may_be_configured():
        return None
    from openlineage.client import OpenLineageClient

    log = logging.getLogger(_CLIENT_LOG)
    quiet = _NoConsoleWarning()
    log.addFilter(quiet)
    try:
        made = OpenLineageClient()
    finally:
        log.removeFilter(quiet)
    explicit = bool((made.config.transport or {}).get("type"))
    if not explicit and not os.environ.get("OPENLINEAGE_URL"):
        return None  # the console fallback
    return made


def timeout() -> float:
    """How long a write waits for one delivery (its START, its COMPLETE or FAIL) before going
    on with the events left in the outbox: ``ODF_CHAIN_OPENLINEAGE_TIMEOUT`` seconds (default
    5; 0 does not wait at all). The transport's own timeout (``timeout``, 5 s for HTTP) bounds
    each request; this bounds the whole delivery, retries and backoff included."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value >= 0 else DEFAULT_TIMEOUT


def job_namespace() -> str:
    """The namespace of the jobs: ``OPENLINEAGE_NAMESPACE`` (as OpenLineage's integrations
    read it), else ``odf_chain`` (the file export's default)."""
    return os.environ.get(NAMESPACE_VARIABLE) or DEFAULT_JOB_NAMESPACE
