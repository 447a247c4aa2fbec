"""The context pack's prompt: rendering cards, summary and messages as lines and fitting them into the budget.

Seed 004's three layers share the budget: working memory (recent messages) 50 %, short-term memory
(latest summary, relevant older messages) 30 %, long-term memory (cards) 20 %; a layer's unused share
flows down, and what long-term memory leaves is offered back up. The rendered text is measured with
memory.rules.text.count_tokens and lines are dropped (long-term first) until it fits. Which
candidates the pack offers is memory.search.context's; this module only shows and fits them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.models import MemoryMessage, MemoryNode, MemorySummary, NodeType
from memory.rules.kinds import ALWAYS_RECALLED_KINDS
from memory.rules.review import REVIEW_LEGEND, review_mark
from memory.rules.text import count_tokens, truncate_to_tokens

__all__ = ["RECENT", "PromptPlan"]

WORKING_SHARE_PERCENT = 50
SHORT_TERM_SHARE_PERCENT = 30  # long-term gets the rest (20 %)
NODES_MAX = 20
# One card or older message stays a short line; recent messages may use their whole layer.
NODE_LINE_MAX_TOKENS = 80
OLDER_MESSAGE_MAX_TOKENS = 120
# A truncated line shorter than this says nothing useful; leave the room to the next layer instead.
MIN_TRUNCATED_TOKENS = 8
MAX_CHARS_PER_TOKEN = 16

ELLIPSIS = "…"


def _one_line(text: str) -> str:
    return " ".join((text or "").split())


def _message_line(message: MemoryMessage) -> str:
    return f"{message.role}: {_one_line(message.content)}"


def _node_line(node: MemoryNode) -> str:
    title, content = _one_line(node.title), _one_line(node.content)
    text = title if not content or content == title else f"{title}: {content}"
    if node.type == NodeType.TASK and isinstance(node.value_json, dict) and node.value_json.get("status"):
        text += f" (status: {_one_line(str(node.value_json['status']))})"
    mark = review_mark(node.review_state, node.confidence)
    return f"- {mark} {text}" if mark else f"- {text}"


def _summary_text(summary: MemorySummary) -> str:
    lines = [_one_line(summary.summary)]
    if summary.current_goal:
        lines.append(f"Current goal: {_one_line(summary.current_goal)}")
    for label, items in (
        ("Pending", summary.pending_work),
        ("Decisions", summary.decisions),
        ("Constraints", summary.constraints),
        ("Known issues", summary.known_issues),
    ):
        if items:
            lines.append(f"{label}: " + "; ".join(_one_line(str(item)) for item in items))
    return "\n".join(line for line in lines if line)


class _TokenCounter:
    """`count_tokens` remembered for one pack: layers are fitted twice and lines are re-rendered."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        count = self._known.get(text)
        if count is None:
            count = self._known[text] = count_tokens(text)
        return count


def _truncated(text: str, max_tokens: int, tokens: _TokenCounter) -> str | None:
    """Return `text` cut to `max_tokens` (ending in an ellipsis), or None when too little would remain."""
    if max_tokens <= 0:
        return None
    # No token is longer than this many characters in practice, so a huge message is cut before
    # it is encoded: counting a 1 MB turn to keep its first 100 tokens would be wasted work.
    cut = len(text) > max_tokens * MAX_CHARS_PER_TOKEN
    if cut:
        text = text[: max_tokens * MAX_CHARS_PER_TOKEN]
    if not cut and tokens(text) <= max_tokens:
        return text
    room = max_tokens - tokens(ELLIPSIS)
    if room < MIN_TRUNCATED_TOKENS:
        return None
    return truncate_to_tokens(text, room).rstrip() + ELLIPSIS


# Section headers, in prompt order (long-term memory first, the latest turns last).
ALWAYS, TASKS, CONSTRAINTS, PREFERENCES, RELATED = (
    "Always apply:",
    "Active tasks:",
    "Constraints:",
    "Preferences:",
    "Related memories:",
)
SUMMARY, EARLIER, RECENT = "Session summary:", "Earlier in this conversation:", "Recent messages:"
SECTION_ORDER = (ALWAYS, TASKS, CONSTRAINTS, PREFERENCES, RELATED, SUMMARY, EARLIER, RECENT)
LONG_TERM_SECTIONS = frozenset({ALWAYS, TASKS, CONSTRAINTS, PREFERENCES, RELATED})
SHORT_TERM_SECTIONS = frozenset({SUMMARY, EARLIER})


@dataclass
class _Item:
    section: str
    text: str
    source: Any  # the message, summary or node the line shows


class _Layer:
    """The lines one layer put into the prompt and the tokens they cost (headers included)."""

    def __init__(self, tokens: _TokenCounter) -> None:
        self.items: list[_Item] = []
        self.cost = 0
        self._tokens = tokens
        self._sections_opened: set[str] = set()

    def try_add(
        self, section: str, text: str, source: Any, allowance: int, *, max_tokens: int | None = None
    ) -> bool:
        header_cost = 0 if section in self._sections_opened else self._tokens(section) + 1
        room = allowance - self.cost - header_cost - 1  # one token for the line break
        line = _truncated(text, room if max_tokens is None else min(room, max_tokens), self._tokens)
        if line is None:
            return False
        self._sections_opened.add(section)
        self.items.append(_Item(section, line, source))
        self.cost += header_cost + self._tokens(line) + 1
        return True


def _render(items: Sequence[_Item]) -> str:
    lines: list[str] = []
    if any(isinstance(item.source, MemoryNode)
           and review_mark(item.source.review_state, item.source.confidence) for item in items):
        lines.append(REVIEW_LEGEND)  # the marks mean nothing to the model without it
    for section in SECTION_ORDER:
        section_items = [item for item in items if item.section == section]
        if section_items:
            lines.append(section)
            lines.extend(item.text for item in section_items)
    return "\n".join(lines)


def _node_section(node: MemoryNode) -> str:
    if node.kind in ALWAYS_RECALLED_KINDS:
        return ALWAYS
    return {NodeType.TASK: TASKS, NodeType.CONSTRAINT: CONSTRAINTS, NodeType.PREFERENCE: PREFERENCES}.get(
        node.type, RELATED
    )


@dataclass
class PromptPlan:
    """What the pack may show, in priority order per layer, and the fitting of it into a budget."""

    recent: list[MemoryMessage]  # oldest to newest
    summary: MemorySummary | None
    older: list[MemoryMessage]
    nodes: list[MemoryNode]  # long-term candidates in priority order
    tokens: _TokenCounter = field(default_factory=_TokenCounter)

    def fit_working(self, allowance: int) -> _Layer:
        layer = _Layer(self.tokens)
        for message in reversed(self.recent):  # newest first: the latest turn matters most
            if not layer.try_add(RECENT, _message_line(message), message, allowance):
                break
        layer.items.reverse()
        return layer

    def fit_short_term(self, allowance: int) -> _Layer:
        layer = _Layer(self.tokens)
        if self.summary is not None:
            layer.try_add(SUMMARY, _summary_text(self.summary), self.summary, allowance)
        for message in self.older:
            line = _message_line(message)
            layer.try_add(EARLIER, line, message, allowance, max_tokens=OLDER_MESSAGE_MAX_TOKENS)
        return layer

    def fit_long_term(self, allowance: int) -> _Layer:
        layer = _Layer(self.tokens)
        for node in self.nodes:
            if len(layer.items) >= NODES_MAX:
                break
            line = _node_line(node)
            layer.try_add(_node_section(node), line, node, allowance, max_tokens=NODE_LINE_MAX_TOKENS)
        return layer

    def fit(self, budget: int) -> tuple[list[_Item], str, int]:
        """Return the lines, the rendered prompt and its token count, never over `budget`."""

        def layers(working_allowance: int, short_allowance: int) -> tuple[_Layer, _Layer, _Layer]:
            working = self.fit_working(working_allowance)
            short = self.fit_short_term(short_allowance + working_allowance - working.cost)
            long = self.fit_long_term(budget - working.cost - short.cost)
            return working, short, long

        working, short, long = layers(
            budget * WORKING_SHARE_PERCENT // 100, budget * SHORT_TERM_SHARE_PERCENT // 100
        )
        spare = budget - working.cost - short.cost - long.cost
        if spare > 0:
            # Nothing further down wanted the rest: offer it back up, working memory first.
            # Long-term still gets at least what it had: its allowance is what the others leave.
            working, short, long = layers(working.cost + spare, short.cost)
        return self._trim([*long.items, *short.items, *working.items], budget)

    def _trim(self, items: list[_Item], budget: int) -> tuple[list[_Item], str, int]:
        # Line costs are estimates (tokens can merge across a line break); the rendered text is the
        # truth. Drop lines until it fits: long-term first, then short-term, then the oldest turn.
        prompt = _render(items)
        used = self.tokens(prompt)
        while items and used > budget:
            victim = next(
                (item for item in reversed(items) if item.section in LONG_TERM_SECTIONS),
                next((item for item in reversed(items) if item.section in SHORT_TERM_SECTIONS), items[0]),
            )
            items.remove(victim)
            prompt = _render(items)
            used = self.tokens(prompt)
        return items, prompt, used
