"""Food and diet rules: avoided and liked ingredients, allergies and the flavour profile.

「不吃香菜也不吃葱」, "I don't eat pork" and 「别给我推荐X」 (in a food context) become one
`food_avoidance` card per ingredient; 「对花生过敏」 / "I'm allergic to X" a `dietary_restriction`;
「喜欢吃X」 / "I love X" (an ingredient) a `preferred_ingredient`; 少油少辣 / 清淡 / "less spicy"
the `flavor_profile` value `{"oil": "low", "spicy": "low"}`, merged with the profile the session
already has unless the user corrects it. Verbs are matched on their own and the item read after
each, so one clause can name several items. Pure: no ORM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.pipeline.extractors.draft import Clause, PlanDraft, node_draft
from memory.pipeline.sentences import CJK
from memory.rules.kinds import DEFAULT_KINDS
from memory.rules.values import normalize_value

__all__ = ["allergy", "avoid", "flavor", "like"]

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
_ITEM_ZH = re.compile(rf"[{CJK}A-Za-z0-9·]{{1,16}}")
_AVOID_EN = re.compile(
    r"\b(?P<verb>i\s+(?:don'?t|do\s+not|never|can'?t|cannot|won'?t|no\s+longer)\s+eat"
    r"|don'?t\s+(?:recommend|give\s+me|put|add|use|include|suggest|cook\s+with)|please\s+avoid|avoid|no|without"
    r"|hold\s+the|i\s+(?:hate|dislike))\s+(?P<x>[a-z][a-z\s\-]{1,40}?)"
    r"(?=$|[.,;!?]|\s+(?:please|anymore|any\s*more|in\s+(?:my|the|any)|from\s+now|again|ever|for\s+me|when"
    r"|because|since|thanks|at\s+all|either)\b)",
    re.IGNORECASE,
)
_ALLERGY_ZH = re.compile(rf"对(?P<x>[{CJK}A-Za-z0-9]{{1,12}}?)过敏")
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


def flavor(draft: PlanDraft, ctx: Clause) -> int:
    """少油少辣 / 清淡 / "less spicy": the flavour profile, added to what is known unless corrected."""
    phrases = [m.group(0) for m in _FLAVOR.finditer(ctx.clause)]
    if not phrases:
        return 0
    value = normalize_value(DEFAULT_KINDS["flavor_profile"], " ".join(phrases))
    if not isinstance(value, dict):
        return 0
    known = draft.known_by_key("flavor_profile")
    if known is not None and isinstance(known.value_json, dict) and not ctx.correction:
        value = {**known.value_json, **value}  # 「少辣」 after 「少油」 adds to the profile
    pending = draft.pending("flavor_profile")
    if pending is not None and isinstance(pending.node.get("value_json"), dict):
        value = {**pending.node["value_json"], **value}
    label = "".join(phrases) if ctx.zh else ", ".join(phrases)
    node = node_draft(
        "flavor_profile",
        value_json=dict(sorted(value.items())),
        importance=0.85,
        title=f"用户偏好{label}" if ctx.zh else f"Prefers {label} food",
        content=f"推荐菜谱时优先{label}。" if ctx.zh else f"Prefer {label} food when recommending dishes.",
        tags=["口味", "菜谱推荐"] if ctx.zh else ["flavor", "recipes"],
        entities=phrases,
    )
    return draft.add(ctx, node, "用户表达口味偏好" if ctx.zh else "the user stated a flavour preference")


def _food_context(ctx: Clause, term: str) -> bool:
    return bool(_FOOD_CONTEXT.search(ctx.sentence)) or term in _INGREDIENTS_ZH or term in _INGREDIENTS_EN


def avoid(draft: PlanDraft, ctx: Clause) -> int:
    """不吃X / 别给我推荐X / "I don't eat X" / "no X" (in a food context): one avoidance per item."""
    count = 0
    for match in _AVOID_ZH.finditer(ctx.clause):
        verb = match.group(0)
        item = _ITEM_ZH.match(ctx.clause, match.end())
        if item is None or _FLAVOR.match(ctx.clause, match.start()):
            continue  # 「不要辣」 is a flavour, handled above
        for term in _item_terms_zh(item.group(0)):
            eats = verb.endswith("吃") or verb == "忌口"
            if _FLAVOR_WORD.fullmatch(term) or not (eats or _food_context(ctx, term)):
                continue
            count += _item_card(draft, ctx, _AVOIDANCE, term)
    for match in _AVOID_EN.finditer(ctx.clause):
        verb = " ".join(match.group("verb").lower().split())
        needs_context = verb in ("no", "without", "avoid", "please avoid", "hold the") or verb in (
            "i hate",
            "i dislike",
        )
        for term in _item_terms_en(match.group("x")):
            if needs_context and not _food_context(ctx, term):
                continue
            count += _item_card(draft, ctx, _AVOIDANCE, term)
    return count


def allergy(draft: PlanDraft, ctx: Clause) -> int:
    """对X过敏 / "I'm allergic to X": a dietary restriction per item."""
    match = _ALLERGY_ZH.search(ctx.clause) or _ALLERGY_EN.search(ctx.clause)
    if match is None:
        return 0
    terms = _item_terms_zh(match.group("x")) if match.re is _ALLERGY_ZH else _item_terms_en(match.group("x"))
    return sum(_item_card(draft, ctx, _ALLERGY, term) for term in terms)


def like(draft: PlanDraft, ctx: Clause) -> int:
    """喜欢吃X / "I love X" (an ingredient, or eating it): a preferred ingredient per item."""
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
                match.group(0).endswith("吃") or _food_context(ctx, term)
            ):
                continue
            count += _item_card(draft, ctx, _PREFERRED, term)
    for match in _LIKE_EN.finditer(ctx.clause):
        raw = match.group("x") or match.group("fav")
        eating = bool(match.group("fav") or match.group("eating"))
        for term in _item_terms_en(raw):
            if eating or term in _INGREDIENTS_EN:
                count += _item_card(draft, ctx, _PREFERRED, term)
    return count


@dataclass(frozen=True)
class _Card:
    """How one itemized food card reads, in Chinese and in English (`{term}` is the item)."""

    kind: str
    importance: float
    title: tuple[str, str]
    content: tuple[str, str]
    tags: tuple[tuple[str, ...], tuple[str, ...]]
    reason: tuple[str, str]


_AVOIDANCE = _Card(
    "food_avoidance",
    0.9,
    title=("用户不吃{term}", "Avoids {term}"),
    content=("推荐菜谱时避免{term}。", "Avoid {term} when recommending dishes."),
    tags=(("忌口", "菜谱推荐"), ("dietary", "recipes")),
    reason=("用户表达忌口", "the user said they avoid this food"),
)
_ALLERGY = _Card(
    "dietary_restriction",
    0.95,
    title=("用户对{term}过敏", "Allergic to {term}"),
    content=("用户对{term}过敏，饮食推荐必须避开。", "The user is allergic to {term}; never recommend it."),
    tags=(("过敏",), ("allergy",)),
    reason=("用户说明过敏", "the user stated an allergy"),
)
_PREFERRED = _Card(
    "preferred_ingredient",
    0.7,
    title=("用户喜欢{term}", "Likes {term}"),
    content=("推荐菜谱时可以优先考虑{term}。", "Consider {term} when recommending dishes."),
    tags=(("喜好", "菜谱推荐"), ("likes", "recipes")),
    reason=("用户表达喜欢的食材", "the user said they like this food"),
)


def _item_card(draft: PlanDraft, ctx: Clause, card: _Card, term: str) -> int:
    language = 0 if ctx.zh else 1
    node = node_draft(
        card.kind,
        item_key=term,
        value_json=term,
        importance=card.importance,
        title=card.title[language].format(term=term),
        content=card.content[language].format(term=term),
        tags=list(card.tags[language]),
        entities=[term],
    )
    return draft.add(ctx, node, card.reason[language])
