"""What a verify run found: each problem located as precisely as it can be, and the counts.

Kept apart from the steps so each step writes into the same report and the callers (the CLI,
``Dataset.verify``, gc) depend on this type only, not on how the checks run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    severity: Severity
    rule: str
    message: str
    sequence_number: int | None = None
    block_hash: str | None = None
    path: str | None = None

    def line(self) -> str:
        where = []
        if self.sequence_number is not None:
            where.append(f"block {self.sequence_number}")
        if self.block_hash is not None:
            where.append(self.block_hash)
        if self.path is not None:
            where.append(self.path)
        location = " ".join(where) or "dataset"
        return f"{self.severity.upper()} {location}: [{self.rule}] {self.message}"


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """What re-running one derive run found: ``reproduced``, ``not reproducible`` (the run
    recorded why a re-run may differ) or ``mismatch``; the detail says how."""

    sequence_number: int
    block_hash: str
    verdict: str
    detail: str
    dataset: str = ""

    def line(self) -> str:
        where = f"{self.dataset} " if self.dataset else ""
        return (
            f"{where}block {self.sequence_number} {self.block_hash}: {self.verdict} ({self.detail})"
        )


@dataclass
class VerifyReport:
    dataset: str
    head: str | None = None
    blocks_checked: int = 0
    slices_checked: int = 0
    bytes_hashed: int = 0
    deep: bool = False  # rows were read: logical hashes and system columns checked
    rows_checked: int = 0
    receipts_checked: int = 0
    receipts_held: int = 0  # receipts whose block the chain holds, without any problem
    receipts_signed: int = 0  # receipts whose signature checked out
    problems: list[Problem] = field(default_factory=list)
    reproduce: bool = False  # derive runs were re-run (chain-verify --reproduce)
    runs: list[RunVerdict] = field(default_factory=list)
    # unreferenced blocks that descend from the head, each with the data slices it names: what
    # gc keeps as possible evidence (not in to_dict: the warning says it)
    descendants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # every readable block outside the chain: its predecessor and the slices it names (gc keeps
    # them all unless named: a rolled-back suffix whose head log went too looks just like this)
    uncommitted: dict[str, tuple[str | None, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when every block, rule and slice checks out (warnings allowed)."""
        return not self.errors

    def to_dict(self) -> dict:
        doc = {
            "dataset": self.dataset,
            "ok": self.ok,
            "head": self.head,
            "blocks_checked": self.blocks_checked,
            "slices_checked": self.slices_checked,
            "bytes_hashed": self.bytes_hashed,
            "deep": self.deep,
            "rows_checked": self.rows_checked,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "problems": [asdict(p) for p in self.problems],
        }
        if self.reproduce:
            doc["runs"] = [asdict(r) for r in self.runs]
        if self.receipts_checked:  # only when receipts were given
            doc["receipts"] = {
                "checked": self.receipts_checked,
                "held": self.receipts_held,
                "signed": self.receipts_signed,
            }
        return doc

    def add(self, severity: Severity, rule: str, message: str, **where) -> None:
        self.problems.append(Problem(severity, rule, message, **where))
