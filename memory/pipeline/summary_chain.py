"""The summary step of a run: the session's next summary, once enough messages have passed.

After a run's plan, `summary_next` looks at the session's main-channel messages since the chain's
latest summary; once `EKKO_SUMMARY_EVERY_MESSAGES` have passed (up to the run's last message) it
drafts the next summary from them (at most the latest 400), with the latest summary as the
previous one. `summarize` asks the chat model when one is configured and falls back to the rules
when it fails, saying so in the summary's `source`. `summary_append_next` appends the draft through
`memory.services.nodes.summary_append`, chained by `parentSummaryId`, inside the run's transaction;
a refusal becomes a warning of the run, never its failure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction

from memory.errors import MemoryServiceError
from memory.models import Channel, ExtractionRun, MemoryMessage, MemorySummary
from memory.pipeline.chat_model import LLMError, chat_client, llm_summarize
from memory.pipeline.plans import SourceMessage
from memory.pipeline.summaries import SummaryDraft, summarize_by_rules
from memory.services.summaries import summary_append
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant

__all__ = ["SummaryWork", "summarize", "summary_append_next", "summary_next"]

logger = logging.getLogger("memory.pipeline.runs")

MAX_SUMMARY_INPUT = 400


@dataclass
class SummaryWork:
    """The next summary of a session's chain, drafted and waiting to be appended."""

    draft: SummaryDraft
    source: str
    from_message_id: str
    to_message_id: str
    parent_id: UUID | None


def summarize(
    messages: Sequence[SourceMessage], *, previous: SummaryDraft | None = None
) -> tuple[SummaryDraft, str]:
    """Return the summary and its source ("llm:<model>" or "rules"); a failing model falls back to rules."""
    try:
        client = chat_client()
        if client is not None:
            return llm_summarize(client, messages=messages, previous=previous), f"llm:{client.model}"
    except LLMError as error:
        logger.warning("Summary by the chat model failed (%s); wrote the rule-based summary instead.", error)
        return summarize_by_rules(messages, previous=previous), "rules (model failed)"
    return summarize_by_rules(messages, previous=previous), "rules"


def summary_next(tenant: Tenant, run: ExtractionRun, latest: MemorySummary | None) -> SummaryWork | None:
    """Return the chain's next summary once EKKO_SUMMARY_EVERY_MESSAGES have passed, else None."""
    with tenant_context(tenant):
        pending = _pending_messages(run, latest)
    if pending is None:
        return None
    messages, from_message_id = pending
    draft, source = summarize(messages, previous=_draft_from(latest) if latest else None)
    return SummaryWork(
        draft=draft,
        source=source,
        from_message_id=from_message_id,
        to_message_id=messages[-1].message_id,
        parent_id=latest.pk if latest else None,
    )


def summary_append_next(
    *, viewer: Viewer, run: ExtractionRun, summary: SummaryWork | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """Append `summary` to the session's chain; return its report entry and the run's warnings."""
    if summary is None:
        return None, []
    data = {
        **summary.draft.as_service_data(),
        "from_message_id": summary.from_message_id,
        "to_message_id": summary.to_message_id,
        "parent_summary_id": summary.parent_id,
    }
    try:
        with transaction.atomic():
            appended = summary_append(viewer=viewer, session_id=run.session_id, data=data)
    except MemoryServiceError as error:
        logger.warning("Extraction run %s: summary not appended: %s", run.pk, error.detail)
        return None, [f"summary not appended: {error.detail}"]
    return {
        "id": str(appended.pk),
        "source": summary.source,
        "parentSummaryId": str(appended.parent_summary_id) if appended.parent_summary_id else None,
        "fromMessageId": appended.from_message_id,
        "toMessageId": appended.to_message_id,
    }, []


def _pending_messages(
    run: ExtractionRun, latest: MemorySummary | None
) -> tuple[list[SourceMessage], str] | None:
    """Return the messages since the latest summary and the first one's id, once there are enough."""
    since_pk = 0
    if latest is not None:
        since_pk = (
            MemoryMessage.objects.filter(
                tenant=run.tenant_id, workspace_id=run.workspace_id, message_id=latest.to_message_id
            )
            .values_list("pk", flat=True)
            .first()
            or 0
        )
    pending = MemoryMessage.objects.filter(
        tenant=run.tenant_id,
        workspace_id=run.workspace_id,
        session_id=run.session_id,
        channel=Channel.MAIN,
        pk__gt=since_pk,
        pk__lte=run.up_to_message_pk or 0,
    )
    if pending.count() < int(settings.EKKO_SUMMARY_EVERY_MESSAGES):
        return None
    first_id = pending.order_by("pk").values_list("message_id", flat=True).first()
    rows = list(
        pending.order_by("-pk").values("message_id", "role", "content", "created_at")[:MAX_SUMMARY_INPUT]
    )
    rows.reverse()
    messages = [
        SourceMessage(
            message_id=r["message_id"], role=r["role"], content=r["content"], created_at=r["created_at"]
        )
        for r in rows
    ]
    return messages, first_id or rows[0]["message_id"]


def _draft_from(summary: MemorySummary) -> SummaryDraft:
    return SummaryDraft(
        summary=summary.summary,
        current_goal=summary.current_goal,
        constraints=list(summary.constraints),
        preferences=list(summary.preferences),
        decisions=list(summary.decisions),
        completed_work=list(summary.completed_work),
        pending_work=list(summary.pending_work),
        known_issues=list(summary.known_issues),
    )
