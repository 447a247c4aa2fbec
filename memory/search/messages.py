"""`messages/search`: the evidence messages most relevant to a query, with conversation context.

Runs the text arms of memory.search.hybrid over the messages the viewer may read
(memory.selectors.visible_messages), lends each turn a share of the score of the turn before it (a
reply often carries the answer to what the turn before it asked: ranking.with_previous_turns) and
loads only the winners. Reads only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from memory.models import HEAVY_FIELDS, Channel, MemoryMessage
from memory.search.hybrid import (
    NOT_EMBEDDED,
    queryset_sql,
    search_modes,
    set_vector_search_width,
    text_candidates,
    text_plan,
)
from memory.search.ranking import MESSAGE_FUSION, with_previous_turns
from memory.search.rerank import rerank_messages
from memory.search.retrieval import SEARCH_LIMIT_MAX
from memory.selectors import visible_messages
from memory.visibility import Viewer
from tenants.context import tenant_context

MESSAGE_LIMIT_DEFAULT = 20
# Message search lends a turn part of the score of the turn before it: the turns that follow the best
# this many candidates (or twice the limit) are looked up; a turn further down gains too little to count.
CONTEXT_CANDIDATES = 50


def search_messages(
    *,
    viewer: Viewer,
    query_text: str,
    session_id: str | None = None,
    include_subagent: bool = False,
    limit: int = MESSAGE_LIMIT_DEFAULT,
    exclude_message_ids: Sequence[str] = (),
    query_embedding: Any = NOT_EMBEDDED,
) -> tuple[list[tuple[MemoryMessage, float]], dict[str, Any]]:
    """Return the evidence messages of the viewer's workspace most relevant to `query_text`, best first.

    Hybrid keyword + vector search with the same fusion as memory cards, plus conversation context: a
    turn inherits part of the score of the turn before it in its session, so the reply to a matching
    question ranks too. `session_id` narrows to one conversation; sub-agent traffic only with
    `include_subagent` (seed 004). Scores are comparable within one answer only.
    """
    limit = max(1, min(int(limit), SEARCH_LIMIT_MAX))
    plan = text_plan(query_text, query_embedding)
    diagnostics: dict[str, Any] = {"storeStatus": "ok", "searchModes": search_modes(plan)}
    if not plan.runs:
        return [], diagnostics
    with tenant_context(viewer.tenant):
        base = visible_messages(viewer)
        if session_id is not None:
            base = base.filter(session_id=session_id)
        if not include_subagent:
            base = base.filter(channel=Channel.MAIN)
        if exclude_message_ids:
            base = base.exclude(message_id__in=list(exclude_message_ids))
        set_vector_search_width(plan)
        scores = text_candidates(base, plan, tenant_id=viewer.tenant.pk).scores(MESSAGE_FUSION)
        best = list(scores)[: max(CONTEXT_CANDIDATES, 2 * limit)]
        scores = with_previous_turns(scores, _previous_turns(base, best))
        scores = rerank_messages(query_text, scores, diagnostics["searchModes"])
        winners = list(scores)[:limit]
        rows = MemoryMessage.objects.defer(*HEAVY_FIELDS).filter(pk__in=winners)
        hits = sorted(rows, key=lambda row: (-scores[row.pk], -row.created_at.timestamp(), row.pk))
    return [(row, scores[row.pk]) for row in hits], diagnostics


def _previous_turns(base: QuerySet, message_pks: list[int]) -> dict[int, int]:
    """Return {turn that follows: message} for the given messages (same session, by time then id)."""
    if not message_pks:
        return {}
    sql = queryset_sql(base, "id", "session_id", "created_at")
    if sql is None:
        return {}
    base_sql, base_params = sql
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.id, (SELECT b.id FROM ({base_sql}) b WHERE b.session_id = c.session_id"
            f" AND (b.created_at, b.id) > (c.created_at, c.id) ORDER BY b.created_at, b.id LIMIT 1)"
            f" FROM {MemoryMessage._meta.db_table} c WHERE c.id = ANY(%s)",
            [*base_params, list(message_pks)],
        )
        return {following: pk for pk, following in cursor.fetchall() if following is not None}
