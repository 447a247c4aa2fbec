"""What a card says, as text: its search text and the content test that makes a rewrite a noop.

`node_search_text` is the one definition of what the keyword index reads for a card (title,
content, value, itemKey, tags and entities, Chinese segmented); `node_plain_text` is what a reader
such as a reranker reads (title, content and value as written). `same_content` is the one test of
DESIGN rule 2: a write into an occupied slot whose value, title and content equal the occupant's is
a noop; anything else supersedes it. All take plain values, so writers of every kind (API,
extraction, imports) call them on whatever they hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from memory.rules.text import segment_for_search

CONTENT_FIELDS = ("value_json", "title", "content")
# Bump when `node_search_text` or the segmentation it calls yields other tokens for the same card: files
# exported before a bump are segmented again on import instead of trusting their stored search text.
SEARCH_TEXT_VERSION = 3


def _value_text(value_json: Any) -> str:
    if isinstance(value_json, str):
        return value_json
    return json.dumps(value_json, ensure_ascii=False) if value_json is not None else ""


def node_search_text(*, title: str | None, content: str | None, value_json: Any, item_key: str | None,
                     tags: Iterable[str], entities: Iterable[str]) -> str:
    """Return the segmented text the keyword index of a card reads."""
    return segment_for_search(title, content, _value_text(value_json), item_key, " ".join(tags),
                              " ".join(entities))


def node_plain_text(*, title: str | None, content: str | None, value_json: Any) -> str:
    """Return a card's title, content and value as written, one per line, without repeats or blanks."""
    parts: list[str] = []
    for part in (title, content, _value_text(value_json)):
        part = (part or "").strip()
        if part and part not in parts:
            parts.append(part)
    return "\n".join(parts)


def content_signature(card: Mapping[str, Any] | object) -> tuple[str, Any, Any]:
    """Return what rule 2 compares of a card (a mapping or an object with the node's attribute names)."""
    if isinstance(card, Mapping):
        value_json, title, content = (card.get(name) for name in CONTENT_FIELDS)
    else:
        value_json, title, content = (getattr(card, name, None) for name in CONTENT_FIELDS)
    return json.dumps(value_json, sort_keys=True, ensure_ascii=False), title, content


def same_content(card: Mapping[str, Any] | object, other: Mapping[str, Any] | object) -> bool:
    """Return True when two cards of one slot say the same thing (a rewrite is a noop, not a revision)."""
    return content_signature(card) == content_signature(other)
