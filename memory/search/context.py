"""The context pack (`POST context`): what an agent injects before a turn, within a token budget.

Owns assembly and the budget, not retrieval: recent messages, the latest summary and standing
nodes come from the small selectors below, relevant nodes from memory.search.retrieval and
relevant older messages from memory.search.messages. Seed 004's three layers share the budget:
working memory (recent messages of the session, main channel, oldest to newest) 50 %, short-term
memory (latest summary, then relevant older messages of the session) 30 %, long-term memory (nodes)
20 %. A layer's unused share flows
down to the next; whatever the long-term layer leaves is offered back up (working first), so a
session without memories still gets its full history. Long-term memory is therefore cut first,
then short-term, then working. Within long-term memory the order is: always-recalled kinds, active
tasks, nodes relevant to the query, other constraints, other preferences (at most 20 nodes).
Each node appears once in the pack, in the list of its type (task, constraint, preference) or else
in `relevant_nodes`. The rendered `prompt` never exceeds the budget (measured with
memory.rules.text.count_tokens on the final text).

Failure never blocks the agent (DESIGN rule 11): every step runs in its own tenant transaction (a
savepoint inside a caller's transaction); a `DatabaseError` skips that part with a warning
(`storeStatus: degraded`), and when every part fails the pack is empty with `storeStatus: disabled`.
`build_context` itself never raises DatabaseError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from django.db import DatabaseError, transaction
from django.db.models import F, Q
from django.utils import timezone

from memory.models import (
    HEAVY_FIELDS,
    RECALLED_CARDS,
    STANDING_CARDS,
    Channel,
    MemoryMessage,
    MemoryNode,
    MemorySummary,
    NodeType,
)
from memory.rules.kinds import ALWAYS_RECALLED_KINDS
from memory.rules.text import count_tokens, query_terms, truncate_to_tokens
from memory.search.embeddings import embed_query
from memory.search.messages import search_messages
from memory.search.ranking import resolve_conflicts
from memory.search.retrieval import MemoryQuery, search_nodes
from memory.selectors import journal_cards
from memory.services.maintenance import node_access_queue
from memory.visibility import Viewer, visible_nodes_q
from tenants.context import tenant_context

__all__ = [
    "DEFAULT_TOKEN_BUDGET",
    "ContextPack",
    "build_context",
    "message_list_recent",
    "node_list_standing",
    "summary_get_latest",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TOKEN_BUDGET = 4000
WORKING_SHARE_PERCENT = 50
SHORT_TERM_SHARE_PERCENT = 30  # long-term gets the rest (20 %)
RECENT_MESSAGES_MAX = 8
RELEVANT_MESSAGES_MAX = 5
NODES_MAX = 20
RELEVANT_NODES_LIMIT = 20
STANDING_NODES_LIMIT = 60
# With includeJournal: the person's latest dates, besides the journal cards the query finds.
JOURNAL_NODES_LIMIT = 3
# One card or older message stays a short line; recent messages may use their whole layer.
NODE_LINE_MAX_TOKENS = 80
OLDER_MESSAGE_MAX_TOKENS = 120
# A truncated line shorter than this says nothing useful; leave the room to the next layer instead.
MIN_TRUNCATED_TOKENS = 8
MAX_CHARS_PER_TOKEN = 16
FINISHED_TASK_STATES = frozenset({"done", "completed", "complete", "cancelled", "canceled", "closed"})

ELLIPSIS = "…"


@dataclass
class ContextPack:
    recent_messages: list[MemoryMessage] = field(default_factory=list)
    latest_summary: MemorySummary | None = None
    active_tasks: list[MemoryNode] = field(default_factory=list)
    constraints: list[MemoryNode] = field(default_factory=list)
    preferences: list[MemoryNode] = field(default_factory=list)
    relevant_nodes: list[MemoryNode] = field(default_factory=list)
    # Older messages of the session recalled for the query (short-term layer); not an API.md field.
    relevant_messages: list[MemoryMessage] = field(default_factory=list)
    used_memory_ids: list[UUID] = field(default_factory=list)
    prompt: str = ""
    diagnostics: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- selectors


def message_list_recent(*, viewer: Viewer, limit: int = RECENT_MESSAGES_MAX) -> list[MemoryMessage]:
    """Return the session's latest main-channel messages, oldest to newest (sub-agent traffic never)."""
    if not viewer.session_id:
        return []
    with tenant_context(viewer.tenant, savepoint=False):
        newest = list(
            MemoryMessage.objects.filter(
                tenant=viewer.tenant,
                workspace=viewer.workspace,
                session_id=viewer.session_id,
                channel=Channel.MAIN,
            )
            .select_related("user")  # the API renders each message's userId
            .defer(*HEAVY_FIELDS)
            .order_by("-created_at", "-pk")[:limit]
        )
    return newest[::-1]


def summary_get_latest(*, viewer: Viewer) -> MemorySummary | None:
    """Return the newest summary of the viewer's session, or None."""
    if not viewer.session_id:
        return None
    with tenant_context(viewer.tenant, savepoint=False):
        return (
            MemorySummary.objects.filter(
                tenant=viewer.tenant, workspace=viewer.workspace, session_id=viewer.session_id
            )
            .order_by("-created_at")
            .first()
        )


def node_list_standing(
    *, viewer: Viewer, now: datetime, limit: int = STANDING_NODES_LIMIT
) -> list[MemoryNode]:
    """Return the visible active cards every turn should consider: always-recalled kinds, tasks,
    constraints and preferences, always-recalled first, then by importance, confidence and recency.
    """
    # Two reads in the order of memory.models' node_recalled_idx and node_standing_idx, so each walks its
    # index and stops at `limit` (one ORDER BY "always-recalled first" sorted every standing card of the
    # viewer: ~23k at 100k cards).
    current = MemoryNode.objects.filter(visible_nodes_q(viewer)).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)).defer(*HEAVY_FIELDS)
    order = (F("importance").desc(), F("confidence").desc(), F("updated_at").desc(), F("id"))
    with tenant_context(viewer.tenant, savepoint=False):
        first = list(current.filter(RECALLED_CARDS).order_by(*order)[:limit])
        if len(first) == limit:
            return first
        rest = current.filter(STANDING_CARDS).exclude(RECALLED_CARDS)
        return first + list(rest.order_by(*order)[: limit - len(first)])


# --------------------------------------------------------------------------- rendering


def _one_line(text: str) -> str:
    return " ".join((text or "").split())


def _message_line(message: MemoryMessage) -> str:
    return f"{message.role}: {_one_line(message.content)}"


def _node_line(node: MemoryNode) -> str:
    title, content = _one_line(node.title), _one_line(node.content)
    text = title if not content or content == title else f"{title}: {content}"
    if node.type == NodeType.TASK and isinstance(node.value_json, dict) and node.value_json.get("status"):
        text += f" (status: {_one_line(str(node.value_json['status']))})"
    return f"- {text}"


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
class _PromptPlan:
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


# --------------------------------------------------------------------------- assembly


class _Steps:
    """Runs the parts of the pack, turning a database failure of one part into a warning.

    Inside the pack's transaction (`shared`) the parts run after one savepoint: a part that fails
    rolls the transaction back to it (undoing nothing but the failed part's statements, since the
    parts only read) and the next part starts from a fresh one. Without it, each part's reads are a
    transaction of their own.
    """

    def __init__(self, *, shared: bool) -> None:
        self.attempted = 0
        self.failed = 0
        self.warnings: list[str] = []
        self.savepoint = transaction.savepoint() if shared else None

    def run(self, what: str, step: Callable[[], T], fallback: T) -> T:
        self.attempted += 1
        try:
            return step()
        except DatabaseError as error:
            self.failed += 1
            self.warnings.append(
                f"{what} unavailable ({type(error).__name__}); the pack was built without it."
            )
            logger.warning("Context pack: %s failed.", what, exc_info=True)
            self._recover()
            return fallback

    def _recover(self) -> None:
        if self.savepoint is None:
            return
        try:
            transaction.savepoint_rollback(self.savepoint)
            self.savepoint = transaction.savepoint()
        except DatabaseError:
            # The connection itself is gone: the parts after this one fail and say so.
            logger.warning("Context pack: the transaction could not be recovered.", exc_info=True)

    @property
    def store_status(self) -> str:
        if self.failed and self.failed == self.attempted:
            return "disabled"
        return "degraded" if self.failed else "ok"


def _is_open_task(node: MemoryNode) -> bool:
    state = node.value_json.get("status") if isinstance(node.value_json, dict) else None
    return not (isinstance(state, str) and state.strip().lower() in FINISHED_TASK_STATES)


def _long_term_order(standing: list[MemoryNode], relevant: list[MemoryNode]) -> list[MemoryNode]:
    """Return each candidate once: always-recalled kinds, tasks, query hits, constraints, preferences."""
    ordered: dict[UUID, MemoryNode] = {}
    for node in (
        *(node for node in standing if node.kind in ALWAYS_RECALLED_KINDS),
        *(node for node in standing if node.type == NodeType.TASK),
        *relevant,
        *(node for node in standing if node.type == NodeType.CONSTRAINT),
        *standing,
    ):
        ordered.setdefault(node.pk, node)
    return list(ordered.values())


def build_context(
    *, viewer: Viewer, query_text: str, token_budget: int = DEFAULT_TOKEN_BUDGET, now: datetime | None = None,
    include_journal: bool = False,
) -> ContextPack:
    """Return the context pack for the viewer's session and `query_text`, never over `token_budget`.

    Journal cards are left out unless `include_journal`. The parts share one transaction bound to the
    viewer's tenant once; when even that cannot be opened (the store is down), each part tries on its
    own and reports its failure.
    """
    now = now or timezone.now()
    budget = max(0, int(token_budget))
    # Embedded once for both searches; None (no topic, or the provider failed) means keywords only.
    vector = embed_query(query_text) if query_terms(query_text or "") else None
    pack: ContextPack | None = None
    try:
        # Inside a caller's transaction bound to the tenant (the API's) the pack joins it as it is.
        with tenant_context(viewer.tenant, savepoint=False):
            pack = _assemble(viewer, query_text, budget, now, vector, _Steps(shared=True), include_journal)
    except DatabaseError:
        if pack is not None:
            return pack  # only the closing commit of reads failed
        logger.warning("Context pack: the tenant transaction could not be opened.", exc_info=True)
        pack = _assemble(viewer, query_text, budget, now, vector, _Steps(shared=False), include_journal)
    return pack


def _assemble(viewer: Viewer, query_text: str, budget: int, now: datetime, vector: Any,
              steps: _Steps, include_journal: bool = False) -> ContextPack:
    """Read the parts through `steps` and fit them into `budget`."""
    recent = steps.run("recent messages", lambda: message_list_recent(viewer=viewer), [])
    summary = steps.run("latest summary", lambda: summary_get_latest(viewer=viewer), None)
    standing = steps.run("standing memories", lambda: node_list_standing(viewer=viewer, now=now), [])
    search = steps.run(
        "relevant memories",
        lambda: search_nodes(
            viewer=viewer,
            query=MemoryQuery(query_text=query_text, limit=RELEVANT_NODES_LIMIT,
                              include_journal=include_journal),
            now=now,
            record_access=False,
            query_embedding=vector,
        ),
        None,
    )
    older: list[MemoryMessage] = []
    if viewer.session_id and query_text:
        found, _ = steps.run(
            "relevant older messages",
            lambda: search_messages(
                viewer=viewer,
                query_text=query_text,
                session_id=viewer.session_id,
                limit=RELEVANT_MESSAGES_MAX,
                exclude_message_ids=[message.message_id for message in recent],
                query_embedding=vector,
            ),
            ([], {}),
        )
        older = [message for message, _score in found]

    relevant = search.nodes if search is not None else []
    if include_journal:
        journal = steps.run("journal", lambda: list(
            journal_cards(viewer=viewer).defer(*HEAVY_FIELDS)[:JOURNAL_NODES_LIMIT]), [])
        relevant += [node for node in journal if node.pk not in {found.pk for found in relevant}]
    candidates, dropped = resolve_conflicts(
        [*standing, *relevant], now=now, group_by_owner=viewer.whole_tenant
    )
    candidates = [node for node in candidates if node.type != NodeType.TASK or _is_open_task(node)]
    standing_ids = {node.pk for node in standing}
    relevant_ids = {node.pk for node in relevant}
    plan = _PromptPlan(
        recent=recent,
        summary=summary,
        older=older,
        nodes=_long_term_order(
            [node for node in candidates if node.pk in standing_ids],
            [node for node in candidates if node.pk in relevant_ids],
        ),
    )
    items, prompt, used_tokens = plan.fit(budget)

    pack = ContextPack(prompt=prompt)
    for item in items:
        source = item.source
        if isinstance(source, MemorySummary):
            pack.latest_summary = source
        elif isinstance(source, MemoryMessage):
            (pack.recent_messages if item.section == RECENT else pack.relevant_messages).append(source)
        else:
            target = {
                NodeType.TASK: pack.active_tasks,
                NodeType.CONSTRAINT: pack.constraints,
                NodeType.PREFERENCE: pack.preferences,
            }.get(source.type, pack.relevant_nodes)
            target.append(source)
            pack.used_memory_ids.append(source.pk)

    # Applied after the commit, in the background: no statement, nothing that can fail here.
    node_access_queue(tenant=viewer.tenant, node_ids=pack.used_memory_ids)
    seen_ids = {node.pk for node in (*standing, *relevant)} | {node_id for node_id, _ in dropped}
    if search is not None:
        seen_ids |= {omission.node_id for omission in search.omitted}
    pack.diagnostics = {
        "enabled": True,
        "storeStatus": steps.store_status,
        "warnings": steps.warnings,
        "retrievedNodeCount": len(pack.used_memory_ids),
        "omittedNodeCount": len(seen_ids - set(pack.used_memory_ids)),
        "tokenBudget": budget,
        "usedTokens": used_tokens,
    }
    return pack
