"""Relevance rules of `memory/search` and `messages/search` through the API, with the real embedder.

Each test names a way hybrid ranking used to lose to its own parts (issue 12): a paraphrase that
shares no word with its card came back empty, a cross-language question lost to a card sharing a
common word, a Chinese word missed the compound holding it. Cards are written through
`memory/write`; their vectors are computed by the after-commit background work, as in production.
"""

from __future__ import annotations

import pytest

from memory.rules.node_text import node_search_text
from memory.rules.text import query_terms
from tests.api_client import api_for

USER = "alice"
SESSION = "s-1"


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    return api_for(client, tenant_a)


def write_cards(api, committed, *cards: dict) -> list[str]:  # noqa: ANN001
    operations = [{"operation": "create", "reason": "test", "node": {"scope": "user", "userId": USER, **card}}
                  for card in cards]
    with committed():
        answer = api.post("memory/write", {"operations": operations, "explicitUserIntent": True}, expect=200)
    return [result["nodeId"] for result in answer["results"]]


def search(api, text: str) -> dict:  # noqa: ANN001
    return api.post("memory/search", {"queryText": text, "userId": USER, "limit": 10})


def skill(item: str, title: str, content: str) -> dict:
    return {"kind": "skill", "itemKey": item, "valueJson": item, "title": title, "content": content}


def test_a_paraphrase_that_shares_no_word_with_its_card_still_finds_it(api, committed) -> None:
    shellfish, *_ = write_cards(
        api, committed,
        {"kind": "dietary_restriction", "itemKey": "shellfish", "valueJson": "shellfish",
         "title": "Allergic to shellfish", "content": "The user is allergic to shellfish."},
        skill("piano", "Plays the piano", "The user has played the piano since she was six."),
        skill("python", "Writes Python", "The user writes Python every day at work."),
    )
    text = "Should I keep her away from oysters?"  # beyond the old 0.8 distance floor
    card_words = node_search_text(title="Allergic to shellfish", content="The user is allergic to shellfish.",
                                  value_json="shellfish", item_key="shellfish", tags=[], entities=[])
    assert not set(query_terms(text)) & set(card_words.split()), "the query must share no word with the card"
    answer = search(api, text)
    assert answer["relevant"], "a paraphrase must never come back empty while cards exist"
    assert answer["relevant"][0]["id"] == shellfish
    first = answer["diagnostics"]["hits"][0]
    assert first["nodeId"] == shellfish and first["foundBy"] == ["vector"]
    assert first["keywordCoverage"] is None
    assert first["vectorDistance"] is not None and first["score"] > answer["diagnostics"]["hits"][-1]["score"]


def test_a_cross_language_question_beats_cards_that_share_only_a_common_word(api, committed) -> None:
    # Two cards share 喜欢 and 喝 with the question, and mean something else; the others share nothing.
    look_alikes = [skill(thing, f"喜欢喝{thing}", f"用户喜欢喝{thing}。") for thing in ["咖啡", "果汁"]]
    others = [skill(thing, f"会{thing}", f"用户会{thing}。") for thing in ["游泳", "滑雪", "下棋", "弹琴"]]
    ids = write_cards(
        api, committed, *look_alikes, *others,
        {"kind": "preferred_ingredient", "itemKey": "oolong tea", "valueJson": "oolong tea",
         "title": "Drinks oolong tea", "content": "The user drinks oolong tea every afternoon."},
    )
    answer = search(api, "她喜欢喝什么茶？")
    assert answer["relevant"][0]["id"] == ids[-1], "the English card that answers leads the 喜欢 look-alikes"


def test_a_chinese_word_finds_the_card_and_the_message_holding_it_in_a_compound(api, committed) -> None:
    group, weibo = write_cards(
        api, committed,
        {"kind": "communication_preference", "itemKey": "家庭群", "valueJson": "装修进展发家庭微信群",
         "title": "进展发到群里", "content": "装修进展请发到家庭微信群，不要私聊。"},
        {"kind": "communication_preference", "itemKey": "微博", "valueJson": "不用微博",
         "title": "不上微博", "content": "用户很久不上微博了。"},
    )
    answer = search(api, "微信")
    assert answer["relevant"][0]["id"] == group
    assert answer["diagnostics"]["hits"][0]["foundBy"] == ["keyword", "vector"]
    keyword_hits = [hit["nodeId"] for hit in answer["diagnostics"]["hits"] if "keyword" in hit["foundBy"]]
    assert weibo not in keyword_hits

    with committed():
        api.post("messages", {"sessionId": SESSION, "userId": USER, "messages": [
            {"id": "m1", "role": "user", "content": "周报发到项目钉钉群里就行"},
            {"id": "m2", "role": "user", "content": "今天的会改到下午三点"},
        ]}, expect=201)
    found = api.post("messages/search", {"queryText": "钉钉", "sessionId": SESSION, "userId": USER})
    assert [message["id"] for message in found["messages"]] == ["m1"]


def test_single_characters_of_a_query_word_match_nothing_alone(api, committed) -> None:
    # 飞书 is cut into 飞 + 书 by jieba; as two single characters it would find every text with 书.
    book, app = write_cards(
        api, committed,
        skill("reading", "爱看书", "用户每晚睡前看一小时书。"),
        skill("feishu", "会用飞书", "用户公司的文档都放在飞书上。"),
    )
    hits = search(api, "飞书")["diagnostics"]["hits"]
    assert hits[0]["nodeId"] == app
    assert [hit["foundBy"] for hit in hits if hit["nodeId"] == book] == [["vector"]]
