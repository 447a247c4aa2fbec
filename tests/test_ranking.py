"""Pure ranking rules: rank fusion, the hybrid guards and conflict precedence (DESIGN rule 8), no database."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from memory.ranking import (
    DEFAULT_ARM_WEIGHTS,
    RRF_K,
    VECTOR_MAX_DISTANCE,
    KeywordHit,
    VectorHit,
    conflict_precedence_key,
    hybrid_scores,
    reciprocal_rank_fusion,
    resolve_conflicts,
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


# --------------------------------------------------------------------------- reciprocal rank fusion


def test_rrf_sums_weighted_reciprocal_ranks_and_orders_best_first() -> None:
    scores = reciprocal_rank_fusion({"a": ["x", "y"], "b": ["y", "z"]}, k=60)
    assert scores == pytest.approx({"y": 1 / 62 + 1 / 61, "x": 1 / 61, "z": 1 / 62})
    assert list(scores) == ["y", "x", "z"]


def test_rrf_weights_scale_a_list_and_zero_weight_ignores_it() -> None:
    scores = reciprocal_rank_fusion({"a": ["x"], "b": ["y"], "c": ["z"]}, weights={"a": 2.0, "c": 0.0})
    assert scores == pytest.approx({"x": 2 / 61, "y": 1 / 61})


def test_rrf_counts_a_duplicate_once_at_its_best_rank() -> None:
    assert reciprocal_rank_fusion({"a": ["x", "y", "x"]}) == pytest.approx({"x": 1 / 61, "y": 1 / 62})


def test_rrf_of_nothing_is_empty_and_negative_k_is_refused() -> None:
    assert reciprocal_rank_fusion({}) == {}
    assert reciprocal_rank_fusion({"a": []}) == {}
    with pytest.raises(ValueError, match="k must be"):
        reciprocal_rank_fusion({"a": ["x"]}, k=-1)


# --------------------------------------------------------------------------- hybrid guards


def test_hybrid_drops_vector_neighbours_beyond_the_relevance_floor() -> None:
    scores = hybrid_scores(
        vector=[VectorHit("near", 0.3), VectorHit("far", VECTOR_MAX_DISTANCE + 0.01)], term_count=1
    )
    assert list(scores) == ["near"]


def test_hybrid_partial_keyword_matches_on_common_words_never_swamp_a_semantic_hit() -> None:
    # 30 cards share one common word with a four-term query; one card is a good semantic hit.
    noise = [KeywordHit(f"noise{i}", rank=1.0 - i / 100, matched_terms=1) for i in range(30)]
    scores = hybrid_scores(keyword=noise, vector=[VectorHit("semantic", 0.35)], term_count=4)
    assert list(scores)[0] == "semantic"
    # Even the 100th vector neighbour outranks the best partial keyword match.
    assert DEFAULT_ARM_WEIGHTS["keyword_partial"] / (RRF_K + 1) < 1 / (RRF_K + 100)


def test_hybrid_full_keyword_matches_rank_with_full_weight_and_agreement_wins() -> None:
    scores = hybrid_scores(
        keyword=[KeywordHit("both", 0.2, 2), KeywordHit("keyword_only", 0.9, 2)],
        vector=[VectorHit("vector_only", 0.2), VectorHit("both", 0.4)],
        term_count=2,
    )
    assert list(scores)[0] == "both"
    assert scores["keyword_only"] == pytest.approx(scores["vector_only"])


def test_hybrid_ranks_keyword_hits_by_matched_terms_before_ts_rank() -> None:
    scores = hybrid_scores(
        keyword=[KeywordHit("one_term", 5.0, 2), KeywordHit("all_terms", 0.1, 3), KeywordHit("none", 0.0, 0)],
        term_count=3,
    )
    assert list(scores) == ["all_terms", "one_term"]


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
