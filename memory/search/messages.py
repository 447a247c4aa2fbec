"""`messages/search`: the evidence messages most relevant to a query, with conversation context.

Runs the text arms of memory.search.hybrid over the messages the viewer may read
(memory.selectors.visible_messages), looks up where the best candidates sit in their conversations
(one statement: each one's session, whether it asks a question, and the reply to each of the best
questions), reorders them under memory.search.conversation's rules (questions ask, replies answer,
sessions cluster), hands them to the optional reranker (memory.search.rerank) and loads only the winners.
Reads only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from memory.models import HEAVY_FIELDS, Channel, MemoryMessage
from memory.search.conversation import QUESTION_END_PATTERN, QUESTION_TAIL_CHARS, Lender, conversation_scores
from memory.search.hybrid import (
    NOT_EMBEDDED,
    queryset_sql,
    search_modes,
    set_vector_search_width,
    text_candidates,
    text_plan,
)
from memory.search.ranking import MESSAGE_FUSION
from memory.search.rerank import rerank_messages
from memory.search.retrieval import SEARCH_LIMIT_MAX
from memory.selectors import visible_messages
from memory.visibility import Viewer
from tenants.context import tenant_context

MESSAGE_LIMIT_DEFAULT = 20
# Conversation context reorders the best this many candidates of the fused ranking (or twice the
# limit); one further down stays out. On LoCoMo dev, reordering all (~240) bought 0.3 points of R@10
# and cost 0.9 ms of the context statement.
RANKED_CANDIDATES = 100
# The best this many candidates (or twice the limit) lend: a question to its reply, every one to its
# session's strength; a turn further down lends too little to count.
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

    Hybrid keyword + vector search (ranking.MESSAGE_FUSION), plus conversation context
    (memory.search.conversation): a question ranks below a statement as relevant, the reply to a
    matching question gains part of its score and comes back even when it shares no word with the
    query, and a turn gains part of its session's best scores. `session_id` narrows to one
    conversation; sub-agent traffic only with `include_subagent` (seed 004). Scores are comparable
    within one answer only.
    """
    limit = max(1, min(int(limit), SEARCH_LIMIT_MAX))
    plan = text_plan(query_text, query_embedding)
    diagnostics: dict[str, Any] = {"storeStatus": "ok", "searchModes": search_modes(plan)}
    if not plan.runs:
        return [], diagnostics
    with tenant_context(viewer.tenant, savepoint=False):
        base = visible_messages(viewer)
        if session_id is not None:
            base = base.filter(session_id=session_id)
        if not include_subagent:
            base = base.filter(channel=Channel.MAIN)
        if exclude_message_ids:
            base = base.exclude(message_id__in=list(exclude_message_ids))
        set_vector_search_width(plan)
        fused = text_candidates(base, plan, tenant_id=viewer.tenant.pk).scores(MESSAGE_FUSION)
        ranked = list(fused)[: max(RANKED_CANDIDATES, 2 * limit)]
        turns = _turns(base, viewer.tenant.pk, ranked, ranked[: max(CONTEXT_CANDIDATES, 2 * limit)])
        scores = conversation_scores(
            {pk: fused[pk] for pk in ranked},
            lenders=turns.lenders,
            sessions=turns.sessions,
            questions=turns.questions,
        )
        scores = rerank_messages(query_text, scores, diagnostics["searchModes"])
        winners = list(scores)[:limit]
        rows = MemoryMessage.objects.defer(*HEAVY_FIELDS).filter(pk__in=winners)
        hits = sorted(rows, key=lambda row: (-scores[row.pk], -row.created_at.timestamp(), row.pk))
    return [(row, scores[row.pk]) for row in hits], diagnostics


@dataclass
class _Turns:
    """Where the candidates sit: each one's session, which ones ask, and the lenders (with the reply
    to each lending question)."""

    sessions: dict[int, str]
    questions: set[int]
    lenders: dict[int, Lender]


def _turns(base: QuerySet, tenant_id: int, candidate_pks: list[int], lender_pks: list[int]) -> _Turns:
    """Return the candidates' sessions and questions, and the turn after each lending question (same
    session among `base`, ordered by time then id), in one statement."""
    turns = _Turns(sessions={}, questions=set(), lenders={})
    sql = queryset_sql(base, "id", "session_id", "created_at")
    if not candidate_pks or sql is None:
        return turns
    base_sql, base_params = sql
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT q.id, q.session_id, q.asks, CASE WHEN q.asks AND q.id = ANY(%s) THEN ("
            f"  SELECT b.id FROM ({base_sql}) b WHERE b.session_id = q.session_id"
            f"  AND (b.created_at, b.id) > (q.created_at, q.id) ORDER BY b.created_at, b.id LIMIT 1) END"
            f" FROM (SELECT c.id, c.session_id, c.created_at,"
            f"  right(c.content, {QUESTION_TAIL_CHARS:d}) ~ %s AS asks"
            f"  FROM {MemoryMessage._meta.db_table} c WHERE c.tenant_id = %s AND c.id = ANY(%s)) q",
            [lender_pks, *base_params, QUESTION_END_PATTERN, tenant_id, candidate_pks],
        )
        rows = cursor.fetchall()
    wanted = set(lender_pks)
    lending: dict[int, Lender] = {}
    for pk, session, asks, reply in rows:
        turns.sessions[pk] = session
        if asks:
            turns.questions.add(pk)
        if pk in wanted:
            lending[pk] = Lender(session=session, reply=reply)
    turns.lenders = {pk: lending[pk] for pk in lender_pks if pk in lending}  # best first: stable ties
    return turns
