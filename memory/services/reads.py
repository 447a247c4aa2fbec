"""The read audit: which caller (API key or person) was handed which card, when, through which endpoint.

A request that hands out cards announces one batch after it commits (`node_reads_record`, signal
`events.nodes_read`); memory.pipeline.background queues it as a Celery task (run in-process
without a broker) and writes it at once when the broker cannot be reached, so a read is never lost
and never costs an insert per card on the request path. Rows are kept `EKKO_READ_AUDIT_DAYS` days;
the beat sweep `read_events_sweep` deletes older ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from memory.models import MemoryReadEvent, ReadEndpoint
from memory.services.events import nodes_read_announce
from tenants.context import tenant_context
from tenants.models import ApiKey, Tenant

SWEEP_BATCH = 10_000


def node_reads_record(*, tenant: Tenant, node_ids: Iterable[UUID | str], endpoint: str, actor: str,
                      user_id: int | None = None, api_key: ApiKey | None = None) -> None:
    """Queue one read-audit batch for the cards a request handed out (written after the commit)."""
    ids = [str(node_id) for node_id in dict.fromkeys(node_ids)]
    if not ids:
        return
    batch = {
        "tenant_id": tenant.pk, "node_ids": ids,
        "endpoint": endpoint if endpoint in ReadEndpoint.values else ReadEndpoint.OTHER,
        "actor": actor, "user_id": user_id, "api_key_id": api_key.pk if api_key is not None else None,
        "read_at": timezone.now().isoformat(),
    }
    nodes_read_announce(batch=batch)


def node_reads_write(*, tenant_id: int, node_ids: list[str], endpoint: str, actor: str, user_id: int | None,
                     api_key_id: int | None, read_at: str) -> int:
    """Store one batch of reads in one insert (the task body); return the number of rows."""
    created_at = parse_datetime(read_at) or timezone.now()
    with tenant_context(tenant_id):
        rows = MemoryReadEvent.objects.bulk_create([
            MemoryReadEvent(tenant_id=tenant_id, node_id=node_id, actor=actor[:200], user_id=user_id,
                            api_key_id=api_key_id, endpoint=endpoint, created_at=created_at)
            for node_id in node_ids
        ])
    return len(rows)


def read_events_sweep(*, now: datetime | None = None) -> int:
    """Delete read-audit rows older than `EKKO_READ_AUDIT_DAYS` days in every tenant; return the count."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.EKKO_READ_AUDIT_DAYS)
    deleted = 0
    for tenant in Tenant.objects.order_by("pk"):
        while True:
            # Bounded batches keep each transaction (and its locks) short on a big tenant.
            with tenant_context(tenant):
                ids = list(MemoryReadEvent.objects.filter(tenant=tenant, created_at__lt=cutoff)
                           .order_by("created_at").values_list("pk", flat=True)[:SWEEP_BATCH])
                if ids:
                    MemoryReadEvent.objects.filter(tenant=tenant, pk__in=ids).delete()
            deleted += len(ids)
            if len(ids) < SWEEP_BATCH:
                break
    return deleted
