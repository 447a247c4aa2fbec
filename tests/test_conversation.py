"""Conversation context of message search (memory.search.conversation): pure rules, no database.

Each test switches off every rule but the one it checks (weight 0), so it fails without that rule.
"""

from __future__ import annotations

import pytest

from memory.search.conversation import Lender, conversation_scores, is_question

ONLY = dict(question_weight=1.0, previous_weight=0.0, session_weight=0.0)


def at(session: str = "s1", *, following: str | None = None) -> Lender:
    return Lender(session=session, following=following)


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Did you run the Boston marathon?", True),
        ('Tim said, "How long have you been surfing?"', True),
        ("你今晚吃什么？", True),
        ("(which one?) ", True),
        ("Yes! Under four hours.", False),
        ("Why? Because I love it.", False),
        ("", False),
        (None, False),
    ],
)
def test_a_question_is_a_turn_that_ends_asking(text, asks) -> None:
    assert is_question(text) is asks


def test_a_question_ranks_below_a_statement_as_relevant() -> None:
    scores = {"asks": 0.5, "tells": 0.5}
    ranked = conversation_scores(scores, lenders={}, sessions={}, questions={"asks"},
                                 **dict(ONLY, question_weight=0.6))
    assert ranked == pytest.approx({"tells": 0.5, "asks": 0.3})
    assert list(ranked) == ["tells", "asks"]


def test_a_reply_gains_from_the_turn_before_it_and_a_question_brings_its_reply_along() -> None:
    scores = {"question": 0.8, "statement": 0.6, "reply": 0.1}
    around = {"question": at(following="answer"), "statement": at("s2", following="aside")}
    ranked = conversation_scores(scores, lenders=around, sessions={}, questions={"question"},
                                 **dict(ONLY, previous_weight=0.5))
    assert ranked == pytest.approx({"question": 0.8, "statement": 0.6, "answer": 0.4, "reply": 0.1})
    assert "aside" not in ranked, "the reply to a statement must be relevant by itself to gain"


def test_a_turn_gains_from_the_best_lenders_of_its_session() -> None:
    scores = {"stray": 0.55, "a": 0.5, "b": 0.4, "c": 0.3, "d": 0.1}
    around = {"stray": at("s2"), "a": at(), "b": at(), "c": at()}
    sessions = {"stray": "s2", "a": "s1", "b": "s1", "c": "s1", "d": "s1"}
    ranked = conversation_scores(scores, lenders=around, sessions=sessions,
                                 **dict(ONLY, session_weight=0.5, session_best=2))
    # s1's strength is a + b (its two best lenders; c does not count), s2's is the stray's alone; d
    # does not lend but gains.
    assert ranked == pytest.approx({"a": 0.95, "b": 0.85, "stray": 0.825, "c": 0.75, "d": 0.55})
    assert list(ranked) == ["a", "b", "stray", "c", "d"]


def test_a_turn_never_lends_to_itself_and_only_candidates_and_replies_come_back() -> None:
    scores = {"loop": 0.5}
    loop = {"loop": at(following="loop")}
    ranked = conversation_scores(scores, lenders=loop, sessions={"loop": "s1"}, questions={"loop"},
                                 **dict(ONLY, previous_weight=0.5))
    assert ranked == {"loop": 0.5}
