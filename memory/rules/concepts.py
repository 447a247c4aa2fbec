"""A small bilingual concept map and the guards that keep look-alike cards apart (organizer clustering).

A card's *signature* is what it is about, language aside: its kind (through the kind synonyms of
memory.rules.kinds), the concepts its words name ('咖啡' and 'coffee' are one concept), the people it
is about (kinship terms stay distinct: 舅舅 is a maternal uncle, 叔叔 a paternal one), its polarity
('不喝咖啡' and "doesn't drink coffee" are negative, "loves shrimp" positive) and the numbers it holds.
`lookalike_reason` names the guard that forbids a merge; two cards with the same kind and the same
non-empty concepts, and no guard against them, are the same memory (`same_concepts`). No ORM.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Signature", "concepts_in", "lookalike_reason", "same_concepts", "signature_of"]

# concept id → surface forms (English: whole words, plural 's' allowed; Chinese: substrings).
CONCEPTS: dict[str, tuple[str, ...]] = {
    "coffee": ("coffee", "espresso", "latte", "咖啡"),
    "tea": ("tea", "茶"),
    "milk": ("milk", "dairy", "牛奶", "乳制品"),
    "alcohol": ("alcohol", "beer", "wine", "liquor", "酒"),
    "sugar": ("sugar", "sweets", "糖", "甜食"),
    "cilantro": ("cilantro", "coriander", "香菜", "芫荽"),
    "peanut": ("peanut", "peanuts", "花生"),
    "shellfish": ("shellfish", "贝类", "贝壳类"),
    "shrimp": ("shrimp", "prawn", "虾"),
    "fish": ("fish", "鱼"),
    "beef": ("beef", "牛肉"),
    "pork": ("pork", "猪肉"),
    "chicken": ("chicken", "鸡肉"),
    "egg": ("egg", "eggs", "鸡蛋"),
    "garlic": ("garlic", "大蒜", "蒜"),
    "onion": ("onion", "洋葱"),
    "mushroom": ("mushroom", "蘑菇", "菌菇"),
    "tofu": ("tofu", "豆腐"),
    "spicy": ("spicy", "chili", "hot food", "辣", "辣椒"),
    "gluten": ("gluten", "wheat", "麸质", "面筋"),
    "vegetarian": ("vegetarian", "veggie", "素食", "吃素"),
    "vegan": ("vegan", "纯素"),
    "rice": ("rice", "米饭", "大米"),
    "noodles": ("noodle", "noodles", "面条"),
    "durian": ("durian", "榴莲"),
    "chocolate": ("chocolate", "巧克力"),
    "tomato": ("tomato", "tomatoes", "番茄", "西红柿"),
    "potato": ("potato", "potatoes", "土豆", "马铃薯"),
    "lamb": ("lamb", "mutton", "羊肉"),
    "dark_mode": ("dark mode", "dark theme", "深色模式", "暗色模式", "夜间模式"),
    "light_mode": ("light mode", "light theme", "浅色模式", "亮色模式"),
    "python": ("python",),
    "rust": ("rust",),
    "typescript": ("typescript",),
    "postgres": ("postgres", "postgresql"),
    "mysql": ("mysql",),
    "tabs": ("tabs", "tab indentation", "制表符"),
    "spaces": ("spaces", "space indentation", "空格缩进"),
    "brevity": ("brief", "concise", "short answers", "简洁", "简短"),
    "detail": ("detailed", "in depth", "详细"),
    "chinese": ("chinese", "mandarin", "中文", "汉语"),
    "english": ("english", "英文", "英语"),
    "morning": ("morning", "早上", "上午"),
    "evening": ("evening", "night", "晚上"),
    "running": ("running", "jogging", "跑步"),
    "swimming": ("swimming", "游泳"),
    "cat": ("cat", "cats", "猫"),
    "dog": ("dog", "dogs", "狗"),
    "beijing": ("beijing", "北京"),
    "shanghai": ("shanghai", "上海"),
    "shenzhen": ("shenzhen", "深圳"),
    "hangzhou": ("hangzhou", "杭州"),
    "tests": ("test", "tests", "testing", "测试"),
    "deploy": ("deploy", "deployment", "release", "部署", "发布"),
    "friday": ("friday", "周五", "星期五"),
    "monday": ("monday", "周一", "星期一"),
}

# Kinship terms name different people, never synonyms of each other ('uncle' alone is its own term).
KINSHIP: dict[str, tuple[str, ...]] = {
    "maternal_uncle": ("maternal uncle", "舅舅", "舅父"),
    "paternal_uncle": ("paternal uncle", "叔叔", "伯伯", "伯父", "叔父"),
    "uncle": ("uncle",),
    "maternal_aunt": ("maternal aunt", "姨妈", "阿姨", "小姨"),
    "paternal_aunt": ("paternal aunt", "姑姑", "姑妈"),
    "aunt": ("aunt",),
    "mother": ("mother", "mom", "mum", "妈妈", "母亲"),
    "father": ("father", "dad", "爸爸", "父亲"),
    "maternal_grandmother": ("maternal grandmother", "外婆", "姥姥"),
    "paternal_grandmother": ("paternal grandmother", "奶奶", "祖母"),
    "maternal_grandfather": ("maternal grandfather", "外公", "姥爷"),
    "paternal_grandfather": ("paternal grandfather", "爷爷", "祖父"),
    "elder_brother": ("older brother", "elder brother", "哥哥"),
    "younger_brother": ("younger brother", "弟弟"),
    "elder_sister": ("older sister", "elder sister", "姐姐"),
    "younger_sister": ("younger sister", "妹妹"),
    "wife": ("wife", "妻子", "老婆", "太太"),
    "husband": ("husband", "丈夫", "老公"),
    "son": ("son", "儿子"),
    "daughter": ("daughter", "女儿"),
    "cousin": ("cousin", "表哥", "表姐", "表弟", "表妹", "堂哥", "堂姐"),
}

NEGATIVE_CUES_EN = (
    "not",
    "no",
    "never",
    "don't",
    "doesn't",
    "dont",
    "doesnt",
    "won't",
    "can't",
    "cannot",
    "avoid",
    "avoids",
    "avoiding",
    "allergic",
    "allergy",
    "hate",
    "hates",
    "dislike",
    "dislikes",
    "without",
    "stopped",
    "quit",
    "refuses",
    "intolerant",
    "free",
)
NEGATIVE_CUES_ZH = ("不", "没", "别", "忌", "过敏", "讨厌", "避免", "戒", "无", "免")
# Words that contain a negative character but are not negations.
_ZH_NOT_NEGATIVE = (
    "不错",
    "不过",
    "不仅",
    "不断",
    "不少",
    "差不多",
    "特别",
    "分别",
    "区别",
    "别的",
    "别人",
    "无论",
    "免费",
    "无障碍",
)

# Kinds that are avoidances by definition: their cards are negative whatever their wording.
NEGATIVE_KINDS = frozenset({"food_avoidance", "dietary_restriction"})

_EN_WORD = re.compile(r"[a-z][a-z']*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CJK = re.compile(r"[\u3400-\u9fff]")


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'").replace("_", " ")
    return re.sub(r"\s+", " ", text)


def _phrase_in(form: str, text: str, words: frozenset[str]) -> bool:
    if _CJK.search(form):
        return form in text
    if " " in form:
        return re.search(rf"(?<![a-z]){re.escape(form)}s?(?![a-z])", text) is not None
    return form in words or f"{form}s" in words or f"{form}es" in words


def _terms_in(table: dict[str, tuple[str, ...]], text: str, words: frozenset[str]) -> frozenset[str]:
    found = set()
    for concept, forms in table.items():
        if any(_phrase_in(form, text, words) for form in forms):
            found.add(concept)
    return frozenset(found)


def concepts_in(text: str) -> frozenset[str]:
    """Return the concept ids `text` names (any language)."""
    folded = _fold(text)
    return _terms_in(CONCEPTS, folded, frozenset(_EN_WORD.findall(folded)))


def _kin_in(text: str, words: frozenset[str]) -> frozenset[str]:
    kin = set(_terms_in(KINSHIP, text, words))
    # 'maternal uncle' also contains 'uncle': the specific term wins.
    for generic in ("uncle", "aunt"):
        if generic in kin and any(k.endswith(f"_{generic}") for k in kin):
            kin.discard(generic)
    return frozenset(kin)


def _negative(text: str, words: frozenset[str]) -> bool:
    if words & set(NEGATIVE_CUES_EN) or any(w.endswith("n't") for w in words):
        return True
    for harmless in _ZH_NOT_NEGATIVE:
        text = text.replace(harmless, "")
    return any(cue in text for cue in NEGATIVE_CUES_ZH)


@dataclass(frozen=True)
class Signature:
    kind: str
    concepts: frozenset[str]
    kin: frozenset[str]
    negative: bool
    numbers: frozenset[str]


def signature_of(kind: str, texts: Iterable[str], labels: Iterable[str] = ()) -> Signature:
    """Return the signature of a card of `kind` whose words are `texts` (title, content, value).

    `labels` (the itemKey) name concepts and people too, but their digits only tell slots apart.
    """
    text = _fold(" ".join(t for t in texts if t))
    folded = f"{text} {_fold(' '.join(label for label in labels if label))}"
    words = frozenset(_EN_WORD.findall(folded))
    return Signature(
        kind=kind,
        concepts=_terms_in(CONCEPTS, folded, words),
        kin=_kin_in(folded, words),
        negative=kind in NEGATIVE_KINDS or _negative(folded, words),
        numbers=frozenset(_NUMBER.findall(text)),
    )


def lookalike_reason(a: Signature, b: Signature) -> str | None:
    """Return why two cards must not merge (`kind`, `polarity`, `kinship`, `concept`, `number`), or None."""
    if a.kind != b.kind:
        return "kind"
    if a.negative != b.negative:
        return "polarity"
    if a.kin != b.kin:
        return "kinship"
    if a.concepts and b.concepts and a.concepts != b.concepts:
        return "concept"
    if a.numbers != b.numbers:
        return "number"
    return None


def same_concepts(a: Signature, b: Signature) -> bool:
    """Return whether two cards name the same non-empty concepts and no guard keeps them apart."""
    return bool(a.concepts) and a.concepts == b.concepts and lookalike_reason(a, b) is None
