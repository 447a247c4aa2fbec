"""Correction rules that change a known card rather than write a new one.

「香菜现在可以接受一点」 / "a little cilantro is fine" supersedes the known avoidance with one
that accepts small amounts; 「其实我现在可以吃香菜了」 expires it. (A correction of any other slot
is handled where the slot's rule files its item: see `PlanDraft.add`.) Pure: no ORM.
"""

from __future__ import annotations

import re

from memory.pipeline.extractors.draft import Clause, PlanDraft, node_draft
from memory.pipeline.sentences import quote, trim_text

__all__ = ["lift"]

_LIFT = re.compile(
    r"可以吃|能吃|可以接受|能接受|接受|可以了|没问题|吃了|可以放|可以加|\bcan\s+eat\b|\bdo\s+eat\b"
    r"|\bis\s+(?:fine|ok|okay)\b|\bare\s+(?:fine|ok|okay)\b|\b(?:okay|ok|fine)\s+with\b",
    re.IGNORECASE,
)
_PARTIAL = re.compile(
    r"一点|少量|少放|少许|不要太多|别太多|\ba\s+little\b|\ba\s+bit\b|\bsmall\s+amounts?\b"
    r"|\bnot\s+too\s+much\b|\bin\s+moderation\b",
    re.IGNORECASE,
)


def lift(draft: PlanDraft, ctx: Clause) -> int:
    """「香菜现在可以接受一点」: a correction of a known avoidance supersedes (a little) or expires it."""
    if not _LIFT.search(ctx.sentence):
        return 0
    for node in draft.known:
        if node.kind != "food_avoidance" or not node.item_key:
            continue
        term = node.value_json if isinstance(node.value_json, str) else node.item_key
        term = re.sub(r"[(（].*$", "", term).strip() or node.item_key
        if term.lower() not in ctx.sentence.lower():
            continue
        words = trim_text(ctx.sentence)
        if _PARTIAL.search(ctx.sentence):
            value = f"{term}(少量)" if ctx.zh else f"{term} (small amounts)"
            replacement = node_draft(
                "food_avoidance",
                item_key=node.item_key,
                value_json=value,
                importance=0.85,
                title=f"用户可接受少量{term}" if ctx.zh else f"Accepts a little {term}",
                content=words,
                tags=["忌口", "菜谱推荐"] if ctx.zh else ["dietary", "recipes"],
                entities=[term],
                source_quote=quote(ctx.sentence, ctx.sentence, ctx.message.content),
            )
            draft.add(
                ctx,
                replacement,
                "用户纠正忌口：可接受少量"
                if ctx.zh
                else "the user corrected the avoidance: small amounts are fine",
                slot=node.key,
                operation="supersede",
                target_id=node.node_id,
                explicit=True,
            )
        else:
            draft.add(
                ctx,
                {},
                "用户纠正：现在可以吃" + term if ctx.zh else f"the user corrected it: {term} is fine now",
                slot=node.key,
                operation="expire",
                target_id=node.node_id,
                explicit=True,
            )
        return 1
    return 0
