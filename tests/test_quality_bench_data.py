"""The bilingual quality bench's data files (bench/data/bilingual_cards*.json) hold what the bench promises.

Pure checks, no database or server: every default kind has cards, each card fits its kind (and would be
created, not supersede another card), ids resolve, the query types meet their minimums in both
languages, paraphrase queries share no query term with their relevant cards, and compound queries find
their word only inside the longer words they name. bench/memory_search_quality.py runs the data.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import pytest

from bench.memory_search_quality import DEFAULT_DATA, QUERY_TYPES, load_bench, paraphrase_overlaps
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import DEFAULT_KINDS, JOURNAL_KIND
from memory.rules.sensitive import find_sensitive_node_content
from memory.rules.text import query_terms
from memory.rules.values import normalize_value, validate_value

MIN_CARDS = 130
MIN_QUERIES = 64
MIN_PER_TYPE = 15
MIN_PER_TYPE_AND_LANGUAGE = 7
MIN_HARD_NEGATIVE_PAIRS = 15
MIN_COMPOUND_QUERIES = 5


DATA_FILES = {"first": DEFAULT_DATA, "heldout": DEFAULT_DATA.with_name("bilingual_cards_heldout.json")}


@cache
def load(name: str) -> dict:
    return load_bench(DATA_FILES[name])


@pytest.fixture(params=list(DATA_FILES))
def bench(request):  # noqa: ANN001, ANN201 - the data file of one set, as a function like before
    return lambda: load(request.param)


def every(field: str) -> list:
    return [pytest.param(name, item, id=f"{name}-{item['id']}")
            for name in DATA_FILES for item in load(name)[field]]


def by_id(data: dict) -> dict[str, dict]:
    return {card["id"]: card for card in data["cards"]}


def card_text(card: dict) -> str:
    value = card.get("valueJson")
    return " ".join(str(part) for part in (card["title"], card["content"], card.get("itemKey") or "",
                                           value if isinstance(value, str) else repr(value)))


def test_every_default_kind_has_cards_in_a_balanced_pool(bench) -> None:
    kinds = Counter(card["kind"] for card in bench()["cards"])
    searched = set(DEFAULT_KINDS) - {JOURNAL_KIND}  # search leaves the journal out unless asked for it
    assert searched <= set(kinds), f"add cards of {sorted(searched - set(kinds))}"
    assert len(bench()["cards"]) >= MIN_CARDS
    languages = Counter(card["lang"] for card in bench()["cards"])
    assert set(languages) == {"zh", "en"}
    assert abs(languages["zh"] - languages["en"]) <= len(bench()["cards"]) // 10, languages


def test_ids_and_titles_are_unique(bench) -> None:
    ids = [card["id"] for card in bench()["cards"]] + [query["id"] for query in bench()["queries"]]
    assert len(ids) == len(set(ids)), [item for item, n in Counter(ids).items() if n > 1]
    titles = Counter(card["title"] for card in bench()["cards"])  # the bench maps stored cards by title
    assert max(titles.values()) == 1, [title for title, n in titles.items() if n > 1]


@pytest.mark.parametrize(("name", "card"), every("cards"))
def test_card_fits_its_kind(name: str, card: dict) -> None:
    spec = DEFAULT_KINDS[card["kind"]]
    assert bool(card.get("itemKey")) == spec.itemized, "itemized kinds need an itemKey, the others none"
    validate_value(spec, normalize_value(spec, card.get("valueJson")))
    assert card["lang"] in ("zh", "en")
    refused = find_sensitive_node_content(title=card["title"], content=card["content"],
                                          item_key=card.get("itemKey"), value_json=card.get("valueJson"))
    assert refused is None, f"the write would be refused: {refused}"
    assert card.get("scope", spec.default_scope) in ("user", "workspace", "session")


def test_no_two_cards_share_a_slot(bench) -> None:
    # Two cards in one slot would supersede each other on write (or lose a conflict in search).
    keys = Counter(canonical_key(DEFAULT_KINDS[card["kind"]], card.get("itemKey"))
                   for card in bench()["cards"])
    assert max(keys.values()) == 1, [key for key, n in keys.items() if n > 1]


def test_queries_meet_the_minimums_per_type_and_language(bench) -> None:
    queries = bench()["queries"]
    assert len(queries) >= MIN_QUERIES
    by_type = Counter(query["type"] for query in queries)
    assert set(by_type) == set(QUERY_TYPES), by_type
    for query_type in QUERY_TYPES:
        assert by_type[query_type] >= MIN_PER_TYPE, (query_type, by_type[query_type])
        languages = Counter(query["lang"] for query in queries if query["type"] == query_type)
        assert min(languages["zh"], languages["en"]) >= MIN_PER_TYPE_AND_LANGUAGE, (query_type, languages)


@pytest.mark.parametrize(("name", "query"), every("queries"))
def test_query_labels_resolve(name: str, query: dict) -> None:
    cards = by_id(load(name))
    assert query["relevant"], "every query needs at least one relevant card"
    assert set(query["relevant"]) <= set(cards), sorted(set(query["relevant"]) - set(cards))
    assert {cards[card_id]["lang"] for card_id in query["relevant"]} == {query["cardLang"]}
    assert (query["lang"] != query["cardLang"]) == (query["type"] == "cross_language")
    if query["type"] == "keyword":
        words = query["text"].split() if query["lang"] == "en" else [query["text"]]
        assert len(words) <= 3 and len(query["text"]) <= 30, "a keyword query is 1-3 words"


def test_paraphrase_queries_share_no_term_with_their_cards(bench) -> None:
    assert paraphrase_overlaps(bench()) == {}


def test_shared_terms_are_detected(bench) -> None:
    # The check itself must see a shared term: append each relevant card's title to its query.
    leaky = [{**query, "text": f"{query['text']} {by_id(bench())[query['relevant'][0]]['title']}"}
             for query in bench()["queries"] if query["type"] == "paraphrase"]
    copy = {**bench(), "queries": leaky}
    assert set(paraphrase_overlaps(copy)) == {query["id"] for query in copy["queries"]}


def test_compound_queries_find_their_word_only_inside_longer_words(bench) -> None:
    compound_queries = [query for query in bench()["queries"] if query.get("compounds")]
    assert len(compound_queries) >= MIN_COMPOUND_QUERIES
    for query in compound_queries:
        assert query_terms(query["text"]) == [query["text"]], "a compound query is one bare word"
        for compound in query["compounds"]:
            assert query["text"] in compound and query["text"] != compound
        for card_id in query["relevant"]:
            text = card_text(by_id(bench())[card_id])
            assert query["text"] in text, (query["id"], card_id)
            rest = re.sub("|".join(map(re.escape, query["compounds"])), " ", text)
            assert query["text"] not in rest, f"{card_id} says {query['text']} outside {query['compounds']}"


def test_hard_negative_pairs_are_distinct_cards_and_tested_by_queries(bench) -> None:
    pairs = bench()["hardNegatives"]
    assert len(pairs) >= MIN_HARD_NEGATIVE_PAIRS
    relevant = {card_id for query in bench()["queries"] for card_id in query["relevant"]}
    for pair in pairs:
        first, second = pair["cards"]
        assert first != second and {first, second} <= set(by_id(bench())), pair
        assert {first, second} & relevant, f"no query asks for either card of {pair}"
