"""Extraction plans: seed 000's `MemoryExtraction` as dataclasses, read from and written to JSON.

A plan is an optional `summaryPatch` and a list of items `{operation: create|update|supersede|expire|
ignore, targetId?, node, reason}`, extended with the `sourceMessageIds` each item rests on and
whether the user stated it explicitly. `plan_from_json` reads that JSON (what the chat model
returns) and refuses malformed shapes with `PlanError`; `MemoryExtraction.to_json` writes it back.
`SourceMessage` and `KnownNode` are what an extractor reads: the run's messages and the memories
the session can already see. Node drafts use the snake_case field names of the node write service.
Pure: no ORM, no settings.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

__all__ = [
    "OPERATIONS",
    "KnownNode",
    "MemoryExtraction",
    "PlanError",
    "PlanItem",
    "SourceMessage",
    "plan_from_json",
]

OPERATIONS: tuple[str, ...] = ("create", "update", "supersede", "expire", "ignore")
MAX_PLAN_ITEMS = 100
NODE_FIELDS: dict[str, str] = {
    # plan JSON (camelCase) -> node draft (snake_case); session, workspace and user are the run's to decide.
    "kind": "kind",
    "itemKey": "item_key",
    "scope": "scope",
    "valueJson": "value_json",
    "title": "title",
    "content": "content",
    "confidence": "confidence",
    "importance": "importance",
    "tags": "tags",
    "entities": "entities",
    "expiresAt": "expires_at",
    "sourceQuote": "source_quote",
    "type": "type",
    "domain": "domain",
    "categoryPath": "category_path",
}


class PlanError(ValueError):
    """The extractor's output is not a MemoryExtraction plan; the message says what is wrong."""


@dataclass(frozen=True)
class SourceMessage:
    """One captured message as the extractor sees it."""

    message_id: str
    role: str
    content: str
    created_at: datetime | None = None
    time_zone: tzinfo | None = None


@dataclass(frozen=True)
class KnownNode:
    """An active memory the session's user can already see (corrections and merges target these)."""

    node_id: str
    kind: str
    key: str
    scope: str
    revision: int
    item_key: str | None = None
    value_json: Any = None
    title: str = ""


@dataclass
class PlanItem:
    """One proposed change: an operation on a node draft, the reason, and the messages it rests on."""

    operation: str
    node: dict[str, Any]
    reason: str
    target_id: str | None = None
    source_message_ids: tuple[str, ...] = ()
    explicit_user_intent: bool = False
    # Set when the item could not be read (a lenient plan keeps it so the run can report it).
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        reverse = {snake: camel for camel, snake in NODE_FIELDS.items()}
        node = {reverse.get(name, name): _jsonable(value) for name, value in self.node.items()}
        return {
            "operation": self.operation,
            "targetId": self.target_id,
            "node": node,
            "reason": self.reason,
            "sourceMessageIds": list(self.source_message_ids),
            "explicitUserIntent": self.explicit_user_intent,
        }


@dataclass
class MemoryExtraction:
    """A whole plan: its items in order and an optional one-line summary patch."""

    nodes: list[PlanItem] = field(default_factory=list)
    summary_patch: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nodes": [item.to_json() for item in self.nodes]}
        if self.summary_patch:
            data["summaryPatch"] = self.summary_patch
        return data


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


# --------------------------------------------------------------------------- plan JSON


def _parse_datetime(raw: Any, where: str) -> datetime | None:
    if raw in (None, ""):
        return None
    if not isinstance(raw, str):
        raise PlanError(f"{where}.expiresAt must be an ISO 8601 string or null.")
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise PlanError(f"{where}.expiresAt {raw!r} is not an ISO 8601 date-time.") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def plan_from_json(
    data: Any, *, message_ids: Collection[str] | None = None, lenient_items: bool = False
) -> MemoryExtraction:
    """Return the plan in `data` (seed 000's MemoryExtraction JSON), or raise PlanError.

    Source message ids outside `message_ids` (the run's input) are dropped, so a plan can only
    cite the messages it was shown. Node fields other than the catalogue's are ignored: the run,
    not the model, decides the session, workspace and user a memory belongs to. With
    `lenient_items`, an unreadable item becomes an `ignore` item carrying `error` instead of
    failing the whole plan.
    """
    if not isinstance(data, dict):
        raise PlanError("The plan must be a JSON object with a `nodes` array.")
    raw_items = data.get("nodes", [])
    if not isinstance(raw_items, list):
        raise PlanError("`nodes` must be an array of plan items.")
    if len(raw_items) > MAX_PLAN_ITEMS:
        raise PlanError(f"A plan holds at most {MAX_PLAN_ITEMS} items; got {len(raw_items)}.")
    patch = data.get("summaryPatch")
    if patch is not None and not isinstance(patch, str):
        raise PlanError("`summaryPatch` must be a string when present.")
    items = []
    for index, raw in enumerate(raw_items):
        try:
            items.append(_item_from_json(raw, f"nodes[{index}]", message_ids))
        except PlanError as error:
            if not lenient_items:
                raise
            items.append(
                PlanItem(operation="ignore", node={}, reason="unreadable plan item", error=str(error))
            )
    return MemoryExtraction(nodes=items, summary_patch=(patch or "").strip() or None)


def _item_from_json(raw: Any, where: str, message_ids: Collection[str] | None) -> PlanItem:
    if not isinstance(raw, dict):
        raise PlanError(f"{where} must be an object.")
    operation = raw.get("operation")
    if operation not in OPERATIONS:
        raise PlanError(f"{where}.operation must be one of {', '.join(OPERATIONS)}; got {operation!r}.")
    node_raw = raw.get("node") or {}
    if not isinstance(node_raw, dict):
        raise PlanError(f"{where}.node must be an object.")
    node: dict[str, Any] = {}
    for camel, snake in NODE_FIELDS.items():
        if camel in node_raw:
            node[snake] = node_raw[camel]
    if "expires_at" in node:
        node["expires_at"] = _parse_datetime(node["expires_at"], where)
    for name in ("tags", "entities", "category_path"):
        if name in node and not (
            isinstance(node[name], list) and all(isinstance(v, str) for v in node[name])
        ):
            raise PlanError(f"{where}.node.{name} must be an array of strings.")
    if operation == "create" and not node.get("kind"):
        raise PlanError(f"{where}: create needs node.kind from the catalogue.")
    target = raw.get("targetId")
    if target is not None and not isinstance(target, str):
        raise PlanError(f"{where}.targetId must be a string.")
    if operation in ("update", "expire") and not target:
        raise PlanError(f"{where}: {operation} needs targetId (an id from the known memories).")
    cited = raw.get("sourceMessageIds") or []
    if not isinstance(cited, list) or not all(isinstance(v, str) for v in cited):
        raise PlanError(f"{where}.sourceMessageIds must be an array of message ids.")
    if message_ids is not None:
        cited = [v for v in cited if v in message_ids]
    reason = raw.get("reason")
    reason = reason.strip() if isinstance(reason, str) and reason.strip() else "proposed by the extractor"
    return PlanItem(
        operation=operation,
        node=node,
        reason=reason[:2000],
        target_id=target or None,
        source_message_ids=tuple(dict.fromkeys(cited)),
        explicit_user_intent=raw.get("explicitUserIntent") is True,
    )
