"""Every write to memory: evidence capture, summaries, node writes and forgets, access counting.

Each public function takes `tenant=` (and the resolved viewer) explicitly, runs in one
transaction bound to that tenant, writes its audit events in the same transaction and queues
background work with `transaction.on_commit`. Views, serializers, admin and tasks never save
memory rows themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from django.db.models import F
from django.utils import timezone

from memory.models import MemoryNode
from tenants.context import tenant_context
from tenants.models import Tenant


def node_access_record(*, tenant: Tenant, node_ids: Iterable[UUID]) -> None:
    """Count one retrieval of each node (seed 004) without touching its revision or updatedAt."""
    ids = list(dict.fromkeys(node_ids))
    if not ids:
        return
    with tenant_context(tenant):
        MemoryNode.objects.filter(tenant=tenant, pk__in=ids).update(
            access_count=F("access_count") + 1, last_accessed_at=timezone.now()
        )
