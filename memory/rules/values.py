"""Value normalisation and value shapes: what a kind's `valueJson` may hold, in canonical form.

Strings are NFKC-normalised; flavour phrases (少辣, less oil) become flavour objects; a value that
does not fit its kind's shape is refused with a message saying what would fit.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from memory.rules.errors import SchemaError
from memory.rules.kinds import JOURNAL_KIND, KindSpec

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
    that cannot be read completely is returned unchanged, so `validate_value` refuses it. A journal
    entry is prose, kept as written (only stripped): NFKC would turn Chinese full-width punctuation
    into ASCII.
    """
    if spec.name == JOURNAL_KIND:
        return value.strip() if isinstance(value, str) else value
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
