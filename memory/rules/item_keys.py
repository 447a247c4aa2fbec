"""Item keys and canonical keys: `<slot key>:<normalised itemKey>` for itemized kinds (DESIGN rule 4).

An itemKey names one item of a slot with a short stable concept ('cilantro', '香菜'), never a
sentence, a timestamp or a random value; the normalised form is what makes two writes land in
the same slot.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import pairwise

from memory.rules.errors import SchemaError
from memory.rules.journal import require_journal_date
from memory.rules.kinds import JOURNAL_KIND, KindSpec

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
    if spec.name == JOURNAL_KIND:
        return f"{spec.slot_key}:{require_journal_date(item_key)}"  # a date, which other itemKeys may not be
    return f"{spec.slot_key}:{normalize_item_key(item_key)}"
