"""The organizer's tables: one run over one scope owner and its planned items (tenant-owned, with RLS).

Only memory.organizer.runs writes them; memory.services.erasure clears an item's copies of content.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from tenants.models import Scope, TenantOwnedModel, Workspace


class OrganizeTrigger(models.TextChoices):
    MANUAL = "manual"
    SCHEDULED = "scheduled"


class OrganizeMode(models.TextChoices):
    """What a manual run may apply on its own (memory.organizer.gate); scheduled runs apply low risk only."""

    REVIEW = "review"
    AUTO_LOW = "auto_low"


class OrganizeState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class OrganizePhase(models.TextChoices):
    SCAN = "scan"
    CLUSTER = "cluster"
    PLAN = "plan"
    GATE = "gate"
    APPLY = "apply"
    DONE = "done"


class OrganizeRun(TenantOwnedModel):
    """One organizer pass over one scope owner's cards (seed 001: scan → cluster → plan → gate → apply)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    scope = models.CharField(max_length=16, choices=Scope.choices)
    owner_ref = models.CharField(max_length=300)
    trigger = models.CharField(max_length=16, choices=OrganizeTrigger.choices)
    mode = models.CharField(max_length=16, choices=OrganizeMode.choices, default=OrganizeMode.REVIEW)
    state = models.CharField(max_length=16, choices=OrganizeState.choices, default=OrganizeState.QUEUED)
    phase = models.CharField(max_length=16, choices=OrganizePhase.choices, default=OrganizePhase.SCAN)
    cards_before = models.PositiveIntegerField(null=True, blank=True)
    cards_after = models.PositiveIntegerField(null=True, blank=True)
    compression_ratio = models.FloatField(null=True, blank=True)
    tokens_used = models.PositiveIntegerField(default=0)
    headroom_at_start = models.IntegerField(null=True, blank=True)
    planner = models.CharField(max_length=200, blank=True, default="")
    rejections = models.JSONField(default=dict, blank=True,
                                  help_text="{reason code: count} of rejected items.")
    error = models.TextField(blank=True, default="")
    requested_by = models.CharField(max_length=200, help_text="api_key:<prefix>, user:<username> or system")
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "owner_ref", "created_at"], name="organize_owner_idx"),
            models.Index(fields=["tenant", "trigger", "created_at"], name="organize_trigger_idx"),
        ]


class OrganizeAction(models.TextChoices):
    KEEP = "keep"
    MERGE_INTO = "merge_into"
    DELETE = "delete"
    MARK_REVIEW = "mark_review"
    REWRITE = "rewrite"


class OrganizeRisk(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class OrganizeDecision(models.TextChoices):
    APPLIED = "applied"
    QUEUED = "queued"
    DISMISSED = "dismissed"
    REJECTED = "rejected"


class OrganizeItem(TenantOwnedModel):
    """One planned change to one cluster of a run, with the gate's risk and what became of it.

    `proposed` copies card content (the merged title, content and value): a hard forget of a member
    clears it (memory.services.erasure).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(OrganizeRun, on_delete=models.CASCADE, related_name="items")
    members = ArrayField(models.UUIDField(), default=list)
    action = models.CharField(max_length=16, choices=OrganizeAction.choices)
    target_id = models.UUIDField(null=True, blank=True)
    proposed = models.JSONField(null=True, blank=True)
    planner = models.CharField(max_length=200, default="rules")
    confidence = models.FloatField(default=1.0)
    risk = models.CharField(max_length=8, choices=OrganizeRisk.choices, default=OrganizeRisk.LOW)
    risk_reasons = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    decision = models.CharField(max_length=16, choices=OrganizeDecision.choices,
                                default=OrganizeDecision.QUEUED)
    reason = models.TextField(blank=True, default="")
    result_node_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["tenant", "run", "created_at"], name="organize_item_run_idx")]
