"""After a write commits, wake the dispatcher of its tenant, if the tenant has an active endpoint.

The audit writers (memory.services.audit) call `webhooks_announce` in the write's transaction; it
registers one commit callback per tenant and transaction, so a rolled-back write wakes nothing.
Whether a tenant has an active endpoint comes from the cache (set by every endpoint change,
`webhooks_active_forget`), so a write sends no extra statement; on a miss the callback asks the
database once, after the commit. A stale answer (another process's cache) costs latency only: the
beat sweep (`memory.retry_webhooks`) dispatches every tenant with an active endpoint anyway.
"""

from __future__ import annotations

import functools
import logging

from django.core.cache import cache
from django.db import transaction

logger = logging.getLogger("memory.webhooks")

ACTIVE_CACHE_SECONDS = 60


def _cache_key(tenant_id: int) -> str:
    return f"ekko:webhooks:active:{tenant_id}"


def webhooks_active(tenant_id: int) -> bool:
    """Return whether the tenant has an active endpoint (cached; one query on a miss)."""
    cached = cache.get(_cache_key(tenant_id))
    if cached is None:
        from memory.webhooks.models import WebhookEndpoint
        from tenants.context import tenant_context

        with tenant_context(tenant_id):
            cached = WebhookEndpoint.objects.filter(tenant_id=tenant_id, is_active=True).exists()
        cache.set(_cache_key(tenant_id), cached, ACTIVE_CACHE_SECONDS)
    return bool(cached)


def webhooks_active_forget(tenant_id: int) -> None:
    """Drop the cached answer after an endpoint was added, paused, resumed or removed."""
    cache.delete(_cache_key(tenant_id))


def _dispatch_after_commit(tenant_id: int) -> None:
    try:
        if not webhooks_active(tenant_id):
            return
        from memory.webhooks.tasks import dispatch_webhooks

        dispatch_webhooks.delay(tenant_id)
    except Exception:  # noqa: BLE001 - the write has committed; the sweep delivers what this misses
        logger.warning(
            "Could not queue the webhook dispatch of tenant %s; the sweep will.", tenant_id, exc_info=True
        )


def webhooks_announce(*, tenant_id: int) -> None:
    """Queue the tenant's webhook dispatch after the current transaction commits (once per transaction)."""
    connection = transaction.get_connection()
    # Registered already at this savepoint level: a writer's loop queues one dispatch, not one per event.
    here = set(connection.savepoint_ids)
    if any(
        getattr(callback, "webhook_tenant_id", None) == tenant_id and savepoints == here
        for savepoints, callback, _robust in connection.run_on_commit
    ):
        return
    callback = functools.partial(_dispatch_after_commit, tenant_id)
    callback.webhook_tenant_id = tenant_id  # type: ignore[attr-defined]
    transaction.on_commit(callback)
