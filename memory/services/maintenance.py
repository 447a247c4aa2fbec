"""Housekeeping writes nobody asks for in a request: the expiry sweep and access counting (seed 004)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from django.db import connection
from django.db.models import F
from django.utils import timezone

from memory.models import AuditEventType, MemoryNode, NodeStatus
from memory.services.audit import audit_chain_lock, audit_event_record
from tenants.context import tenant_context
from tenants.models import Tenant

EXPIRY_ACTOR = "system:expiry"


def nodes_expire_due(*, now: datetime | None = None, limit_per_tenant: int = 1000) -> int:
    """Mark active nodes whose `expiresAt` has passed as expired (the Celery beat sweep); return the count."""
    now = now or timezone.now()
    expired = 0
    for tenant in Tenant.objects.all():
        with tenant_context(tenant):
            audit_chain_lock(tenant=tenant)
            due = list(
                MemoryNode.objects.select_for_update(skip_locked=True)
                .filter(tenant=tenant, status=NodeStatus.ACTIVE, expires_at__lte=now)[:limit_per_tenant])
            for node in due:
                node.status, node.revision, node.updated_at = NodeStatus.EXPIRED, node.revision + 1, now
                node.save(update_fields=["status", "revision", "updated_at"])
                audit_event_record(
                    tenant=tenant, event_type=AuditEventType.EXPIRE, node_id=node.pk,
                    workspace_id=node.workspace_id, session_id=node.session_id, actor=EXPIRY_ACTOR,
                    reason="expiresAt passed",
                    payload={"revision": node.revision}, created_at=now)
            expired += len(due)
    return expired


def node_access_record(*, tenant: Tenant, node_ids: Iterable[UUID]) -> None:
    """Count one retrieval of each node (seed 004) without touching its revision or updatedAt."""
    ids = list(dict.fromkeys(node_ids))
    if not ids:
        return
    with tenant_context(tenant):
        # A lost access count after a crash is harmless; not waiting for the WAL flush keeps reads fast.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
        MemoryNode.objects.filter(tenant=tenant, pk__in=ids).update(
            access_count=F("access_count") + 1, last_accessed_at=timezone.now()
        )
