"""The text arms shared by card search and message search: keyword and vector candidates in one statement.

A text search plans its query terms and vector once (`text_plan`), then `text_candidates` runs both
arms over a base queryset (whatever the caller may see) in one SQL statement that returns candidate
ids only: which query terms each keyword match contains, how many of the searched rows contain each
term (the terms' BM25 weights) and each candidate's vector distance. `TextCandidates.scores` fuses
them under memory.search.ranking's rules. Callers (memory.search.retrieval for cards,
memory.search.messages for evidence) load the rows they keep. Reads only; no ORM writes.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import QuerySet

from ekko_site.metrics import SEARCH_ARM_SECONDS
from memory.models import EMBEDDING_DIM, MemoryMessage, SearchTable, vector_text
from memory.rules.text import query_terms
from memory.search.embeddings import embed_query
from memory.search.keyword_arm import capped_part, capped_plan, exact_part, term_stats
from memory.search.ranking import Fusion, KeywordHit, VectorHit, hybrid_scores, keyword_coverage, term_weights

logger = logging.getLogger(__name__)

# (searched-rows SQL, params) -> (row count, monotonic expiry); see ROW_COUNT_REUSE_FROM.
_row_counts: dict[tuple, tuple[int, float]] = {}
_row_counts_lock = threading.Lock()
# (tenant id, searched table) of the tenants whose searched sets were once counted as big, per process.
_big_tenants: set[tuple[int, str]] = set()

# The vector arm asks the HNSW index for at most this many neighbours (the keyword arm's bounds are
# memory.search.keyword_arm's).
# The term weights need the number of searched rows: a tenant once seen big that has term statistics
# takes it from them; any other set is counted up to ROW_COUNT_CAP, and a count of at least
# ROW_COUNT_REUSE_FROM rows is reused for ROW_COUNT_TTL seconds by later searches over the same rows,
# since it costs a read of every row and drifts slowly. Smaller sets are counted every time (cheap,
# and exact for tests and small workspaces).
ROW_COUNT_CAP = 10_000
ROW_COUNT_REUSE_FROM = 2_000
ROW_COUNT_TTL = 120.0
_ROW_COUNTS_MAX = 1024
VECTOR_CANDIDATES = 100
HNSW_EF_SEARCH = 100
# Terms beyond this add little to a ranking and a lot to the per-term match count.
MAX_QUERY_TERMS = 16

# Passed as `query_embedding` when the caller has not embedded the query (None means "no vector").
NOT_EMBEDDED: Any = object()


def queryset_sql(queryset: QuerySet, *fields: str) -> tuple[str, tuple] | None:
    """Return the SQL and params selecting `fields` of `queryset`, or None when it can match nothing."""
    try:
        return queryset.order_by().values(*fields).query.sql_with_params()
    except EmptyResultSet:  # e.g. a viewer asking for scopes it cannot see (`pk__in=[]`)
        return None


@dataclass(frozen=True)
class TextPlan:
    """A query's terms (at most MAX_QUERY_TERMS) and vector; without terms no text arm runs."""

    terms: list[str]
    vector: list[float] | None

    @property
    def runs(self) -> bool:
        return bool(self.terms)


def text_plan(text: str | None, query_embedding: Any) -> TextPlan:
    """Return the plan of `text`: its query terms, and its vector (embedded here when given NOT_EMBEDDED)."""
    terms = query_terms(text or "")[:MAX_QUERY_TERMS]
    if not terms:
        return TextPlan(terms=[], vector=None)
    if query_embedding is NOT_EMBEDDED:
        with SEARCH_ARM_SECONDS.labels(arm="query_embedding").time():
            vector = embed_query(text or "")
    else:
        vector = query_embedding
    if vector is not None and len(vector) != EMBEDDING_DIM:
        logger.warning(
            "Query embedding has %d dimensions but the vector columns have %d; searching by keywords only. "
            "Set EKKO_EMBEDDING_DIM to the provider's size and re-embed.",
            len(vector),
            EMBEDDING_DIM,
        )
        vector = None
    return TextPlan(terms=terms, vector=list(vector) if vector is not None else None)


def search_modes(plan: TextPlan) -> list[str]:
    """Return the diagnostics' `searchModes` of a plan: "keyword", and "vector" when it has a vector."""
    modes = []
    if plan.runs:
        modes.append("keyword")
        if plan.vector is not None:
            modes.append("vector")
    return modes


@dataclass
class TextCandidates:
    """What the text arms found: each query term's weight, and per candidate id which terms it
    contains (a bit per term), its vector distance (None when unknown) and whether the vector arm
    returned it (a keyword hit's distance is measured too, but the vector arm did not find it)."""

    weights: list[float]
    matched: dict[Any, int] = field(default_factory=dict)
    distance: dict[Any, float | None] = field(default_factory=dict)
    vector_found: set[Any] = field(default_factory=set)

    def _matched_terms(self, pk: Any) -> tuple[bool, ...]:
        mask = self.matched.get(pk, 0)
        return tuple(bool(mask >> index & 1) for index in range(len(self.weights)))

    def scores(self, fusion: Fusion) -> dict[Any, float]:
        """Fuse the arms under `fusion` (memory.search.ranking); best first."""
        return hybrid_scores(
            keyword=[KeywordHit(pk, self._matched_terms(pk)) for pk, mask in self.matched.items() if mask],
            vector=[VectorHit(pk, gap) for pk, gap in self.distance.items() if gap is not None],
            weights=self.weights,
            fusion=fusion,
        )

    def explain(self, pk: Any, score: float) -> dict[str, Any]:
        """Return the diagnostics of one hit: its score, the arms that found it and what each measured."""
        found_by = ["keyword"] if self.matched.get(pk) else []
        found_by += ["vector"] if pk in self.vector_found else []
        distance = self.distance.get(pk)
        coverage = keyword_coverage(self._matched_terms(pk), self.weights) if self.matched.get(pk) else None
        return {
            "score": round(score, 6),
            "foundBy": found_by,
            "keywordCoverage": None if coverage is None else round(coverage, 6),
            "vectorDistance": None if distance is None else round(float(distance), 6),
        }


def text_candidates(
    arm_base: QuerySet, plan: TextPlan, *, vector_limit: int = VECTOR_CANDIDATES, tenant_id: int | None = None
) -> TextCandidates:
    """Run the keyword arm, the vector arm and (when not reused) the row count in one statement.

    Keyword arm (memory.search.keyword_arm): the KEYWORD_CANDIDATES rows holding the rarest query
    terms, a bit per term each holds, and every term's document frequency, which with the searched-row
    count give the terms' BM25 weights. A search in a tenant once seen big that has term statistics
    takes its frequencies and row count from them and reads only the rarest terms' rows; any other set
    counts them exactly over every matching row. Vector arm: the
    nearest `vector_limit` neighbours (HNSW; a big tenant's own index, memory.tenant_indexes) with their
    distances.
    """
    base = queryset_sql(arm_base, "id", "embedding", "search_vector")
    if base is None:
        return TextCandidates(weights=[0.0] * len(plan.terms))
    base_sql, base_params = base
    terms = plan.terms
    nulls = ", ".join(["NULL::bigint"] * len(terms))
    vector = vector_text(plan.vector) if plan.vector is not None else None
    distance_sql = "t.embedding <=> %s::vector" if vector is not None else "NULL::float8"
    distance_params = [vector] if vector is not None else []

    source = SearchTable.MESSAGE if arm_base.model is MemoryMessage else SearchTable.NODE
    count_key = (base_sql, tuple(str(param) for param in base_params))
    row_count, fresh = _known_row_count(count_key)
    # A tenant once seen big (any of its searched sets counted at ROW_COUNT_REUSE_FROM rows or more)
    # weighs terms by its statistics, when it has them, and needs no count of the rows: a viewer's new
    # set (a new session) does not read every matching row first.
    big = tenant_id is not None and (
        (row_count is not None and row_count >= ROW_COUNT_REUSE_FROM) or (tenant_id, source) in _big_tenants)
    stats = term_stats(tenant_id, source) if big else None
    fresh = fresh or stats is not None
    prefix, params = "", []
    if stats is not None:
        capped = capped_plan(terms, stats)
        keyword_sql, keyword_params, prefix, params = capped_part(
            base_sql, base_params, terms, capped, distance_sql, distance_params)
    else:
        keyword_sql, keyword_params = exact_part(base_sql, base_params, terms, distance_sql, distance_params)
    parts = [keyword_sql]
    params += keyword_params
    if vector is not None:
        parts.append(
            f"(SELECT 'v', b.id, 0, b.embedding <=> %s::vector AS distance, {nulls} FROM ({base_sql}) b"
            f" WHERE b.embedding IS NOT NULL ORDER BY distance LIMIT {max(1, int(vector_limit)):d})"
        )
        params += [vector, *base_params]
    if not fresh:
        parts.append(
            f"(SELECT 'n', NULL, count(*), NULL::float8, {nulls} FROM"
            f" (SELECT 1 FROM ({base_sql}) b LIMIT {ROW_COUNT_CAP:d}) c)"
        )
        params += base_params
    arm = "keyword" if vector is None else "keyword_vector"
    with SEARCH_ARM_SECONDS.labels(arm=arm).time(), connection.cursor() as cursor:
        cursor.execute(prefix + " UNION ALL ".join(parts), params)
        rows = cursor.fetchall()

    document_frequencies = [0] * len(terms)
    matched: dict[Any, int] = {}
    distance: dict[Any, float | None] = {}
    vector_found: set[Any] = set()
    for arm, pk, mask, row_distance, *row_frequencies in rows:
        if arm == "n":
            row_count = mask
            _remember_row_count(count_key, mask)
            if tenant_id is not None and mask >= ROW_COUNT_REUSE_FROM:
                _big_tenants.add((tenant_id, source))
        elif arm == "f":
            document_frequencies = row_frequencies
        elif arm == "k":
            matched[pk], distance[pk] = mask, row_distance
            if stats is None:
                document_frequencies = row_frequencies
        else:
            distance[pk] = row_distance
            vector_found.add(pk)
    collection = stats.collection if stats is not None else row_count or 0
    return TextCandidates(
        weights=term_weights(collection, document_frequencies), matched=matched, distance=distance,
        vector_found=vector_found,
    )


def _known_row_count(key: tuple) -> tuple[int | None, bool]:
    """Return the last row count of these searched rows (None if never counted) and whether it is fresh."""
    with _row_counts_lock:
        entry = _row_counts.get(key)
    if entry is None:
        return None, False
    return entry[0], entry[1] >= time.monotonic()


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


def set_vector_search_width(plan: TextPlan) -> None:
    """Let the HNSW index look at enough neighbours to fill the vector arm, for this transaction."""
    if plan.vector is None:
        return
    # Transaction-local: the index must look at enough neighbours to fill the vector arm's cap.
    # `hnsw.iterative_scan = relaxed_order` is set per connection (settings), so a tenant filter
    # applied after the index keeps scanning instead of returning fewer rows.
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {max(HNSW_EF_SEARCH, VECTOR_CANDIDATES):d}")
