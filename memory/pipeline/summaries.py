"""Session summaries: seed 000's MemorySummary fields drawn from the messages since the last summary.

`summarize_by_rules` needs no model: the summary line counts the turns and quotes the first and
latest user requests; preferences, constraints and pending work come from the rule extractor's
plan for the same messages; decisions, completed work and known issues are sentences with the
words that mark them (决定 / decided, 完成了 / done, 报错 / error). `summary_from_json`
reads the chat model's answer into the same `SummaryDraft` (the choice between model and rules is
`memory.pipeline.summary_chain.summarize`). Every sentence that carries a secret is dropped
(`memory.pipeline.sentences.redact`), so no summary stores one. No ORM.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from memory.pipeline.extractors import extract_by_rules
from memory.pipeline.gating import is_trivial
from memory.pipeline.plans import SourceMessage
from memory.pipeline.sentences import REDACTED, looks_chinese, redact, split_sentences, trim_text
from memory.rules.kinds import DEFAULT_KINDS
from memory.rules.sensitive import find_sensitive_content

__all__ = ["SummaryDraft", "summarize_by_rules", "summary_from_json"]

MAX_ITEMS = 10
MAX_ITEM_CHARS = 200
MAX_SUMMARY_CHARS = 2000
LIST_FIELDS = ("constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")
_JSON_NAMES = {
    "current_goal": "currentGoal",
    "completed_work": "completedWork",
    "pending_work": "pendingWork",
    "known_issues": "knownIssues",
}


@dataclass
class SummaryDraft:
    summary: str
    current_goal: str | None = None
    constraints: list[str] = field(default_factory=list)
    preferences: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    completed_work: list[str] = field(default_factory=list)
    pending_work: list[str] = field(default_factory=list)
    known_issues: list[str] = field(default_factory=list)

    def all_items(self) -> list[str]:
        return [item for name in LIST_FIELDS for item in getattr(self, name)]

    def as_json(self) -> dict[str, Any]:
        return {_JSON_NAMES.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}

    def as_service_data(self) -> dict[str, Any]:
        """Return the fields in the snake_case names `memory.services.nodes.summary_append` takes."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def redacted(self) -> SummaryDraft:
        return SummaryDraft(
            summary=redact(self.summary) or "[redacted]",
            current_goal=redact(self.current_goal) or None if self.current_goal else None,
            **{name: _clean(redact(item) for item in getattr(self, name)) for name in LIST_FIELDS},
        )


def _clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clean(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        item = _clip(trim_text(item))
        if item and item != REDACTED and not find_sensitive_content(item):
            seen.setdefault(item)
    return list(seen)[:MAX_ITEMS]


def summary_from_json(data: Any) -> SummaryDraft:
    """Return the summary in a model's JSON answer, or raise ValueError saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("the summary must be a JSON object")
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise ValueError("`summary` must be a non-empty string")
    goal = data.get("currentGoal")
    if goal is not None and not isinstance(goal, str):
        raise ValueError("`currentGoal` must be a string or null")
    lists: dict[str, list[str]] = {}
    for name in LIST_FIELDS:
        value = data.get(_JSON_NAMES.get(name, name)) or []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError(f"`{_JSON_NAMES.get(name, name)}` must be an array of strings")
        lists[name] = _clean(value)
    return SummaryDraft(
        summary=_clip(summary.strip(), MAX_SUMMARY_CHARS),
        current_goal=_clip(goal.strip()) if goal and goal.strip() else None,
        **lists,
    )


# --------------------------------------------------------------------------- the rule-based summary

_DECISION = re.compile(
    r"决定|定了|就用|选择了|我们用|采用|\bdecided\b|\blet'?s\s+go\s+with\b|\bwe'?ll\s+use\b"
    r"|\bwe\s+chose\b|\bgoing\s+with\b",
    re.IGNORECASE,
)
_COMPLETED = re.compile(
    r"完成了|做完了|搞定了|弄好了|已完成|已经完成|修好了|上线了|\bdone\b|\bfinished\b|\bcompleted\b"
    r"|\bfixed\b|\bmerged\b|\bdeployed\b|\bshipped\b",
    re.IGNORECASE,
)
_ISSUE = re.compile(
    r"报错|错误|失败|异常|崩溃|有问题|不工作|\bbug\b|\berror\b|\bfails?\b|\bfailed\b|\bexception\b"
    r"|\bcrash(?:es|ed)?\b|\bbroken\b|\bdoesn'?t\s+work\b",
    re.IGNORECASE,
)
_REQUEST = re.compile(
    r"[?？]|吗|帮我|请|怎么|如何|能不能|可以.*吗|想要|想|需要|\bplease\b|\bcan\s+you\b|\bcould\s+you\b"
    r"|\bhow\b|\bwhat\b|\bhelp\b|\bi\s+(?:want|need)\b",
    re.IGNORECASE,
)
_CONSTRAINT_TYPES = {"constraint"}


def _sentences_matching(messages: Sequence[SourceMessage], pattern: re.Pattern[str]) -> list[str]:
    return [
        sentence
        for message in messages
        for sentence in split_sentences(message.content)
        if pattern.search(sentence) and not find_sensitive_content(sentence)
    ]


def summarize_by_rules(
    messages: Sequence[SourceMessage], *, previous: SummaryDraft | None = None
) -> SummaryDraft:
    """Return a summary of `messages` (oldest first) without a model."""
    usable = [m for m in messages if not is_trivial(m.content)]
    users = [m for m in usable if m.role == "user"]
    zh = looks_chinese(" ".join(m.content for m in usable[:20]))
    first = _clip(redact(users[0].content), 80) if users else ""
    latest = _clip(redact(users[-1].content), 80) if users else ""
    counts = {role: sum(1 for m in messages if m.role == role) for role in ("user", "assistant")}
    if zh:
        line = f"本段共{len(messages)}条消息（用户{counts['user']}条，助手{counts['assistant']}条）。"
        if first:
            line += f"用户起初：「{first}」。"
        if latest and latest != first:
            line += f"最近：「{latest}」。"
    else:
        user_count, assistant_count = counts["user"], counts["assistant"]
        line = f"{len(messages)} messages ({user_count} from the user, {assistant_count} from the assistant)."
        if first:
            line += f' The user began with: "{first}".'
        if latest and latest != first:
            line += f' Latest: "{latest}".'
    plan = extract_by_rules(messages)
    preferences, constraints, pending = [], [], []
    for item in plan.nodes:
        kind = DEFAULT_KINDS.get(str(item.node.get("kind")))
        title = item.node.get("title")
        if kind is None or not title or item.operation not in ("create", "supersede"):
            continue
        if kind.type == "task":
            pending.append(title)
        elif kind.type in _CONSTRAINT_TYPES:
            constraints.append(title)
        elif kind.type == "preference":
            preferences.append(title)
    completed = _sentences_matching(users, _COMPLETED) + _sentences_matching(
        [m for m in usable if m.role == "assistant"], _COMPLETED
    )
    carried = [
        task
        for task in (previous.pending_work if previous else [])
        if not any(task in done for done in completed)
    ]
    goal = next((_clip(redact(m.content)) for m in reversed(users) if _REQUEST.search(m.content)), None)
    return SummaryDraft(
        summary=_clip(line, MAX_SUMMARY_CHARS),
        current_goal=goal or (previous.current_goal if previous else None),
        constraints=_clean(constraints),
        preferences=_clean(preferences),
        decisions=_clean(_sentences_matching(usable, _DECISION)),
        completed_work=_clean(completed),
        pending_work=_clean([*carried, *pending]),
        known_issues=_clean(_sentences_matching(usable, _ISSUE)),
    )
