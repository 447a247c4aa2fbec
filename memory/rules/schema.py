"""Pure memory rules: the controlled kind catalogue, canonical keys and normalisation, value shapes,
the sensitive-content guard, the confidence contract (seed 001), list-all detection and the write
scope policy. Nothing here touches the ORM or the database; every rule is a small typed function
that either returns a value or raises `SchemaError`, whose `code`, `detail` and `field` the API
layer renders as `{"code", "detail", "errors": {field: [detail]}}`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

SchemaErrorCode = Literal["invalid", "sensitive_content", "forbidden"]


class SchemaError(ValueError):
    """A rule was broken; `detail` says how to fix it and `field` names the offending input."""

    def __init__(self, code: SchemaErrorCode, detail: str, field: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.field = field


# --------------------------------------------------------------------------- kind catalogue

NODE_TYPES: tuple[str, ...] = (
    "preference",
    "fact",
    "decision",
    "task",
    "recipe",
    "skill",
    "constraint",
    "correction",
)
SCOPES: tuple[str, ...] = ("session", "workspace", "user", "global")
VALUE_SHAPES: tuple[str, ...] = ("string", "object", "string_or_object", "any")


@dataclass(frozen=True)
class KindSpec:
    """One controlled kind: the slot it fills and the rules its writes follow."""

    name: str
    slot_key: str
    type: str
    domain: str
    category_path: tuple[str, ...]
    itemized: bool
    default_scope: str
    requires_explicit_user_intent: bool
    value_shape: str
    required_value_keys: tuple[str, ...] = ()
    always_recalled: bool = False
    user_scope_needs_expiry: bool = False

    def __post_init__(self) -> None:
        # Tenant-defined kinds are built from stored data, so a bad one must fail loudly here.
        if not self.name or not self.slot_key or ":" in self.slot_key:
            raise SchemaError("invalid", "A kind needs a name and a slot key without ':'.", "kind.slotKey")
        if self.type not in NODE_TYPES:
            raise SchemaError("invalid", f"Kind type must be one of {', '.join(NODE_TYPES)}.", "kind.type")
        if self.default_scope not in SCOPES:
            raise SchemaError(
                "invalid", f"Kind default scope must be one of {', '.join(SCOPES)}.", "kind.defaultScope"
            )
        if self.value_shape not in VALUE_SHAPES:
            raise SchemaError(
                "invalid", f"Kind value shape must be one of {', '.join(VALUE_SHAPES)}.", "kind.valueShape"
            )


def _kind(
    name: str,
    slot_key: str,
    type_: str,
    category_path: str,
    *,
    itemized: bool,
    scope: str,
    intent: bool,
    shape: str,
    **extra: Any,
) -> KindSpec:
    path = tuple(category_path.split("/"))
    return KindSpec(
        name=name,
        slot_key=slot_key,
        type=type_,
        domain=path[0],
        category_path=path,
        itemized=itemized,
        default_scope=scope,
        requires_explicit_user_intent=intent,
        value_shape=shape,
        **extra,
    )


_FOOD = "生活技能/做饭/饮食偏好"

# API.md, "Default kind catalogue", row by row (the domain is the first element of the path).
# fmt: off
DEFAULT_KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        _kind("food_avoidance", "avoid_ingredient", "preference", _FOOD,
              itemized=True, scope="user", intent=True, shape="string"),
        _kind("preferred_ingredient", "preferred_ingredient", "preference", _FOOD,
              itemized=True, scope="user", intent=True, shape="string"),
        _kind("flavor_profile", "flavor_profile", "preference", _FOOD,
              itemized=False, scope="user", intent=True, shape="object"),
        _kind("dietary_restriction", "dietary_restriction", "constraint", _FOOD,
              itemized=True, scope="user", intent=True, shape="string"),
        _kind("recipe", "recipe", "recipe", "生活技能/做饭/菜谱",
              itemized=True, scope="user", intent=False, shape="object"),
        _kind("language_preference", "language_preference", "preference", "沟通/语言",
              itemized=False, scope="user", intent=True, shape="string", always_recalled=True),
        _kind("interaction_contract", "interaction_contract", "preference", "沟通/称呼",
              itemized=False, scope="user", intent=True, shape="object", always_recalled=True,
              required_value_keys=("userRole", "assistantRole", "addressUserAs")),
        _kind("communication_preference", "communication_preference", "preference", "沟通/风格",
              itemized=True, scope="user", intent=True, shape="string", always_recalled=True),
        _kind("accessibility_need", "accessibility_need", "constraint", "沟通/无障碍",
              itemized=True, scope="user", intent=True, shape="string", always_recalled=True),
        _kind("home_location", "home_location", "fact", "个人/居住地",
              itemized=False, scope="user", intent=True, shape="object",
              required_value_keys=("city", "location")),
        _kind("personal_relationship", "personal_relationship", "fact", "个人/关系",
              itemized=True, scope="user", intent=True, shape="object"),
        _kind("hard_constraint", "hard_constraint", "constraint", "项目/约束",
              itemized=True, scope="workspace", intent=False, shape="string", always_recalled=True),
        _kind("project_context", "project_context", "fact", "项目/背景",
              itemized=True, scope="workspace", intent=False, shape="string_or_object"),
        _kind("decision", "decision", "decision", "项目/决策",
              itemized=True, scope="workspace", intent=False, shape="string_or_object"),
        _kind("task", "task", "task", "任务",
              itemized=True, scope="session", intent=False, shape="object", required_value_keys=("status",)),
        _kind("skill", "skill", "skill", "技能",
              itemized=True, scope="user", intent=False, shape="string_or_object"),
        _kind("temporary_state", "temporary_state", "constraint", "通用/临时",
              itemized=True, scope="session", intent=False, shape="string", user_scope_needs_expiry=True),
        _kind("correction", "correction", "correction", "通用/纠正",
              itemized=True, scope="session", intent=False, shape="string"),
    )
}
# fmt: on

ALWAYS_RECALLED_KINDS: frozenset[str] = frozenset(
    name for name, spec in DEFAULT_KINDS.items() if spec.always_recalled
)

KIND_SYNONYMS: dict[str, str] = {
    # API.md's synonyms, then every slot key that differs from its kind name.
    "disliked_ingredient": "food_avoidance",
    "avoid_food": "food_avoidance",
    "excluded_ingredient": "food_avoidance",
    **{spec.slot_key: spec.name for spec in DEFAULT_KINDS.values() if spec.slot_key != spec.name},
    # Unambiguous English variants agents tend to send.
    "disliked_food": "food_avoidance",
    "food_dislike": "food_avoidance",
    "avoided_ingredient": "food_avoidance",
    "favorite_ingredient": "preferred_ingredient",
    "favourite_ingredient": "preferred_ingredient",
    "liked_ingredient": "preferred_ingredient",
    "flavour_profile": "flavor_profile",
    "flavor_preference": "flavor_profile",
    "taste_preference": "flavor_profile",
    "diet_restriction": "dietary_restriction",
    "dietary_requirement": "dietary_restriction",
    "preferred_language": "language_preference",
    "communication_style": "communication_preference",
    "accessibility_requirement": "accessibility_need",
    "home_city": "home_location",
    "residence": "home_location",
    "relationship": "personal_relationship",
    "project_constraint": "hard_constraint",
    "project_fact": "project_context",
    "project_decision": "decision",
    "todo": "task",
    "todo_item": "task",
    "temporary_constraint": "temporary_state",
    "user_correction": "correction",
}


def _normalize_kind_name(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", unicodedata.normalize("NFKC", name).strip().lower())


def resolve_kind(name: str, extra_kinds: Mapping[str, KindSpec] | None = None) -> KindSpec:
    """Return the kind named `name`, through synonyms, defaults first, then the tenant's own kinds."""
    normalized = _normalize_kind_name(name) if isinstance(name, str) else ""
    normalized = KIND_SYNONYMS.get(normalized, normalized)
    if normalized in DEFAULT_KINDS:
        return DEFAULT_KINDS[normalized]
    tenant_kinds = {_normalize_kind_name(key): spec for key, spec in (extra_kinds or {}).items()}
    if normalized in tenant_kinds:
        return tenant_kinds[normalized]
    known = ", ".join(sorted({*DEFAULT_KINDS, *(spec.name for spec in tenant_kinds.values())}))
    raise SchemaError("invalid", f"Unknown kind {name!r}; use one of: {known}.", "node.kind")


# --------------------------------------------------------------------------- item keys

MAX_ITEM_KEY_CHARS = 64
MAX_ITEM_KEY_WORDS = 6
MAX_ITEM_KEY_CJK_CHARS = 16

_ITEM_KEY_HINT = "use a short stable concept such as 'cilantro', 'hermes_studio' or '香菜'"
_ITEM_KEY_SEPARATORS = frozenset("-‐‑‒–—―/\\.:;,|+&~·・、")
_SENTENCE_PUNCTUATION = re.compile(r"[。!?]|[.…]$")
_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_CLOCK_TIME = re.compile(r"(?<!\d)(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?!\d)")
_DATE_IN_KEY = re.compile(
    r"(?<!\d)(?:19|20)\d{2}_(?:0?[1-9]|1[0-2])_(?:0?[1-9]|[12]\d|3[01])(?!\d)"  # 2024-05-01, 2024/5/1
    r"|(?<!\d)\d{1,2}_\d{1,2}_(?:19|20)\d{2}(?!\d)"  # 01/05/2024
    r"|\d{4}年\d{1,2}月|\d{1,2}月\d{1,2}[日号]"
)
_UUID_IN_KEY = re.compile(r"[0-9a-f]{8}_?[0-9a-f]{4}_?[0-9a-f]{4}_?[0-9a-f]{4}_?[0-9a-f]{12}")
_DIGIT_RUN = re.compile(r"\d+")
_RAW_TOKEN_SPLIT = re.compile(r"[\s_\-./:]+")


def _refuse_item_key(raw: str, problem: str) -> SchemaError:
    return SchemaError("invalid", f"itemKey {raw!r} {problem}; {_ITEM_KEY_HINT}.", "node.itemKey")


def _is_compact_date(digits: str) -> bool:
    return digits[:2] in ("19", "20") and 1 <= int(digits[4:6]) <= 12 and 1 <= int(digits[6:8]) <= 31


def _looks_random(token: str) -> bool:
    """Return True for hex digests and base64-like tokens: long, with digits scattered among letters."""
    if len(token) < 16:
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", token) and any(ch.isdigit() for ch in token):
        return True
    if not re.fullmatch(r"[A-Za-z0-9+/=]+", token):
        return False
    switches = sum(1 for left, right in pairwise(token) if left.isdigit() != right.isdigit())
    return switches >= 4


def _item_key_text(text: str) -> str:
    kept: list[str] = []
    for char in text:
        if char == "_" or unicodedata.category(char)[0] in "LNM":
            kept.append(char)
        elif char.isspace() or char in _ITEM_KEY_SEPARATORS:
            kept.append("_")
    return re.sub(r"_+", "_", "".join(kept)).strip("_")


def normalize_item_key(raw: str) -> str:
    """Return the canonical form of an itemKey, or refuse sentences, timestamps and random values.

    NFKC, lower-case, whitespace and separators become `_`, other symbols are dropped (letters,
    digits and CJK are kept; `+` reads "plus" and a `#` after a letter "sharp", so c++ and c# stay
    apart from c), runs of `_` collapse. Refused: empty results, more than 64 characters,
    more than 6 words, sentence punctuation (。!? anywhere, or a final . / …), more than 16 CJK
    characters, clock times, dates, digit runs of 10 or more (epoch timestamps, phone or card numbers),
    8-digit compact dates, UUIDs, and hex or base64-like tokens of 16+ characters.
    """
    if not isinstance(raw, str):
        raise SchemaError("invalid", f"itemKey must be a string; {_ITEM_KEY_HINT}.", "node.itemKey")
    text = unicodedata.normalize("NFKC", raw).strip()
    if len(text) > MAX_ITEM_KEY_CHARS:
        raise _refuse_item_key(raw, f"is longer than {MAX_ITEM_KEY_CHARS} characters")
    if (
        len(text.split()) > MAX_ITEM_KEY_WORDS
        or _SENTENCE_PUNCTUATION.search(text)
        or len(_CJK_CHAR.findall(text)) > MAX_ITEM_KEY_CJK_CHARS
    ):
        raise _refuse_item_key(raw, "looks like a sentence")
    if _CLOCK_TIME.search(text):
        raise _refuse_item_key(raw, "contains a time of day")
    if any(_looks_random(token) for token in _RAW_TOKEN_SPLIT.split(text)):
        raise _refuse_item_key(raw, "looks like a random token")
    # "c++" and "c#" must not collapse into "c".
    key = _item_key_text(re.sub(r"(?<=\w)#", " sharp ", text.lower()).replace("+", " plus "))
    if not key:
        raise _refuse_item_key(raw, "has no letters or digits")
    if len(key) > MAX_ITEM_KEY_CHARS:
        raise _refuse_item_key(raw, f"is longer than {MAX_ITEM_KEY_CHARS} characters once normalised")
    if _DATE_IN_KEY.search(key):
        raise _refuse_item_key(raw, "contains a date")
    if _UUID_IN_KEY.search(key):
        raise _refuse_item_key(raw, "contains a UUID")
    for digits in _DIGIT_RUN.findall(key):
        if len(digits) >= 10 or (len(digits) == 8 and _is_compact_date(digits)):
            raise _refuse_item_key(raw, "contains a timestamp or a long identifier")
    return key


def canonical_key(spec: KindSpec, item_key: str | None) -> str:
    """Return the server-side key: `<slot key>:<itemKey>` for itemized kinds, the slot key otherwise."""
    if not spec.itemized:
        return spec.slot_key
    if item_key is None or (isinstance(item_key, str) and not item_key.strip()):
        raise SchemaError(
            "invalid", f"Kind {spec.name} is itemized: give an itemKey; {_ITEM_KEY_HINT}.", "node.itemKey"
        )
    return f"{spec.slot_key}:{normalize_item_key(item_key)}"


# --------------------------------------------------------------------------- values

_LIGHT = {"oil": "low", "salt": "low"}

# (levels set, phrase pattern). Negations and "not too …" come before the plain phrases they contain.
# fmt: off
_FLAVOR_PHRASES: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), levels)
    for levels, pattern in (
        ({"spicy": "none"}, r"不要辣|不辣|免辣|不吃辣|去辣|不放辣"
                            r"|\bno\s+spic[ey]\b|\bnot\s+spicy\b|\bnon-?\s?spicy\b"),
        ({"spicy": "low"}, r"少辣|微辣|小辣|少放辣|\bless\s+spic[ey]\b|\bnot\s+too\s+spicy\b"
                           r"|\bmild(?:ly\s+spicy)?\b|\b(?:a\s+little|slightly)\s+spicy\b"),
        ({"spicy": "medium"}, r"中辣|\bmedium\s+spic[ey]\b"),
        ({"spicy": "high"}, r"特辣|重辣|多辣|加辣|超辣"
                            r"|\b(?:extra|very)\s+spicy\b|\bmore\s+spic[ey]\b|\bspicier\b"),
        ({"oil": "none"}, r"不要油|无油|不放油|\bno\s+oil\b|\boil-?\s?free\b"),
        ({"oil": "low"}, r"少油|低油|少放油|\bless\s+oily?\b|\blow\s+oil\b|\bless\s+greasy\b"
                         r"|\bnot\s+too\s+(?:oily|greasy)\b"),
        ({"oil": "high"}, r"多油|重油|\b(?:more|extra)\s+oil\b"),
        ({"salt": "none"}, r"不要盐|无盐|不放盐|\bno\s+salt\b|\bsalt-?\s?free\b"),
        ({"salt": "low"}, r"少盐|低盐|少放盐|\bless\s+salty?\b|\blow\s+(?:salt|sodium)\b"
                          r"|\bnot\s+too\s+salty\b"),
        ({"salt": "high"}, r"多盐|\bmore\s+salt\b|\bsaltier\b"),
        ({"sugar": "none"}, r"不要糖|无糖|不加糖|不放糖"
                            r"|\bno\s+sugar\b|\bsugar-?\s?free\b|\bunsweetened\b"),
        ({"sugar": "low"}, r"少糖|低糖|少放糖|\bless\s+(?:sugar|sweet)\b|\blow\s+sugar\b"
                           r"|\bnot\s+too\s+sweet\b"),
        ({"sugar": "high"}, r"多糖|多放糖|\bmore\s+sugar\b|\bsweeter\b"),
        (_LIGHT, r"清淡|\blight(?:\s+(?:flavou?r|taste|seasoning))?\b|\bbland\b"),
    )
)
# fmt: on
# Words allowed around the phrases ("我喜欢少辣", "I prefer less spicy food"); anything else means
# the sentence says more than a flavour object can hold, so it is left as a string and refused.
_FLAVOR_FILLER = re.compile(
    r"我|喜欢|偏好|口味|一点|一些|稍微|要|偏|的|菜|和|而且|并且|还有|都|请"
    r"|\b(?:i|prefer|like|likes|and|a|bit|little|please|with|food|dishes|taste|but|also|the|my)\b"
    r"|[\s,;/+&.!~\-、]+",
    re.IGNORECASE,
)


def _parse_flavor(text: str) -> dict[str, str] | None:
    levels: dict[str, str] = {}
    rest = text
    for pattern, phrase_levels in _FLAVOR_PHRASES:
        if not pattern.search(rest):
            continue
        for dimension, level in phrase_levels.items():
            if levels.setdefault(dimension, level) != level:
                return None  # "少辣 多辣" contradicts itself; let validation ask for an object
        rest = pattern.sub(" ", rest)
    if not levels or _FLAVOR_FILLER.sub("", rest):
        return None
    return dict(sorted(levels.items()))


def _normalize_strings(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFKC", value).strip()
    if isinstance(value, dict):
        return {key: _normalize_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalize_strings(item) for item in value]
    return value


def normalize_value(spec: KindSpec, value: Any) -> Any:
    """Return `value` in canonical form: strings NFKC-normalised and stripped (also inside objects and
    lists); for flavor_profile, phrases such as 少油少辣 / "less oil, less spicy" become
    `{"oil": "low", "spicy": "low"}` and object keys and string levels are lower-cased. A flavour string
    that cannot be read completely is returned unchanged, so `validate_value` refuses it.
    """
    value = _normalize_strings(value)
    if spec.name != "flavor_profile":
        return value
    if isinstance(value, str):
        return _parse_flavor(value) or value
    if isinstance(value, dict):
        return {
            str(key).strip().lower(): item.lower() if isinstance(item, str) else item
            for key, item in value.items()
        }
    return value


def _is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def validate_value(spec: KindSpec, value: Any, *, field: str = "node.valueJson") -> None:
    """Refuse a value that does not fit the kind's shape; call it on the output of `normalize_value`.

    valueJson may be omitted (None) for every kind without `required_value_keys`: title and content
    carry the memory and an itemized kind's itemKey names the item. Kinds with required keys
    (interaction_contract, home_location, task) exist for their structured value and need it.
    A present string must not be blank and a present object must not be empty.
    """
    if value is None and not spec.required_value_keys:
        return
    if spec.value_shape == "any":
        return
    accepts_string = spec.value_shape in ("string", "string_or_object") and not spec.required_value_keys
    accepts_object = spec.value_shape in ("object", "string_or_object")
    if isinstance(value, str) and accepts_string:
        if not value.strip():
            raise SchemaError("invalid", f"{spec.name} needs a non-empty string in valueJson.", field)
        return
    if isinstance(value, dict) and accepts_object:
        _check_object(spec, value, field)
        return
    raise SchemaError("invalid", _shape_detail(spec), field)


def _check_object(spec: KindSpec, value: dict[str, Any], field: str) -> None:
    if not value:
        raise SchemaError("invalid", f"{spec.name} needs a non-empty object in valueJson.", field)
    if spec.required_value_keys and all(_is_blank(value.get(key)) for key in spec.required_value_keys):
        raise SchemaError("invalid", _shape_detail(spec), field)


def _shape_detail(spec: KindSpec) -> str:
    if spec.required_value_keys:
        keys = spec.required_value_keys
        wanted = keys[0] if len(keys) == 1 else f"at least one of {', '.join(keys)}"
        return f"{spec.name} needs an object with {wanted} in valueJson."
    if spec.name == "flavor_profile":
        return (
            'flavor_profile needs an object such as {"oil": "low", "spicy": "low"} in valueJson; '
            "phrases like 少辣, 少油, less spicy or less oil are converted for you."
        )
    wanted = {"string": "a string", "object": "an object", "string_or_object": "a string or an object"}
    return f"{spec.name} needs {wanted[spec.value_shape]} in valueJson."


# --------------------------------------------------------------------------- sensitive content

_SECRET_VALUE = r"[\"']?([A-Za-z0-9._~+/=\-]{8,})"
_VERBAL_SEPARATOR = r"\s*(?:[:=：]|\bis\b|是|为|為)\s*"

_TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern))
    for reason, pattern in (
        ("api_key", r"\bsk-[A-Za-z0-9_\-]{20,}"),  # OpenAI / Anthropic (sk-proj-…, sk-ant-…)
        ("api_key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
        ("api_key", r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
        ("api_key", r"\bgithub_pat_[A-Za-z0-9_]{30,}"),
        ("api_key", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
        ("api_key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
        ("api_key", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
        ("api_key", r"\bAIza[0-9A-Za-z_\-]{35}"),
        ("access_token", r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
        ("access_token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{20,}=*"),
    )
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_KEYWORD_SECRET = re.compile(
    r"(?i)(?<![a-z])(api[\s_\-]?key|apikey|access[\s_\-]?key|secret[\s_\-]?key|client[\s_\-]?secret"
    r"|(?:access|auth|refresh)[\s_\-]?token|token|secret|密钥|秘钥|私钥|令牌)"
    + _VERBAL_SEPARATOR
    + _SECRET_VALUE
)
_WEAK_SECRET_KEYWORDS = frozenset({"token", "secret"})
_PASSWORD_KEYWORD = (
    r"(?:(?<![A-Za-z0-9])(?:pass(?:word|wd|code|phrase)|pwd|pin(?:\s*code)?)(?![A-Za-z])|密码|口令)"
)
# "密码：xxx", "pwd=…", "密码是 abc123": any ASCII value after a colon, '=' or 是/为.
_PASSWORD_ASSIGNED = re.compile(_PASSWORD_KEYWORD + r"\s*(?:[:=：]|是|为|為)\s*([!-~]{3,})", re.IGNORECASE)
# "my password is hunter2": after a verb only a value with a digit, a symbol or quotes counts,
# so "my password is strong" and "the password manager is 1Password" pass.
_PASSWORD_STATED = re.compile(_PASSWORD_KEYWORD + r"\s+(?:is|was)\s+([!-~]{3,})", re.IGNORECASE)
_CARD_CANDIDATE = re.compile(
    r"(?<![\d\-])(?:\d{13,19}|\d{4}([ \-])\d{4}\1\d{4}\1\d{1,7}|\d{4}([ \-])\d{6}\2\d{4,5})(?![\d\-])"
)
_CARD_WITH_CONTEXT = re.compile(
    r"(?i)(?:银行卡号?|信用卡号?|卡号|\b(?:credit|debit)\s+card(?:\s+number)?|\bcard\s*(?:number|no\.?|#))"
    r"\s*(?:[:：=是为]|\bis\b)?\s*(\d[\d \-]{10,24}\d)"
)
_CN_ID_CANDIDATE = re.compile(r"(?<![0-9A-Za-z])([1-9]\d{16}[\dXx])(?![0-9A-Za-z])")
_CN_ID_WITH_CONTEXT = re.compile(r"身份证(?:号码|号)?\D{0,6}(\d{17}[\dXx]|\d{15})(?![0-9A-Za-z])")
_SSN = re.compile(
    r"(?i)\b(?:ssn|social\s+security(?:\s+(?:number|no\.?|#))?)\b\D{0,15}(\d{3}[\- ]?\d{2}[\- ]?\d{4})(?!\d)"
)
_PASSPORT = re.compile(
    r"(?i)(?:护照(?:号码|号)?|\bpassport(?:\s*(?:number|no\.?|#))?)\s*(?:[:：=是为]|\bis\b)?\s*"
    r"([A-Za-z]{0,2}\d{6,9})(?![0-9A-Za-z])"
)
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_ID_CHECK_CHARS = "10X98765432"


def luhn_valid(digits: str) -> bool:
    """Return True when the digit string passes the Luhn checksum of payment cards."""
    if not digits.isdigit():
        return False
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = int(char)
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def cn_resident_id_valid(number: str) -> bool:
    """Return True for an 18-character Chinese resident ID with a plausible birth date and valid checksum."""
    number = number.upper()
    if not re.fullmatch(r"[1-9]\d{16}[\dX]", number):
        return False
    year, month, day = int(number[6:10]), int(number[10:12]), int(number[12:14])
    if not (1900 <= year <= 2099 and 1 <= month <= 12 and 1 <= day <= 31):
        return False
    total = sum(int(char) * weight for char, weight in zip(number[:17], _CN_ID_WEIGHTS, strict=True))
    return _CN_ID_CHECK_CHARS[total % 11] == number[17]


def _is_card_number(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    # Major networks start with 2–6; the prefix check keeps millisecond timestamps out.
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_valid(digits)


def _password_value_stated(value: str) -> bool:
    if value[0] in "\"'":
        return True
    core = value.rstrip(".,!?;:)")
    return len(core) >= 4 and any(not char.isalpha() for char in core)


def _has_letter_and_digit(value: str) -> bool:
    return any(char.isdigit() for char in value) and any(char.isalpha() for char in value)


def _sensitive_reason(text: str) -> str | None:
    if _PRIVATE_KEY.search(text):
        return "private_key"
    for reason, pattern in _TOKEN_PATTERNS:
        if any(any(char.isdigit() for char in match.group()) for match in pattern.finditer(text)):
            return reason
    for match in _KEYWORD_SECRET.finditer(text):
        keyword, value = match.group(1).lower(), match.group(2)
        minimum = 16 if keyword in _WEAK_SECRET_KEYWORDS else 8
        if len(value) >= minimum and _has_letter_and_digit(value):
            return "api_key"
    if _PASSWORD_ASSIGNED.search(text) or any(
        _password_value_stated(match.group(1)) for match in _PASSWORD_STATED.finditer(text)
    ):
        return "password"
    if _CN_ID_WITH_CONTEXT.search(text) or any(
        cn_resident_id_valid(match.group(1)) for match in _CN_ID_CANDIDATE.finditer(text)
    ):
        return "id_number"
    if _SSN.search(text):
        return "ssn"
    if _PASSPORT.search(text):
        return "passport_number"
    for match in _CARD_WITH_CONTEXT.finditer(text):
        if 12 <= len(re.sub(r"\D", "", match.group(1))) <= 19:
            return "card_number"
    if any(_is_card_number(match.group()) for match in _CARD_CANDIDATE.finditer(text)):
        return "card_number"
    return None


def find_sensitive_content(*texts: str | None) -> str | None:
    """Return why the texts must not be stored ("password", "api_key", "access_token", "private_key",
    "card_number", "id_number", "ssn", "passport_number"), or None when they are safe to keep.
    """
    for text in texts:
        if text:
            reason = _sensitive_reason(unicodedata.normalize("NFKC", text))
            if reason:
                return reason
    return None


# --------------------------------------------------------------------------- confidence contract

HIGH_CONFIDENCE_MIN = 0.8
MEDIUM_CONFIDENCE_MIN = 0.5
MIN_HIGH_CONFIDENCE_QUOTE_CHARS = 5
MEDIUM_CONFIDENCE_CAP = 0.7
LOW_CONFIDENCE_CAP = 0.45
LOW_CONFIDENCE_OMIT_BELOW = 0.35  # retrieval omits nodes below this as `low_confidence` (DESIGN rule 8)


def _normalize_quote_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def apply_confidence_contract(
    confidence: float, quote: str | None, evidence_texts: Sequence[str]
) -> tuple[float, bool]:
    """Return `(applied_confidence, downgraded)` under seed 001's contract.

    High (>= 0.8) needs a quote of at least 5 non-whitespace characters found verbatim in one
    evidence text; medium (>= 0.5) needs a non-empty quote found there. A claim that its quote does
    not support drops to the level the quote does support: medium -> 0.7, low -> 0.45 (above the
    0.35 omission floor, so a downgraded memory is still recalled). Matching is case-sensitive and
    verbatim after NFKC and collapsing whitespace.
    """
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not math.isfinite(confidence)
        or not 0 <= confidence <= 1
    ):
        raise SchemaError("invalid", "confidence must be a number between 0 and 1.", "node.confidence")
    needle = _normalize_quote_text(quote or "")
    found = bool(needle) and any(needle in _normalize_quote_text(text) for text in evidence_texts if text)
    quote_chars = len(needle.replace(" ", ""))
    if confidence >= HIGH_CONFIDENCE_MIN:
        if found and quote_chars >= MIN_HIGH_CONFIDENCE_QUOTE_CHARS:
            return float(confidence), False
        return (MEDIUM_CONFIDENCE_CAP if found else LOW_CONFIDENCE_CAP), True
    if confidence >= MEDIUM_CONFIDENCE_MIN and not found:
        return LOW_CONFIDENCE_CAP, True
    return float(confidence), False


# --------------------------------------------------------------------------- list-all queries

_LIST_ALL_CHINESE = re.compile(
    r"(?:请|麻烦)?(?:你)?(?:帮我)?(?:把)?(?:列出|显示|展示|查看|看看|给我看|告诉我|导出|打印)?(?:一下)?"
    r"(?:你记得的|你记住的|关于我的|我的|你的)?(?:所有|全部|一切)的?(?:记忆|回忆|memory|memories)"
    r"(?:内容|列表)?(?:都)?(?:列出来|显示出来|给我看)?(?:吧|呢|吗)?"
    r"|(?:列出|显示|展示|查看|导出)(?:一下)?(?:我的|你的)?记忆(?:列表)?"
)
_LIST_ALL_ENGLISH = re.compile(
    r"(?:please )?(?:(?:list|show|give|tell|display|dump|export|print|what are) )?(?:me )?"
    r"(?:all|every) (?:of )?(?:(?:the|my|your|our|stored|saved) )*(?:memory|memories)"
    r"(?: (?:you (?:have|remember|stored|saved|keep)|about me|of me|stored|saved))?(?: please)?"
    r"|(?:please )?(?:list|show|give|tell|display|dump|export|print) (?:me )?(?:everything|all)"
    r"(?: (?:you (?:have|remember|know|stored|saved)|about me|stored|saved))?(?: please)?"
    r"|(?:tell me |what is |what's )?everything you (?:remember|know|have stored|stored|saved)(?: about me)?"
    r"|(?:list|show|dump|export) (?:my |your |the )?memories"
)


def is_list_all_query(text: str | None) -> bool:
    """Return True when a query asks for every memory ("所有记忆", "list everything"), not a topic."""
    if not text:
        return False
    normalized = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    normalized = normalized.strip(" .!?。,~")
    return bool(
        _LIST_ALL_ENGLISH.fullmatch(normalized) or _LIST_ALL_CHINESE.fullmatch(normalized.replace(" ", ""))
    )


# --------------------------------------------------------------------------- scope policy


def validate_scope_for_write(
    *,
    spec: KindSpec,
    scope: str,
    explicit_user_intent: bool,
    expires_at_set: bool,
    allowed_scopes: Collection[str],
) -> str:
    """Return the scope a write lands in, or refuse it (DESIGN rule 5, API.md "Write").

    1. Unknown scope -> invalid. `global` -> forbidden (agents never write global). A scope outside
       the key's writeScopes -> forbidden.
    2. Session writes never need explicit intent. User scope needs it, and so does any scope for a
       kind with `requires_explicit_user_intent`. Without it the write is downgraded to `session`
       when the key may write session, and forbidden otherwise.
    3. A `user_scope_needs_expiry` kind (temporary_state) that still lands in user scope without
       expiresAt -> invalid.
    """
    if scope not in SCOPES:
        raise SchemaError("invalid", f"scope must be one of {', '.join(SCOPES)}.", "node.scope")
    if scope == "global":
        raise SchemaError(
            "forbidden", "Agents never write global scope; write to user, workspace or session.", "node.scope"
        )
    if scope not in allowed_scopes:
        permitted = ", ".join(s for s in SCOPES if s in allowed_scopes) or "none"
        raise SchemaError(
            "forbidden", f"This API key may not write {scope} scope (writeScopes: {permitted}).", "node.scope"
        )
    needs_intent = scope != "session" and (scope == "user" or spec.requires_explicit_user_intent)
    if needs_intent and not explicit_user_intent:
        if "session" not in allowed_scopes:
            raise SchemaError(
                "forbidden",
                f"{spec.name} in {scope} scope needs explicitUserIntent: true (the user asked for it).",
                "node.scope",
            )
        scope = "session"
    if spec.user_scope_needs_expiry and scope == "user" and not expires_at_set:
        raise SchemaError(
            "invalid",
            "Temporary states without expiresAt never enter user scope; set expiresAt or use session scope.",
            "node.expiresAt",
        )
    return scope
