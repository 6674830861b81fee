"""The transaction-version rule, and the writers' side of the same pair (``transaction=``).

A transaction pair (app id, version) makes a retried write idempotent: the rule that versions
rise per app id and the writers' checks of their argument are kept together so they cannot
disagree on what a valid pair is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odf_chain.errors import RuleViolation
from odf_chain.events import MetadataBlock
from odf_chain.format.multihash import Multihash
from odf_chain.state import TRANSACTION_KEY, DatasetState, transaction_of

MAX_TRANSACTION_VERSION = 2**63 - 1  # a signed 64-bit integer, as Delta's txnVersion


def transaction_problem(app_id: Any, version: Any) -> str | None:
    """What is wrong with a transaction pair, or None: the app id must be a non-empty string
    and the version an integer (not a bool) in 0..2**63-1."""
    if not isinstance(app_id, str) or not app_id:
        return f"the app id must be a non-empty string, found {app_id!r}"
    if isinstance(version, bool) or not isinstance(version, int):
        return f"the version must be an integer, found {version!r}"
    if not 0 <= version <= MAX_TRANSACTION_VERSION:
        return f"the version must be in 0..{MAX_TRANSACTION_VERSION}, found {version}"
    return None


def transaction_argument(transaction: Any) -> tuple[str, int]:
    """A writer's ``transaction=`` argument as ``(app_id, version)``, checked before anything
    runs; raises :class:`RuleViolation` (``transaction-version``) saying what is wrong."""
    if not isinstance(transaction, tuple | list) or len(transaction) != 2:
        raise RuleViolation(
            "transaction-version",
            f"transaction= takes a pair (app_id, version), found {transaction!r}",
        )
    app_id, version = transaction
    problem = transaction_problem(app_id, version)
    if problem is not None:
        raise RuleViolation("transaction-version", f"transaction={transaction!r}: {problem}")
    return app_id, version


def transaction_recorded(state: DatasetState, app_id: str, version: int) -> bool:
    """Does the chain already record ``version`` or a later one for ``app_id``? A writer given
    that pair appends nothing (a retried job whose first attempt did commit)."""
    last = state.transactions.get(app_id)
    return last is not None and version <= last


def check_transaction(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    value = transaction_of(block.event)
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise RuleViolation(
            "transaction-version",
            f"expected {TRANSACTION_KEY} to be an object {{app_id, version}}, found {value!r}",
        )
    app_id, version = value.get("app_id"), value.get("version")
    problem = transaction_problem(app_id, version)
    if problem is not None:
        raise RuleViolation("transaction-version", f"{TRANSACTION_KEY}: {problem}")
    if transaction_recorded(state, app_id, version):
        raise RuleViolation(
            "transaction-version",
            f"expected a version above {state.transactions[app_id]} for app id {app_id!r} "
            f"(versions must increase per app id), found {version}",
        )
