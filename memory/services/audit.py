"""Audit events: the one place that builds and writes a `MemoryAuditEvent`.

Every mutation of a memory node records who (actor, user), what (event type, node) and why
(reason, payload) in the same transaction as the change. Writers that save rows one by one call
`audit_event_record`; bulk writers build unsaved events with `audit_event_build` and
`bulk_create` them, so both paths produce the same rows. The database chains every event on
insert (memory.audit_chain); `audit_chain_lock` lets a writer take the chain's lock first. The
audit log is also the webhooks' outbox: each writer wakes the tenant's dispatcher after its commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection
from django.utils import timezone

from memory.models import MemoryAuditEvent, MemoryNode
from memory.services.rows_insert import rows_insert
from memory.visibility import Viewer
from memory.webhooks.outbox import webhooks_announce
from tenants.models import Tenant

# The first key of the advisory lock the chain's insert trigger takes (the tenant id is the second).
AUDIT_CHAIN_LOCK = 1162562383


def audit_chain_lock(*, tenant: Tenant | int) -> None:
    """Take the tenant's audit-chain lock now (held to commit), before the writer locks any row.

    The insert trigger takes the same lock at the first event; a writer that has locked rows by
    then could wait on a writer that holds the chain and waits for those rows (a deadlock).
    """
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, (%s %% 2147483647)::int)",
                       [AUDIT_CHAIN_LOCK, tenant_id])


def audit_event_build(
    *,
    tenant: Tenant,
    event_type: str,
    node_id: UUID | None,
    workspace_id: int | None,
    session_id: str | None,
    actor: str,
    reason: str,
    payload: dict[str, Any] | None,
    user_id: int | None = None,
    created_at: datetime | None = None,
) -> MemoryAuditEvent:
    """Return an unsaved audit event (saved by `audit_event_record` or a writer's `bulk_create`)."""
    return MemoryAuditEvent(
        tenant=tenant, workspace_id=workspace_id, event_type=event_type, node_id=node_id,
        session_id=session_id, user_id=user_id, actor=actor, reason=reason, payload=payload,
        created_at=created_at or timezone.now(),
    )


def audit_event_record(**fields: Any) -> MemoryAuditEvent:
    """Write one audit event now (inside the caller's transaction); `fields` are `audit_event_build`'s."""
    event = audit_event_build(**fields)
    event.save(force_insert=True)
    webhooks_announce(tenant_id=event.tenant_id)
    return event


def audit_node_change(*, viewer: Viewer, event_type: str, node: MemoryNode, reason: str,
                      payload: dict[str, Any] | None) -> MemoryAuditEvent:
    """Write the audit event of a change `viewer` made to `node`."""
    return audit_event_record(**_node_event_fields(viewer, event_type, node, reason, payload))


def _node_event_fields(viewer: Viewer, event_type: str, node: MemoryNode, reason: str,
                       payload: dict[str, Any] | None) -> dict[str, Any]:
    return {"tenant": viewer.tenant, "event_type": event_type, "node_id": node.pk,
            "workspace_id": node.workspace_id, "session_id": node.session_id,
            "user_id": viewer.user.pk if viewer.user is not None else None, "actor": viewer.actor,
            "reason": reason, "payload": payload}


# (event type, node, reason, payload): one change to audit
NodeChange = tuple[str, MemoryNode, str, dict[str, Any] | None]


def audit_node_changes(*, viewer: Viewer, changes: Sequence[NodeChange],
                       created_at: datetime | None = None) -> list[MemoryAuditEvent]:
    """Write the audit events of many changes `viewer` made, in order, with one INSERT.

    `changes` holds (event type, node, reason, payload) per change: the rows `audit_node_change`
    writes one by one. The chain's trigger still links each row to the one before it.
    """
    events = [audit_event_build(**_node_event_fields(viewer, *change), created_at=created_at)
              for change in changes]
    rows_insert(MemoryAuditEvent, events)
    if events:
        webhooks_announce(tenant_id=viewer.tenant.pk)
    return events
