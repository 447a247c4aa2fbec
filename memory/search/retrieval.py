"""Retrieval: `memory/search` over memory cards (`messages/search` is memory.search.messages).

Owns candidate selection (structured filters, list-all, and the keyword and vector arms of
memory.search.hybrid), fusion (memory.search.ranking), conflict resolution and limits. It reads only
what memory.visibility lets the viewer see, inside `tenant_context(viewer.tenant)`. A text search runs
both arms in one statement that returns candidate ids only; the scored cards (plus the structured
matches) are then loaded in a second query. The only write is the access-count bump, queued through
`memory.services.maintenance.node_access_queue` and applied after the commit (DESIGN rule 12).

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
- Any other query text gets the nearest cards back even when no word matches (cards keep every
  vector neighbour: ranking.CARD_FUSION), so `relevant` is empty only when no visible card has a
  vector or a matching word. `diagnostics.hits` gives each relevant card, in order, its fused
  score, the arms that found it (`foundBy`), its keyword coverage and its vector distance.
- The text arms rank active cards (and expired ones with `includeExpired`); superseded revisions are
  reported in `omitted` only by structured and list-all queries, soft-forgotten cards never.
- Candidate sets are bounded, so `omitted` reports what the bounded candidate set held.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import Case, F, IntegerField, Q, Value, When
from django.utils import timezone

from ekko_site.metrics import SEARCH_ARM_SECONDS
from memory.models import HEAVY_FIELDS, MemoryNode, NodeStatus
from memory.rules.kinds import JOURNAL_KIND
from memory.rules.queries import is_list_all_query
from memory.search.hybrid import (
    NOT_EMBEDDED,
    VECTOR_CANDIDATES,
    TextCandidates,
    TextPlan,
    search_modes,
    set_vector_search_width,
    text_candidates,
    text_plan,
)
from memory.search.ranking import CARD_FUSION, is_expired, resolve_conflicts
from memory.search.rerank import rerank_cards
from memory.selectors import category_q, key_q, value_json_q
from memory.services.maintenance import node_access_queue
from memory.visibility import Viewer, visible_nodes_q
from tenants.context import tenant_context

__all__ = [
    "SEARCH_LIMIT_DEFAULT",
    "SEARCH_LIMIT_MAX",
    "MemoryQuery",
    "Omission",
    "SearchResult",
    "search_nodes",
]

SEARCH_LIMIT_DEFAULT = 50
SEARCH_LIMIT_MAX = 200
# Structured enumeration reads a margin past `limit` so conflict losers and expired cards can still
# be reported.
STRUCTURED_MARGIN = 50
# A text search loads its best `2 * limit + TEXT_MARGIN` candidates: enough for conflict losers to be
# replaced and reported, without loading every neighbour the vector arm returned.
TEXT_MARGIN = 10


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
    # Journal cards are found only when asked for: by kind, or by the context pack's includeJournal.
    include_journal: bool = False
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


# --------------------------------------------------------------------------- search


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
    if not query.include_journal and JOURNAL_KIND not in (query.kinds or ()):
        condition &= ~Q(kind=JOURNAL_KIND)
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
    plan = TextPlan(terms=[], vector=None) if list_all else text_plan(text, query_embedding)

    if list_all:
        modes = ["list_all"]
    else:
        modes = (["structured"] if structured else []) + search_modes(plan)

    text_statuses = [NodeStatus.ACTIVE, NodeStatus.EXPIRED] if query.include_expired else [NodeStatus.ACTIVE]
    rows: list[MemoryNode] = []
    scores: dict[Any, float] = {}
    found: TextCandidates | None = None
    with tenant_context(viewer.tenant, savepoint=False):
        visible = MemoryNode.objects.filter(visible_nodes_q(viewer, query.scopes)).filter(
            _structured_q(query)
        )
        base = visible.exclude(status=NodeStatus.DELETED).defer(*HEAVY_FIELDS)
        enumerated = base.order_by(*_structured_order(now)) if (list_all or structured) else None
        cap = limit + STRUCTURED_MARGIN
        text_cap = 2 * limit + TEXT_MARGIN
        if plan.runs:
            set_vector_search_width(plan)
            # Every vector neighbour is a card candidate: ask for as many as the answer can use.
            found = text_candidates(base.filter(status__in=text_statuses), plan,
                                    vector_limit=min(VECTOR_CANDIDATES, text_cap), tenant_id=viewer.tenant.pk)
            scores = found.scores(CARD_FUSION)
            wanted = Q(pk__in=list(scores)[:text_cap])
            if enumerated is not None:
                wanted |= Q(pk__in=enumerated.values("pk")[:cap])
            rows = list(MemoryNode.objects.defer(*HEAVY_FIELDS).filter(wanted))
        elif enumerated is not None:
            with SEARCH_ARM_SECONDS.labels(arm="structured").time():
                rows = list(enumerated[:cap])

    pool = rows if (list_all or structured) else [row for row in rows if row.pk in scores]
    kept, dropped = resolve_conflicts(
        pool, now=now, group_by_owner=viewer.whole_tenant, include_expired=query.include_expired
    )
    scores = rerank_cards(text, scores, kept, modes)

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
    if found is not None:
        result.diagnostics["hits"] = [{"nodeId": str(node.pk), **found.explain(node.pk, scores[node.pk])}
                                      for node in result.relevant]
    if record_access:
        node_access_queue(tenant=viewer.tenant, node_ids=[node.pk for node in result.nodes])
    return result
