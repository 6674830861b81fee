"""The exception hierarchy.

Every failure the library reports is an :class:`OdfChainError`, so callers (and the CLI) can
catch one type. The subclasses say *what kind* of thing went wrong; the message says *where*
(block sequence number and hash, field, or file) and, for rule violations, expected vs found.
"""

from __future__ import annotations


class OdfChainError(Exception):
    """Base class of every error raised by odf_chain."""


class FormatError(OdfChainError):
    """Bytes that cannot be decoded: a corrupt block, an unknown manifest kind or version,
    an unknown multihash code, a malformed Arrow schema."""


class SchemaError(FormatError):
    """A schema document (Avro, DataMine, Arrow) that is malformed or cannot be mapped; the
    message names the offending table or field."""


class IntegrityError(OdfChainError):
    """Stored content does not match its hash or recorded size: a tampered or damaged block or
    data slice."""


class NotFoundError(OdfChainError):
    """A dataset, block, data slice or ref that should exist does not."""


class AmbiguousRefError(NotFoundError):
    """A block hash prefix that more than one block starts with: it names no single block."""


class StorageError(OdfChainError):
    """The filesystem refused an operation (permissions, a read-only or full disk, a file where
    a directory should be); the message names the path."""


class UnsyncedCommitError(StorageError):
    """The head moved, so the write is visible and whoever reads the dataset now sees it, but
    the sync that makes the move survive a power loss failed. The write is not to be made
    again (its data is there); ``head`` names the block the head moved to."""

    def __init__(self, message: str, head: str) -> None:
        super().__init__(message)
        self.head = head


class ConflictError(OdfChainError):
    """Another writer moved the head first. Nothing of this append became visible; re-read the
    head and retry."""


class StaleBaseError(ConflictError):
    """The head, as the head move found it under the head lock, is not the block the write was
    built on, or the head log's last line does not name it: the writer re-reads both (and
    checks the log for a rollback) before it tries again. ``Dataset.append`` does so itself."""


class RuleViolation(OdfChainError):
    """A block breaks one of the chain's rules.

    Carries the rule's name and, when known, the offending block's sequence number and hash so
    that reports can name them without parsing the message.
    """

    def __init__(
        self,
        rule: str,
        message: str,
        *,
        sequence_number: int | None = None,
        block_hash: str | None = None,
    ) -> None:
        self.rule = rule
        self.detail = message
        self.sequence_number = sequence_number
        self.block_hash = block_hash
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.sequence_number is not None:
            where.append(f"block {self.sequence_number}")
        if self.block_hash is not None:
            where.append(self.block_hash)
        prefix = f"{' '.join(where)}: " if where else ""
        return f"{prefix}rule {self.rule}: {self.detail}"

    def at(self, sequence_number: int, block_hash: str | None) -> RuleViolation:
        """The same violation, located at a block (used once the block's hash is known)."""
        return type(self)(
            self.rule, self.detail, sequence_number=sequence_number, block_hash=block_hash
        )


class SchemaEvolutionError(RuleViolation):
    """A new schema breaks the evolution rules (a field removed, retyped, or made required)."""


class NewColumnsError(SchemaEvolutionError):
    """A write would add columns (or struct fields) to the schema in force without being asked
    to (``evolve=True``, ``--evolve``): a misspelt column must not change a dataset for good.

    Raised before anything is written, so it names the dataset, not a block.
    """

    def _render(self) -> str:
        return self.detail if self.sequence_number is None else super()._render()


class TypeChangeError(SchemaEvolutionError):
    """A write whose input has a field of another type than the schema in force declares,
    one that does not widen into it without loss (:mod:`odf_chain.schema.widening`).

    Raised before anything is written, so it names the input and the field, not a block.
    """

    def _render(self) -> str:
        return self.detail if self.sequence_number is None else super()._render()


class LineageError(OdfChainError, ValueError):
    """Field lineage that cannot be recorded or resolved (an unknown field, a duplicate
    operation name, a cycle); the message names the operation and the field."""


class GraphvizError(OdfChainError):
    """Graphviz's ``dot`` refused the DOT text or could not run."""
