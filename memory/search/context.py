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
in `relevant_nodes`. The rendered `prompt` (memory.search.context_prompt: the lines, the layers'
shares, the fitting) never exceeds the budget (measured with memory.rules.text.count_tokens on the
final text).

Failure never blocks the agent (DESIGN rule 11): every step runs in its own tenant transaction (a
savepoint inside a caller's transaction); a `DatabaseError` skips that part with a warning
(`storeStatus: degraded`), and when every part fails the pack is empty with `storeStatus: disabled`.
`build_context` itself never raises DatabaseError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
from memory.rules.text import query_terms
from memory.search.context_prompt import RECENT, PromptPlan
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
RECENT_MESSAGES_MAX = 8
RELEVANT_MESSAGES_MAX = 5
RELEVANT_NODES_LIMIT = 20
STANDING_NODES_LIMIT = 60
# With includeJournal: the person's latest dates, besides the journal cards the query finds.
JOURNAL_NODES_LIMIT = 3
FINISHED_TASK_STATES = frozenset({"done", "completed", "complete", "cancelled", "canceled", "closed"})


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
    plan = PromptPlan(
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
