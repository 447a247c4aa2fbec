"""Search segmentation, query terms, tsquery quoting and token counting (pure functions, no database)."""

from __future__ import annotations

import re
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.rules.text import (
    STOP_WORDS,
    count_tokens,
    query_terms,
    segment_for_search,
    truncate_to_tokens,
    tsquery_text,
)


def indexed(*parts: str | None) -> set[str]:
    return set(segment_for_search(*parts).split())


def test_chinese_word_is_found_inside_a_sentence() -> None:
    assert "香菜" in indexed("我不吃香菜")
    assert set(query_terms("香菜")) <= indexed("我不吃香菜")


def test_a_chinese_word_finds_the_longer_compound_that_contains_it() -> None:
    # Whatever jieba makes of the compound (one unknown word, a dictionary word, single characters),
    # the word inside it is one of the document's terms.
    for word, compound in [
        ("微信", "我们建了一个微信群"),
        ("猫砂", "猫砂盆该换了"),
        ("钉钉", "项目沟通用钉钉群"),
        ("花椒", "做菜少放花椒油"),
        ("飞书", "会议纪要放在飞书文档"),
        ("猫粮", "记得买猫粮"),
        ("猫", "家里有一只橘猫"),
    ]:
        assert set(query_terms(word)) & indexed(compound), (word, compound)


def test_a_chinese_query_does_not_fall_apart_into_single_characters() -> None:
    # 飞书 is cut into 飞 + 书 by jieba; as single characters it would match every text with 书.
    assert query_terms("飞书") == ["飞书"]
    assert not set(query_terms("飞书")) & indexed("我在看一本书")
    assert not set(query_terms("微信")) & indexed("微博和短信")
    # A lone content character stays a term (猫, 辣), and stop words still break a run.
    assert query_terms("猫") == ["猫"]
    assert "猫" in query_terms("我的猫")


def test_chinese_dinner_question_shares_a_term_with_the_preference() -> None:
    # 「今晚吃什么」 must reach 「我不吃香菜」 by keyword: jieba makes "不吃", the index also keeps "吃".
    assert set(query_terms("今晚吃什么")) & indexed("我不吃香菜")
    assert {"油", "辣"} <= indexed("少油少辣")


def test_mixed_text_splits_cjk_from_latin_and_folds_width_and_case() -> None:
    tokens = segment_for_search("Ekko的API在２０２４年上线，ＡＢＣ香菜！").split()
    assert tokens[:3] == ["ekko", "的", "api"]
    assert "2024" in tokens and "abc" in tokens and "香菜" in tokens
    assert all(re.fullmatch(r"\w+", token) for token in tokens)


def test_english_is_lowercased_split_at_punctuation_and_stemmed_on_both_sides() -> None:
    assert segment_for_search("Alice's CATS & dogs; boxes, glasses. Status!") == (
        "alic cat dog box glass status"
    )
    assert segment_for_search("I don’t eat coriander") == segment_for_search("I don't eat coriander")
    for query, document in [
        ("cats", "a cat"),
        ("Cat", "two cats"),
        ("boxes", "the box"),
        ("When did she paint a sunrise?", "I painted that lake sunrise last year"),
        ("running", "She runs every morning"),
        ("adoption agencies", "We want to adopt; the agency called"),
    ]:
        assert set(query_terms(query)) <= indexed(document), (query, document)
    assert segment_for_search("2024 x86 ab") == "2024 x86 ab", "numbers and short words stay as they are"


def test_segmentation_skips_empty_parts_and_is_deterministic() -> None:
    assert segment_for_search("咖啡", None, "", "Tea") == "咖啡 咖 啡 tea"
    assert segment_for_search() == ""
    text = "用户说他以后都不喝咖啡了, from now on no coffee; 张三丰喜欢太极拳"
    assert len({segment_for_search(text) for _ in range(5)}) == 1


def test_segmentation_is_safe_from_many_threads_at_once() -> None:
    expected = segment_for_search("我住在北京市朝阳区")
    results: list[str] = []

    def work() -> None:
        results.append(segment_for_search("我住在北京市朝阳区"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 8


def test_query_terms_drop_stop_words_and_duplicates_in_order() -> None:
    assert query_terms("What did the user say about coffee?") == ["say", "coffe"]
    assert query_terms("你知道我喜欢喝什么咖啡吗") == ["喜欢", "喝", "咖啡"]
    assert query_terms("coffee Coffee COFFEES 咖啡 咖啡") == ["coffe", "咖啡"]
    assert query_terms("the users, what is it? 的 了 是 我 他们") == []
    assert query_terms("") == []


def test_stop_word_list_covers_common_english_and_chinese_function_words() -> None:
    assert len(STOP_WORDS) >= 150
    required = "the a an is are was user i you he she it we they what how when did do does of to in on"
    assert set(required.split()) <= STOP_WORDS
    assert set("的 了 是 我 你 他 她 它 们 在 和 吗 呢 吧 什么 怎么 一个".split()) <= STOP_WORDS


def parse_tsquery_operands(query: str) -> list[str]:
    """Split `'a' | 'b'` back into raw terms, failing if anything outside the quotes is not ` | `."""
    operand = r"'((?:[^'\\]|''|\\.)*)'"
    assert re.fullmatch(rf"(?:{operand}(?: \| {operand})*)?", query, flags=re.DOTALL), query
    unescape = re.compile(r"''|\\(.)", flags=re.DOTALL)
    return [
        unescape.sub(lambda match: match.group(1) or "'", raw)
        for raw in re.findall(operand, query, flags=re.DOTALL)
    ]


def test_tsquery_quotes_every_term_so_operators_stay_text() -> None:
    nasty = ["it's", "a\\b", "&|!():*", "x'y\\'z", "\\", "'", "<->", "a & b | !c", "'; drop table x; --"]
    query = tsquery_text(["香菜", *nasty])
    assert query.startswith("'香菜' | ")
    assert parse_tsquery_operands(query) == ["香菜", *nasty]
    assert tsquery_text(["coffee", "tea"]) == "'coffee' | 'tea'"


def test_tsquery_skips_blank_terms_and_is_empty_for_no_terms() -> None:
    assert tsquery_text([]) == ""
    assert tsquery_text(["", "  ", "tea"]) == "'tea'"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), max_size=6))
def test_tsquery_round_trips_any_terms(terms: list[str]) -> None:
    assert parse_tsquery_operands(tsquery_text(terms)) == [term for term in terms if term.strip()]


def test_count_tokens_counts_english_and_chinese() -> None:
    assert count_tokens("I do not eat coriander") > 0
    assert count_tokens("我不吃香菜") > 0
    assert count_tokens("") == 0
    # Special-token markup inside user text is counted as text, not rejected.
    assert count_tokens("<|endoftext|>") > 1


def test_truncate_to_tokens_respects_the_limit_and_whole_characters() -> None:
    text = "用户不吃香菜，也不喜欢辣椒。The user prefers tea over coffee in the morning. " * 5
    total = count_tokens(text)
    for limit in [1, 2, 3, 7, 10, 25, total - 1]:
        prefix = truncate_to_tokens(text, limit)
        assert count_tokens(prefix) <= limit
        assert text.startswith(prefix)
        assert "\ufffd" not in prefix
    assert truncate_to_tokens(text, total) == text
    assert truncate_to_tokens(text, 0) == ""
    assert truncate_to_tokens("", 5) == ""


def test_long_text_is_counted_in_bounded_pieces_that_cover_it_exactly():
    """BPE is quadratic in one pre-token: a long Chinese run must reach the encoder in short pieces."""
    from memory.rules import text as text_rules

    run = "我们今天去超市买了很多东西包括香菜花生辣椒牛奶海鲜" * 400
    mixed = ("remember to buy cilantro " * 30) + run
    for sample in (run, mixed):
        pieces = text_rules._bounded_pieces(sample)
        assert "".join(pieces) == sample
        assert max(len(piece) for piece in pieces) <= text_rules.TOKEN_PIECE_CHARS
    assert text_rules._bounded_pieces(mixed)[0].endswith("cilantro")  # cut at a space where one is near
    encoder = text_rules._get_encoder()
    short = "我不吃香菜, and no peanuts either."
    assert text_rules.count_tokens(short) == len(encoder.encode_ordinary(short))
    # Piecewise counting moves a long count by at most one token per piece.
    sample = run[:1000]
    assert abs(text_rules.count_tokens(sample) - len(encoder.encode_ordinary(sample))) <= len(
        text_rules._bounded_pieces(sample))
    assert text_rules.count_tokens(text_rules.truncate_to_tokens(run, 300)) <= 300
