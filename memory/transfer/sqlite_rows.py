"""One row of an imported file, checked: typed accessors that name the table, row id and column at fault.

Every value a file offers is validated before it reaches the database — type, length, NUL
characters (PostgreSQL refuses them), JSON that is JSON, timestamps, numbers in range, vectors of
the declared size — and a bad one raises ImportError_ saying how to fix the file. The length
limits are the database columns'. Pure: no ORM.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.conf import settings

from memory.models import (
    AuditEventType,
    Channel,
    MemoryAuditEvent,
    MemoryMessage,
    MemoryNode,
    NodeStatus,
    NodeType,
    ReviewState,
    Role,
)
from memory.rules.text import MAX_TEXT
from memory.services.summaries import SUMMARY_LIST_FIELDS
from memory.transfer.report import ImportError_
from memory.transfer.sqlite_format import JSON_DECODER, json_text, vector_text
from tenants.models import Scope

__all__ = [
    "CHANNELS", "EVENT_TYPES", "MAX", "MAX_TEXT", "NODE_TYPES", "OVERSIZED", "ROLES", "SCOPES", "STATUSES",
    "TEXT_CAPS", "FileRow", "read_cap",
]

# The name of the first column of a read row that is over its TEXT_CAPS limit, computed by SQLite.
OVERSIZED = "ekko_oversized"


def _limit(model: type, name: str) -> int:
    field = model._meta.get_field(name)
    return getattr(field, "base_field", field).max_length


# The database's column limits: a longer value cannot be stored, so the file is refused.
MAX = {
    "message_id": _limit(MemoryMessage, "message_id"),
    "session_id": _limit(MemoryMessage, "session_id"),
    "title": _limit(MemoryNode, "title"),
    "key": _limit(MemoryNode, "key"),
    "kind": _limit(MemoryNode, "kind"),
    "item_key": _limit(MemoryNode, "item_key"),
    "domain": _limit(MemoryNode, "domain"),
    "category": _limit(MemoryNode, "category_path"),
    "tag": _limit(MemoryNode, "tags"),
    "entity": _limit(MemoryNode, "entities"),
    "actor": _limit(MemoryAuditEvent, "actor"),
    "agent_name": _limit(MemoryMessage, "agent_name"),
    "category_path_text": _limit(MemoryNode, "category_path_text"),
}
# The API's text limit (memory.api.serializers) holds for imported rows too: a longer text is left out
# of the import (`too_large`), so no path stores, segments or embeds more than a write could. An audit
# payload holds a card snapshot (content and value of at most MAX_TEXT each, plus its lists).
MAX_PAYLOAD = 4 * MAX_TEXT
TEXT_CAPS: dict[str, dict[str, int]] = {
    "memory_messages": {"content": MAX_TEXT, "metadata_json": MAX_TEXT},
    "memory_summaries": {
        "summary": MAX_TEXT, "current_goal": MAX_TEXT,
        **{f"{name}_json": MAX_TEXT for name in SUMMARY_LIST_FIELDS},
    },
    "memory_nodes": {
        "content": MAX_TEXT, "value_json": MAX_TEXT, "tags_json": MAX_TEXT, "entities_json": MAX_TEXT,
        "category_path_json": MAX_TEXT, "source_message_ids_json": MAX_TEXT,
    },
    "memory_audit_events": {"reason": MAX_TEXT, "payload_json": MAX_PAYLOAD},
}
# What a file may hold beyond TEXT_CAPS without a refusal: derived text (recomputed when cut short) and
# vectors; every other column is an id, a name, a time, a choice or a signature, valid far below
# SMALL_CAP characters (a longer one fails its check whichever way it is cut).
LARGE_CAPS = {"search_text": MAX_PAYLOAD, "vector": MAX_PAYLOAD}
SMALL_CAP = 1000


def read_cap(table: str, column: str) -> int:
    """Return how many characters (bytes for blobs) of a file column are read, plus one to see excess."""
    return TEXT_CAPS.get(table, {}).get(column) or LARGE_CAPS.get(column) or SMALL_CAP


ROLES = frozenset(Role.values)
CHANNELS = frozenset(Channel.values)
SCOPES = frozenset(Scope.values)
NODE_TYPES = frozenset(NodeType.values)
STATUSES = frozenset(NodeStatus.values)
REVIEW_STATES = frozenset(ReviewState.values)
EVENT_TYPES = frozenset(AuditEventType.values)


class FileRow:
    """One file row (column → value) with validating accessors; errors name the table, row id and column."""

    __slots__ = ("table", "values", "id")

    def __init__(self, table: str, values: dict[str, Any]) -> None:
        self.table = table
        self.values = values
        value = values.get("id")
        self.id = value if isinstance(value, str) else repr(value)

    def fail(self, column: str, problem: str) -> ImportError_:
        return ImportError_(
            f"{self.table} row id={self.id[:80]!r}, column {column}: {problem}. Fix or "
            "re-export the file; nothing was imported."
        )

    def oversized(self) -> str | None:
        """Return the first column over its TEXT_CAPS limit (the API's size limit), or None."""
        return self.values.get(OVERSIZED)

    def get(self, column: str, default: Any = None) -> Any:
        value = self.values.get(column)
        return default if value is None else value

    def text(
        self, column: str, *, required: bool = True, max_length: int | None = None, default: str | None = None
    ) -> str | None:
        value = self.values.get(column)
        if type(value) is str and "\x00" not in value and (max_length is None or len(value) <= max_length):
            return value
        return self._text_checked(column, value, required, max_length, default)

    def _text_checked(
        self, column: str, value: Any, required: bool, max_length: int | None, default: str | None
    ) -> str | None:
        if value is None:
            value = default
        if value is None:
            if required:
                raise self.fail(column, "a value is required")
            return None
        if type(value) is not str:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(column, f"expected text, found {type(value).__name__}")
            value = str(value)
        if "\x00" in value:
            raise self.fail(column, "contains a NUL character")
        if max_length is not None and len(value) > max_length:
            raise self.fail(column, f"longer than {max_length} characters")
        return value

    def choice(self, column: str, choices: frozenset[str], default: str | None = None) -> str:
        value = self.text(column, default=default)
        if value not in choices:
            raise self.fail(column, f"{value!r} is not one of {', '.join(sorted(choices))}")
        return value

    def json(self, column: str, *, default: Any = None) -> Any:
        value = self.values.get(column)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(column, "expected JSON text")
        try:
            parsed = [] if value == "[]" else JSON_DECODER.decode(value)
        except ValueError as exc:
            raise self.fail(column, f"not valid JSON ({exc})") from exc
        # PostgreSQL's jsonb refuses NUL; only re-check the rare text that spells one.
        if "\\u0000" in value and "\x00" in json_text(parsed):
            raise self.fail(column, "contains a NUL character")
        return parsed

    def json_strings(self, column: str, max_length: int) -> list[str]:
        value = self.json(column, default=[])
        if type(value) is not list:
            raise self.fail(column, "expected a JSON array of strings")
        for item in value:
            if type(item) is not str or len(item) > max_length:
                raise self.fail(column, f"expected an array of strings of at most {max_length} characters")
        return value

    def timestamp(self, column: str, *, required: bool = True) -> datetime | None:
        value = self.text(column, required=required)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise self.fail(column, f"{value!r} is not an ISO-8601 timestamp") from exc
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

    def number(self, column: str) -> float:
        value = self.values.get(column)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise self.fail(column, "expected a number from 0 to 1")
        return float(value)

    def integer(self, column: str, *, default: int = 0, low: int = 0, high: int = 2**31 - 1) -> int:
        value = self.get(column, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(column, f"expected an integer in {low}..{high}")
        return value

    def vector(self, server_model: str | None) -> tuple[str | None, str]:
        """Return (pgvector text, model) for a reusable vector, or (None, '') to embed it again."""
        blob, dim = self.values.get("vector_blob"), self.values.get("vector_dim")
        if blob is None:
            return None, ""
        if not isinstance(blob, bytes) or not isinstance(dim, int) or len(blob) != dim * 4:
            raise self.fail("vector", "the vector blob does not hold `dim` little-endian float32 values")
        if self.values.get("vector_model") != server_model or dim != settings.EKKO_EMBEDDING_DIM:
            return None, ""
        if not np.isfinite(np.frombuffer(blob, dtype="<f4")).all():
            raise self.fail("vector", "the vector holds NaN or infinite values")
        return vector_text(blob), server_model

