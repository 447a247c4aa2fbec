"""The confidence contract of seed 001: high confidence needs a verbatim quote of the evidence.

Also the floor below which retrieval omits a memory as `low_confidence` (DESIGN rule 8).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence

from memory.rules.errors import SchemaError

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
