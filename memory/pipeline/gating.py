"""Gating (seed 001): which user messages are worth reading, and which ask to be remembered now.

`is_trivial` skips empty, very short messages and those made only of greetings, thanks and acks;
a run whose messages are all trivial never calls an extractor. `has_explicit_statement` is the
"explicit" extraction trigger: an explicit statement (「记住」「以后都」, "remember", "from now
on", "always"/"never"), a correction (「不对」「其实」, "actually") or a task ("remind me to",
「提醒我」). `is_explicit`, `is_correction`, `mentions_task` and `is_question` are the same tests
per text, for the rule extractor. Pure: no ORM.
"""

from __future__ import annotations

import re
import unicodedata

from memory.pipeline.sentences import split_sentences

__all__ = [
    "has_explicit_statement",
    "is_correction",
    "is_explicit",
    "is_question",
    "is_trivial",
    "mentions_task",
]

_TRIVIAL_TOKENS = (
    "hi|hello|hey|heya|hiya|yo|goodmorning|goodafternoon|goodevening|goodnight|morning|thanks|thank|thankyou"
    "|thx|ty|cheers|ok|okay|k|cool|great|nice|gotit|sure|yes|yeah|yep|no|nope|bye|goodbye|seeyou|much|so|very"
    "|a|lot|you|too|alright|perfect|awesome|fine"
    "|你好|您好|嗨|哈喽|哈啰|早上好|早安|上午好|中午好|下午好|晚上好|晚安|谢谢|谢啦|多谢|感谢|谢|你|您|啦|呀|啊|哈"
    "|好的|好滴|好|嗯|嗯嗯|哦|噢|收到|明白|明白了|知道了|了解|可以|行|没问题|再见|拜拜|大家|了|的|哈哈|呵呵|ok"
)
_TRIVIAL = re.compile(rf"(?:{_TRIVIAL_TOKENS})+")
MIN_MESSAGE_CHARS = 2

_EXPLICIT_ZH = re.compile(
    r"记住|记下|记一下|帮我记|请记|以后|今后|往后|从今|从现在起|从现在开始|一直|永远|每次都|总是"
    r"|别再|不要再|再也不|长期"
)
_EXPLICIT_EN = re.compile(
    r"(?:^|[.!?,;:]\s*|\bplease\s+|\band\s+|\bto\s+)remember\b|\bfrom\s+now\s+on\b|\bgoing\s+forward\b"
    r"|\bfrom\s+here\s+on\b|\balways\b|\bnever\b|\bkeep\s+in\s+mind\b|\bnote\s+that\b|\bmake\s+a\s+note\b"
    r"|\bfor\s+future\s+reference\b|\bin\s+(?:the\s+)?future\b|\bevery\s+time\b|\bno\s+more\b",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"不对|其实|现在可以|现在能|更正|纠正|改成|改为|说错了|搞错了|不再|已经不"
    r"|\bactually\b|\bcorrection\b|\bi\s+meant\b|\bno\s+longer\b|\bnot\s+anymore\b|\bany\s*more\b"
    r"|\bscratch\s+that\b|\bchanged\s+my\s+mind\b|\bi\s+was\s+wrong\b",
    re.IGNORECASE,
)
_TASK = re.compile(
    r"\bto-?do\b|\bremind\s+me\b|\bdon'?t\s+(?:let\s+me\s+)?forget\s+to\b|待办|提醒我|别忘了"
    r"|帮我.{1,40}?(?:完成|做完|搞定|写完|弄完)",
    re.IGNORECASE,
)
_QUESTION_END = re.compile(r"(?:[?？]|吗|么)\s*[。.!！~]*\s*$")


def _letters(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if ch.isalnum())


def is_trivial(content: str | None) -> bool:
    """Return True for messages extraction skips: empty, too short, or only greetings, thanks and acks."""
    letters = _letters(content or "")
    return len(letters) < MIN_MESSAGE_CHARS or bool(_TRIVIAL.fullmatch(letters))


def is_question(sentence: str) -> bool:
    """Return True when `sentence` ends as a question (?, ？, 吗, 么)."""
    return bool(_QUESTION_END.search(sentence))


def is_explicit(text: str) -> bool:
    """Return True when a sentence of `text`, not a question, uses explicit words (「记住」, "always")."""
    return any(
        (_EXPLICIT_ZH.search(sentence) or _EXPLICIT_EN.search(sentence)) and not is_question(sentence)
        for sentence in split_sentences(text)
    )


def is_correction(text: str) -> bool:
    """Return True when `text` corrects something said before (「不对」「其实」, "actually", "no longer")."""
    return bool(_CORRECTION.search(text))


def mentions_task(text: str) -> bool:
    """Return True when `text` asks for a task ("remind me to", 「提醒我」, 「帮我…完成」)."""
    return bool(_TASK.search(text))


def has_explicit_statement(content: str | None) -> bool:
    """Return True when a user message states something to keep now: explicit, a correction or a task."""
    if is_trivial(content) or not content:
        return False
    return is_explicit(content) or is_correction(content) or mentions_task(content)
