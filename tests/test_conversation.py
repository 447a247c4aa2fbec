"""Conversation context of message search (memory.search.conversation): pure rules, no database.

Each test switches off every rule but the one it checks (weight 0), so it fails without that rule.
Which turns are questions is decided in SQL (QUESTION_END_PATTERN): see test_message_context.py.
"""

from __future__ import annotations

import re

import pytest

from memory.search.conversation import QUESTION_END_PATTERN, Lender, conversation_scores

ONLY = dict(question_weight=1.0, reply_weight=0.0, session_weight=0.0)


def at(session: str = "s1", *, reply: str | None = None) -> Lender:
    return Lender(session=session, reply=reply)


def test_the_question_pattern_compiles_for_python_too() -> None:
    assert re.search(QUESTION_END_PATTERN, 'Tim said, "How long have you been surfing?"')


def test_a_question_ranks_below_a_statement_as_relevant() -> None:
    scores = {"asks": 0.5, "tells": 0.5}
    ranked = conversation_scores(scores, lenders={}, sessions={}, questions={"asks"},
                                 **dict(ONLY, question_weight=0.6))
    assert ranked == pytest.approx({"tells": 0.5, "asks": 0.3})
    assert list(ranked) == ["tells", "asks"]


def test_the_reply_to_a_question_gains_and_comes_back_and_a_statement_lends_nothing() -> None:
    scores = {"question": 0.8, "statement": 0.6, "reaction": 0.1}
    around = {"question": at(reply="answer"), "statement": at("s2", reply="reaction")}
    ranked = conversation_scores(scores, lenders=around, sessions={}, questions={"question"},
                                 **dict(ONLY, reply_weight=0.5))
    assert ranked == pytest.approx({"question": 0.8, "statement": 0.6, "answer": 0.4, "reaction": 0.1})
    assert list(ranked) == ["question", "statement", "answer", "reaction"]


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


def test_a_reply_joins_its_questions_session_and_a_turn_never_answers_itself() -> None:
    scores = {"question": 0.5, "loop": 0.4}
    around = {"question": at("s1", reply="reply"), "loop": at("s2", reply="loop")}
    ranked = conversation_scores(scores, lenders=around, sessions={"question": "s1", "loop": "s2"},
                                 questions={"question", "loop"}, question_weight=1.0, reply_weight=0.5,
                                 session_weight=0.5, session_best=2)
    assert ranked == pytest.approx({"question": 0.75, "reply": 0.5, "loop": 0.6})
