"""Task rules: a request to remember a to-do, and marking a known task done.

"TODO: …", "remind me to …", 「待办」「提醒我」「别忘了」 and 「帮我把周报完成」 become a `task`
card `{"status": "open", "title": …}` with a short itemKey drawn from its words; 「…完成了」 /
"… is done" updates a known open task whose words it names to `done`. Pure: no ORM.
"""

from __future__ import annotations

import re

from memory.pipeline.extractors.draft import Clause, PlanDraft, node_draft
from memory.pipeline.sentences import compact_key, trim_text
from memory.rules.sensitive import find_sensitive_content

__all__ = ["task", "task_done"]

_TASK_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bto-?do\s*[:：\-]?\s*(?P<x>.+)", re.IGNORECASE),
    re.compile(r"\bremind\s+me\s+(?:to|about)\s+(?P<x>.+)", re.IGNORECASE),
    re.compile(r"\bdon'?t\s+(?:let\s+me\s+)?forget\s+to\s+(?P<x>.+)", re.IGNORECASE),
    re.compile(r"待办(?:事项)?\s*[:：]?\s*(?P<x>.+)"),
    re.compile(r"提醒我(?:一下)?(?:要)?(?P<x>.+)"),
    re.compile(r"别忘了(?:要)?(?P<x>.+)"),
    re.compile(r"帮我(?:把)?(?P<x>.{1,40}?)(?P<verb>完成|做完|搞定|写完|弄完)"),
)
_DONE = re.compile(
    r"完成了|做完了|搞定了|弄完了|写完了|已完成|已经完成|\bdone\b|\bfinished\b|\bcompleted\b", re.IGNORECASE
)


def task(draft: PlanDraft, ctx: Clause) -> int:
    """ "remind me to …" / 「提醒我…」 / 「帮我把…完成」: an open task (the first pattern that matches)."""
    for pattern in _TASK_PATTERNS:
        match = pattern.search(ctx.sentence)
        if match is None:
            continue
        what = trim_text(match.group("x"))
        if "verb" in pattern.groupindex and what:
            what = match.group("verb") + what  # 「帮我把周报完成」 → 完成周报
        if not what or find_sensitive_content(what):
            return 0
        item_key = compact_key(what)
        if item_key is None:
            return 0
        node = node_draft(
            "task",
            item_key=item_key,
            value_json={"status": "open", "title": what[:200]},
            importance=0.7,
            title=(f"待办：{what}" if ctx.zh else f"TODO: {what}")[:500],
            content=trim_text(ctx.sentence),
            tags=["待办"] if ctx.zh else ["todo"],
        )
        return draft.add(
            ctx, node, "用户提出待办事项" if ctx.zh else "the user asked for a task", explicit=True
        )
    return 0


def task_done(draft: PlanDraft, ctx: Clause) -> int:
    """「…完成了」 / "… is done": the known open task whose words the clause names becomes done."""
    if not _DONE.search(ctx.clause):
        return 0
    lowered = ctx.clause.lower()
    for node in draft.known:
        value = node.value_json if isinstance(node.value_json, dict) else {}
        if node.kind != "task" or value.get("status") == "done":
            continue
        words = [w for w in (node.item_key or "").split("_") if w]
        title = str(value.get("title") or "")
        if (words and all(w in lowered for w in words)) or (title and title.lower() in lowered):
            draft.add(
                ctx,
                {"value_json": {**value, "status": "done"}, "source_quote": ctx.quote()},
                "用户说明任务已完成" if ctx.zh else "the user said the task is done",
                slot=node.key,
                operation="update",
                target_id=node.node_id,
                explicit=True,
            )
            return 1
    return 0
