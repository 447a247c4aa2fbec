"""What an SQLite import tells its caller: the refusal error, counts per table and the rows it left out.

`ImportError_` is the one error of a file that cannot be imported at all (nothing is written).
`ImportReport` is the answer of an import that ran: rows imported, updated and skipped as identical,
and every row left out with a machine reason (`conflicts`, at most MAX_CONFLICTS_LISTED listed, all
counted). The API, the pages and the command render `as_json()` / `summary_line()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memory.errors import Invalid

__all__ = ["MAX_CONFLICTS_LISTED", "ImportError_", "ImportReport", "Progress", "TableCounts"]

MAX_CONFLICTS_LISTED = 1000

# (stage, rows done since the last call, stage total or None)
Progress = Callable[[str, int, int | None], None]


def no_progress(stage: str, done: int, total: int | None) -> None:
    """A `Progress` callback that shows nothing."""


def sensitive_detail(reason: str) -> str:
    """Return the report detail of a row left out because it carries a secret (`reason` names which kind)."""
    return f"carries a secret or personal identifier ({reason}); it is never stored, the rest was imported"


class ImportError_(Invalid):  # noqa: N801 - the trailing underscore keeps clear of the builtin
    """The file cannot be imported (not SQLite, truncated, unknown version, wrong shape or bad rows).

    `code` is "invalid" (HTTP 400) and `detail` says what is wrong and how to fix it; nothing was written.
    """

    status, code = 400, "invalid"


@dataclass
class TableCounts:
    messages: int = 0
    summaries: int = 0
    nodes: int = 0
    audit_events: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "summaries": self.summaries,
            "nodes": self.nodes,
            "auditEvents": self.audit_events,
        }


@dataclass
class ImportReport:
    """What an import did: counts per table, rows left out with their reasons, vectors and warnings."""

    mode: str  # "same_workspace": ids kept; "copy": ids derived for the target workspace
    imported: TableCounts = field(default_factory=TableCounts)
    updated: TableCounts = field(default_factory=TableCounts)
    skipped: TableCounts = field(default_factory=TableCounts)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    conflict_count: int = 0
    vectors_reused: int = 0
    vectors_pending: int = 0
    warnings: list[str] = field(default_factory=list)

    def conflict(self, table: str, source_id: str, reason: str, detail: str) -> None:
        self.conflict_count += 1
        if len(self.conflicts) < MAX_CONFLICTS_LISTED:
            self.conflicts.append({"table": table, "id": source_id, "reason": reason, "detail": detail})

    def as_json(self) -> dict[str, Any]:
        return {
            "imported": self.imported.as_json(),
            "updated": self.updated.as_json(),
            "skipped": self.skipped.as_json(),
            "conflicts": self.conflicts,
            "conflictCount": self.conflict_count,
            "mode": self.mode,
            "vectors": {"reused": self.vectors_reused, "pendingEmbedding": self.vectors_pending},
            "warnings": self.warnings,
        }

    def summary_line(self) -> str:
        i, u, s = self.imported, self.updated, self.skipped
        return (
            f"imported {i.messages} messages, {i.summaries} summaries, {i.nodes} nodes, "
            f"{i.audit_events} audit "
            f"events; updated {u.nodes} nodes; skipped {s.messages + s.summaries + s.nodes + s.audit_events} "
            f"identical rows; {self.conflict_count} conflicts; {self.vectors_reused} vectors reused, "
            f"{self.vectors_pending} to embed ({self.mode})"
        )
