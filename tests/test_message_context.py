"""Conversation context of `messages/search` against real PostgreSQL (memory.search.conversation).

Each test builds turns whose own keyword scores tie, so without the rule it checks the newest turn
would come first; every test also writes look-alike turns into tenant B and checks none come back.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memory.search.conversation import QUESTION_END_PATTERN, QUESTION_TAIL_CHARS
from memory.search.messages import search_messages
from tests.memory_factories import default_workspace, make_message, make_viewer


@pytest.fixture
def say(tenant_a, tenant_b):
    """`say(session, content)` stores the next turn of tenant A, a minute after the one before."""
    workspace = default_workspace(tenant_a)
    start = timezone.now() - timedelta(hours=1)
    clock = iter(range(1, 1000))
    for content in ("My Lisbon trip was wonderful.", "I painted a sunset.", "Yes! Boston marathon."):
        make_message(tenant=tenant_b, workspace=default_workspace(tenant_b), session_id="s1", content=content)

    def say(session_id: str, content: str):  # noqa: ANN202
        return make_message(tenant=tenant_a, workspace=workspace, session_id=session_id, content=content,
                            created_at=start + timedelta(minutes=next(clock)))

    say.viewer = make_viewer(tenant=tenant_a, workspace=workspace, session_id=None)
    return say


def found(say, query: str) -> list:
    hits, _ = search_messages(viewer=say.viewer, query_text=query)
    assert {message.tenant_id for message, _ in hits} <= {say.viewer.tenant.pk}, "tenant B leaked"
    return [message.pk for message, _ in hits]


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Did you run the Boston marathon?", True),
        ('Tim said, "How long have you been surfing?"', True),
        ("你今晚吃什么？", True),
        ("(which one?) ", True),
        ("「去哪里？」", True),
        ("Yes! Under four hours.", False),
        ("Why? Because I love it.", False),
        ('Mel said, "Guess what?" and shared a photo of a sunset over the lake', False),
    ],
)
def test_a_question_is_a_turn_whose_tail_ends_asking(db, text, asks) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT right(%s, {QUESTION_TAIL_CHARS:d}) ~ %s", [text, QUESTION_END_PATTERN])
        assert cursor.fetchone()[0] is asks


def test_a_statement_ranks_above_a_newer_question_with_the_same_words(say) -> None:
    statement = say("s1", "My Lisbon trip was wonderful.")
    question = say("s2", "What was your Lisbon trip like?")
    assert found(say, "Lisbon trip") == [statement.pk, question.pk]


def test_the_reply_to_a_matching_question_comes_back_without_a_word_of_the_query(say) -> None:
    question = say("s1", "Did you run the Boston marathon this year?")
    reply = say("s1", "Yes! Under four hours.")
    say("s1", "We had pizza for dinner.")
    assert found(say, "Boston marathon") == [question.pk, reply.pk], "the turn after the reply stays out"


def test_the_turn_after_a_statement_gains_nothing_from_it(say) -> None:
    statement = say("s1", "I painted a sunset.")
    reaction = say("s1", "Wow, a sunset!")
    say("s1", "We had pizza for dinner.")
    newer = say("s1", "The sunset was red.")
    assert found(say, "sunset") == [newer.pk, reaction.pk, statement.pk]


def test_turns_of_a_session_about_the_query_pass_a_newer_stray_match(say) -> None:
    first = say("s1", "I painted a sunset at the lake.")
    say("s1", "We had pizza for dinner.")
    second = say("s1", "The sunset I painted hangs in the hall.")
    stray = say("s2", "I painted a sunset at the lake.")
    assert found(say, "painted sunset") == [second.pk, first.pk, stray.pk], "pizza stays out"
