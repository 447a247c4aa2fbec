"""The scale bench's generated data is deterministic and shaped as bench/README.md says (no database).

bench/scale.py caches vectors on disk keyed by the corpus seed and count, so the same seed must always
give the same texts; the layout must hold the tenants issue 13 names.
"""

from __future__ import annotations

from collections import Counter

from bench.scale_corpus import Corpus
from bench.scale_seed import layout, text_index
from memory.rules.item_keys import normalize_item_key


def test_the_same_seed_gives_the_same_texts_and_another_seed_other_texts():
    first, again, other = Corpus(1), Corpus(1), Corpus(2)
    assert [first.card(i) for i in range(50)] == [again.card(i) for i in range(50)]
    assert [first.message(i) for i in range(50)] == [again.message(i) for i in range(50)]
    assert [first.hybrid_query(i) for i in range(20)] == [again.hybrid_query(i) for i in range(20)]
    assert [first.card(i) for i in range(50)] != [other.card(i) for i in range(50)]
    assert first.card(7) == Corpus(1).card(7)  # an index alone, without generating the ones before it


def test_cards_are_bilingual_mostly_distinct_with_a_long_tail_of_rare_words():
    corpus = Corpus(1)
    cards = [corpus.card(i) for i in range(3000)]
    german = sum(
        " der " in f" {c.content} " or " die " in f" {c.content} " or "Nutzer" in c.content for c in cards
    )
    assert 0.35 < german / len(cards) < 0.65
    assert len({card.embedding_text for card in cards}) > 0.85 * len(cards)
    words = Counter(word.lower() for card in cards for word in card.content.split())
    counts = sorted(words.values(), reverse=True)
    assert counts[0] > 50 * counts[len(counts) // 2]  # a few words everywhere, most words rare
    for card in cards:
        normalize_item_key(card.item_key)  # the write rules accept every generated item key


def test_the_full_layout_holds_one_100k_user_tenants_of_10k_and_1k_and_1m_cards():
    full = layout(quick=False)
    sizes = Counter(plan.cards for plan in full.tenants)
    assert full.cards == 1_000_000 and len(full.tenants) >= 200
    assert sizes[100_000] == 1 and sizes[10_000] >= 10 and sizes[1_000] >= 40
    big = full.tenants[0]
    assert big.members == 1
    assert len({text_index(full, big, position) for position in range(big.cards)}) == big.cards
    quick = layout(quick=True)
    assert quick.cards == 50_000 and {plan.slug for plan in quick.tenants}.isdisjoint(
        {plan.slug for plan in full.tenants}
    )
