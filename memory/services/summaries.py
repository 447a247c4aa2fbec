"""Session summaries: appended to the end of the session's chain, never changed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.errors import Invalid, NotFound, RevisionConflict, SensitiveContent
from memory.models import MemoryMessage, MemorySummary
from memory.rules.sensitive import find_sensitive_content
from memory.services.guards import require_capture_allowed
from memory.visibility import Viewer
from tenants.context import tenant_context

SUMMARY_LIST_FIELDS = (
    "constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")
# Every text a summary carries, by its API field name (the sensitive-content guard reads them all).
_SUMMARY_TEXT_FIELDS = {
    "summary": "summary", "current_goal": "currentGoal", "constraints": "constraints",
    "preferences": "preferences", "decisions": "decisions", "completed_work": "completedWork",
    "pending_work": "pendingWork", "known_issues": "knownIssues",
}


def _refuse_sensitive(data: dict[str, Any]) -> None:
    for name, api_name in _SUMMARY_TEXT_FIELDS.items():
        value = data.get(name)
        texts = value if isinstance(value, list | tuple) else [value]
        reason = find_sensitive_content(*(text for text in texts if isinstance(text, str)))
        if reason:
            raise SensitiveContent(
                f"Refused: the summary carries a secret or personal identifier ({reason}) in {api_name}. "
                "Leave it out of the summary.",
                errors={api_name: [reason]},
            )


def summary_append(*, viewer: Viewer, session_id: str, data: dict[str, Any]) -> MemorySummary:
    """Append a summary to the session's chain; it links to the latest one (a stale parent → 409)."""
    require_capture_allowed(viewer)
    _refuse_sensitive(data)
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
