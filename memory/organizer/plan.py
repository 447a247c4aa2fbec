"""Plan each cluster: keep / merge_into / delete / mark_review / rewrite.

Offline (`plan_by_rules`): a cluster merges into its best card (reviewed first, then the most
confident, then the newest), which keeps its wording. With a chat model (`plan_by_model`, the
extractor's settings) the model answers one JSON object per cluster; each answer is validated
(`plan_from_answer`) and a cluster whose answer fails (timeout, bad JSON, an unknown action or card)
falls back to the rules with the failure's code, so the run reports why. No ORM.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.organizer.cluster import Card

__all__ = ["ACTIONS", "PlanFailure", "PlannedItem", "plan_by_model", "plan_by_rules", "plan_from_answer"]

ACTIONS = ("keep", "merge_into", "delete", "mark_review", "rewrite")
MAX_TEXT = 2000


@dataclass
class PlannedItem:
    action: str
    members: list[str]
    target_id: str | None
    proposed: dict[str, Any] | None
    planner: str
    confidence: float
    reason: str
    fallback: str = ""  # why the model's plan was not used, when it was not
    extra: dict[str, Any] = field(default_factory=dict)


class PlanFailure(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


def _proposed(card: Card) -> dict[str, Any]:
    return {"title": card.title, "content": card.content, "value": card.value}


def plan_by_rules(cluster: Sequence[Card]) -> PlannedItem:
    target = cluster[0]
    return PlannedItem(
        action="merge_into",
        members=[card.id for card in cluster],
        target_id=target.id,
        proposed=_proposed(target),
        planner="rules",
        confidence=0.9,
        reason=f"{len(cluster)} cards hold one memory; kept the best one's wording.",
    )


PROMPT = """You organise an AI agent's long-term memory cards. The cards below were clustered as possible
duplicates of one memory. Decide what to do and answer one JSON object:
{"action": "keep|merge_into|delete|mark_review|rewrite", "members": [card ids this applies to],
 "target": "the card id that survives (merge_into, rewrite)", "title": "...", "content": "...",
 "confidence": 0..1, "reason": "one sentence"}
merge_into: the members are one memory, keep one card with every member's meaning (title/content in the
target's language). keep: they are different memories. delete: the members are wrong or empty. mark_review:
a person should look. rewrite: one card's wording needs fixing. Never merge opposite statements
(likes vs avoids) or different people."""


def _card_json(card: Card) -> dict[str, Any]:
    return {
        "id": card.id,
        "kind": card.kind,
        "title": card.title,
        "content": card.content[:500],
        "value": card.value,
        "confidence": card.confidence,
        "reviewed": card.reviewed,
    }


def plan_from_answer(cluster: Sequence[Card], answer: Any, *, planner: str) -> PlannedItem:
    """Validate a model's answer for `cluster`; raise PlanFailure with a code when it is unusable."""
    if not isinstance(answer, dict):
        raise PlanFailure("model_bad_answer", "The answer is not a JSON object.")
    ids = {card.id for card in cluster}
    action = answer.get("action")
    if action not in ACTIONS:
        raise PlanFailure("model_bad_action", f"Unknown action {action!r}.")
    members = answer.get("members") or sorted(ids)
    if not isinstance(members, list) or not members or not set(map(str, members)) <= ids:
        raise PlanFailure("model_bad_members", "The answer names cards outside the cluster.")
    members = [str(m) for m in members]
    target = answer.get("target")
    if action in ("merge_into", "rewrite") and (not isinstance(target, str) or target not in members):
        raise PlanFailure("model_bad_target", "merge_into and rewrite need a target among the members.")
    confidence = answer.get("confidence", 0.7)
    if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        raise PlanFailure("model_bad_confidence", "confidence must be a number from 0 to 1.")
    proposed = None
    if action in ("merge_into", "rewrite"):
        card = next(c for c in cluster if c.id == target)
        title, content = answer.get("title") or card.title, answer.get("content") or card.content
        if not isinstance(title, str) or not isinstance(content, str) or len(content) > MAX_TEXT:
            raise PlanFailure("model_bad_text", "title and content must be short strings.")
        proposed = {"title": title[:500], "content": content, "value": card.value}
    reason = answer.get("reason") if isinstance(answer.get("reason"), str) else ""
    return PlannedItem(
        action=action,
        members=members,
        target_id=target if proposed else None,
        proposed=proposed,
        planner=planner,
        confidence=float(confidence),
        reason=reason[:500],
    )


def plan_by_model(
    cluster: Sequence[Card], client: Any, *, compression_target: str = ""
) -> tuple[PlannedItem, int]:
    """Return the model's validated plan for `cluster` (or the rules' with `fallback`) and the tokens used."""
    from memory.pipeline.chat_model import LLMError

    user = json.dumps(
        {"cards": [_card_json(card) for card in cluster], "compressionTarget": compression_target},
        ensure_ascii=False,
        default=str,
    )
    try:
        answer = client.complete_json(system=PROMPT, user=user)
        return plan_from_answer(cluster, answer, planner=f"llm:{client.model}"), client.last_tokens
    except LLMError as exc:
        item, code = plan_by_rules(cluster), "model_unavailable"
        item.reason = f"{item.reason} (model: {exc})"[:500]
    except PlanFailure as exc:
        item, code = plan_by_rules(cluster), exc.code
        item.reason = f"{item.reason} (model: {exc})"[:500]
    item.fallback = code
    return item, getattr(client, "last_tokens", 0)
