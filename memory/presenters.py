"""The JSON shapes of API.md (camelCase), built from model rows; used by the API and audit snapshots."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary

if TYPE_CHECKING:
    from memory.services.forget import ForgetResult
    from memory.services.quota import QuotaReport


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def node_to_api(node: MemoryNode, *, superseded_by_id: Any = None, username: str | None = None) -> dict[str, Any]:
    """Return the API card for `node`; `username` avoids a query when the caller already knows it."""
    if username is None and node.user_id is not None:
        username = node.user.get_username()
    return {
        "id": str(node.pk),
        "key": node.key,
        "kind": node.kind,
        "itemKey": node.item_key,
        "revision": node.revision,
        "parentId": _str_or_none(node.parent_id),
        "supersedesId": _str_or_none(node.supersedes_id),
        "supersededById": _str_or_none(superseded_by_id),
        "scope": node.scope,
        "sessionId": node.session_id,
        "workspaceId": str(node.workspace_id),
        "userId": username,
        "domain": node.domain,
        "categoryPath": list(node.category_path),
        "type": node.type,
        "valueJson": node.value_json,
        "title": node.title,
        "content": node.content,
        "status": node.status,
        "reviewState": node.review_state,
        "confidence": node.confidence,
        "importance": node.importance,
        "tags": list(node.tags),
        "entities": list(node.entities),
        "sourceMessageIds": list(node.source_message_ids),
        "explicitUserIntent": node.explicit_user_intent,
        "createdAt": iso(node.created_at),
        "updatedAt": iso(node.updated_at),
        "expiresAt": iso(node.expires_at),
        "accessCount": node.access_count,
        "lastAccessedAt": iso(node.last_accessed_at),
    }


def message_to_api(message: MemoryMessage) -> dict[str, Any]:
    return {
        "id": message.message_id,
        "sessionId": message.session_id,
        "workspaceId": str(message.workspace_id),
        "userId": message.user.get_username() if message.user_id else None,
        "parentId": message.parent_id,
        "role": message.role,
        "content": message.content,
        "channel": message.channel,
        "agentName": message.agent_name or None,
        "metadata": message.metadata,
        "createdAt": iso(message.created_at),
    }


def summary_to_api(summary: MemorySummary) -> dict[str, Any]:
    return {
        "id": str(summary.pk),
        "sessionId": summary.session_id,
        "workspaceId": str(summary.workspace_id),
        "parentSummaryId": _str_or_none(summary.parent_summary_id),
        "fromMessageId": summary.from_message_id,
        "toMessageId": summary.to_message_id,
        "summary": summary.summary,
        "currentGoal": summary.current_goal,
        "constraints": summary.constraints,
        "preferences": summary.preferences,
        "decisions": summary.decisions,
        "completedWork": summary.completed_work,
        "pendingWork": summary.pending_work,
        "knownIssues": summary.known_issues,
        "createdAt": iso(summary.created_at),
    }


def audit_event_to_api(event: MemoryAuditEvent) -> dict[str, Any]:
    return {
        "id": str(event.pk),
        "eventType": event.event_type,
        "nodeId": _str_or_none(event.node_id),
        "sessionId": event.session_id,
        "workspaceId": _str_or_none(event.workspace_id),
        "actor": event.actor,
        "reason": event.reason,
        "payload": event.payload,
        "createdAt": iso(event.created_at),
        "sequence": event.sequence,
        "digest": event.digest,
    }


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def forget_result_to_api(result: ForgetResult, *, mode: str) -> dict[str, Any]:
    """Return the `memory/forget` answer: the forgotten ids and, for a hard forget, the erasure receipt."""
    answer: dict[str, Any] = {"deletedIds": [str(pk) for pk in result.forgotten], "mode": mode}
    if result.receipt is not None:
        answer["derivedIds"] = [str(pk) for pk in result.derived]
        answer["receipt"] = {"id": str(result.receipt.id), "removed": result.receipt.removed,
                             "createdAt": iso(result.receipt.created_at), "digest": result.receipt.digest}
    return answer


def quota_to_api(report: QuotaReport) -> dict[str, Any]:
    """Return `GET memory/quota`'s body: each owner's usage and the tightest level."""
    return {
        "scopes": [{
            "scope": row.owner.scope, "owner": row.owner.label, "used": row.usage.used,
            "limit": row.usage.limit, "headroom": row.usage.headroom, "unreviewed": row.usage.unreviewed,
            "oldestUnreviewedDays": row.oldest_unreviewed_days, "level": row.usage.level,
        } for row in report.owners],
        "level": report.level,
    }
