"""Extraction plans and the rule-based extractor: pure functions from messages to a `MemoryExtraction`.

A plan is seed 000's `MemoryExtraction`: an optional `summaryPatch` and a list of items
`{operation: create|update|supersede|expire|ignore, targetId?, node, reason}`, extended with the
`sourceMessageIds` each item rests on and whether the user stated it explicitly. `plan_from_json`
reads that JSON (what the LLM extractor returns) and refuses malformed shapes with `PlanError`;
`MemoryExtraction.to_json` writes it back. `extract_by_rules` is the default extractor: it reads
user messages only, skips greetings, thanks and messages that carry secrets, and recognises
explicit statements (「记住」「以后都」, "remember", "from now on", "always"/"never"), food
preferences (不吃X, 少油少辣, 喜欢吃X), how to address the user, the reply language, corrections,
tasks and temporary states. Every node it proposes quotes the message verbatim (`source_quote`),
so the confidence contract keeps its confidence. Node drafts use the snake_case names of
`memory.services.nodes.node_write_batch`. Nothing here touches the ORM; the rules it writes under
(kinds, scopes, sensitive content) are enforced again by the write service.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Any

from memory.rules.schema import (
    DEFAULT_KINDS,
    SchemaError,
    find_sensitive_content,
    normalize_item_key,
    normalize_value,
)

__all__ = [
    "OPERATIONS",
    "KnownNode",
    "MemoryExtraction",
    "PlanError",
    "PlanItem",
    "SourceMessage",
    "extract_by_rules",
    "has_explicit_statement",
    "is_trivial",
    "looks_chinese",
    "plan_from_json",
    "split_sentences",
    "trim_text",
]

OPERATIONS: tuple[str, ...] = ("create", "update", "supersede", "expire", "ignore")
MAX_PLAN_ITEMS = 100
NODE_FIELDS: dict[str, str] = {
    # plan JSON (camelCase) -> node draft (snake_case); session, workspace and user are the run's to decide.
    "kind": "kind",
    "itemKey": "item_key",
    "scope": "scope",
    "valueJson": "value_json",
    "title": "title",
    "content": "content",
    "confidence": "confidence",
    "importance": "importance",
    "tags": "tags",
    "entities": "entities",
    "expiresAt": "expires_at",
    "sourceQuote": "source_quote",
    "type": "type",
    "domain": "domain",
    "categoryPath": "category_path",
}


class PlanError(ValueError):
    """The extractor's output is not a MemoryExtraction plan; the message says what is wrong."""


@dataclass(frozen=True)
class SourceMessage:
    """One captured message as the extractor sees it."""

    message_id: str
    role: str
    content: str
    created_at: datetime | None = None
    time_zone: tzinfo | None = None


@dataclass(frozen=True)
class KnownNode:
    """An active memory the session's user can already see (corrections and merges target these)."""

    node_id: str
    kind: str
    key: str
    scope: str
    revision: int
    item_key: str | None = None
    value_json: Any = None
    title: str = ""


@dataclass
class PlanItem:
    operation: str
    node: dict[str, Any]
    reason: str
    target_id: str | None = None
    source_message_ids: tuple[str, ...] = ()
    explicit_user_intent: bool = False
    # Set when the item could not be read (a lenient plan keeps it so the run can report it).
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        reverse = {snake: camel for camel, snake in NODE_FIELDS.items()}
        node = {reverse.get(name, name): _jsonable(value) for name, value in self.node.items()}
        return {
            "operation": self.operation,
            "targetId": self.target_id,
            "node": node,
            "reason": self.reason,
            "sourceMessageIds": list(self.source_message_ids),
            "explicitUserIntent": self.explicit_user_intent,
        }


@dataclass
class MemoryExtraction:
    nodes: list[PlanItem] = field(default_factory=list)
    summary_patch: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nodes": [item.to_json() for item in self.nodes]}
        if self.summary_patch:
            data["summaryPatch"] = self.summary_patch
        return data


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


# --------------------------------------------------------------------------- plan JSON


def _parse_datetime(raw: Any, where: str) -> datetime | None:
    if raw in (None, ""):
        return None
    if not isinstance(raw, str):
        raise PlanError(f"{where}.expiresAt must be an ISO 8601 string or null.")
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise PlanError(f"{where}.expiresAt {raw!r} is not an ISO 8601 date-time.") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def plan_from_json(
    data: Any, *, message_ids: Collection[str] | None = None, lenient_items: bool = False
) -> MemoryExtraction:
    """Return the plan in `data` (seed 000's MemoryExtraction JSON), or raise PlanError.

    Source message ids outside `message_ids` (the run's input) are dropped, so a plan can only
    cite the messages it was shown. Node fields other than the catalogue's are ignored: the run,
    not the model, decides the session, workspace and user a memory belongs to. With
    `lenient_items`, an unreadable item becomes an `ignore` item carrying `error` instead of
    failing the whole plan.
    """
    if not isinstance(data, dict):
        raise PlanError("The plan must be a JSON object with a `nodes` array.")
    raw_items = data.get("nodes", [])
    if not isinstance(raw_items, list):
        raise PlanError("`nodes` must be an array of plan items.")
    if len(raw_items) > MAX_PLAN_ITEMS:
        raise PlanError(f"A plan holds at most {MAX_PLAN_ITEMS} items; got {len(raw_items)}.")
    patch = data.get("summaryPatch")
    if patch is not None and not isinstance(patch, str):
        raise PlanError("`summaryPatch` must be a string when present.")
    items = []
    for index, raw in enumerate(raw_items):
        try:
            items.append(_item_from_json(raw, f"nodes[{index}]", message_ids))
        except PlanError as error:
            if not lenient_items:
                raise
            items.append(
                PlanItem(operation="ignore", node={}, reason="unreadable plan item", error=str(error))
            )
    return MemoryExtraction(nodes=items, summary_patch=(patch or "").strip() or None)


def _item_from_json(raw: Any, where: str, message_ids: Collection[str] | None) -> PlanItem:
    if not isinstance(raw, dict):
        raise PlanError(f"{where} must be an object.")
    operation = raw.get("operation")
    if operation not in OPERATIONS:
        raise PlanError(f"{where}.operation must be one of {', '.join(OPERATIONS)}; got {operation!r}.")
    node_raw = raw.get("node") or {}
    if not isinstance(node_raw, dict):
        raise PlanError(f"{where}.node must be an object.")
    node: dict[str, Any] = {}
    for camel, snake in NODE_FIELDS.items():
        if camel in node_raw:
            node[snake] = node_raw[camel]
    if "expires_at" in node:
        node["expires_at"] = _parse_datetime(node["expires_at"], where)
    for name in ("tags", "entities", "category_path"):
        if name in node and not (
            isinstance(node[name], list) and all(isinstance(v, str) for v in node[name])
        ):
            raise PlanError(f"{where}.node.{name} must be an array of strings.")
    if operation == "create" and not node.get("kind"):
        raise PlanError(f"{where}: create needs node.kind from the catalogue.")
    target = raw.get("targetId")
    if target is not None and not isinstance(target, str):
        raise PlanError(f"{where}.targetId must be a string.")
    if operation in ("update", "expire") and not target:
        raise PlanError(f"{where}: {operation} needs targetId (an id from the known memories).")
    cited = raw.get("sourceMessageIds") or []
    if not isinstance(cited, list) or not all(isinstance(v, str) for v in cited):
        raise PlanError(f"{where}.sourceMessageIds must be an array of message ids.")
    if message_ids is not None:
        cited = [v for v in cited if v in message_ids]
    reason = raw.get("reason")
    reason = reason.strip() if isinstance(reason, str) and reason.strip() else "proposed by the extractor"
    return PlanItem(
        operation=operation,
        node=node,
        reason=reason[:2000],
        target_id=target or None,
        source_message_ids=tuple(dict.fromkeys(cited)),
        explicit_user_intent=raw.get("explicitUserIntent") is True,
    )


# --------------------------------------------------------------------------- gating

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TRIVIAL_TOKENS = (
    "hi|hello|hey|heya|hiya|yo|goodmorning|goodafternoon|goodevening|goodnight|morning|thanks|thank|thankyou"
    "|thx|ty|cheers|ok|okay|k|cool|great|nice|gotit|sure|yes|yeah|yep|no|nope|bye|goodbye|seeyou|much|so|very"
    "|a|lot|you|too|alright|perfect|awesome|fine"
    "|你好|您好|嗨|哈喽|哈啰|早上好|早安|上午好|中午好|下午好|晚上好|晚安|谢谢|谢啦|多谢|感谢|谢|你|您|啦|呀|啊|哈"
    "|好的|好滴|好|嗯|嗯嗯|哦|噢|收到|明白|明白了|知道了|了解|可以|行|没问题|再见|拜拜|大家|了|的|哈哈|呵呵|ok"
)
_TRIVIAL = re.compile(rf"(?:{_TRIVIAL_TOKENS})+")
MIN_MESSAGE_CHARS = 2


def _letters(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if ch.isalnum())


def is_trivial(content: str | None) -> bool:
    """Return True for messages extraction skips: empty, too short, or only greetings, thanks and acks."""
    letters = _letters(content or "")
    return len(letters) < MIN_MESSAGE_CHARS or bool(_TRIVIAL.fullmatch(letters))


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


def _is_question(sentence: str) -> bool:
    return bool(_QUESTION_END.search(sentence))


def _explicit(text: str) -> bool:
    return any(
        (_EXPLICIT_ZH.search(sentence) or _EXPLICIT_EN.search(sentence)) and not _is_question(sentence)
        for sentence in split_sentences(text)
    )


def has_explicit_statement(content: str | None) -> bool:
    """Return True when a user message states something to keep now: explicit, a correction or a task."""
    if is_trivial(content) or not content:
        return False
    return _explicit(content) or bool(_CORRECTION.search(content)) or bool(_TASK.search(content))


# --------------------------------------------------------------------------- text helpers

_SENTENCE_SPLIT = re.compile(r"(?<=[。！？!?；;\n])|(?<=\.)\s+")
_CLAUSE_SPLIT = re.compile(r"(?<=[，,、：:])")


def split_sentences(text: str) -> list[str]:
    """Return the sentences of `text` (split after 。！？!?; and newlines, and at ". "), punctuation kept."""
    return [part for part in _SENTENCE_SPLIT.split(text) if part.strip()]


def _clauses(sentence: str) -> list[str]:
    return [part for part in _CLAUSE_SPLIT.split(sentence) if part.strip()]


def looks_chinese(text: str) -> bool:
    """Return True when `text` has at least two CJK characters (titles are then written in Chinese)."""
    return len(re.findall(f"[{_CJK}]", text)) >= 2


def trim_text(text: str) -> str:
    """Return `text` without surrounding whitespace, quotes and punctuation."""
    return text.strip().strip("，,。.!！?？;；:：、~ \t\n\"'“”‘’")


def _quote(clause: str, sentence: str, message: str) -> str:
    """Return the shortest of clause, sentence and message that is long enough for high confidence."""
    for candidate in (clause, sentence, message):
        stripped = candidate.strip()
        if len(stripped.replace(" ", "")) >= 5:
            return stripped
    return message.strip()


def _compact_key(text: str) -> str | None:
    """Return a short stable itemKey for a phrase (first words or CJK characters), or None."""
    text = trim_text(text)
    if looks_chinese(text):
        chars = "".join(ch for ch in text if re.match(f"[{_CJK}A-Za-z0-9]", ch))
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


# --------------------------------------------------------------------------- vocabulary

_INGREDIENTS_ZH = frozenset(
    """
    香菜 葱 大葱 小葱 姜 蒜 大蒜 辣椒 花椒 花生 坚果 海鲜 虾 螃蟹 蟹 贝类 鱼 牛肉 猪肉 羊肉
    鸡肉 鸭肉 鸡蛋 蛋 牛奶 奶制品 芹菜 洋葱 蘑菇 香菇 茄子 青椒 韭菜 苦瓜 胡萝卜 土豆 番茄
    西红柿 豆腐 内脏 动物内脏 味精 酒 白酒 咖啡 奶酪 芝麻 榴莲 豆 黄豆 花菜 西兰花 菠菜 生姜
    八角 桂皮 孜然 芥末 醋 酱油 肥肉 鸡 鸭 鹅 羊 牛 猪 腰果 杏仁 麸质 面筋 面食 米饭 甜食
    """.split()
)
_INGREDIENTS_EN = frozenset(
    """
    cilantro coriander onion onions garlic ginger peanut peanuts nuts shellfish shrimp prawns crab fish
    seafood pork beef lamb mutton chicken duck eggs egg milk dairy cheese gluten wheat soy tofu mushroom
    mushrooms celery eggplant tomato tomatoes pepper peppers chili chilli chilies coffee alcohol sesame
    durian msg meat
    """.split()
)
_FOOD_CONTEXT = re.compile(
    r"做饭|做菜|菜|吃|饭|餐|推荐|菜谱|口味|放|加|料理|烧|炒|煮|烤|食材|饮食|忌口"
    r"|\b(?:cook|cooking|recipe|recipes|dish|dishes|food|meal|meals|eat|eating|dinner|lunch|breakfast|menu)\b",
    re.IGNORECASE,
)
_AVOID_EXCLUDED = frozenset(
    "太多 多 太 辣 油 盐 糖 饭 东西 这个 那个 什么 啥 一点 吃 做 推荐 给我 我 你 他 她 它 了"
    " 这样 那样 这些 那些 它们 忘了 忘记 告诉 说 提醒".split()
)
_AVOID_EXCLUDED_EN = frozenset(
    "it that this them much too anything everything something problem idea thanks thank worries way more one"
    " spicy spice oily salty sweet greasy fried food meals dishes".split()
)
_STOP_IN_ITEM = re.compile(r"也|又|但|而且|并且|还|就|都|吗|呢|吧|啊|呀|哦|了|的|不|没|别|啦|，|。")
_LIST_SPLIT_ZH = re.compile(r"和|、|跟|与|或者|或|以及|及|还有|/")
_LIST_SPLIT_EN = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*/\s*", re.IGNORECASE)

# Verbs are matched on their own and the item read after each, so 「不吃香菜也不吃葱」 yields both.
_AVOID_ZH = re.compile(
    r"不能吃|不吃|不爱吃|不喜欢吃|别给我(?:推荐|做|放|加)|不要给我(?:推荐|做|放|加)|别(?:放|加)"
    r"|不要(?:放|加)?|不想吃|忌口"
)
_ITEM_ZH = re.compile(rf"[{_CJK}A-Za-z0-9·]{{1,16}}")
_AVOID_EN = re.compile(
    r"\b(?P<verb>i\s+(?:don'?t|do\s+not|never|can'?t|cannot|won'?t|no\s+longer)\s+eat"
    r"|don'?t\s+(?:recommend|give\s+me|put|add|use|include|suggest|cook\s+with)|please\s+avoid|avoid|no|without"
    r"|hold\s+the|i\s+(?:hate|dislike))\s+(?P<x>[a-z][a-z\s\-]{1,40}?)"
    r"(?=$|[.,;!?]|\s+(?:please|anymore|any\s*more|in\s+(?:my|the|any)|from\s+now|again|ever|for\s+me|when"
    r"|because|since|thanks|at\s+all|either)\b)",
    re.IGNORECASE,
)
_ALLERGY_ZH = re.compile(rf"对(?P<x>[{_CJK}A-Za-z0-9]{{1,12}}?)过敏")
_ALLERGY_EN = re.compile(
    r"\b(?:i'?m|i\s+am)\s+allergic\s+to\s+(?P<x>[a-z][a-z\s\-]{1,40}?)(?=$|[.,;!?]|\s+and\s+i)", re.IGNORECASE
)
_LIKE_ZH = re.compile(r"最爱吃|最喜欢吃|喜欢吃|爱吃|最爱|最喜欢|喜欢")
_LIKE_EN = re.compile(
    r"\bi\s+(?:really\s+)?(?P<verb>like|love|enjoy|adore)\s+(?P<eating>eating\s+)?(?P<x>[a-z][a-z\s\-]{1,40}?)"
    r"(?=$|[.,;!?]|\s+(?:a\s+lot|very\s+much|so\s+much|please|too)\b)"
    r"|\bmy\s+favou?rite\s+(?:food|dish|ingredient)\s+is\s+(?P<fav>[a-z][a-z\s\-]{1,40}?)(?=$|[.,;!?])",
    re.IGNORECASE,
)

# Flavour phrases; normalize_value turns the joined phrases into {"oil": "low", ...}. 辣椒 is an ingredient.
_FLAVOR = re.compile(
    r"少油|低油|少放油|无油|不放油|少辣|微辣|小辣|不辣|不要辣(?![椒条酱油])|不吃辣(?![椒条酱油])|免辣|中辣|特辣|重辣|多辣"
    r"|加辣|少盐|低盐|少放盐|无盐|不放盐|少糖|低糖|无糖|不加糖|不放糖|清淡"
    r"|\bless\s+(?:oil|oily|greasy|salt|salty|sugar|sweet|spicy|spice)\b|\blow[\s-](?:oil|salt|sodium|sugar)\b"
    r"|\bnot\s+too\s+(?:spicy|oily|greasy|salty|sweet)\b|\bno\s+spic[ey]\b|\bnot\s+spicy\b|\bnon-?spicy\b"
    r"|\bmild(?:ly\s+spicy)?\b|\bsugar-?free\b|\boil-?free\b|\bbland\b",
    re.IGNORECASE,
)
_FLAVOR_WORD = re.compile(r"辣|油|盐|咸|甜|糖|spic|oil|salt|sweet|sugar|greas", re.IGNORECASE)

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
    rf"(?:^|[，,。！!\s]|以后|今后|请|你|就|可以|直接|都)(?:叫我|称呼我为?|喊我)(?P<x>[{_CJK}A-Za-z0-9·]{{1,8}})"
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

_TEMPORAL: tuple[tuple[re.Pattern[str], int], ...] = (
    # (marker, extra days after the message's local day)
    (
        re.compile(
            r"今天|今晚|今早|今天早上|今儿|\btoday\b|\btonight\b|\bthis\s+(?:morning|afternoon|evening)\b"
            r"|\bright\s+now\b|\bat\s+the\s+moment\b",
            re.IGNORECASE,
        ),
        0,
    ),
    (re.compile(r"这两天|这几天|\bthese\s+days\b|\bfor\s+a\s+couple\s+of\s+days\b", re.IGNORECASE), 2),
    (re.compile(r"最近|这周|本周|这阵子|\bthis\s+week\b|\blately\b|\brecently\b", re.IGNORECASE), 7),
)
_STATE_ZH = re.compile(
    r"不舒服|难受|累|疼|痛|感冒|发烧|生病|病了|忙|没空|心情不好|困|饿|失眠|咳嗽|上火|拉肚子|过敏|出差|在外地|不方便|减肥|节食"
    r"|胃|头晕|嗓子|牙|少辣|少油|清淡|不能吃辣|吃素"
)
_STATE_EN = re.compile(
    r"\b(?:tired|exhausted|sick|ill|unwell|busy|stressed|sleepy|hungry|sad|headache|stomach\s*ache"
    r"|stomachache|cold|flu|fever|sore\s+throat|traveling|travelling|on\s+a\s+diet|fasting"
    r"|not\s+feeling\s+(?:well|good|great))\b",
    re.IGNORECASE,
)
_STATE_FILLER_ZH = re.compile(
    r"^(?:我|本人)?(?:今天|今晚|今早|今儿|这两天|这几天|最近|这周|本周|这阵子)?(?:我)?"
    r"(?:有点儿?|有些|有一点|比较|感觉|觉得|真的|特别|非常|好|很)*"
)

_TASK_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bto-?do\s*[:：\-]?\s*(?P<x>.+)", re.IGNORECASE),
    re.compile(r"\bremind\s+me\s+(?:to|about)\s+(?P<x>.+)", re.IGNORECASE),
    re.compile(r"\bdon'?t\s+(?:let\s+me\s+)?forget\s+to\s+(?P<x>.+)", re.IGNORECASE),
    re.compile(r"待办(?:事项)?\s*[:：]?\s*(?P<x>.+)"),
    re.compile(r"提醒我(?:一下)?(?:要)?(?P<x>.+)"),
    re.compile(r"别忘了(?:要)?(?P<x>.+)"),
    re.compile(r"帮我(?:把)?(?P<x>.{1,40}?)(?P<verb>完成|做完|搞定|写完|弄完)"),
)
_HOME_ZH = re.compile(
    rf"我(?:现在)?(?:住在|家在|住)(?P<x>[{_CJK}]{{2,10}}?)(?:市|省)?(?=$|[，,。！!；;]|了|呢|啊|哦)"
)
_HOME_EN = re.compile(r"\b[Ii]\s+(?:now\s+)?live\s+in\s+(?P<x>[A-Z][A-Za-z\-]+(?:\s+[A-Z][A-Za-z\-]+){0,2})")
_DONE = re.compile(
    r"完成了|做完了|搞定了|弄完了|写完了|已完成|已经完成|\bdone\b|\bfinished\b|\bcompleted\b", re.IGNORECASE
)
_LIFT = re.compile(
    r"可以吃|能吃|可以接受|能接受|接受|可以了|没问题|吃了|可以放|可以加|\bcan\s+eat\b|\bdo\s+eat\b"
    r"|\bis\s+(?:fine|ok|okay)\b|\bare\s+(?:fine|ok|okay)\b|\b(?:okay|ok|fine)\s+with\b",
    re.IGNORECASE,
)
_PARTIAL = re.compile(
    r"一点|少量|少放|少许|不要太多|别太多|\ba\s+little\b|\ba\s+bit\b|\bsmall\s+amounts?\b"
    r"|\bnot\s+too\s+much\b|\bin\s+moderation\b",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- the rule-based extractor


@dataclass
class _Context:
    message: SourceMessage
    sentence: str
    clause: str
    zh: bool
    explicit: bool
    correction: bool

    def quote(self) -> str:
        return _quote(self.clause, self.sentence, self.message.content)


def _item_terms_zh(raw: str) -> list[str]:
    head = _STOP_IN_ITEM.split(raw, maxsplit=1)[0]
    terms = []
    for part in _LIST_SPLIT_ZH.split(head):
        part = re.sub(r"^(?:任何|一切|带|含|有|吃|放|加|推荐)", "", part.strip())
        part = re.sub(r"(?:类|这种东西|之类|等)$", "", part)
        if part and part not in _AVOID_EXCLUDED and not re.match(r"^(?:太|很|那么|这么|一|再|多)", part):
            terms.append(part)
    return terms


def _item_terms_en(raw: str) -> list[str]:
    terms = []
    for part in _LIST_SPLIT_EN.split(raw.strip()):
        words = [
            w
            for w in part.lower().split()
            if w not in {"any", "the", "a", "an", "more", "some", "food", "with"}
        ]
        term = " ".join(words[:3])
        if term and not set(words) & _AVOID_EXCLUDED_EN and not _FLAVOR_WORD.search(term):
            terms.append(term)
    return terms


def _node(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, **{name: value for name, value in fields.items() if value is not None}}


class _RuleExtractor:
    def __init__(self, known: Sequence[KnownNode], now: datetime) -> None:
        self.known = list(known)
        self.now = now
        self.items: dict[tuple[str, str], PlanItem] = {}
        self.order: list[tuple[str, str]] = []

    # --- bookkeeping ---------------------------------------------------------------------------------

    def known_by_key(self, key: str) -> KnownNode | None:
        for node in self.known:
            if node.key == key:
                return node
        return None

    def add(
        self,
        ctx: _Context,
        slot: str,
        node: dict[str, Any],
        reason: str,
        *,
        operation: str | None = None,
        target_id: str | None = None,
        explicit: bool | None = None,
    ) -> None:
        explicit = ctx.explicit if explicit is None else explicit
        node.setdefault("source_quote", ctx.quote())
        if operation is None or operation == "supersede":
            node.setdefault("confidence", 0.95 if explicit else 0.8)
        if operation is None:
            operation = "create"
            if ctx.correction and node.get("kind") in DEFAULT_KINDS:
                known = self.known_by_key(slot)
                if known is not None:
                    operation, target_id = "supersede", known.node_id
        item = PlanItem(
            operation=operation,
            node=node,
            reason=reason,
            target_id=target_id,
            source_message_ids=(ctx.message.message_id,),
            explicit_user_intent=explicit,
        )
        index = (operation if operation in ("update", "expire") else "write", slot)
        if index not in self.items:
            self.order.append(index)
        self.items[index] = item  # a later message about the same slot wins

    def ignore(self, message: SourceMessage, reason: str, slot: str) -> None:
        index = ("ignore", slot)
        if index not in self.items:
            self.order.append(index)
        self.items[index] = PlanItem(
            operation="ignore", node={}, reason=reason, source_message_ids=(message.message_id,)
        )

    def plan(self) -> MemoryExtraction:
        return MemoryExtraction(nodes=[self.items[index] for index in self.order])

    # --- messages ------------------------------------------------------------------------------------

    def read(self, message: SourceMessage) -> None:
        if message.role != "user" or is_trivial(message.content):
            return
        reason = find_sensitive_content(message.content)
        if reason:
            self.ignore(
                message,
                f"message carries sensitive content ({reason}); nothing extracted from it",
                f"sensitive:{message.message_id}",
            )
            return
        zh = looks_chinese(message.content)
        explicit_message = _explicit(message.content)
        correction = bool(_CORRECTION.search(message.content))
        found = 0
        for sentence in split_sentences(message.content):
            if _is_question(sentence) and not _TASK.search(sentence):
                continue
            sentence_explicit = explicit_message or correction
            temporal = self._temporal_days(sentence)
            if temporal is not None and not _explicit(sentence):
                states = self._temporary_state(message, sentence, temporal, zh)
                if states:
                    found += states
                    continue
            for clause in _clauses(sentence) or [sentence]:
                ctx = _Context(message, sentence, clause, zh, sentence_explicit, correction)
                found += self._clause(ctx)
            ctx = _Context(message, sentence, sentence, zh, sentence_explicit, correction)
            found += self._task(ctx)
        if not found and explicit_message:
            self.ignore(
                message,
                "explicit statement, but no rule recognises a memory in it; the agent's "
                "memory/write or the LLM extractor can store it",
                f"explicit:{message.message_id}",
            )

    def _clause(self, ctx: _Context) -> int:
        if ctx.correction and self._lift(ctx):
            return 1
        return sum(
            (
                self._language(ctx),
                self._address(ctx),
                self._flavor(ctx),
                self._avoid(ctx),
                self._allergy(ctx),
                self._like(ctx),
                self._style(ctx),
                self._task_done(ctx),
                self._home(ctx),
            )
        )

    # --- rules ---------------------------------------------------------------------------------------

    def _language(self, ctx: _Context) -> int:
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
            (code, zh, en)
            for pattern, code, zh, en in _LANGUAGES
            if re.fullmatch(pattern, spoken, re.IGNORECASE)
        )
        node = _node(
            "language_preference",
            value_json=code,
            importance=0.9,
            title=f"用户希望用{name_zh}回复" if ctx.zh else f"Reply in {name_en}",
            content=f"回复用户时使用{name_zh}。" if ctx.zh else f"Reply to the user in {name_en}.",
            tags=["语言"] if ctx.zh else ["language"],
            entities=[name_zh if ctx.zh else name_en],
        )
        self.add(
            ctx,
            "language_preference",
            node,
            "用户说明回复语言" if ctx.zh else "the user set the reply language",
            explicit=True,
        )
        return 1

    def _address(self, ctx: _Context) -> int:
        match = _ADDRESS_ZH.search(ctx.clause) or _ADDRESS_EN.search(ctx.clause)
        if match is None:
            return 0
        name = trim_text(match.group("x"))
        if match.re is _ADDRESS_ZH:
            name = _ADDRESS_TAIL_ZH.sub("", name)
            if not name or _ADDRESS_BAD_START.match(name):
                return 0
        else:
            name = re.split(r"\s+(?:from|please|instead|now|going|in|when|and)\b", name, flags=re.IGNORECASE)[
                0
            ]
        if not name or len(name) > 30:
            return 0
        node = _node(
            "interaction_contract",
            value_json={"addressUserAs": name},
            importance=0.9,
            title=f"称呼用户为{name}" if ctx.zh else f"Call the user {name}",
            content=f"与用户交流时称呼对方为「{name}」。" if ctx.zh else f"Address the user as {name}.",
            tags=["称呼"] if ctx.zh else ["addressing"],
            entities=[name],
        )
        self.add(
            ctx,
            "interaction_contract",
            node,
            "用户说明希望的称呼" if ctx.zh else "the user said how to be addressed",
            explicit=True,
        )
        return 1

    def _flavor(self, ctx: _Context) -> int:
        phrases = [m.group(0) for m in _FLAVOR.finditer(ctx.clause)]
        if not phrases:
            return 0
        value = normalize_value(DEFAULT_KINDS["flavor_profile"], " ".join(phrases))
        if not isinstance(value, dict):
            return 0
        known = self.known_by_key("flavor_profile")
        if known is not None and isinstance(known.value_json, dict) and not ctx.correction:
            value = {**known.value_json, **value}  # 「少辣」 after 「少油」 adds to the profile
        pending = self.items.get(("write", "flavor_profile"))
        if pending is not None and isinstance(pending.node.get("value_json"), dict):
            value = {**pending.node["value_json"], **value}
        label = "".join(phrases) if ctx.zh else ", ".join(phrases)
        node = _node(
            "flavor_profile",
            value_json=dict(sorted(value.items())),
            importance=0.85,
            title=f"用户偏好{label}" if ctx.zh else f"Prefers {label} food",
            content=f"推荐菜谱时优先{label}。"
            if ctx.zh
            else f"Prefer {label} food when recommending dishes.",
            tags=["口味", "菜谱推荐"] if ctx.zh else ["flavor", "recipes"],
            entities=phrases,
        )
        self.add(
            ctx,
            "flavor_profile",
            node,
            "用户表达口味偏好" if ctx.zh else "the user stated a flavour preference",
        )
        return 1

    def _food_context(self, ctx: _Context, term: str) -> bool:
        return bool(_FOOD_CONTEXT.search(ctx.sentence)) or term in _INGREDIENTS_ZH or term in _INGREDIENTS_EN

    def _avoid(self, ctx: _Context) -> int:
        count = 0
        for match in _AVOID_ZH.finditer(ctx.clause):
            verb = match.group(0)
            item = _ITEM_ZH.match(ctx.clause, match.end())
            if item is None or _FLAVOR.match(ctx.clause, match.start()):
                continue  # 「不要辣」 is a flavour, handled above
            for term in _item_terms_zh(item.group(0)):
                eats = verb.endswith("吃") or verb == "忌口"
                if _FLAVOR_WORD.fullmatch(term) or not (eats or self._food_context(ctx, term)):
                    continue
                count += self._avoidance(ctx, term)
        for match in _AVOID_EN.finditer(ctx.clause):
            verb = " ".join(match.group("verb").lower().split())
            needs_context = verb in ("no", "without", "avoid", "please avoid", "hold the") or verb in (
                "i hate",
                "i dislike",
            )
            for term in _item_terms_en(match.group("x")):
                if needs_context and not self._food_context(ctx, term):
                    continue
                count += self._avoidance(ctx, term)
        return count

    def _avoidance(self, ctx: _Context, term: str) -> int:
        try:
            slot = f"avoid_ingredient:{normalize_item_key(term)}"
        except SchemaError:
            return 0
        node = _node(
            "food_avoidance",
            item_key=term,
            value_json=term,
            importance=0.9,
            title=f"用户不吃{term}" if ctx.zh else f"Avoids {term}",
            content=f"推荐菜谱时避免{term}。" if ctx.zh else f"Avoid {term} when recommending dishes.",
            tags=["忌口", "菜谱推荐"] if ctx.zh else ["dietary", "recipes"],
            entities=[term],
        )
        self.add(ctx, slot, node, "用户表达忌口" if ctx.zh else "the user said they avoid this food")
        return 1

    def _allergy(self, ctx: _Context) -> int:
        match = _ALLERGY_ZH.search(ctx.clause) or _ALLERGY_EN.search(ctx.clause)
        if match is None:
            return 0
        terms = (
            _item_terms_zh(match.group("x")) if match.re is _ALLERGY_ZH else _item_terms_en(match.group("x"))
        )
        count = 0
        for term in terms:
            try:
                slot = f"dietary_restriction:{normalize_item_key(term)}"
            except SchemaError:
                continue
            node = _node(
                "dietary_restriction",
                item_key=term,
                value_json=term,
                importance=0.95,
                title=f"用户对{term}过敏" if ctx.zh else f"Allergic to {term}",
                content=f"用户对{term}过敏，饮食推荐必须避开。"
                if ctx.zh
                else f"The user is allergic to {term}; never recommend it.",
                tags=["过敏"] if ctx.zh else ["allergy"],
                entities=[term],
            )
            self.add(ctx, slot, node, "用户说明过敏" if ctx.zh else "the user stated an allergy")
            count += 1
        return count

    def _like(self, ctx: _Context) -> int:
        count = 0
        for match in _LIKE_ZH.finditer(ctx.clause):
            if match.start() and ctx.clause[match.start() - 1] in "不没别":
                continue  # 「不喜欢吃」 is an avoidance
            item = _ITEM_ZH.match(ctx.clause, match.end())
            raw = item.group(0) if item else ""
            if not raw or _FLAVOR.match(raw) or _FLAVOR_WORD.match(raw):
                continue  # 「喜欢少油少辣」 is a flavour
            for term in _item_terms_zh(raw):
                if _FLAVOR_WORD.fullmatch(term) or not (
                    match.group(0).endswith("吃") or self._food_context(ctx, term)
                ):
                    continue
                count += self._preferred(ctx, term)
        for match in _LIKE_EN.finditer(ctx.clause):
            raw = match.group("x") or match.group("fav")
            eating = bool(match.group("fav") or match.group("eating"))
            for term in _item_terms_en(raw):
                if eating or term in _INGREDIENTS_EN:
                    count += self._preferred(ctx, term)
        return count

    def _preferred(self, ctx: _Context, term: str) -> int:
        try:
            slot = f"preferred_ingredient:{normalize_item_key(term)}"
        except SchemaError:
            return 0
        node = _node(
            "preferred_ingredient",
            item_key=term,
            value_json=term,
            importance=0.7,
            title=f"用户喜欢{term}" if ctx.zh else f"Likes {term}",
            content=f"推荐菜谱时可以优先考虑{term}。"
            if ctx.zh
            else f"Consider {term} when recommending dishes.",
            tags=["喜好", "菜谱推荐"] if ctx.zh else ["likes", "recipes"],
            entities=[term],
        )
        self.add(ctx, slot, node, "用户表达喜欢的食材" if ctx.zh else "the user said they like this food")
        return 1

    def _home(self, ctx: _Context) -> int:
        match = _HOME_ZH.search(ctx.clause) or _HOME_EN.search(ctx.clause)
        if match is None:
            return 0
        city = trim_text(match.group("x"))
        if re.search(r"这|那|哪|很|久|附近|里|边", city):
            return 0  # 「我住在这里很久了」 names no place
        node = _node(
            "home_location",
            value_json={"city": city},
            importance=0.7,
            title=f"用户住在{city}" if ctx.zh else f"Lives in {city}",
            content=f"用户住在{city}。" if ctx.zh else f"The user lives in {city}.",
            tags=["居住地"] if ctx.zh else ["home"],
            entities=[city],
        )
        self.add(ctx, "home_location", node, "用户说明居住地" if ctx.zh else "the user said where they live")
        return 1

    def _style(self, ctx: _Context) -> int:
        if not (ctx.explicit or ctx.correction):
            return 0
        count = 0
        for pattern, item_key, value, title_zh, title_en in _STYLES:
            if pattern.search(ctx.clause):
                node = _node(
                    "communication_preference",
                    item_key=item_key,
                    value_json=value,
                    importance=0.8,
                    title=title_zh if ctx.zh else title_en,
                    content=trim_text(ctx.clause) or ctx.clause,
                    tags=["沟通风格"] if ctx.zh else ["style"],
                )
                self.add(
                    ctx,
                    f"communication_preference:{item_key}",
                    node,
                    "用户说明回复风格" if ctx.zh else "the user set a reply style",
                )
                count += 1
        return count

    def _lift(self, ctx: _Context) -> int:
        """「香菜现在可以接受一点」: a correction of a known avoidance supersedes (a little) or expires it."""
        if not _LIFT.search(ctx.sentence):
            return 0
        for node in self.known:
            if node.kind != "food_avoidance" or not node.item_key:
                continue
            term = node.value_json if isinstance(node.value_json, str) else node.item_key
            term = re.sub(r"[(（].*$", "", term).strip() or node.item_key
            if term.lower() not in ctx.sentence.lower():
                continue
            words = trim_text(ctx.sentence)
            if _PARTIAL.search(ctx.sentence):
                value = f"{term}(少量)" if ctx.zh else f"{term} (small amounts)"
                replacement = _node(
                    "food_avoidance",
                    item_key=node.item_key,
                    value_json=value,
                    importance=0.85,
                    title=f"用户可接受少量{term}" if ctx.zh else f"Accepts a little {term}",
                    content=words,
                    tags=["忌口", "菜谱推荐"] if ctx.zh else ["dietary", "recipes"],
                    entities=[term],
                    source_quote=_quote(ctx.sentence, ctx.sentence, ctx.message.content),
                )
                self.add(
                    ctx,
                    node.key,
                    replacement,
                    "用户纠正忌口：可接受少量"
                    if ctx.zh
                    else "the user corrected the avoidance: small amounts are fine",
                    operation="supersede",
                    target_id=node.node_id,
                    explicit=True,
                )
            else:
                self.add(
                    ctx,
                    node.key,
                    {},
                    "用户纠正：现在可以吃" + term if ctx.zh else f"the user corrected it: {term} is fine now",
                    operation="expire",
                    target_id=node.node_id,
                    explicit=True,
                )
            return 1
        return 0

    def _task(self, ctx: _Context) -> int:
        for pattern in _TASK_PATTERNS:
            match = pattern.search(ctx.sentence)
            if match is None:
                continue
            what = trim_text(match.group("x"))
            if "verb" in pattern.groupindex and what:
                what = match.group("verb") + what  # 「帮我把周报完成」 → 完成周报
            if not what or find_sensitive_content(what):
                return 0
            item_key = _compact_key(what)
            if item_key is None:
                return 0
            node = _node(
                "task",
                item_key=item_key,
                value_json={"status": "open", "title": what[:200]},
                importance=0.7,
                title=(f"待办：{what}" if ctx.zh else f"TODO: {what}")[:500],
                content=trim_text(ctx.sentence),
                tags=["待办"] if ctx.zh else ["todo"],
            )
            self.add(
                ctx,
                f"task:{item_key}",
                node,
                "用户提出待办事项" if ctx.zh else "the user asked for a task",
                explicit=True,
            )
            return 1
        return 0

    def _task_done(self, ctx: _Context) -> int:
        if not _DONE.search(ctx.clause):
            return 0
        lowered = ctx.clause.lower()
        for node in self.known:
            value = node.value_json if isinstance(node.value_json, dict) else {}
            if node.kind != "task" or value.get("status") == "done":
                continue
            words = [w for w in (node.item_key or "").split("_") if w]
            title = str(value.get("title") or "")
            if (words and all(w in lowered for w in words)) or (title and title.lower() in lowered):
                self.add(
                    ctx,
                    node.key,
                    {"value_json": {**value, "status": "done"}, "source_quote": ctx.quote()},
                    "用户说明任务已完成" if ctx.zh else "the user said the task is done",
                    operation="update",
                    target_id=node.node_id,
                    explicit=True,
                )
                return 1
        return 0

    def _temporal_days(self, sentence: str) -> int | None:
        for pattern, days in _TEMPORAL:
            if pattern.search(sentence):
                return days
        return None

    def _temporary_state(self, message: SourceMessage, sentence: str, days: int, zh: bool) -> int:
        state_match = _STATE_ZH.search(sentence) if zh else _STATE_EN.search(sentence)
        if state_match is None:
            return 0
        if zh:
            state = trim_text(sentence)
            for pattern, _ in _TEMPORAL:
                state = pattern.sub("", state, count=1)
            state = trim_text(_STATE_FILLER_ZH.sub("", trim_text(state)))
            state = re.split(r"[，,。；;]", state)[0] or state_match.group(0)
            item_key = _compact_key(state[:8]) or _compact_key(state_match.group(0))
        else:
            state = state_match.group(0).lower()
            item_key = _compact_key(state)
        if item_key is None:
            return 0
        expires_at = _end_of_day(message, self.now, days)
        ctx = _Context(message, sentence, sentence, zh, False, False)
        node = _node(
            "temporary_state",
            item_key=item_key,
            scope="session",
            value_json=state,
            importance=0.75,
            title=(f"用户{trim_text(sentence)[:60]}" if zh else f"Temporarily: {state}"),
            content=trim_text(sentence),
            expires_at=expires_at,
            tags=["临时状态"] if zh else ["temporary"],
            entities=[state],
        )
        self.add(
            ctx,
            f"temporary_state:{item_key}",
            node,
            "临时状态，只在本会话内有效并到期" if zh else "a temporary state: session only, expires",
        )
        return 1


def _end_of_day(message: SourceMessage, now: datetime, extra_days: int) -> datetime:
    """Return the end of the message's local day (plus `extra_days`) as an aware datetime."""
    moment = message.created_at or now
    zone = message.time_zone or moment.tzinfo or UTC
    local = moment.astimezone(zone)
    next_midnight = datetime.combine(local.date() + timedelta(days=1 + extra_days), time.min, tzinfo=zone)
    return next_midnight.astimezone(UTC)


def extract_by_rules(
    messages: Sequence[SourceMessage], *, known: Sequence[KnownNode] = (), now: datetime | None = None
) -> MemoryExtraction:
    """Return the plan the rules read from `messages` (oldest first); `known` enables corrections."""
    extractor = _RuleExtractor(known, now or datetime.now(UTC))
    for message in messages:
        extractor.read(message)
    return extractor.plan()
