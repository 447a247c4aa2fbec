"""Pure ranking rules: term weights, hybrid fusion and its guards and conflict precedence (DESIGN
rule 8), no database."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from memory.search.ranking import (
    CARD_FUSION,
    MESSAGE_FUSION,
    VECTOR_MAX_DISTANCE,
    KeywordHit,
    VectorHit,
    conflict_precedence_key,
    hybrid_scores,
    keyword_coverage,
    resolve_conflicts,
    term_weights,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Card:
    """Anything with a memory node's attributes is enough for the ranking rules."""

    scope: str = "user"
    status: str = "active"
    expires_at: datetime | None = None
    explicit_user_intent: bool = True
    type: str = "preference"
    kind: str = "food_avoidance"
    updated_at: datetime = NOW - timedelta(days=1)
    confidence: float = 0.9
    importance: float = 0.6
    domain: str = "生活技能"
    key: str = "avoid_ingredient:香菜"
    owner_ref: str = "user:1"
    id: uuid.UUID = field(default_factory=uuid.uuid4)


def winner(*cards: Card) -> Card:
    kept, omitted = resolve_conflicts(cards, now=NOW, group_by_owner=False, include_expired=True)
    assert len(kept) == 1, "all cards share one slot, so exactly one must win"
    assert {reason for _, reason in omitted} == {"conflict_lost"}
    return kept[0]


# --------------------------------------------------------------------------- term weights


def test_term_weights_fall_as_more_rows_contain_the_term() -> None:
    everywhere, common, rare, absent = term_weights(100, [100, 60, 2, 0])
    assert 0 < everywhere < common < rare < absent
    assert everywhere < 0.01, "a word in every row carries (almost) no weight"
    assert term_weights(0, [0]) == pytest.approx([math.log(2)])
    assert term_weights(10, [25, -1]) == term_weights(10, [10, 0]), "frequencies are clamped to [0, rows]"


def test_keyword_coverage_is_the_share_of_the_query_weight_a_row_contains() -> None:
    weights = [3.0, 1.0]
    assert keyword_coverage((True, True), weights) == pytest.approx(1.0)
    assert keyword_coverage((True, False), weights) == pytest.approx(0.75)
    assert keyword_coverage((False, True), weights) == pytest.approx(0.25)
    assert keyword_coverage((False, False), weights) == 0.0
    assert keyword_coverage((True,), [0.0]) == 0.0


# --------------------------------------------------------------------------- hybrid fusion and its guards


def test_message_fusion_drops_vector_neighbours_beyond_the_relevance_floor() -> None:
    scores = hybrid_scores(
        vector=[
            VectorHit("near", 0.3),
            VectorHit("far", VECTOR_MAX_DISTANCE + 0.01),
            VectorHit("at_floor", VECTOR_MAX_DISTANCE),
        ]
    )
    assert list(scores) == ["near"]
    assert scores["near"] == pytest.approx(MESSAGE_FUSION.vector_weight * (1 - 0.3 / VECTOR_MAX_DISTANCE))


def test_hybrid_keyword_hits_on_common_words_never_swamp_a_semantic_hit() -> None:
    # 31 rows; 30 share only the common word of a four-term query, which no other row contains. The
    # one row that means the query (distance 0.6, a middling semantic hit) shares no word with it.
    weights = term_weights(31, [30, 0, 0, 0])
    noise = [KeywordHit(f"noise{i}", (True, False, False, False)) for i in range(30)]
    scores = hybrid_scores(keyword=noise, vector=[VectorHit("semantic", 0.6)], weights=weights)
    assert list(scores)[0] == "semantic"
    assert max(scores[f"noise{i}"] for i in range(30)) < scores["semantic"] / 10
    # Plain rank fusion, which this fusion replaced, would rank the first noise row level with the
    # semantic hit: each is first in its list, so both score 1 / (k + 1).


def test_hybrid_rows_matching_in_words_and_meaning_lead() -> None:
    weights = term_weights(50, [3, 5])
    scores = hybrid_scores(
        keyword=[KeywordHit("both", (True, True)), KeywordHit("keyword_only", (True, True))],
        vector=[VectorHit("vector_only", 0.1), VectorHit("both", 0.4)],
        weights=weights,
    )
    assert list(scores) == ["both", "keyword_only", "vector_only"]
    assert scores["keyword_only"] == pytest.approx(MESSAGE_FUSION.keyword_weight)


def test_hybrid_ranks_keyword_hits_by_the_weight_of_the_terms_they_contain() -> None:
    # A rare term outweighs two common ones; a row with no term is no hit.
    weights = term_weights(100, [1, 40, 45])
    scores = hybrid_scores(
        keyword=[
            KeywordHit("two_common", (False, True, True)),
            KeywordHit("rare", (True, False, False)),
            KeywordHit("none", (False, False, False)),
        ],
        weights=weights,
    )
    assert list(scores) == ["rare", "two_common"]


def test_card_fusion_keeps_every_neighbour_so_a_paraphrase_always_finds_its_card() -> None:
    # A paraphrase shares no word with its card; its distance is beyond the message floor.
    scores = hybrid_scores(
        vector=[VectorHit("card", VECTOR_MAX_DISTANCE + 0.1), VectorHit("farther", 1.2)], fusion=CARD_FUSION
    )
    assert list(scores) == ["card", "farther"]


def test_card_fusion_lets_a_common_word_match_lose_to_a_closer_card() -> None:
    # The query's one common word (in 20 of 40 cards) is in a look-alike card; the card that means the
    # query, across languages, shares no word with it but sits closer in meaning.
    weights = term_weights(40, [20, 0])
    scores = hybrid_scores(
        keyword=[KeywordHit("look_alike", (True, False))],
        vector=[VectorHit("meaning", 0.55), VectorHit("look_alike", 0.62)],
        weights=weights,
        fusion=CARD_FUSION,
    )
    assert list(scores) == ["meaning", "look_alike"]


def test_card_fusion_lets_a_full_keyword_match_beat_a_closer_look_alike() -> None:
    # A bare keyword (微信) matches its card in full; the vector prefers a look-alike (微博) a little.
    weights = term_weights(40, [1])
    scores = hybrid_scores(
        keyword=[KeywordHit("exact", (True,))],
        vector=[VectorHit("look_alike", 0.50), VectorHit("exact", 0.58)],
        weights=weights,
        fusion=CARD_FUSION,
    )
    assert list(scores) == ["exact", "look_alike"]


def test_card_fusion_scores_a_keyword_hit_without_a_vector_at_the_median_distance() -> None:
    weights = term_weights(40, [1])
    scores = hybrid_scores(
        keyword=[KeywordHit("not_embedded_yet", (True,))],
        vector=[VectorHit("a", 0.4), VectorHit("b", 0.6), VectorHit("c", 0.8)],
        weights=weights,
        fusion=CARD_FUSION,
    )
    assert scores["not_embedded_yet"] == pytest.approx(CARD_FUSION.keyword_weight + (1 - 0.6))
    assert scores["not_embedded_yet"] > scores["b"], "a keyword hit outranks the card at the same distance"


def test_card_fusion_without_any_vector_ranks_by_the_whole_keyword_coverage() -> None:
    # The embedder is down or nothing is embedded yet: a partial match still outranks a weaker one.
    weights = term_weights(10, [1, 3])
    scores = hybrid_scores(
        keyword=[KeywordHit("one_common", (False, True)), KeywordHit("rare", (True, False))],
        weights=weights,
        fusion=CARD_FUSION,
    )
    assert list(scores) == ["rare", "one_common"] and scores["one_common"] > 0


# --------------------------------------------------------------------------- conflict precedence


def test_precedence_session_beats_workspace_beats_user_beats_global() -> None:
    cards = [Card(scope=scope) for scope in ("global", "user", "workspace", "session")]
    assert winner(*cards).scope == "session"
    assert winner(*cards[:3]).scope == "workspace"
    assert winner(*cards[:2]).scope == "user"


def test_precedence_unexpired_beats_expired() -> None:
    fresh = Card(updated_at=NOW - timedelta(days=30))
    expired = Card(expires_at=NOW - timedelta(minutes=1), updated_at=NOW)
    expired_status = Card(status="expired", updated_at=NOW)
    assert winner(expired, fresh) is fresh
    assert winner(expired_status, fresh) is fresh


def test_precedence_explicit_beats_inferred() -> None:
    explicit = Card(explicit_user_intent=True, updated_at=NOW - timedelta(days=9))
    inferred = Card(explicit_user_intent=False, updated_at=NOW, confidence=1.0)
    assert winner(inferred, explicit) is explicit


def test_precedence_temporary_constraint_beats_long_term_preference() -> None:
    preference = Card(type="preference", kind="flavor_profile", updated_at=NOW, confidence=1.0)
    constraint = Card(
        type="constraint",
        kind="temporary_state",
        expires_at=NOW + timedelta(hours=8),
        updated_at=NOW - timedelta(days=2),
    )
    assert winner(preference, constraint) is constraint


def test_precedence_newer_beats_older() -> None:
    older = Card(updated_at=NOW - timedelta(days=2), confidence=1.0, importance=1.0)
    newer = Card(updated_at=NOW - timedelta(days=1), confidence=0.5, importance=0.1)
    assert winner(older, newer) is newer


def test_precedence_higher_confidence_beats_lower() -> None:
    low = Card(confidence=0.6, importance=1.0)
    high = replace(low, id=uuid.uuid4(), confidence=0.9, importance=0.1)
    assert winner(low, high) is high


def test_precedence_higher_importance_beats_lower() -> None:
    low = Card(importance=0.2)
    high = replace(low, id=uuid.uuid4(), importance=0.8)
    assert winner(low, high) is high


def test_precedence_is_independent_of_input_order_even_for_exact_ties() -> None:
    first = Card()
    twin = replace(first, id=uuid.uuid4())
    assert winner(first, twin) is winner(twin, first)
    assert conflict_precedence_key(first, NOW) != conflict_precedence_key(twin, NOW)


# --------------------------------------------------------------------------- resolve_conflicts


def test_resolve_conflicts_reports_each_omission_reason() -> None:
    superseded = Card(status="superseded", key="a")
    deleted = Card(status="deleted", key="b")
    expired = Card(expires_at=NOW, key="c")  # expires_at <= now counts as expired
    shaky = Card(confidence=0.34, key="d")
    loser = Card(scope="user", key="e")
    keeper = Card(scope="session", key="e")
    kept, omitted = resolve_conflicts(
        [superseded, deleted, expired, shaky, loser, keeper], now=NOW, group_by_owner=False
    )
    assert kept == [keeper]
    assert dict(omitted) == {
        superseded.id: "superseded",
        deleted.id: "superseded",
        expired.id: "expired",
        shaky.id: "low_confidence",
        loser.id: "conflict_lost",
    }


def test_resolve_conflicts_keeps_expired_only_when_asked_and_then_it_still_loses() -> None:
    expired = Card(status="expired", key="x")
    alone = Card(status="expired", key="y")
    fresh = Card(key="x")
    kept, omitted = resolve_conflicts(
        [expired, alone, fresh], now=NOW, group_by_owner=False, include_expired=True
    )
    assert kept == [alone, fresh]
    assert omitted == [(expired.id, "conflict_lost")]


def test_resolve_conflicts_keeps_confidence_at_the_threshold() -> None:
    kept, omitted = resolve_conflicts([Card(confidence=0.35)], now=NOW, group_by_owner=False)
    assert len(kept) == 1 and omitted == []


def test_different_keys_or_domains_never_conflict() -> None:
    cards = [Card(key="avoid_ingredient:香菜"), Card(key="avoid_ingredient:葱"), Card(domain="其他")]
    kept, omitted = resolve_conflicts(cards, now=NOW, group_by_owner=False)
    assert kept == cards and omitted == []


def test_whole_tenant_viewers_group_by_owner_so_people_never_conflict() -> None:
    alice = Card(owner_ref="user:1")
    bob = Card(owner_ref="user:2")
    kept, _ = resolve_conflicts([alice, bob], now=NOW, group_by_owner=True)
    assert kept == [alice, bob]
    kept, omitted = resolve_conflicts([alice, bob], now=NOW, group_by_owner=False)
    assert len(kept) == 1 and [reason for _, reason in omitted] == ["conflict_lost"]


def test_resolve_conflicts_keeps_input_order_and_drops_repeated_ids() -> None:
    first, second = Card(key="a"), Card(key="b")
    kept, omitted = resolve_conflicts([second, first, second], now=NOW, group_by_owner=False)
    assert kept == [second, first] and omitted == []
