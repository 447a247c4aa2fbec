"""Celery tasks of the webhooks: one-line adapters (memory.webhooks.delivery does the work)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="memory.dispatch_webhooks", acks_late=True)
def dispatch_webhooks(tenant_id: int) -> int:
    from memory.webhooks.delivery import webhooks_dispatch

    return webhooks_dispatch(tenant_id=tenant_id)


@shared_task(name="memory.retry_webhooks")
def retry_webhooks() -> int:
    from memory.webhooks.delivery import webhooks_sweep

    return webhooks_sweep()
