"""Reads the pages need beyond memory.selectors: filtered lists, facets, counts, sessions, timelines.

Every function takes the viewer and reads inside the caller's tenant context, starting from
`accessible_nodes_q` (memory.visibility), so a page can never show more than the rule allows.
Lists are paginated and facets are single GROUP BY queries, so a 10k-memory tenant stays fast.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib.postgres.search import SearchQuery
from django.db import transaction
from django.db.models import Count, Max, Min, Q, QuerySet, Window

from memory.models import HEAVY_FIELDS, MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary, NodeStatus
from memory.pages import labels
from memory.rules.queries import is_list_all_query
from memory.rules.text import query_terms, tsquery_text
from memory.search.retrieval import SEARCH_LIMIT_MAX, MemoryQuery, search_nodes
from memory.selectors import category_q, visible_messages
from memory.visibility import Viewer, accessible_nodes_q
from tenants.models import Scope

logger = logging.getLogger(__name__)

PAGE_SIZE = 25
KEYWORD_MATCH_CAP = 500
STATUS_ANY = "any"


@dataclass(frozen=True)
class NodeFilters:
    q: str = ""
    scope: str = ""
    domain: str = ""
    category: str = ""
    type: str = ""
    kind: str = ""
    status: str = NodeStatus.ACTIVE
    tag: str = ""

    def is_default(self) -> bool:
        return self == NodeFilters()


def page_nodes(viewer: Viewer) -> QuerySet[MemoryNode]:
    """Return the nodes the memory pages list for `viewer`: what they may open, in the chosen workspace.

    Personal and tenant-wide memories follow the person into every workspace; workspace and
    session memories belong to the workspace picked in the switcher.
    """
    here = Q(scope__in=[Scope.USER, Scope.GLOBAL]) | Q(workspace_id=viewer.workspace.pk)
    return MemoryNode.objects.filter(accessible_nodes_q(viewer)).filter(here).defer(*HEAVY_FIELDS)


def _status_q(status: str) -> Q:
    return Q() if status == STATUS_ANY else Q(status=status)


def filtered_nodes(viewer: Viewer, filters: NodeFilters) -> QuerySet[MemoryNode]:
    """Return `page_nodes` narrowed by every filter except the search text."""
    nodes = page_nodes(viewer).filter(_status_q(filters.status))
    if filters.scope:
        nodes = nodes.filter(scope=filters.scope)
    if filters.domain:
        nodes = nodes.filter(domain=filters.domain)
    if filters.category:
        nodes = nodes.filter(category_q(filters.category))
    if filters.type:
        nodes = nodes.filter(type=filters.type)
    if filters.kind:
        nodes = nodes.filter(kind=filters.kind)
    if filters.tag:
        nodes = nodes.filter(tags__contains=[filters.tag])
    return nodes


@dataclass
class NodePage:
    nodes: list[MemoryNode]
    number: int
    total: int
    page_size: int = PAGE_SIZE
    searched: bool = False
    capped: bool = False  # more matches exist than were collected

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first_index(self) -> int:
        return 0 if not self.total else (self.number - 1) * self.page_size + 1

    @property
    def last_index(self) -> int:
        return min(self.total, self.number * self.page_size)


def _clamp_page(number: int, total: int) -> int:
    return max(1, min(number, max(1, -(-total // PAGE_SIZE))))


def node_page(viewer: Viewer, filters: NodeFilters, *, page: int) -> NodePage:
    """Return one page of the filtered list: newest first, or best match first when searching."""
    nodes = filtered_nodes(viewer, filters).select_related("user")
    text = filters.q.strip()
    if text and not is_list_all_query(text):
        ranked, capped = _search_ids(viewer, filters, nodes, text)
        number = _clamp_page(page, len(ranked))
        wanted = ranked[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]
        rows = {node.pk: node for node in nodes.filter(pk__in=wanted)}
        return NodePage(
            nodes=[rows[pk] for pk in wanted if pk in rows],
            number=number,
            total=len(ranked),
            searched=True,
            capped=capped,
        )
    number = max(1, page)
    start = (number - 1) * PAGE_SIZE
    # One scan for the page and the total: the window count is computed before LIMIT.
    rows = list(
        nodes.annotate(total=Window(Count("pk"))).order_by("-updated_at", "-id")[start : start + PAGE_SIZE]
    )
    if rows:
        return NodePage(nodes=rows, number=number, total=rows[0].total)
    total = nodes.count()
    if number > 1 and total:
        return node_page(viewer, filters, page=_clamp_page(page, total))
    return NodePage(nodes=[], number=1, total=total)


def _search_ids(
    viewer: Viewer, filters: NodeFilters, nodes: QuerySet[MemoryNode], text: str
) -> tuple[list[UUID], bool]:
    """Return the matching ids, best first (retrieval's hybrid ranking, then other keyword matches),
    and whether the keyword matches were cut at KEYWORD_MATCH_CAP."""
    ranked: list[UUID] = []
    capped = False
    if filters.status in (NodeStatus.ACTIVE, NodeStatus.EXPIRED, STATUS_ANY):
        query = MemoryQuery(
            query_text=text,
            scopes=[filters.scope] if filters.scope else None,
            domain=filters.domain or None,
            category_path_prefix=filters.category.split("/") if filters.category else None,
            types=[filters.type] if filters.type else None,
            kinds=[filters.kind] if filters.kind else None,
            tags=[filters.tag] if filters.tag else None,
            include_expired=filters.status != NodeStatus.ACTIVE,
            limit=SEARCH_LIMIT_MAX,
        )
        try:
            # The person browsing is not the agent recalling: no access-count bump. A savepoint of
            # its own, so a failed statement leaves the page's transaction usable for the fallback.
            with transaction.atomic():
                result = search_nodes(viewer=viewer, query=query, record_access=False)
        except Exception:
            # Search must never take the page down; the keyword match below still answers.
            logger.exception("Hybrid search failed; the memory page falls back to keyword matching.")
        else:
            candidates = [node.pk for node in result.relevant]
            # Retrieval reads with its own visibility rule; the page keeps only what it lists.
            allowed = set(nodes.filter(pk__in=candidates).values_list("pk", flat=True))
            ranked = [pk for pk in candidates if pk in allowed]
    terms = query_terms(text)
    if terms:
        tsquery = SearchQuery(tsquery_text(terms), search_type="raw", config="simple")
        # Every other keyword match, unranked and capped: the best ones already lead from the hybrid
        # ranking above, and ranking or sorting all matches of a common word would read every one.
        matches = list(
            nodes.filter(search_vector=tsquery).order_by().values_list("pk", flat=True)[:KEYWORD_MATCH_CAP]
        )
        capped = len(matches) == KEYWORD_MATCH_CAP
        seen = set(ranked)
        ranked += [pk for pk in matches if pk not in seen]
    return ranked, capped


# --------------------------------------------------------------------------- facets


@dataclass(frozen=True)
class CategoryEntry:
    path: str
    label: str
    depth: int
    count: int


@dataclass
class Facets:
    categories: list[CategoryEntry] = field(default_factory=list)
    domains: list[tuple[str, int]] = field(default_factory=list)
    kinds: list[tuple[str, int]] = field(default_factory=list)


def facets(viewer: Viewer, status: str) -> Facets:
    """Return the category tree, domains and kinds of the listed nodes, with counts (one GROUP BY)."""
    nodes = page_nodes(viewer).filter(_status_q(status))
    rows = nodes.order_by().values("domain", "category_path_text", "kind").annotate(n=Count("pk"))
    paths: Counter[str] = Counter()
    domains: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for row in rows:
        domains[row["domain"]] += row["n"]
        kinds[row["kind"]] += row["n"]
        parts = [p for p in row["category_path_text"].split("/") if p]
        for depth in range(1, len(parts) + 1):
            paths["/".join(parts[:depth])] += row["n"]
    categories = [
        CategoryEntry(path=path, label=path.rsplit("/", 1)[-1], depth=path.count("/"), count=n)
        for path, n in sorted(paths.items())
    ]
    roots = {entry.path for entry in categories if entry.depth == 0}
    return Facets(
        categories=categories,
        # Domains usually are the category roots; list them only when they add something.
        domains=sorted(domains.items()) if set(domains) - roots else [],
        kinds=sorted(kinds.items()),
    )


# --------------------------------------------------------------------------- dashboard


@dataclass
class Dashboard:
    by_scope: list[tuple[str, str, int]]
    by_type: list[tuple[str, str, int]]
    by_status: list[tuple[str, str, int]]
    active_total: int
    recent: list[dict[str, Any]]


def dashboard(viewer: Viewer, *, recent_limit: int = 12) -> Dashboard:
    """Return active counts per scope and type, counts per status and the latest changes."""
    nodes = page_nodes(viewer)
    scope_counts: Counter[str] = Counter()
    type_counts: Counter[str] = Counter()
    status_counts: Counter[str] = Counter()
    for row in nodes.order_by().values("scope", "type", "status").annotate(n=Count("pk")):
        status_counts[row["status"]] += row["n"]
        if row["status"] == NodeStatus.ACTIVE:
            scope_counts[row["scope"]] += row["n"]
            type_counts[row["type"]] += row["n"]
    return Dashboard(
        by_scope=[(key, str(label), scope_counts[key]) for key, label in labels.SCOPES.items()],
        by_type=[
            (key, str(label), type_counts[key]) for key, label in labels.TYPES.items() if type_counts[key]
        ],
        by_status=[(key, str(label), status_counts[key]) for key, label in labels.STATUSES.items()],
        active_total=scope_counts.total(),
        recent=recent_changes(viewer, limit=recent_limit),
    )


RECENT_SCAN_BATCH = 100
RECENT_SCAN_BATCHES = 5


def recent_changes(viewer: Viewer, *, limit: int) -> list[dict[str, Any]]:
    """Return the latest audit events of listed nodes, each with its node's title when it still exists.

    Events are read newest first through the (tenant, created_at) index in small batches and kept
    when their node is listed for the viewer, so the cost does not grow with the tenant's history.
    """
    nodes = page_nodes(viewer)
    events = MemoryAuditEvent.objects.filter(tenant=viewer.tenant).order_by("-created_at", "-id")
    kept: list[MemoryAuditEvent] = []
    titles: dict[UUID, str] = {}
    for batch in range(RECENT_SCAN_BATCHES):
        chunk = list(events[batch * RECENT_SCAN_BATCH : (batch + 1) * RECENT_SCAN_BATCH])
        node_ids = {event.node_id for event in chunk if event.node_id is not None}
        titles.update(nodes.filter(pk__in=node_ids).values_list("pk", "title"))
        kept += [event for event in chunk if event.node_id in titles]
        if len(kept) >= limit or len(chunk) < RECENT_SCAN_BATCH:
            break
    return [
        {
            "event": event,
            "label": labels.EVENTS.get(event.event_type, event.event_type),
            "actor": labels.actor_label(event.actor),
            "title": titles.get(event.node_id),
        }
        for event in kept[:limit]
    ]


# --------------------------------------------------------------------------- one node


@dataclass(frozen=True)
class Revision:
    """One step of a memory's story, from its audit event."""

    event: MemoryAuditEvent
    label: str
    actor: str
    revision: int | None
    changes: list[tuple[str, str, str]]  # (field label, before, after)


def _display(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def revisions(events: list[MemoryAuditEvent]) -> list[Revision]:
    """Return the audit events as readable revisions (oldest first), with before → after per field."""
    story = []
    for event in events:
        payload = event.payload or {}
        number = payload.get("revision") or (payload.get("node") or {}).get("revision")
        changes = []
        before, after = payload.get("before") or {}, payload.get("after") or {}
        for name in after:
            changes.append(
                (str(labels.FIELDS.get(name, name)), _display(before.get(name)), _display(after[name]))
            )
        story.append(
            Revision(
                event=event,
                label=str(labels.EVENTS.get(event.event_type, event.event_type)),
                actor=labels.actor_label(event.actor),
                revision=number,
                changes=changes,
            )
        )
    return story


def evidence_messages(viewer: Viewer, node: MemoryNode) -> list[MemoryMessage]:
    """Return the source messages a node cites (its evidence), oldest first."""
    if not node.source_message_ids:
        return []
    return list(
        MemoryMessage.objects.filter(
            tenant=viewer.tenant, workspace_id=node.workspace_id, message_id__in=list(node.source_message_ids)
        )
        .defer(*HEAVY_FIELDS)
        .order_by("created_at", "id")
    )


# --------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    messages: int
    started_at: datetime
    last_at: datetime


def session_page(viewer: Viewer, *, page: int) -> tuple[list[SessionRow], NodePage]:
    """Return one page of the workspace's sessions the viewer may read, most recent first."""
    grouped = (
        visible_messages(viewer)
        .order_by()
        .values("session_id")
        .annotate(n=Count("pk"), first=Min("created_at"), last=Max("created_at"))
    )
    total = grouped.count()
    number = _clamp_page(page, total)
    start = (number - 1) * PAGE_SIZE
    rows = [
        SessionRow(r["session_id"], r["n"], r["first"], r["last"])
        for r in grouped.order_by("-last", "session_id")[start : start + PAGE_SIZE]
    ]
    return rows, NodePage(nodes=[], number=number, total=total)


@dataclass
class SessionDetail:
    session_id: str
    messages: list[MemoryMessage]
    message_total: int
    summaries: list[MemorySummary]
    nodes: list[MemoryNode]


SESSION_MESSAGE_LIMIT = 200


def session_detail(viewer: Viewer, session_id: str) -> SessionDetail | None:
    """Return a session's latest messages, its summary chain and its session memories, or None if hidden."""
    messages = visible_messages(viewer).filter(session_id=session_id)
    total = messages.count()
    summaries = list(
        MemorySummary.objects.filter(
            tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id
        ).order_by("created_at", "id")
    )
    if not total and (viewer.restrict_to_person or not summaries):
        return None
    newest = list(
        messages.select_related("user")
        .defer(*HEAVY_FIELDS)
        .order_by("-created_at", "-id")[:SESSION_MESSAGE_LIMIT]
    )
    nodes = list(
        page_nodes(viewer)
        .filter(scope=Scope.SESSION, session_id=session_id)
        .select_related("user")
        .order_by("-updated_at")[:100]
    )
    return SessionDetail(
        session_id=session_id,
        messages=list(reversed(newest)),
        message_total=total,
        summaries=summaries,
        nodes=nodes,
    )
