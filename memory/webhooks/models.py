"""Webhook tables: the endpoints a tenant registered and the delivery log (memory.webhooks).

Registered with the memory app (memory.models imports this module), tenant-owned like every table:
`tenant_id` first in every constraint and index, row-level security in the migration. A delivery
stores what it points at (event id, type, card, workspace), never the body it sends.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from tenants.models import TenantOwnedModel, Workspace


class WebhookEvent(models.TextChoices):
    MEMORY_CREATED = "memory.created"
    MEMORY_UPDATED = "memory.updated"
    MEMORY_SUPERSEDED = "memory.superseded"
    MEMORY_EXPIRED = "memory.expired"
    MEMORY_FORGOTTEN = "memory.forgotten"
    EXTRACTION_COMPLETED = "extraction.completed"


class WebhookEndpoint(TenantOwnedModel):
    """Where a tenant's events go: a URL, the events it wants, a signing secret (encrypted at rest)."""

    # Bound to one workspace, the endpoint hears only that workspace's events; unbound, the tenant's.
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    events = ArrayField(models.CharField(max_length=32, choices=WebhookEvent.choices))
    secret_encrypted = models.TextField(
        help_text="Fernet token of the signing secret (memory.webhooks.secrets)."
    )
    secret_hint = models.CharField(max_length=8, help_text="Last characters of the secret, for display.")
    is_active = models.BooleanField(default=True, help_text="False while paused.")
    paused_reason = models.TextField(blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # The last audit-chain position turned into deliveries; events at or before it are done.
    cursor_sequence = models.BigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "is_active"], name="webhook_endpoint_active_idx")]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.url


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    RETRYING = "retrying"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(TenantOwnedModel):
    """One event for one endpoint: its attempts, last answer and last error (the delivery log)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="+")
    event_type = models.CharField(max_length=32, choices=WebhookEvent.choices)
    # The `Ekko-Event-Id` header: the audit event's id (or the extraction run's), the same for every endpoint.
    event_id = models.UUIDField()
    node_id = models.UUIDField(null=True, blank=True)
    run_id = models.UUIDField(null=True, blank=True)
    workspace_id = models.BigIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # Dispatching the same events twice (the sweep after a lost enqueue) adds nothing.
            models.UniqueConstraint(
                fields=["tenant", "endpoint", "event_id"], name="webhook_delivery_event_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "status", "next_attempt_at"], name="webhook_delivery_due_idx"),
            models.Index(fields=["tenant", "endpoint", "created_at"], name="webhook_delivery_log_idx"),
        ]
        ordering = ["-created_at"]
