"""Text helpers the extractors and the summarizer share: sentences, clauses, quotes and short item keys.

`split_sentences` cuts after 。！？!?; and newlines and at ". "; `clauses` cuts a sentence at
，,、：: so one rule sees one statement; `quote` picks the shortest verbatim span that still keeps
a card's confidence (5+ characters); `compact_key` turns a phrase into a short stable itemKey
through the rules' `normalize_item_key`. `redact` drops every sentence that carries a secret, so
no summary, report or prompt repeats one. Pure: no ORM.
"""

from __future__ import annotations

import re

from memory.rules.errors import SchemaError
from memory.rules.item_keys import normalize_item_key
from memory.rules.sensitive import find_sensitive_content

__all__ = [
    "CJK",
    "REDACTED",
    "clauses",
    "compact_key",
    "looks_chinese",
    "quote",
    "redact",
    "split_sentences",
    "trim_text",
]

CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
REDACTED = "[已省略敏感内容]"

_SENTENCE_SPLIT = re.compile(r"(?<=[。！？!?；;\n])|(?<=\.)\s+")
_CLAUSE_SPLIT = re.compile(r"(?<=[，,、：:])")


def split_sentences(text: str) -> list[str]:
    """Return the sentences of `text` (split after 。！？!?; and newlines, and at ". "), punctuation kept."""
    return [part for part in _SENTENCE_SPLIT.split(text) if part.strip()]


def clauses(sentence: str) -> list[str]:
    """Return the clauses of `sentence` (split after ，,、：:), punctuation kept."""
    return [part for part in _CLAUSE_SPLIT.split(sentence) if part.strip()]


def looks_chinese(text: str) -> bool:
    """Return True when `text` has at least two CJK characters (titles are then written in Chinese)."""
    return len(re.findall(f"[{CJK}]", text)) >= 2


def trim_text(text: str) -> str:
    """Return `text` without surrounding whitespace, quotes and punctuation."""
    return text.strip().strip("，,。.!！?？;；:：、~ \t\n\"'“”‘’")


def quote(clause: str, sentence: str, message: str) -> str:
    """Return the shortest of clause, sentence and message that is long enough for high confidence."""
    for candidate in (clause, sentence, message):
        stripped = candidate.strip()
        if len(stripped.replace(" ", "")) >= 5:
            return stripped
    return message.strip()


def compact_key(text: str) -> str | None:
    """Return a short stable itemKey for a phrase (first words or CJK characters), or None."""
    text = trim_text(text)
    if looks_chinese(text):
        chars = "".join(ch for ch in text if re.match(f"[{CJK}A-Za-z0-9]", ch))
        candidates = [chars[:12], chars[:8], chars[:4]]
    else:
        words = [w for w in re.findall(r"[A-Za-z0-9']+", text.lower()) if not any(c.isdigit() for c in w)]
        words = [w for w in words if w not in {"a", "an", "the", "my", "to", "please"}]
        candidates = [" ".join(words[:5]), " ".join(words[:3]), " ".join(words[:1])]
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return normalize_item_key(candidate)
        except SchemaError:
            continue
    return None


def redact(text: str | None) -> str:
    """Return `text` with every sentence that carries a secret replaced by a marker."""
    if not text:
        return ""
    if not find_sensitive_content(text):
        return text
    return "".join(REDACTED if find_sensitive_content(part) else part for part in split_sentences(text))
