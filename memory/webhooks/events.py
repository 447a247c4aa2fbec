"""Webhook events: which audit events become which webhook event, and the body each one carries.

A body is built when it is sent, from the rows as they are then, and never stored. A card that
has since been forgotten (soft or hard) is named by id only: its content is never sent after its
forget. `memory.forgotten` always carries ids only, and `extraction.completed` ids and counts.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from memory.models import AuditEventType, ExtractionRun, MemoryAuditEvent, MemoryNode, NodeStatus
from memory.presenters import iso, node_to_api
from memory.webhooks.models import WebhookDelivery, WebhookEvent
from tenants.models import Tenant

# The audit event types that are webhook events (`erase`, the receipt of a hard forget, is not).
FROM_AUDIT = {
    AuditEventType.CREATE: WebhookEvent.MEMORY_CREATED,
    AuditEventType.UPDATE: WebhookEvent.MEMORY_UPDATED,
    AuditEventType.RESTORE: WebhookEvent.MEMORY_UPDATED,
    AuditEventType.ACCEPT: WebhookEvent.MEMORY_UPDATED,  # the card is now reviewed, at a new revision
    AuditEventType.SUPERSEDE: WebhookEvent.MEMORY_SUPERSEDED,
    AuditEventType.EXPIRE: WebhookEvent.MEMORY_EXPIRED,
    AuditEventType.DELETE: WebhookEvent.MEMORY_FORGOTTEN,
}
# Content fields of a card that a body leaves out once the card is forgotten.
GONE = (NodeStatus.DELETED,)


def _card(node: MemoryNode | None) -> dict[str, Any] | None:
    if node is None or node.status in GONE:
        return None
    return node_to_api(node)


def _memory_data(delivery: WebhookDelivery, node: MemoryNode | None, mode: str | None) -> dict[str, Any]:
    memory_id = str(delivery.node_id) if delivery.node_id else None
    if delivery.event_type == WebhookEvent.MEMORY_FORGOTTEN:
        return {"memoryId": memory_id, "mode": mode}
    card = _card(node)
    data: dict[str, Any] = {"memoryId": memory_id, "forgotten": card is None, "memory": card}
    if delivery.event_type == WebhookEvent.MEMORY_SUPERSEDED:
        data["supersedesId"] = card["supersedesId"] if card else None
    return data


def _extraction_data(run: ExtractionRun | None, run_id: UUID | None) -> dict[str, Any]:
    results = (run.results or {}) if run is not None else {}
    items = results.get("items") or []
    return {
        "runId": str(run_id),
        "sessionId": run.session_id if run is not None else None,
        "status": run.status if run is not None else None,
        "counts": results.get("counts") or {},
        "memoryIds": sorted(
            {str(i["nodeId"]) for i in items if i.get("outcome") == "applied" and i.get("nodeId")}
        ),
    }


def event_body(*, tenant: Tenant, delivery: WebhookDelivery) -> bytes:
    """Return the JSON body of `delivery` as of now (the caller has bound the tenant)."""
    if delivery.event_type == WebhookEvent.EXTRACTION_COMPLETED:
        run = ExtractionRun.objects.filter(tenant=tenant, pk=delivery.run_id).first()
        data = _extraction_data(run, delivery.run_id)
    else:
        node, mode = None, None
        if delivery.event_type == WebhookEvent.MEMORY_FORGOTTEN:
            payload = (
                MemoryAuditEvent.objects.filter(tenant=tenant, pk=delivery.event_id)
                .values_list("payload", flat=True)
                .first()
            )
            # Only a hard forget erases an event's payload: an erased soft forget was followed by one.
            mode = payload.get("mode", "soft") if isinstance(payload, dict) else "hard"
        elif delivery.node_id is not None:
            node = (
                MemoryNode.objects.filter(tenant=tenant, pk=delivery.node_id)
                .defer("embedding", "search_vector", "search_text")
                .select_related("user")
                .first()
            )
        data = _memory_data(delivery, node, mode)
    body = {
        "id": str(delivery.event_id),
        "type": delivery.event_type,
        "createdAt": iso(delivery.occurred_at),
        "tenant": tenant.slug,
        "workspaceId": str(delivery.workspace_id) if delivery.workspace_id is not None else None,
        "data": data,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
