"""The sensitive-content guard (DESIGN rule 7): secrets and personal identifiers are never stored.

Passwords, API keys and tokens, private keys, payment card numbers (Luhn-checked), Chinese
resident ID numbers (checksum), SSNs and passport numbers are recognised in any text; writers of
cards, summaries and imported rows refuse what `find_sensitive_content` names.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

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


def find_sensitive_node_content(*, title: str | None, content: str | None, item_key: str | None,
                                value_json: Any, tags: Iterable[str] = (),
                                entities: Iterable[str] = ()) -> str | None:
    """Return why a card must not be stored (as `find_sensitive_content`), reading every text it carries."""
    value = value_json if isinstance(value_json, str) else (
        json.dumps(value_json, ensure_ascii=False) if value_json is not None else None)
    return find_sensitive_content(title, content, item_key, value, *tags, *entities)
