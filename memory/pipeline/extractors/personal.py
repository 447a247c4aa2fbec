"""Personal-fact rules: where the user lives.

「我住在杭州」 / "I live in Berlin" becomes `home_location` `{"city": X}`; phrases that name no
place (「我住在这里很久了」) are left alone. Pure: no ORM.
"""

from __future__ import annotations

import re

from memory.pipeline.extractors.draft import Clause, PlanDraft, node_draft
from memory.pipeline.sentences import CJK, trim_text

__all__ = ["home"]

_HOME_ZH = re.compile(
    rf"我(?:现在)?(?:住在|家在|住)(?P<x>[{CJK}]{{2,10}}?)(?:市|省)?(?=$|[，,。！!；;]|了|呢|啊|哦)"
)
_HOME_EN = re.compile(r"\b[Ii]\s+(?:now\s+)?live\s+in\s+(?P<x>[A-Z][A-Za-z\-]+(?:\s+[A-Z][A-Za-z\-]+){0,2})")


def home(draft: PlanDraft, ctx: Clause) -> int:
    """我住在X / "I live in X": the user's home city."""
    match = _HOME_ZH.search(ctx.clause) or _HOME_EN.search(ctx.clause)
    if match is None:
        return 0
    city = trim_text(match.group("x"))
    if re.search(r"这|那|哪|很|久|附近|里|边", city):
        return 0  # 「我住在这里很久了」 names no place
    node = node_draft(
        "home_location",
        value_json={"city": city},
        importance=0.7,
        title=f"用户住在{city}" if ctx.zh else f"Lives in {city}",
        content=f"用户住在{city}。" if ctx.zh else f"The user lives in {city}.",
        tags=["居住地"] if ctx.zh else ["home"],
        entities=[city],
    )
    return draft.add(ctx, node, "用户说明居住地" if ctx.zh else "the user said where they live")
