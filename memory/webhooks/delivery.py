"""Turning audit events into deliveries and sending them: signed, retried with backoff, paused on failure.

`webhooks_dispatch` (Celery task `memory.dispatch_webhooks`, queued after a write commits) first
plans: for each active endpoint of the tenant it reads the audit events past the endpoint's
cursor and adds a delivery for each event the endpoint wants (its types, its workspace, not older
than the endpoint), then moves the cursor, all in one transaction. Then it sends the due
deliveries: each is claimed for a short lease, sent outside any transaction (a slow receiver holds
no lock), and its outcome recorded. A failure is retried after 30 s, 60 s, 120 s, … (capped) up to
EKKO_WEBHOOK_MAX_ATTEMPTS; after EKKO_WEBHOOK_PAUSE_AFTER failures in a row the endpoint is paused
with its reason. `webhooks_sweep` (beat, `memory.retry_webhooks`) dispatches every tenant with an
active endpoint: due retries, and events whose enqueue was lost. Logger: `memory.webhooks`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ekko_site.metrics import WEBHOOK_DELIVERIES
from memory.models import MemoryAuditEvent
from memory.webhooks import signing
from memory.webhooks.events import FROM_AUDIT, event_body
from memory.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from memory.webhooks.outbox import webhooks_active_forget
from memory.webhooks.secrets import secret_decrypt
from memory.webhooks.urls import UnsafeUrl, url_check
from tenants.context import all_tenants_context, tenant_context
from tenants.models import Tenant

logger = logging.getLogger("memory.webhooks")

PLAN_BATCH = 500
SEND_BATCH = 50
LEASE = timedelta(seconds=120)
USER_AGENT = "Ekko-Webhooks/1"


def retry_delay(attempts: int) -> timedelta:
    """Return the wait after failed attempt number `attempts` (30 s, 60 s, 120 s, … capped)."""
    base = int(settings.EKKO_WEBHOOK_RETRY_BASE_SECONDS)
    cap = int(settings.EKKO_WEBHOOK_RETRY_MAX_SECONDS)
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


# --------------------------------------------------------------------------- plan


def _plan_endpoint(tenant: Tenant, endpoint: WebhookEndpoint, now: datetime) -> int:
    wanted = {audit for audit, event in FROM_AUDIT.items() if event in endpoint.events}
    added = 0
    while True:
        events = list(
            MemoryAuditEvent.objects.filter(tenant=tenant, sequence__gt=endpoint.cursor_sequence)
            .order_by("sequence")
            .values("id", "sequence", "event_type", "node_id", "workspace_id", "created_at")[:PLAN_BATCH]
        )
        deliveries = [
            WebhookDelivery(
                tenant=tenant,
                endpoint=endpoint,
                event_type=FROM_AUDIT[event["event_type"]],
                event_id=event["id"],
                node_id=event["node_id"],
                workspace_id=event["workspace_id"],
                occurred_at=event["created_at"],
                next_attempt_at=now,
            )
            for event in events
            if event["event_type"] in wanted
            and event["created_at"] >= endpoint.created_at
            and endpoint.workspace_id in (None, event["workspace_id"])
        ]
        WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
        added += len(deliveries)
        if events:
            endpoint.cursor_sequence = events[-1]["sequence"]
        if len(events) < PLAN_BATCH:
            break
    WebhookEndpoint.objects.filter(tenant=tenant, pk=endpoint.pk).update(
        cursor_sequence=endpoint.cursor_sequence
    )
    return added


def _plan(tenant: Tenant) -> int:
    now = timezone.now()
    with tenant_context(tenant):
        # Another dispatcher planning the same endpoint skips it: it moves the cursor itself.
        endpoints = list(
            WebhookEndpoint.objects.select_for_update(skip_locked=True).filter(tenant=tenant, is_active=True)
        )
        return sum(_plan_endpoint(tenant, endpoint, now) for endpoint in endpoints)


# --------------------------------------------------------------------------- send


def _claim(tenant: Tenant, now: datetime) -> list[WebhookDelivery]:
    with tenant_context(tenant):
        active = list(
            WebhookEndpoint.objects.filter(tenant=tenant, is_active=True).values_list("pk", flat=True)
        )
        due = list(
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(
                tenant=tenant,
                endpoint_id__in=active,
                next_attempt_at__lte=now,
                status__in=[DeliveryStatus.PENDING, DeliveryStatus.RETRYING],
            )
            .order_by("created_at")[:SEND_BATCH]
        )
        # The lease: a second dispatcher leaves these alone while this one sends them.
        WebhookDelivery.objects.filter(tenant=tenant, pk__in=[d.pk for d in due]).update(
            next_attempt_at=now + LEASE
        )
        return due


def _post(endpoint: WebhookEndpoint, delivery: WebhookDelivery, body: bytes) -> tuple[int | None, str]:
    """Send one delivery; return (response code or None, error text or '')."""
    try:
        url_check(endpoint.url)  # again at send time: the host may resolve elsewhere now
    except UnsafeUrl as exc:
        return None, str(exc)
    secret = secret_decrypt(endpoint.secret_encrypted)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        signing.EVENT_HEADER: delivery.event_type,
        signing.EVENT_ID_HEADER: str(delivery.event_id),
        signing.SIGNATURE_HEADER: signing.signature_header(secret=secret, body=body),
    }
    try:
        with httpx.Client(timeout=settings.EKKO_WEBHOOK_TIMEOUT, follow_redirects=False) as client:
            response = client.post(endpoint.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}: {response.text[:200]}"


def _record(tenant: Tenant, delivery: WebhookDelivery, code: int | None, error: str) -> str:
    now = timezone.now()
    with tenant_context(tenant):
        row = WebhookDelivery.objects.select_for_update().get(tenant=tenant, pk=delivery.pk)
        endpoint = WebhookEndpoint.objects.select_for_update().get(tenant=tenant, pk=delivery.endpoint_id)
        row.attempts += 1
        row.response_code = code
        outcome = "delivered" if not error else "failed"
        if not error:
            row.status, row.delivered_at, row.next_attempt_at, row.last_error = (
                DeliveryStatus.DELIVERED,
                now,
                None,
                "",
            )
            endpoint.consecutive_failures = 0
        else:
            row.last_error = error
            gave_up = row.attempts >= int(settings.EKKO_WEBHOOK_MAX_ATTEMPTS)
            row.status = DeliveryStatus.FAILED if gave_up else DeliveryStatus.RETRYING
            row.next_attempt_at = None if gave_up else now + retry_delay(row.attempts)
            endpoint.consecutive_failures += 1
            if endpoint.is_active and endpoint.consecutive_failures >= int(settings.EKKO_WEBHOOK_PAUSE_AFTER):
                endpoint.is_active, endpoint.paused_at, outcome = False, now, "paused"
                endpoint.paused_reason = (
                    f"Paused after {endpoint.consecutive_failures} failed deliveries in a row; "
                    f"the last one: {error}"
                )[:1000]
                transaction.on_commit(lambda: webhooks_active_forget(tenant.pk))
                logger.warning("Webhook endpoint %s of tenant %s paused: %s", endpoint.pk, tenant.pk, error)
        row.save()
        endpoint.save(
            update_fields=["consecutive_failures", "is_active", "paused_at", "paused_reason", "updated_at"]
        )
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
    return outcome


def _send_due(tenant: Tenant) -> int:
    delivered = 0
    for delivery in _claim(tenant, timezone.now()):
        with tenant_context(tenant):
            endpoint = WebhookEndpoint.objects.get(tenant=tenant, pk=delivery.endpoint_id)
            body = event_body(tenant=tenant, delivery=delivery)
        code, error = _post(endpoint, delivery, body)
        delivered += _record(tenant, delivery, code, error) == "delivered"
    return delivered


def webhooks_dispatch(*, tenant_id: int) -> int:
    """Plan the tenant's new deliveries and send the due ones; return how many were delivered."""
    tenant = Tenant.objects.get(pk=tenant_id)
    _plan(tenant)
    return _send_due(tenant)


def webhooks_sweep() -> int:
    """Dispatch every tenant with an active endpoint (the beat sweep); return how many were delivered."""
    with all_tenants_context():
        tenant_ids = sorted(
            set(WebhookEndpoint.all_tenants.filter(is_active=True).values_list("tenant_id", flat=True))
        )
    delivered = 0
    for tenant_id in tenant_ids:
        try:
            delivered += webhooks_dispatch(tenant_id=tenant_id)
        except Exception:  # noqa: BLE001 - one tenant's trouble must not stop the others' deliveries
            logger.exception("Webhook dispatch of tenant %s failed; the next sweep tries again.", tenant_id)
    return delivered
