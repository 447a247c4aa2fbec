"""The gate: each planned item's risk, recomputed from the cards alone, and what the run does with it.

The risk never trusts the planner. Rules, strongest first: members in more than one scope owner →
high (`cross_scope`); a member or the plan under 0.5 confidence → high (`low_confidence`); members
whose values disagree (their signatures differ: polarity, relatives, concepts, numbers) → high
(`values_disagree`); a card a person reviewed → at least medium (`reviewed`); otherwise low.

The decision matrix (docs/memory-rules.md, "Organizer"), trigger × mode × risk:

| trigger   | mode     | low     | medium | high   |
|-----------|----------|---------|--------|--------|
| scheduled | any      | applied | queued | queued |
| manual    | review   | queued  | queued | queued |
| manual    | auto_low | applied | queued | queued |

No ORM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory.organizer.cluster import Card
from memory.rules.concepts import lookalike_reason

__all__ = ["LOW_CONFIDENCE", "Risk", "decide", "risk_of"]

LOW_CONFIDENCE = 0.5
_RANK = {"low": 0, "medium": 1, "high": 2}


@dataclass(frozen=True)
class Risk:
    level: str
    reasons: tuple[str, ...]


def _values_disagree(cards: Sequence[Card]) -> bool:
    first = cards[0].sign()
    return any(lookalike_reason(first, card.sign()) for card in cards[1:])


def risk_of(cards: Sequence[Card], *, confidence: float) -> Risk:
    """Return the risk of changing `cards` together, with every rule that raised it."""
    reasons: list[str] = []
    level = "low"

    def raise_to(wanted: str, reason: str) -> None:
        nonlocal level
        reasons.append(reason)
        if _RANK[wanted] > _RANK[level]:
            level = wanted

    if len({(card.scope, card.owner_ref) for card in cards}) > 1:
        raise_to("high", "cross_scope")
    if confidence < LOW_CONFIDENCE or any(card.confidence < LOW_CONFIDENCE for card in cards):
        raise_to("high", "low_confidence")
    if len(cards) > 1 and _values_disagree(cards):
        raise_to("high", "values_disagree")
    if any(card.reviewed for card in cards):
        raise_to("medium", "reviewed")
    return Risk(level=level, reasons=tuple(reasons))


def decide(*, trigger: str, mode: str, risk: str) -> str:
    """Return `applied` or `queued` for an item of `risk` in a run of `trigger` and `mode`."""
    if risk != "low":
        return "queued"
    if trigger == "scheduled" or mode == "auto_low":
        return "applied"
    return "queued"
