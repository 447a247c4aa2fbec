"""Endpoint changes (register, rotate the secret, resume, remove) and the deliveries of finished extractions.

Every change drops the cached "has an active endpoint" answer after its commit (memory.webhooks.outbox).
A new endpoint starts at the tenant's audit-chain head: it hears what happens from now on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory.models import AuditChainHead, ExtractionRun
from memory.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookEvent
from memory.webhooks.outbox import webhooks_active_forget, webhooks_announce
from memory.webhooks.secrets import secret_encrypt, secret_generate
from memory.webhooks.urls import UnsafeUrl, url_check
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace


class EndpointError(ValueError):
    """The endpoint cannot be saved as asked; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class IssuedSecret:
    """An endpoint and its signing secret in clear text: shown once, never stored so."""

    endpoint: WebhookEndpoint
    secret: str


def _changed(tenant: Tenant) -> None:
    transaction.on_commit(lambda: webhooks_active_forget(tenant.pk))


def _secret_fields() -> tuple[str, dict[str, Any]]:
    secret = secret_generate()
    return secret, {"secret_encrypted": secret_encrypt(secret), "secret_hint": secret[-4:]}


def endpoint_create(
    *,
    tenant: Tenant,
    url: str,
    events: Iterable[str],
    workspace: Workspace | None = None,
    description: str = "",
    created_by: Any = None,
) -> IssuedSecret:
    """Register an endpoint and return it with its new secret (refused: EndpointError, nothing saved)."""
    try:
        url = url_check(url)
    except UnsafeUrl as exc:
        raise EndpointError(str(exc), field="url") from exc
    chosen = sorted(set(events))
    if not chosen:
        raise EndpointError("Choose at least one event.", field="events")
    unknown = set(chosen) - set(WebhookEvent.values)
    if unknown:
        raise EndpointError(f"Unknown events: {', '.join(sorted(unknown))}.", field="events")
    if workspace is not None and workspace.tenant_id != tenant.pk:
        raise EndpointError("No such workspace.", field="workspace")
    secret, fields = _secret_fields()
    with tenant_context(tenant):
        head = AuditChainHead.objects.filter(tenant=tenant).values_list("sequence", flat=True).first() or 0
        endpoint = WebhookEndpoint.objects.create(
            tenant=tenant,
            url=url,
            events=chosen,
            workspace=workspace,
            description=description[:200],
            created_by=created_by,
            cursor_sequence=head,
            **fields,
        )
        _changed(tenant)
    return IssuedSecret(endpoint=endpoint, secret=secret)


def _locked(tenant: Tenant, endpoint_id: int) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.select_for_update().filter(tenant=tenant, pk=endpoint_id).first()
    if endpoint is None:
        raise EndpointError("No such webhook endpoint.")
    return endpoint


def endpoint_rotate_secret(*, tenant: Tenant, endpoint_id: int) -> IssuedSecret:
    """Give the endpoint a new secret (the old one stops signing at once) and return it."""
    secret, fields = _secret_fields()
    with tenant_context(tenant):
        endpoint = _locked(tenant, endpoint_id)
        for name, value in fields.items():
            setattr(endpoint, name, value)
        endpoint.save(update_fields=[*fields, "updated_at"])
    return IssuedSecret(endpoint=endpoint, secret=secret)


def endpoint_resume(*, tenant: Tenant, endpoint_id: int) -> WebhookEndpoint:
    """Resume a paused endpoint: its waiting deliveries are retried now, then what it missed follows."""
    with tenant_context(tenant):
        endpoint = _locked(tenant, endpoint_id)
        endpoint.is_active, endpoint.paused_at, endpoint.paused_reason = True, None, ""
        endpoint.consecutive_failures = 0
        endpoint.save(
            update_fields=["is_active", "paused_at", "paused_reason", "consecutive_failures", "updated_at"]
        )
        WebhookDelivery.objects.filter(
            tenant=tenant, endpoint_id=endpoint.pk, status=DeliveryStatus.RETRYING
        ).update(next_attempt_at=timezone.now())
        _changed(tenant)
        webhooks_announce(tenant_id=tenant.pk)
    return endpoint


def endpoint_delete(*, tenant: Tenant, endpoint_id: int) -> None:
    """Remove the endpoint and its delivery log."""
    with tenant_context(tenant):
        endpoint = _locked(tenant, endpoint_id)
        WebhookDelivery.objects.filter(tenant=tenant, endpoint_id=endpoint.pk).delete()
        WebhookEndpoint.objects.filter(tenant=tenant, pk=endpoint.pk).delete()
        _changed(tenant)


def extraction_completed_record(*, tenant: Tenant, run: ExtractionRun) -> int:
    """Add the `extraction.completed` deliveries of `run` in the caller's transaction; return how many.

    Paused endpoints get theirs too (sent after a resume), as they get the memory events they missed.
    """
    endpoints = WebhookEndpoint.objects.filter(
        tenant=tenant, events__contains=[WebhookEvent.EXTRACTION_COMPLETED]
    ).values_list("pk", "workspace_id")
    deliveries = [
        WebhookDelivery(
            tenant=tenant,
            endpoint_id=pk,
            event_type=WebhookEvent.EXTRACTION_COMPLETED,
            event_id=run.pk,
            run_id=run.pk,
            workspace_id=run.workspace_id,
            occurred_at=run.updated_at,
            next_attempt_at=timezone.now(),
        )
        for pk, workspace_id in endpoints
        if workspace_id in (None, run.workspace_id)
    ]
    if deliveries:
        WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
        webhooks_announce(tenant_id=tenant.pk)
    return len(deliveries)
