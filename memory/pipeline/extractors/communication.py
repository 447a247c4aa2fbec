"""Communication rules: the reply language, how to address the user, and reply style.

「用中文回答」 / "reply in English" sets `language_preference` (a wish, not 「我会说英语」, an
ability); 「叫我X」 / "call me X" the `interaction_contract` `{"addressUserAs": X}`; explicit
style wishes (「以后回答简短」, "no emoji", "plain text") a `communication_preference` per
aspect (length, emoji, format). Pure: no ORM.
"""

from __future__ import annotations

import re

from memory.pipeline.extractors.draft import Clause, PlanDraft, node_draft
from memory.pipeline.sentences import CJK, trim_text

__all__ = ["address", "language", "style"]

_LANGUAGES: tuple[tuple[str, str, str, str], ...] = (
    # (pattern, code, Chinese name, English name)
    (r"中文|汉语|普通话|chinese|mandarin", "zh", "中文", "Chinese"),
    (r"英文|英语|english", "en", "英文", "English"),
    (r"日语|日文|japanese", "ja", "日语", "Japanese"),
    (r"韩语|韩文|korean", "ko", "韩语", "Korean"),
    (r"法语|法文|french", "fr", "法语", "French"),
    (r"德语|德文|german", "de", "德语", "German"),
    (r"西班牙语|spanish", "es", "西班牙语", "Spanish"),
)
_LANGUAGE_NAMES = "|".join(pattern for pattern, *_ in _LANGUAGES)
_LANGUAGE_ZH = re.compile(
    rf"(?:用|说|讲|改用|换成)(?P<lang>{_LANGUAGE_NAMES})(?:来)?(?P<verb>回答|回复|交流|聊天|聊|沟通|跟我说|和我说|对我说|写|说话)?"
    rf"|(?:回答|回复)(?:都)?(?:用|请用)(?P<lang2>{_LANGUAGE_NAMES})",
    re.IGNORECASE,
)
_LANGUAGE_EN = re.compile(
    rf"\b(?:reply|respond|answer|talk|speak|write|communicate|chat)(?:\s+to\s+me)?\s+(?:only\s+)?in\s+"
    rf"(?P<lang>{_LANGUAGE_NAMES})\b|\b(?:use|switch\s+to)\s+(?P<lang2>{_LANGUAGE_NAMES})\b",
    re.IGNORECASE,
)

_ADDRESS_ZH = re.compile(
    rf"(?:^|[，,。！!\s]|以后|今后|请|你|就|可以|直接|都)(?:叫我|称呼我为?|喊我)(?P<x>[{CJK}A-Za-z0-9·]{{1,8}})"
)
_ADDRESS_EN = re.compile(
    r"\b(?:please\s+)?call\s+me\s+(?P<x>[A-Za-z][\w\-']*(?:\s+[A-Z][\w\-']*){0,2})", re.IGNORECASE
)
_ADDRESS_TAIL_ZH = re.compile(r"(?:就行了?|就好了?|就可以了?|好了|吧|哦|呀|啊|啦|了|就是)$")
_ADDRESS_BAD_START = re.compile(r"^(?:去|来|做|帮|把|给|别|不|吃|起床|过去|回家)")

_STYLES: tuple[tuple[re.Pattern[str], str, str, str, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), item_key, value, title_zh, title_en)
    for pattern, item_key, value, title_zh, title_en in (
        (
            r"简短|简洁|短一点|少说废话|精简|\bconcise(?:ly)?\b|\bbrief(?:ly)?\b|\bshort(?:er)?\s+(?:answers|replies)\b",
            "length",
            "concise",
            "回答简洁",
            "Keep answers concise",
        ),
        (
            r"详细|多解释|\bdetailed\b|\bmore\s+detail\b|\bin\s+detail\b",
            "length",
            "detailed",
            "回答详细",
            "Give detailed answers",
        ),
        (
            r"(?:不要|别|不用|少用)(?:再)?(?:用|加|发)?(?:表情|emoji)|\bno\s+emojis?\b|\bwithout\s+emojis?\b"
            r"|\bnever\s+use\s+emojis?\b|\bdon'?t\s+use\s+emojis?\b",
            "emoji",
            "no emoji",
            "不用表情符号",
            "No emoji",
        ),
        (
            r"(?:不要|别)(?:再)?(?:用)?markdown|\bno\s+markdown\b|\bplain\s+text\b|纯文本",
            "format",
            "plain text",
            "用纯文本回答",
            "Answer in plain text",
        ),
    )
)


def language(draft: PlanDraft, ctx: Clause) -> int:
    """用中文回答 / "reply in English": the reply language (a wish, not an ability)."""
    match = _LANGUAGE_ZH.search(ctx.clause) or _LANGUAGE_EN.search(ctx.clause)
    if match is None:
        return 0
    if (
        match.re is _LANGUAGE_ZH
        and match.group("lang")
        and not match.group("verb")
        and not (ctx.explicit or re.search(r"请|以后|都|你|改用|换成", ctx.clause))
    ):
        return 0  # "我会说英语" states an ability, not a wish
    spoken = (match.group("lang") or match.group("lang2")).lower()
    code, name_zh, name_en = next(
        (code, zh, en) for pattern, code, zh, en in _LANGUAGES if re.fullmatch(pattern, spoken, re.IGNORECASE)
    )
    node = node_draft(
        "language_preference",
        value_json=code,
        importance=0.9,
        title=f"用户希望用{name_zh}回复" if ctx.zh else f"Reply in {name_en}",
        content=f"回复用户时使用{name_zh}。" if ctx.zh else f"Reply to the user in {name_en}.",
        tags=["语言"] if ctx.zh else ["language"],
        entities=[name_zh if ctx.zh else name_en],
    )
    return draft.add(
        ctx, node, "用户说明回复语言" if ctx.zh else "the user set the reply language", explicit=True
    )


def address(draft: PlanDraft, ctx: Clause) -> int:
    """叫我X / "call me X": how to address the user."""
    match = _ADDRESS_ZH.search(ctx.clause) or _ADDRESS_EN.search(ctx.clause)
    if match is None:
        return 0
    name = trim_text(match.group("x"))
    if match.re is _ADDRESS_ZH:
        name = _ADDRESS_TAIL_ZH.sub("", name)
        if not name or _ADDRESS_BAD_START.match(name):
            return 0
    else:
        name = re.split(r"\s+(?:from|please|instead|now|going|in|when|and)\b", name, flags=re.IGNORECASE)[0]
    if not name or len(name) > 30:
        return 0
    node = node_draft(
        "interaction_contract",
        value_json={"addressUserAs": name},
        importance=0.9,
        title=f"称呼用户为{name}" if ctx.zh else f"Call the user {name}",
        content=f"与用户交流时称呼对方为「{name}」。" if ctx.zh else f"Address the user as {name}.",
        tags=["称呼"] if ctx.zh else ["addressing"],
        entities=[name],
    )
    return draft.add(
        ctx, node, "用户说明希望的称呼" if ctx.zh else "the user said how to be addressed", explicit=True
    )


def style(draft: PlanDraft, ctx: Clause) -> int:
    """Explicit reply-style wishes (简短, "no emoji", "plain text"): one preference per aspect."""
    if not (ctx.explicit or ctx.correction):
        return 0
    count = 0
    for pattern, item_key, value, title_zh, title_en in _STYLES:
        if pattern.search(ctx.clause):
            node = node_draft(
                "communication_preference",
                item_key=item_key,
                value_json=value,
                importance=0.8,
                title=title_zh if ctx.zh else title_en,
                content=trim_text(ctx.clause) or ctx.clause,
                tags=["沟通风格"] if ctx.zh else ["style"],
            )
            count += draft.add(ctx, node, "用户说明回复风格" if ctx.zh else "the user set a reply style")
    return count
