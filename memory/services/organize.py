"""The organizer's writes: apply one planned item to its cluster, all or nothing, with audit.

`organize_item_apply` runs in its own transaction (savepoint) per cluster: it locks the members, refuses
the item when a member changed since the scan (`stale`), and applies the action:

- `merge_into`: one new card supersedes the target (same slot, revision + 1) and every other member
  (status superseded). It holds the union of the members' evidence (`sourceMessageIds`), their highest
  confidence, and is reviewed when any member was. Its audit event names every source (`mergedFrom`);
  each other source gets a `supersede` event naming the merged card (`mergedInto`), which is how the
  memory detail page links their history. The quota is asked with the change (a merge of N into 1
  nets N − 1 fewer cards).
- `delete`: the members go to status deleted (soft, restorable); `mark_review`: they become
  unreviewed; `rewrite`: the target's title/content change (revision + 1); `keep`: nothing.

A refusal raises `OrganizeRefused` with a reason code and leaves the cluster untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID, uuid4

from django.db import transaction
from django.utils import timezone

from memory.errors import MemoryServiceError
from memory.models import AuditEventType, MemoryNode, NodeStatus, OrganizeAction, ReviewState
from memory.presenters import node_to_api
from memory.rules.review import merged_review_state
from memory.rules.sensitive import find_sensitive_content
from memory.services.audit import audit_chain_lock, audit_node_change
from memory.services.events import nodes_written_announce
from memory.services.node_creates import nodes_insert, successor_link
from memory.services.node_drafts import search_text_of
from memory.services.quota import cards_added, quota_require
from memory.visibility import Viewer

__all__ = ["OrganizeRefused", "organize_item_apply"]

MAX_TITLE = 500


class OrganizeRefused(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def _locked_members(viewer: Viewer, members: Sequence[UUID], revisions: dict[str, int]) -> list[MemoryNode]:
    nodes = {
        node.pk: node
        for node in MemoryNode.objects.select_for_update(of=("self",)).filter(
            tenant=viewer.tenant, pk__in=list(members)
        )
    }
    found = []
    for member in members:
        node = nodes.get(member)
        if node is None or node.status != NodeStatus.ACTIVE:
            raise OrganizeRefused("stale", f"Memory {member} is no longer active.")
        expected = revisions.get(str(member))
        if expected is not None and node.revision != expected:
            raise OrganizeRefused(
                "stale", f"Memory {member} changed since the scan (revision {node.revision})."
            )
        found.append(node)
    return found


def _proposed_text(proposed: dict[str, Any], target: MemoryNode) -> tuple[str, str]:
    title = str(proposed.get("title") or target.title)[:MAX_TITLE]
    content = str(proposed.get("content") or target.content)
    if find_sensitive_content(f"{title}\n{content}"):
        raise OrganizeRefused("sensitive", "The proposed text holds sensitive content.")
    return title, content


def _merge(
    viewer: Viewer, nodes: list[MemoryNode], target: MemoryNode, proposed: dict[str, Any], reason: str
) -> MemoryNode:
    now = timezone.now()
    title, content = _proposed_text(proposed, target)
    merged = MemoryNode(
        **{f.attname: getattr(target, f.attname) for f in MemoryNode._meta.concrete_fields if not f.generated}
    )
    merged.pk = uuid4()
    successor_link(target, merged)
    merged.title, merged.content = title, content
    if "value" in proposed and proposed["value"] is not None:
        merged.value_json = proposed["value"]
    merged.source_message_ids = list(dict.fromkeys(m for node in nodes for m in node.source_message_ids))
    merged.confidence = max(node.confidence for node in nodes)
    merged.importance = max(node.importance for node in nodes)
    merged.tags = list(dict.fromkeys(t for node in nodes for t in node.tags))
    merged.entities = list(dict.fromkeys(e for node in nodes for e in node.entities))
    merged.explicit_user_intent = any(node.explicit_user_intent for node in nodes)
    merged.review_state = merged_review_state([node.review_state for node in nodes])
    merged.created_at = merged.updated_at = now
    merged.last_accessed_at = None
    merged.embedding = None
    merged.embedding_model = ""
    merged.search_text = search_text_of(merged)
    quota_require(tenant=viewer.tenant, adding=cards_added([merged], nodes))
    MemoryNode.objects.filter(pk__in=[node.pk for node in nodes]).update(
        status=NodeStatus.SUPERSEDED, updated_at=now
    )
    nodes_insert([merged])
    sources = [str(node.pk) for node in nodes]
    audit_node_change(
        viewer=viewer,
        event_type=AuditEventType.SUPERSEDE,
        node=merged,
        reason=reason,
        payload={"supersededId": str(target.pk), "mergedFrom": sources, "node": node_to_api(merged)},
    )
    for node in nodes:
        if node.pk != target.pk:
            audit_node_change(
                viewer=viewer,
                event_type=AuditEventType.SUPERSEDE,
                node=node,
                reason=reason,
                payload={"mergedInto": str(merged.pk), "revision": node.revision},
            )
    return merged


def _change(viewer: Viewer, node: MemoryNode, reason: str, event: str, **changes: Any) -> MemoryNode:
    before = {name: getattr(node, name) for name in changes}
    for name, value in changes.items():
        setattr(node, name, value)
    node.revision += 1
    node.updated_at = timezone.now()
    node.search_text = search_text_of(node)
    node.save(update_fields=[*changes, "revision", "updated_at", "search_text"])
    audit_node_change(
        viewer=viewer,
        event_type=event,
        node=node,
        reason=reason,
        payload={"before": before, "after": changes, "revision": node.revision, "organizer": True},
    )
    return node


def organize_item_apply(
    *,
    viewer: Viewer,
    action: str,
    members: Sequence[UUID],
    target_id: UUID | None,
    proposed: dict[str, Any] | None,
    revisions: dict[str, int],
    reason: str,
) -> UUID | None:
    """Apply one item to its cluster in one savepoint; return the card that holds the result, if any."""
    proposed = proposed or {}
    members = [UUID(str(member)) for member in members]
    target_id = UUID(str(target_id)) if target_id else None
    if action == OrganizeAction.KEEP:
        return None
    try:
        with transaction.atomic():
            audit_chain_lock(tenant=viewer.tenant)
            nodes = _locked_members(viewer, members, revisions)
            by_id = {node.pk: node for node in nodes}
            target = by_id.get(target_id) if target_id else None
            if action in (OrganizeAction.MERGE_INTO, OrganizeAction.REWRITE) and target is None:
                raise OrganizeRefused("invalid_target", "The item's target is not one of its members.")
            if action == OrganizeAction.MERGE_INTO:
                result = _merge(viewer, nodes, target, proposed, reason)
            elif action == OrganizeAction.REWRITE:
                title, content = _proposed_text(proposed, target)
                result = _change(viewer, target, reason, AuditEventType.UPDATE, title=title, content=content)
            elif action == OrganizeAction.DELETE:
                for node in nodes:
                    _change(viewer, node, reason, AuditEventType.DELETE, status=NodeStatus.DELETED)
                result = None
            elif action == OrganizeAction.MARK_REVIEW:
                for node in nodes:
                    _change(viewer, node, reason, AuditEventType.UPDATE, review_state=ReviewState.UNREVIEWED)
                result = None
            else:
                raise OrganizeRefused("invalid_action", f"Unknown action {action!r}.")
            if result is not None:
                nodes_written_announce(tenant_id=viewer.tenant.pk, node_ids=[result.pk])
    except MemoryServiceError as exc:
        raise OrganizeRefused(getattr(exc, "code", "refused"), str(exc)) from exc
    return result.pk if result is not None else None
