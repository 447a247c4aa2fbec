"""Housekeeping writes nobody asks for in a request: the expiry sweep and access counting (seed 004).

Access counts are bumped after the reading request has committed, in the background: a request
queues its batch (`node_access_queue`), a task applies it (`node_access_record`, one UPDATE).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from memory.models import AuditEventType, MemoryNode, NodeStatus
from memory.services.audit import audit_chain_lock, audit_event_record
from memory.services.events import nodes_accessed_announce
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


def node_access_queue(*, tenant: Tenant, node_ids: Iterable[UUID | str]) -> None:
    """Count one retrieval of each node (seed 004) once the current transaction commits.

    The request only announces the batch (`events.nodes_accessed`); memory.pipeline.background
    queues `node_access_record` for it, so the bump costs the request no statement.
    """
    ids = [str(node_id) for node_id in dict.fromkeys(node_ids)]
    if ids:
        nodes_accessed_announce(batch={"tenant_id": tenant.pk, "node_ids": ids,
                                       "accessed_at": timezone.now().isoformat()})


def node_access_record(*, tenant_id: int, node_ids: list[str], accessed_at: str | None = None) -> int:
    """Bump `accessCount` and `lastAccessedAt` of the nodes in one UPDATE, never their revision or
    updatedAt (the task body of a `node_access_queue` batch); return the number of rows."""
    ids = list(dict.fromkeys(node_ids))
    if not ids:
        return 0
    accessed = (parse_datetime(accessed_at) if accessed_at else None) or timezone.now()
    with tenant_context(tenant_id):
        # A lost access count after a crash is harmless; not waiting for the WAL flush keeps it cheap.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
        return MemoryNode.objects.filter(tenant_id=tenant_id, pk__in=ids).update(
            access_count=F("access_count") + 1, last_accessed_at=Greatest(
                Coalesce("last_accessed_at", Value(accessed)), Value(accessed)))
