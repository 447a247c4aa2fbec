"""Temporary-state rules: how the user is today or these days, kept in the session and expiring.

A sentence with a time marker (今天 / 这两天 / 最近, "today", "these days") and a state (胃不舒服,
累, "tired", "on a diet") becomes a session-scope `temporary_state` that expires at the end of
the message's local day (plus two or seven days for the longer markers), in the message's
`metadata.timeZone` when it has one. Pure: no ORM.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta

from memory.pipeline.extractors.draft import Clause, PlanDraft, node_draft
from memory.pipeline.plans import SourceMessage
from memory.pipeline.sentences import compact_key, trim_text

__all__ = ["temporal_days", "temporary_state"]

_TEMPORAL: tuple[tuple[re.Pattern[str], int], ...] = (
    # (marker, extra days after the message's local day)
    (
        re.compile(
            r"今天|今晚|今早|今天早上|今儿|\btoday\b|\btonight\b|\bthis\s+(?:morning|afternoon|evening)\b"
            r"|\bright\s+now\b|\bat\s+the\s+moment\b",
            re.IGNORECASE,
        ),
        0,
    ),
    (re.compile(r"这两天|这几天|\bthese\s+days\b|\bfor\s+a\s+couple\s+of\s+days\b", re.IGNORECASE), 2),
    (re.compile(r"最近|这周|本周|这阵子|\bthis\s+week\b|\blately\b|\brecently\b", re.IGNORECASE), 7),
)
_STATE_ZH = re.compile(
    r"不舒服|难受|累|疼|痛|感冒|发烧|生病|病了|忙|没空|心情不好|困|饿|失眠|咳嗽|上火|拉肚子|过敏|出差|在外地|不方便|减肥|节食"
    r"|胃|头晕|嗓子|牙|少辣|少油|清淡|不能吃辣|吃素"
)
_STATE_EN = re.compile(
    r"\b(?:tired|exhausted|sick|ill|unwell|busy|stressed|sleepy|hungry|sad|headache|stomach\s*ache"
    r"|stomachache|cold|flu|fever|sore\s+throat|traveling|travelling|on\s+a\s+diet|fasting"
    r"|not\s+feeling\s+(?:well|good|great))\b",
    re.IGNORECASE,
)
_STATE_FILLER_ZH = re.compile(
    r"^(?:我|本人)?(?:今天|今晚|今早|今儿|这两天|这几天|最近|这周|本周|这阵子)?(?:我)?"
    r"(?:有点儿?|有些|有一点|比较|感觉|觉得|真的|特别|非常|好|很)*"
)


def temporal_days(sentence: str) -> int | None:
    """Return the extra days a time marker in `sentence` keeps a state (0 for today), or None."""
    for pattern, days in _TEMPORAL:
        if pattern.search(sentence):
            return days
    return None


def temporary_state(draft: PlanDraft, message: SourceMessage, sentence: str, days: int, zh: bool) -> int:
    """A state in a sentence with a time marker: a session-only card expiring after `days` extra days."""
    state_match = _STATE_ZH.search(sentence) if zh else _STATE_EN.search(sentence)
    if state_match is None:
        return 0
    if zh:
        state = trim_text(sentence)
        for pattern, _ in _TEMPORAL:
            state = pattern.sub("", state, count=1)
        state = trim_text(_STATE_FILLER_ZH.sub("", trim_text(state)))
        state = re.split(r"[，,。；;]", state)[0] or state_match.group(0)
        item_key = compact_key(state[:8]) or compact_key(state_match.group(0))
    else:
        state = state_match.group(0).lower()
        item_key = compact_key(state)
    if item_key is None:
        return 0
    expires_at = _end_of_day(message, draft.now, days)
    ctx = Clause(message, sentence, sentence, zh, False, False)
    node = node_draft(
        "temporary_state",
        item_key=item_key,
        scope="session",
        value_json=state,
        importance=0.75,
        title=(f"用户{trim_text(sentence)[:60]}" if zh else f"Temporarily: {state}"),
        content=trim_text(sentence),
        expires_at=expires_at,
        tags=["临时状态"] if zh else ["temporary"],
        entities=[state],
    )
    return draft.add(
        ctx, node, "临时状态，只在本会话内有效并到期" if zh else "a temporary state: session only, expires"
    )


def _end_of_day(message: SourceMessage, now: datetime, extra_days: int) -> datetime:
    """Return the end of the message's local day (plus `extra_days`) as an aware datetime."""
    moment = message.created_at or now
    zone = message.time_zone or moment.tzinfo or UTC
    local = moment.astimezone(zone)
    next_midnight = datetime.combine(local.date() + timedelta(days=1 + extra_days), time.min, tzinfo=zone)
    return next_midnight.astimezone(UTC)
