"""Retrieval: `memory/search` over memory cards and `messages/search` over the evidence log.

Owns candidate selection (structured filters, keyword and vector arms, list-all), fusion
(memory.ranking), conflict resolution and limits. It reads only what memory.visibility lets the
viewer see, inside `tenant_context(viewer.tenant)`, in one data query per search: the arms are id
subqueries joined under one outer select that also computes each candidate's keyword rank, matched
terms and vector distance. The only write is the access-count bump through
`memory.services.node_access_record` (DESIGN rule 12).

Semantics chosen where API.md is silent:
- `key` with a ':' is an exact canonical key; a bare slot key ("avoid_ingredient") matches the slot
  itself and every item of it ("avoid_ingredient:*").
- `valueJson` is JSON equality, case- and form-sensitive: writes store values normalised
  (memory.schema.normalize_value), so callers send the normalised value. `valueJson: null` given
  explicitly matches nodes without a value.
- `tags` and `entities` match when a node has any of the given values (array overlap).
- `categoryPathPrefix` matches whole path segments: ["生活技能", "做饭"] finds 生活技能/做饭 and
  生活技能/做饭/…, never 生活技能/做饭器具.
- Structured fields only: `exact` holds the matches (importance, confidence, recency). `queryText`
  only: `relevant` holds the fused ranking. Both: the structured fields filter every arm; `exact`
  holds all structured matches with the text hits first, `relevant` the text hits among them (the
  same nodes, ranked by relevance). `all`, a list-all phrase, or a query with neither structured
  fields nor text enumerates every visible node (`listAll: true`).
- A query text made only of stop words has no topic: neither text arm runs and nothing is relevant.
- The text arms rank active cards (and expired ones with `includeExpired`); superseded revisions are
  reported in `omitted` only by structured and list-all queries, soft-forgotten cards never.
- Candidate sets are bounded, so `omitted` reports what the bounded candidate set held.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection
from django.db.models import Case, F, IntegerField, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone
from pgvector.django import CosineDistance

from memory.embeddings import embed_query
from memory.models import EMBEDDING_DIM, Channel, MemoryMessage, MemoryNode, NodeStatus
from memory.ranking import KeywordHit, VectorHit, hybrid_scores, is_expired, resolve_conflicts
from memory.schema import is_list_all_query
from memory.services import node_access_record
from memory.text import query_terms, tsquery_text
from memory.visibility import Viewer, visible_nodes_q
from tenants.context import tenant_context

__all__ = [
    "SEARCH_LIMIT_DEFAULT",
    "SEARCH_LIMIT_MAX",
    "MemoryQuery",
    "Omission",
    "SearchResult",
    "search_messages",
    "search_nodes",
]

logger = logging.getLogger(__name__)

SEARCH_LIMIT_DEFAULT = 50
SEARCH_LIMIT_MAX = 200
MESSAGE_LIMIT_DEFAULT = 20
# Bounds on each arm: the keyword arm ranks at most this many matches' ids, the vector arm asks the
# HNSW index for this many neighbours, and structured enumeration reads a margin past `limit` so
# conflict losers and expired cards can still be reported.
KEYWORD_CANDIDATES = 200
VECTOR_CANDIDATES = 100
HNSW_EF_SEARCH = 100
STRUCTURED_MARGIN = 50
# Terms beyond this add little to a ranking and a lot to the per-term match count.
MAX_QUERY_TERMS = 16

NODE_DEFERRED_FIELDS = ("embedding", "search_vector", "search_text")
MESSAGE_DEFERRED_FIELDS = ("embedding", "search_vector", "search_text")

# Passed as `query_embedding` when the caller has not embedded the query (None means "no vector").
NOT_EMBEDDED: Any = object()


@dataclass
class MemoryQuery:
    """API.md's MemoryQuery body, resolved: the viewer already carries user, workspace and session."""

    scopes: list[str] | None = None
    domain: str | None = None
    category_path_prefix: list[str] | None = None
    types: list[str] | None = None
    kinds: list[str] | None = None
    key: str | None = None
    value_json: Any = None
    value_json_given: bool = False
    tags: list[str] | None = None
    entities: list[str] | None = None
    query_text: str | None = None
    include_expired: bool = False
    all: bool = False
    limit: int = SEARCH_LIMIT_DEFAULT

    @property
    def effective_limit(self) -> int:
        return max(1, min(int(self.limit), SEARCH_LIMIT_MAX))

    @property
    def has_structured_filters(self) -> bool:
        return bool(
            self.scopes
            or self.domain
            or self.category_path_prefix
            or self.types
            or self.kinds
            or self.key
            or self.value_json_given
            or self.tags
            or self.entities
        )


@dataclass(frozen=True)
class Omission:
    node_id: UUID
    reason: str  # expired | superseded | low_confidence | conflict_lost | over_limit


@dataclass
class SearchResult:
    exact: list[MemoryNode] = field(default_factory=list)
    relevant: list[MemoryNode] = field(default_factory=list)
    omitted: list[Omission] = field(default_factory=list)
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def nodes(self) -> list[MemoryNode]:
        """Return the distinct returned nodes, exact first."""
        seen: dict[UUID, MemoryNode] = {}
        for node in (*self.exact, *self.relevant):
            seen.setdefault(node.pk, node)
        return list(seen.values())


# --------------------------------------------------------------------------- text arms


@dataclass(frozen=True)
class _TextPlan:
    terms: list[str]
    vector: list[float] | None

    @property
    def runs(self) -> bool:
        return bool(self.terms)


def _text_plan(text: str | None, query_embedding: Any) -> _TextPlan:
    terms = query_terms(text or "")[:MAX_QUERY_TERMS]
    if not terms:
        return _TextPlan(terms=[], vector=None)
    vector = embed_query(text or "") if query_embedding is NOT_EMBEDDED else query_embedding
    if vector is not None and len(vector) != EMBEDDING_DIM:
        logger.warning(
            "Query embedding has %d dimensions but the vector columns have %d; searching by keywords only. "
            "Set EKKO_EMBEDDING_DIM to the provider's size and re-embed.",
            len(vector),
            EMBEDDING_DIM,
        )
        vector = None
    return _TextPlan(terms=terms, vector=list(vector) if vector is not None else None)


def _search_modes(plan: _TextPlan) -> list[str]:
    modes = []
    if plan.runs:
        modes.append("keyword")
        if plan.vector is not None:
            modes.append("vector")
    return modes


def _hybrid_candidates(
    rows: QuerySet, arm_base: QuerySet, plan: _TextPlan, *, extra_ids: QuerySet | None = None
) -> QuerySet:
    """Return `rows` narrowed to every candidate of the keyword arm, the vector arm and `extra_ids`,
    annotated with `keyword_rank`, `keyword_terms` and (with a vector) `vector_distance`.

    The arms are id subqueries under one `pk IN (… UNION ALL …)`, so the outer select reads only the
    candidates, by primary key, in the same round trip.
    """
    tsquery = SearchQuery(tsquery_text(plan.terms), search_type="raw", config="simple")
    keyword_ids = (
        arm_base.filter(search_vector=tsquery)
        .order_by(SearchRank(F("search_vector"), tsquery, cover_density=True).desc())
        .values("pk")[:KEYWORD_CANDIDATES]
    )
    id_parts = [keyword_ids]
    if plan.vector is not None:
        id_parts.append(
            arm_base.filter(embedding__isnull=False)
            .order_by(CosineDistance("embedding", plan.vector))
            .values("pk")[:VECTOR_CANDIDATES]
        )
    if extra_ids is not None:
        id_parts.append(extra_ids)
    ids = id_parts[0].union(*id_parts[1:], all=True) if len(id_parts) > 1 else id_parts[0]
    # One indicator per term, so fusion can tell a card that matches the whole query from one that
    # shares a single common word with it.
    term_hits = " + ".join(["(search_vector @@ to_tsquery('simple', %s))::int"] * len(plan.terms))
    candidates = rows.filter(pk__in=ids).annotate(
        keyword_rank=SearchRank(F("search_vector"), tsquery, cover_density=True),
        keyword_terms=RawSQL(
            f"({term_hits})", [tsquery_text([term]) for term in plan.terms], output_field=IntegerField()
        ),
    )
    if plan.vector is not None:
        candidates = candidates.annotate(vector_distance=CosineDistance("embedding", plan.vector))
    return candidates


def _set_vector_search_width(plan: _TextPlan) -> None:
    if plan.vector is None:
        return
    # Transaction-local: the index must look at enough neighbours to fill the vector arm's cap.
    # `hnsw.iterative_scan = relaxed_order` is set per connection (settings), so a tenant filter
    # applied after the index keeps scanning instead of returning fewer rows.
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {max(HNSW_EF_SEARCH, VECTOR_CANDIDATES):d}")


def _fused_scores(rows: Sequence[Any], plan: _TextPlan) -> dict[Any, float]:
    if not plan.runs:
        return {}
    return hybrid_scores(
        keyword=[KeywordHit(row.pk, row.keyword_rank or 0.0, row.keyword_terms or 0) for row in rows],
        vector=[
            VectorHit(row.pk, row.vector_distance)
            for row in rows
            if getattr(row, "vector_distance", None) is not None
        ],
        term_count=len(plan.terms),
    )


# --------------------------------------------------------------------------- memory nodes


def _structured_q(query: MemoryQuery) -> Q:
    condition = Q()
    if query.domain:
        condition &= Q(domain=query.domain)
    if query.category_path_prefix:
        prefix = "/".join(query.category_path_prefix)
        condition &= Q(category_path_text=prefix) | Q(category_path_text__startswith=prefix + "/")
    if query.types:
        condition &= Q(type__in=query.types)
    if query.kinds:
        condition &= Q(kind__in=query.kinds)
    if query.key:
        if ":" in query.key:
            condition &= Q(key=query.key)
        else:
            condition &= Q(key=query.key) | Q(key__startswith=query.key + ":")
    if query.value_json_given:
        if query.value_json is None:
            condition &= Q(value_json__isnull=True) | Q(value_json=None)
        else:
            condition &= Q(value_json=query.value_json)
    if query.tags:
        condition &= Q(tags__overlap=list(query.tags))
    if query.entities:
        condition &= Q(entities__overlap=list(query.entities))
    return condition


def _structured_order(now: datetime) -> list[Any]:
    current = Q(status=NodeStatus.ACTIVE) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    return [
        Case(When(current, then=Value(0)), default=Value(1), output_field=IntegerField()),
        F("importance").desc(),
        F("confidence").desc(),
        F("updated_at").desc(),
        F("id"),
    ]


def _structured_sort_key(node: MemoryNode, now: datetime) -> tuple:
    return (
        is_expired(node, now),
        -node.importance,
        -node.confidence,
        -node.updated_at.timestamp(),
        str(node.pk),
    )


def search_nodes(
    *,
    viewer: Viewer,
    query: MemoryQuery,
    now: datetime | None = None,
    record_access: bool = True,
    query_embedding: Any = NOT_EMBEDDED,
) -> SearchResult:
    """Return the viewer's memory cards for `query`: exact matches, relevant ones, and what was left out.

    `query_embedding` lets a caller that already embedded the text (the context pack) pass the vector
    (or None for keywords only); `record_access=False` leaves the access bump to that caller.
    """
    now = now or timezone.now()
    limit = query.effective_limit
    structured = query.has_structured_filters
    text = (query.query_text or "").strip()
    list_all = query.all or is_list_all_query(text) or (not structured and not text)
    plan = _TextPlan(terms=[], vector=None) if list_all else _text_plan(text, query_embedding)

    if list_all:
        modes = ["list_all"]
    else:
        modes = (["structured"] if structured else []) + _search_modes(plan)

    text_statuses = [NodeStatus.ACTIVE, NodeStatus.EXPIRED] if query.include_expired else [NodeStatus.ACTIVE]
    rows: list[MemoryNode] = []
    with tenant_context(viewer.tenant):
        visible = MemoryNode.objects.filter(visible_nodes_q(viewer, query.scopes)).filter(
            _structured_q(query)
        )
        base = visible.exclude(status=NodeStatus.DELETED).defer(*NODE_DEFERRED_FIELDS)
        enumerated = base.order_by(*_structured_order(now)) if (list_all or structured) else None
        cap = limit + STRUCTURED_MARGIN
        if plan.runs:
            _set_vector_search_width(plan)
            extra = enumerated.values("pk")[:cap] if enumerated is not None else None
            candidates = MemoryNode.objects.defer(*NODE_DEFERRED_FIELDS)
            arm_base = base.filter(status__in=text_statuses)
            rows = list(_hybrid_candidates(candidates, arm_base, plan, extra_ids=extra))
        elif enumerated is not None:
            rows = list(enumerated[:cap])

    scores = _fused_scores(rows, plan)
    pool = rows if (list_all or structured) else [row for row in rows if row.pk in scores]
    kept, dropped = resolve_conflicts(
        pool, now=now, group_by_owner=viewer.whole_tenant, include_expired=query.include_expired
    )

    def relevance_key(node: MemoryNode) -> tuple:
        return (-scores.get(node.pk, 0.0), *_structured_sort_key(node, now))

    hits = sorted((node for node in kept if node.pk in scores), key=relevance_key)
    if list_all or structured:
        ordered = sorted(kept, key=relevance_key)  # text hits first; the rest by importance etc.
        exact = ordered[:limit]
        returned_ids = {node.pk for node in exact}
        relevant = [node for node in hits if node.pk in returned_ids]
        over = ordered[limit:]
    else:
        exact, relevant, over = [], hits[:limit], hits[limit:]

    omitted = [Omission(node_id, reason) for node_id, reason in dropped]
    omitted += [Omission(node.pk, "over_limit") for node in over]
    result = SearchResult(exact=exact, relevant=relevant, omitted=omitted)
    result.diagnostics = {
        "storeStatus": "ok",
        "retrievedNodeCount": len(result.nodes),
        "omittedNodeCount": len(omitted),
        "listAll": list_all,
        "searchModes": modes,
    }
    if record_access:
        node_access_record(tenant=viewer.tenant, node_ids=[node.pk for node in result.nodes])
    return result


# --------------------------------------------------------------------------- messages


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

    Hybrid keyword + vector search with the same fusion as memory cards; `session_id` narrows to one
    conversation; sub-agent traffic only with `include_subagent` (seed 004). Scores are fused
    rank-fusion scores: comparable within one answer only.
    """
    limit = max(1, min(int(limit), SEARCH_LIMIT_MAX))
    plan = _text_plan(query_text, query_embedding)
    diagnostics: dict[str, Any] = {"storeStatus": "ok", "searchModes": _search_modes(plan)}
    if not plan.runs:
        return [], diagnostics
    with tenant_context(viewer.tenant):
        base = MemoryMessage.objects.filter(tenant=viewer.tenant, workspace=viewer.workspace)
        if session_id is not None:
            base = base.filter(session_id=session_id)
        if not include_subagent:
            base = base.filter(channel=Channel.MAIN)
        if exclude_message_ids:
            base = base.exclude(message_id__in=list(exclude_message_ids))
        _set_vector_search_width(plan)
        rows = list(_hybrid_candidates(MemoryMessage.objects.defer(*MESSAGE_DEFERRED_FIELDS), base, plan))
    scores = _fused_scores(rows, plan)
    hits = sorted(
        (row for row in rows if row.pk in scores),
        key=lambda row: (-scores[row.pk], -row.created_at.timestamp(), row.pk),
    )
    return [(row, scores[row.pk]) for row in hits[:limit]], diagnostics
