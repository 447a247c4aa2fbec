"""The optional reranker, played by a real HTTP server on loopback, through the API and the real database.

Configured, it reorders the best candidates of `memory/search` and `messages/search` and says so in
`diagnostics.searchModes`; failing (down, HTTP 500, garbage, wrong indices, too slow), it leaves the
offline order in place with a logged warning; not configured, it is never called and costs no query.
Every data test also writes look-alike noise into tenant B that must never reach the reranker.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.rules.node_text import node_plain_text
from memory.search.messages import search_messages
from memory.search.rerank import Reranker, RerankError, merge_reranked, parse_scores
from memory.search.retrieval import MemoryQuery, search_nodes
from tests.api_client import api_for
from tests.loopback import JsonHandler, loopback_server
from tests.memory_factories import default_workspace, make_member, make_message, make_node, make_viewer

ROOT = Path(__file__).resolve().parent.parent
QUERY = "coriander soup recipe"
# Offline, more query words matched ranks higher: the cards and messages below come back in this order.
TEXTS = ["coriander soup recipe", "coriander soup", "coriander"]


class FakeRerankHandler(JsonHandler):
    """Plays `POST {base}/rerank`; the first path segment picks the behaviour. `reverse` scores the
    documents by their position, so the last one sent (the offline worst) comes first."""

    def do_POST(self) -> None:  # noqa: N802
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.path.split("/")[1]
        type(self).requests.append(
            {"path": self.path, "body": payload, "authorization": self.headers.get("Authorization")}
        )
        documents = payload.get("documents", payload.get("texts", []))
        ranked = sorted(range(len(documents)), reverse=True)
        if mode == "reverse":  # Cohere style: best first, at most top_n
            results = [{"index": i, "relevance_score": i / 10} for i in ranked][: payload.get("top_n")]
            self.reply(200, json.dumps({"id": "r1", "results": results}).encode())
        elif mode == "tei":  # text-embeddings-inference: a plain list, `score`
            self.reply(200, json.dumps([{"index": i, "score": float(i)} for i in ranked]).encode())
        elif mode == "fail":
            self.reply(500, b'{"message": "model exploded"}')
        elif mode == "garbage":
            self.reply(200, b"<html>not json</html>")
        elif mode == "wrong":
            results = [{"index": len(documents), "relevance_score": 1.0}]
            self.reply(200, json.dumps({"results": results}).encode())
        elif mode == "slow":
            time.sleep(2)
            self.reply(200, b"{}")


@pytest.fixture
def reranker_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with loopback_server(FakeRerankHandler, monkeypatch) as url:
        yield url


@pytest.fixture
def configure(settings, reranker_server):  # noqa: ANN001, ANN201
    """Point the reranker at the fake server's `mode`; returns the settings."""

    def point(mode: str, **overrides: object):  # noqa: ANN202
        settings.EKKO_RERANK_BASE_URL = f"{reranker_server}/{mode}/v1"
        settings.EKKO_RERANK_MODEL = "bge-reranker-v2-m3"
        settings.EKKO_RERANK_API_KEY = "sk-rerank"
        settings.EKKO_RERANK_STYLE = "cohere"
        settings.EKKO_RERANK_TIMEOUT = 0.5
        settings.EKKO_RERANK_TOP_N = 30
        for name, value in overrides.items():
            setattr(settings, f"EKKO_RERANK_{name.upper()}", value)
        return settings

    return point


@pytest.fixture
def world(tenant_a, tenant_b):  # noqa: ANN001, ANN201
    """Tenant A: three cards and three messages (one session each) in offline order TEXTS; tenant B: noise."""
    ws_a, ws_b = default_workspace(tenant_a), default_workspace(tenant_b)
    ann = make_member(tenant=tenant_a, username="ann")
    bea = make_member(tenant=tenant_b, username="bea")
    for text in TEXTS:
        make_node(tenant=tenant_b, workspace=ws_b, title=f"B {text}", content=text, user=bea)
        make_message(tenant=tenant_b, workspace=ws_b, session_id="b", content=f"B {text}")

    class World:
        tenant, workspace, user = tenant_a, ws_a, ann
        viewer = make_viewer(tenant=tenant_a, workspace=ws_a, session_id=None, user=ann)
        cards = [
            make_node(tenant=tenant_a, workspace=ws_a, title=text, content=f"{text} — card {i}", user=ann,
                      value_json={"note": i})
            for i, text in enumerate(TEXTS)
        ]
        messages = [
            make_message(tenant=tenant_a, workspace=ws_a, session_id=f"s{i}", content=f"{text} (turn {i})")
            for i, text in enumerate(TEXTS)
        ]

    return World


def card_ids(answer: dict) -> list[str]:
    return [node["id"] for node in answer["relevant"]]


def message_ids(answer: dict) -> list[str]:
    return [message["id"] for message in answer["messages"]]


def offline(world) -> tuple[list[str], list[str]]:  # noqa: ANN001
    return [str(card.pk) for card in world.cards], [message.message_id for message in world.messages]


def search_both(api) -> tuple[dict, dict]:  # noqa: ANN001
    cards = api.post("memory/search", {"queryText": QUERY, "userId": "ann"})
    messages = api.post("messages/search", {"queryText": QUERY})
    return cards, messages


# --------------------------------------------------------------------------- configured


def test_a_reranker_that_reverses_the_order_is_followed_by_both_searches(client, world, configure) -> None:
    configure("reverse")
    cards, messages = search_both(api_for(client, world.tenant))

    offline_cards, offline_messages = offline(world)
    assert card_ids(cards) == offline_cards[::-1]
    assert message_ids(messages) == offline_messages[::-1]
    assert cards["diagnostics"]["searchModes"][-1] == "rerank"
    assert messages["diagnostics"]["searchModes"][-1] == "rerank"
    scores = [message["score"] for message in messages["messages"]]
    assert scores == sorted(scores, reverse=True), "scores follow the new order"

    card_request, message_request = FakeRerankHandler.requests
    assert card_request["path"] == message_request["path"] == "/reverse/v1/rerank"
    assert card_request["authorization"] == message_request["authorization"] == "Bearer sk-rerank"
    assert card_request["body"] == {
        "model": "bge-reranker-v2-m3",
        "query": QUERY,
        "documents": [
            node_plain_text(title=card.title, content=card.content, value_json=card.value_json)
            for card in world.cards
        ],
        "top_n": 3,
    }
    first_card = 'coriander soup recipe\ncoriander soup recipe — card 0\n{"note": 0}'
    assert card_request["body"]["documents"][0] == first_card
    assert message_request["body"] == {
        "model": "bge-reranker-v2-m3",
        "query": QUERY,
        "documents": [message.content for message in world.messages],
        "top_n": 3,
    }


def test_only_the_top_n_are_reranked_and_the_rest_keep_their_offline_order(client, world, configure) -> None:
    configure("reverse", top_n=2)
    cards, messages = search_both(api_for(client, world.tenant))

    (first, second, third), (m_first, m_second, m_third) = offline(world)
    assert card_ids(cards) == [second, first, third]
    assert message_ids(messages) == [m_second, m_first, m_third]
    assert [len(request["body"]["documents"]) for request in FakeRerankHandler.requests] == [2, 2]
    assert all(request["body"]["top_n"] == 2 for request in FakeRerankHandler.requests)


def test_the_tei_style_sends_texts_and_reads_a_plain_list(client, world, configure) -> None:
    configure("tei", style="tei", model="")
    cards, messages = search_both(api_for(client, world.tenant))

    offline_cards, offline_messages = offline(world)
    assert card_ids(cards) == offline_cards[::-1]
    assert message_ids(messages) == offline_messages[::-1]
    assert "rerank" in cards["diagnostics"]["searchModes"]
    message_request = FakeRerankHandler.requests[1]
    assert message_request["body"] == {
        "query": QUERY, "texts": [message.content for message in world.messages], "truncate": True
    }


def test_a_structured_query_with_text_reranks_the_text_hits_first(world, configure) -> None:
    configure("reverse")
    other = make_node(tenant=world.tenant, workspace=world.workspace, title="no words in common",
                      user=world.user, importance=1.0)
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text=QUERY, kinds=["food_avoidance"]))
    assert [node.pk for node in result.exact] == [card.pk for card in world.cards[::-1]] + [other.pk]
    modes = result.diagnostics["searchModes"]
    assert modes[0] == "structured" and modes[-1] == "rerank"


def test_a_single_candidate_is_not_sent(world, configure) -> None:
    configure("reverse")
    found, diagnostics = search_messages(viewer=world.viewer, query_text="recipe")
    assert [message.pk for message, _ in found] == [world.messages[0].pk]
    assert FakeRerankHandler.requests == [] and "rerank" not in diagnostics["searchModes"]


# --------------------------------------------------------------------------- failing


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    ("mode", "warning"),
    [
        ("down", "is unreachable"),
        ("fail", 'HTTP 500: {"message": "model exploded"}'),
        ("garbage", "not JSON"),
        ("wrong", "named document 3, but was sent documents 0 to 2"),
        ("slow", "did not answer within 0.5s"),
    ],
)
def test_a_failing_reranker_leaves_the_offline_order_with_a_warning(client, world, configure, caplog,
                                                                    mode: str, warning: str) -> None:
    settings = configure(mode)
    if mode == "down":
        settings.EKKO_RERANK_BASE_URL = closed_port_url()
    api = api_for(client, world.tenant)
    with caplog.at_level(logging.WARNING, logger="memory.search.rerank"):
        cards, messages = search_both(api)

    offline_cards, offline_messages = offline(world)
    assert card_ids(cards) == offline_cards and message_ids(messages) == offline_messages
    assert "rerank" not in cards["diagnostics"]["searchModes"] + messages["diagnostics"]["searchModes"]
    warnings = [record for record in caplog.records if record.name == "memory.search.rerank"]
    assert len(warnings) == 2 and all(record.levelno == logging.WARNING for record in warnings)
    assert all("offline order stands" in record.getMessage() for record in warnings)
    assert all(warning in record.getMessage() for record in warnings), [r.getMessage() for r in warnings]


# --------------------------------------------------------------------------- not configured


def test_without_a_base_url_nothing_is_sent_and_no_query_is_added(client, world, configure, settings) -> None:
    configure("reverse")

    def queries(search) -> int:  # noqa: ANN001
        with CaptureQueriesContext(connection) as captured:
            search()
        return len(captured)

    def cards() -> None:
        search_nodes(viewer=world.viewer, query=MemoryQuery(query_text=QUERY), record_access=False)

    def messages() -> None:
        search_messages(viewer=world.viewer, query_text=QUERY)

    cards(), messages()  # warm: one-off lookups stay out of the counts
    configured = queries(cards), queries(messages)
    assert len(FakeRerankHandler.requests) == 4
    settings.EKKO_RERANK_BASE_URL = ""
    FakeRerankHandler.requests.clear()
    assert (queries(cards), queries(messages)) == (configured[0], configured[1] - 1), (
        "off, card search runs the same queries (the texts were loaded anyway) and message search one fewer"
    )

    answers = search_both(api_for(client, world.tenant))
    assert FakeRerankHandler.requests == []
    assert (card_ids(answers[0]), message_ids(answers[1])) == offline(world)
    assert all("rerank" not in answer["diagnostics"]["searchModes"] for answer in answers)


# --------------------------------------------------------------------------- pure parts


def test_merge_puts_the_reranked_first_in_the_rerankers_order_and_keeps_the_rest() -> None:
    offline_scores = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.2}
    merged = merge_reranked(offline_scores, {"a": -3.0, "b": 5.0})
    assert list(merged) == ["b", "a", "c", "d"]
    assert merged["c"] == 0.7 and merged["d"] == 0.2
    assert merged["a"] > merged["c"], "a reranked candidate stays above every other one, whatever its scale"
    tied = merge_reranked(offline_scores, {"a": 1.0, "b": 1.0})
    assert list(tied) == ["a", "b", "c", "d"], "ties keep the offline order"
    assert merge_reranked(offline_scores, {}) == offline_scores


@pytest.mark.parametrize(
    "answer",
    [
        {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
        {"data": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},  # Voyage
        {"results": [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}]},
        [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}],  # TEI
    ],
)
def test_both_answer_styles_are_read(answer) -> None:  # noqa: ANN001
    assert parse_scores(json.dumps(answer).encode(), 2, url="u") == {1: 0.9, 0: 0.1}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"results": []}, "sent no results"),
        ({"error": "x"}, "sent no results"),
        ([{"index": 0, "score": 1}, {"index": 0, "score": 2}], "named document 0"),
        ([{"index": -1, "score": 1}], "named document -1"),
        ([{"index": True, "score": 1}], "named document True"),
        ([{"index": "0", "score": 1}], "named document '0'"),
        ([{"index": 0, "score": "high"}], "not a number"),
        ([{"index": 0}], "not a number"),
        (["x"], "named document None"),
    ],
)
def test_bad_answers_are_errors(answer, message: str) -> None:  # noqa: ANN001
    with pytest.raises(RerankError, match=message):
        parse_scores(json.dumps(answer).encode(), 2, url="u")


def test_a_non_finite_score_or_a_cut_answer_is_an_error() -> None:
    with pytest.raises(RerankError, match="not a number"):
        parse_scores(b'{"results": [{"index": 0, "relevance_score": NaN}]}', 2, url="u")
    with pytest.raises(RerankError, match="not JSON"):
        parse_scores(b'{"results": [{"index": 0, "relevance_score": 0.5', 2, url="u")


def test_documents_are_cut_and_the_model_is_left_out_when_unset() -> None:
    body = Reranker(base_url="http://h/v1/").request_body("q", ["x" * 5000])
    assert body == {"query": "q", "documents": ["x" * 2000], "top_n": 1}
    assert Reranker(base_url="http://h/v1/").url == "http://h/v1/rerank"


def test_a_cards_plain_text_is_title_content_and_value_without_repeats() -> None:
    assert node_plain_text(title="不吃香菜", content="不吃香菜", value_json="香菜") == "不吃香菜\n香菜"
    assert node_plain_text(title="Diet", content=" ", value_json={"spicy": "low"}) == 'Diet\n{"spicy": "low"}'
    assert node_plain_text(title=None, content="c", value_json=None) == "c"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EKKO_RERANK_STYLE": "openai"}, "EKKO_RERANK_STYLE must be"),
        ({"EKKO_RERANK_TOP_N": "1"}, "at least 2"),
    ],
)
def test_bad_reranker_settings_refuse_to_start(env: dict, message: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "EKKO_", "DATABASE_"))}
    result = subprocess.run(
        [sys.executable, "-c", "import ekko_site.settings"], cwd=ROOT, capture_output=True, text=True,
        env={**base, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "DJANGO_DEBUG": "1", **env},
        timeout=120,
    )
    assert result.returncode != 0 and message in result.stderr
