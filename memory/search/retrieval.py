"""Retrieval: `memory/search` over memory cards and `messages/search` over the evidence log.

Owns candidate selection (structured filters, keyword and vector arms, list-all), fusion
(memory.search.ranking), conflict resolution and limits. It reads only what memory.visibility lets the
viewer see, inside `tenant_context(viewer.tenant)`. A text search runs both arms in one statement
that returns candidate ids only: which query terms each keyword match contains, how many of the
searched rows contain each term (the terms' BM25 weights) and each candidate's vector distance.
Card search then loads the scored cards (plus the structured matches) in a second query; message
search looks up the turns that follow its best candidates, because a reply inherits part of the
score of the turn it answers (memory.search.ranking.with_previous_turns), and loads only the winners. The
only write is the access-count bump through `memory.services.nodes.node_access_record` (DESIGN rule 12).

Semantics chosen where API.md is silent:
- `key` with a ':' is an exact canonical key; a bare slot key ("avoid_ingredient") matches the slot
  itself and every item of it ("avoid_ingredient:*").
- `valueJson` is JSON equality, case- and form-sensitive: writes store values normalised
  (memory.rules.schema.normalize_value), so callers send the normalised value. `valueJson: null` given
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
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Case, F, IntegerField, Q, QuerySet, Value, When
from django.utils import timezone

from memory.models import EMBEDDING_DIM, HEAVY_FIELDS, Channel, MemoryMessage, MemoryNode, NodeStatus
from memory.rules.queries import is_list_all_query
from memory.rules.text import query_terms, tsquery_text
from memory.search.embeddings import embed_query
from memory.search.ranking import (
    KeywordHit,
    VectorHit,
    hybrid_scores,
    is_expired,
    resolve_conflicts,
    term_weights,
    with_previous_turns,
)
from memory.selectors import category_q, key_q, value_json_q, visible_messages
from memory.services.maintenance import node_access_record
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

# (searched-rows SQL, params) -> (row count, monotonic expiry); see ROW_COUNT_REUSE_FROM.
_row_counts: dict[tuple, tuple[int, float]] = {}
_row_counts_lock = threading.Lock()

SEARCH_LIMIT_DEFAULT = 50
SEARCH_LIMIT_MAX = 200
MESSAGE_LIMIT_DEFAULT = 20
# Bounds on each arm: the keyword arm ranks at most this many matches' ids, the vector arm asks the
# HNSW index for this many neighbours, and structured enumeration reads a margin past `limit` so
# conflict losers and expired cards can still be reported.
KEYWORD_CANDIDATES = 200
# The term weights need the number of searched rows. It is counted up to ROW_COUNT_CAP (beyond it the
# weights barely move); a count of at least ROW_COUNT_REUSE_FROM rows is reused for ROW_COUNT_TTL
# seconds by later searches over the same rows, since it costs a read of every row and drifts slowly.
# Smaller sets are counted every time (cheap, and exact for tests and small workspaces).
ROW_COUNT_CAP = 10_000
ROW_COUNT_REUSE_FROM = 2_000
ROW_COUNT_TTL = 120.0
_ROW_COUNTS_MAX = 1024
VECTOR_CANDIDATES = 100
HNSW_EF_SEARCH = 100
STRUCTURED_MARGIN = 50
# Terms beyond this add little to a ranking and a lot to the per-term match count.
MAX_QUERY_TERMS = 16
# Message search lends a turn part of the score of the turn before it: the turns that follow the best
# this many candidates (or twice the limit) are looked up; a turn further down gains too little to count.
CONTEXT_CANDIDATES = 50

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


def _term_query(term: str) -> str:
    return tsquery_text([term])


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(value)) for value in vector) + "]"


@dataclass
class _TextCandidates:
    """What the text arms found: each query term's weight, and per candidate id which terms it
    contains (a bit per term) and its vector distance (None when unknown)."""

    weights: list[float]
    matched: dict[Any, int] = field(default_factory=dict)
    distance: dict[Any, float | None] = field(default_factory=dict)

    def scores(self, term_count: int) -> dict[Any, float]:
        """Fuse the arms under memory.search.ranking's rules; best first."""
        return hybrid_scores(
            keyword=[
                KeywordHit(pk, tuple(bool(mask >> index & 1) for index in range(term_count)))
                for pk, mask in self.matched.items()
                if mask
            ],
            vector=[VectorHit(pk, gap) for pk, gap in self.distance.items() if gap is not None],
            weights=self.weights,
        )


def _text_candidates(arm_base: QuerySet, plan: _TextPlan) -> _TextCandidates:
    """Run the keyword arm, the vector arm and the row count in one statement.

    Keyword arm: every row that contains a query term gets one bit per term it contains, and every
    term its document frequency among *all* those rows (window counts, taken before the limit); the
    KEYWORD_CANDIDATES rows holding the rarest terms are returned. With the searched-row count the
    frequencies give the terms' BM25 weights. Each matching row's tsvector is read once (`strip` in
    a fenced subquery): a long one lives in TOAST, and each `@@` on the raw column would fetch it
    again. Vector arm: the nearest VECTOR_CANDIDATES neighbours (HNSW) with their distances.
    """
    base_sql, base_params = (
        arm_base.order_by().values("id", "embedding", "search_vector").query.sql_with_params()
    )
    bits = [1 << index for index in range(len(plan.terms))]
    term_params = [_term_query(term) for term in plan.terms]
    mask_sql = " + ".join(f"(s.sv @@ to_tsquery('simple', %s))::int * {bit:d}" for bit in bits)
    frequencies = ", ".join(
        f"count(*) FILTER (WHERE m.mask & {bit:d} <> 0) OVER () AS df{bit:d}" for bit in bits
    )
    rarity = " + ".join(
        f"(w.mask & {bit:d} <> 0)::int::float8 / greatest(w.df{bit:d}, 1)" for bit in bits
    )
    frequency_columns = ", ".join(f"w.df{bit:d}" for bit in bits)
    nulls = ", ".join(["NULL::bigint"] * len(bits))
    vector = _vector_literal(plan.vector) if plan.vector is not None else None
    distance_sql = "t.embedding <=> %s::vector" if vector is not None else "NULL::float8"

    # ('k' | 'v' | 'n', id, mask or row count, distance, one document frequency per term); the keyword
    # rows' distances are computed after the limit (a vector may live out of line: read it only then).
    parts = [
        f"(SELECT 'k', t.id, t.mask, {distance_sql}, {frequency_columns.replace('w.', 't.')} FROM ("
        f" SELECT w.id, w.embedding, w.mask, {frequency_columns} FROM ("
        f"  SELECT m.id, m.embedding, m.mask, {frequencies} FROM ("
        f"   SELECT s.id, s.embedding, ({mask_sql}) AS mask FROM ("
        f"    SELECT b.id, b.embedding, strip(b.search_vector) AS sv FROM ({base_sql}) b"
        f"    WHERE b.search_vector @@ to_tsquery('simple', %s) OFFSET 0) s) m) w"
        f"  ORDER BY {rarity} DESC, w.id LIMIT {KEYWORD_CANDIDATES:d}) t)"
    ]
    params: list[Any] = [*([vector] if vector else []), *term_params, *base_params, tsquery_text(plan.terms)]
    if vector is not None:
        parts.append(
            f"(SELECT 'v', b.id, 0, b.embedding <=> %s::vector AS distance, {nulls} FROM ({base_sql}) b"
            f" WHERE b.embedding IS NOT NULL ORDER BY distance LIMIT {VECTOR_CANDIDATES:d})"
        )
        params += [vector, *base_params]
    count_key = (base_sql, tuple(str(param) for param in base_params))
    row_count = _reused_row_count(count_key)
    if row_count is None:
        parts.append(
            f"(SELECT 'n', NULL, count(*), NULL::float8, {nulls} FROM"
            f" (SELECT 1 FROM ({base_sql}) b LIMIT {ROW_COUNT_CAP:d}) c)"
        )
        params += base_params
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        rows = cursor.fetchall()

    document_frequencies = [0] * len(bits)
    matched: dict[Any, int] = {}
    distance: dict[Any, float | None] = {}
    for arm, pk, mask, row_distance, *row_frequencies in rows:
        if arm == "n":
            row_count = mask
            _remember_row_count(count_key, mask)
        elif arm == "k":
            matched[pk], distance[pk], document_frequencies = mask, row_distance, row_frequencies
        else:
            distance[pk] = row_distance
    return _TextCandidates(
        weights=term_weights(row_count or 0, document_frequencies), matched=matched, distance=distance
    )


def _reused_row_count(key: tuple) -> int | None:
    with _row_counts_lock:
        entry = _row_counts.get(key)
    if entry is None or entry[1] < time.monotonic():
        return None
    return entry[0]


def _remember_row_count(key: tuple, count: int) -> None:
    if count < ROW_COUNT_REUSE_FROM:
        return
    with _row_counts_lock:
        if len(_row_counts) >= _ROW_COUNTS_MAX:
            now = time.monotonic()
            stale = [k for k, (_, expiry) in _row_counts.items() if expiry < now] or list(_row_counts)[:1]
            for old_key in stale:
                del _row_counts[old_key]
        _row_counts[key] = (count, time.monotonic() + ROW_COUNT_TTL)


def _set_vector_search_width(plan: _TextPlan) -> None:
    if plan.vector is None:
        return
    # Transaction-local: the index must look at enough neighbours to fill the vector arm's cap.
    # `hnsw.iterative_scan = relaxed_order` is set per connection (settings), so a tenant filter
    # applied after the index keeps scanning instead of returning fewer rows.
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {max(HNSW_EF_SEARCH, VECTOR_CANDIDATES):d}")


# --------------------------------------------------------------------------- memory nodes


def _structured_q(query: MemoryQuery) -> Q:
    condition = Q()
    if query.domain:
        condition &= Q(domain=query.domain)
    if query.category_path_prefix:
        condition &= category_q(query.category_path_prefix)
    if query.types:
        condition &= Q(type__in=query.types)
    if query.kinds:
        condition &= Q(kind__in=query.kinds)
    if query.key:
        condition &= key_q(query.key)
    if query.value_json_given:
        condition &= value_json_q(query.value_json)
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
    scores: dict[Any, float] = {}
    with tenant_context(viewer.tenant):
        visible = MemoryNode.objects.filter(visible_nodes_q(viewer, query.scopes)).filter(
            _structured_q(query)
        )
        base = visible.exclude(status=NodeStatus.DELETED).defer(*HEAVY_FIELDS)
        enumerated = base.order_by(*_structured_order(now)) if (list_all or structured) else None
        cap = limit + STRUCTURED_MARGIN
        if plan.runs:
            _set_vector_search_width(plan)
            found = _text_candidates(base.filter(status__in=text_statuses), plan)
            scores = found.scores(len(plan.terms))
            wanted = Q(pk__in=list(scores))
            if enumerated is not None:
                wanted |= Q(pk__in=enumerated.values("pk")[:cap])
            rows = list(MemoryNode.objects.defer(*HEAVY_FIELDS).filter(wanted))
        elif enumerated is not None:
            rows = list(enumerated[:cap])

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

    Hybrid keyword + vector search with the same fusion as memory cards, plus conversation context: a
    turn inherits part of the score of the turn before it in its session, so the reply to a matching
    question ranks too. `session_id` narrows to one conversation; sub-agent traffic only with
    `include_subagent` (seed 004). Scores are comparable within one answer only.
    """
    limit = max(1, min(int(limit), SEARCH_LIMIT_MAX))
    plan = _text_plan(query_text, query_embedding)
    diagnostics: dict[str, Any] = {"storeStatus": "ok", "searchModes": _search_modes(plan)}
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
        _set_vector_search_width(plan)
        scores = _text_candidates(base, plan).scores(len(plan.terms))
        best = list(scores)[: max(CONTEXT_CANDIDATES, 2 * limit)]
        scores = with_previous_turns(scores, _previous_turns(base, best))
        winners = list(scores)[:limit]
        rows = MemoryMessage.objects.defer(*HEAVY_FIELDS).filter(pk__in=winners)
        hits = sorted(rows, key=lambda row: (-scores[row.pk], -row.created_at.timestamp(), row.pk))
    return [(row, scores[row.pk]) for row in hits], diagnostics


def _previous_turns(base: QuerySet, message_pks: list[int]) -> dict[int, int]:
    """Return {turn that follows: message} for the given messages (same session, by time then id)."""
    if not message_pks:
        return {}
    base_sql, base_params = base.order_by().values("id", "session_id", "created_at").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.id, (SELECT b.id FROM ({base_sql}) b WHERE b.session_id = c.session_id"
            f" AND (b.created_at, b.id) > (c.created_at, c.id) ORDER BY b.created_at, b.id LIMIT 1)"
            f" FROM {MemoryMessage._meta.db_table} c WHERE c.id = ANY(%s)",
            [*base_params, list(message_pks)],
        )
        return {following: pk for pk, following in cursor.fetchall() if following is not None}
