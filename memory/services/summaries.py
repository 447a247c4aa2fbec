"""Session summaries: appended to the end of the session's chain, never changed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.errors import Invalid, NotFound, RevisionConflict
from memory.models import MemoryMessage, MemorySummary
from memory.visibility import Viewer
from tenants.context import tenant_context

SUMMARY_LIST_FIELDS = (
    "constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")


def summary_append(*, viewer: Viewer, session_id: str, data: dict[str, Any]) -> MemorySummary:
    """Append a summary to the session's chain; it links to the latest one (a stale parent → 409)."""
    with tenant_context(viewer.tenant):
        latest = (
            MemorySummary.objects.select_for_update()
            .filter(tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id)
            .order_by("-created_at").first()
        )
        parent_ref = data.get("parent_summary_id")
        if parent_ref is not None and (latest is None or str(latest.pk) != str(parent_ref)):
            if latest is None:
                raise NotFound("parentSummaryId names no summary of this session.")
            raise RevisionConflict(
                f"The session's latest summary is {latest.pk}; summaries append to the end of the chain.",
                errors={"parentSummaryId": [f"expected {latest.pk}"]},
            )
        known = set(
            MemoryMessage.objects.filter(
                tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id,
                message_id__in=[data["from_message_id"], data["to_message_id"]],
            ).values_list("message_id", flat=True)
        )
        missing = {"fromMessageId": data["from_message_id"], "toMessageId": data["to_message_id"]}
        errors = {name: ["not a message of this session"]
                  for name, value in missing.items() if value not in known}
        if errors:
            raise Invalid("fromMessageId and toMessageId must name messages of this session.", errors=errors)
        try:
            with transaction.atomic():
                return MemorySummary.objects.create(
                    tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id,
                    parent_summary=latest,
                    from_message_id=data["from_message_id"], to_message_id=data["to_message_id"],
                    summary=data["summary"], current_goal=data.get("current_goal"),
                    **{name: data.get(name) or [] for name in SUMMARY_LIST_FIELDS},
                    created_at=max(timezone.now(), latest.created_at + timedelta(microseconds=1))
                    if latest else timezone.now(),
                )
        except IntegrityError as exc:
            raise RevisionConflict(
                "Another summary was appended at the same time; fetch the latest and retry.") from exc
