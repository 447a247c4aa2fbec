"""Reads of memory rows by id or selector (no ranking: that is memory.search.retrieval); none of them write.

It also owns the card filters every reader shares — `key_q`, `category_q`, `value_json_q` — so
memory/get, memory/forget, memory/search and the memory pages match a key, a category path and a
value the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet

from memory.errors import NotFound, RequiresConfirmation
from memory.models import (
    HEAVY_FIELDS,
    MemoryAuditEvent,
    MemoryKind,
    MemoryMessage,
    MemoryNode,
    MemorySummary,
    NodeStatus,
)
from memory.rules.kinds import KindSpec
from memory.visibility import Viewer, accessible_nodes_q
from tenants.context import tenant_context
from tenants.models import Tenant


def key_q(key: str) -> Q:
    """Return the filter for a key: a canonical key (with ':') exactly, a bare slot key with all its items."""
    if ":" in key:
        return Q(key=key)
    return Q(key=key) | Q(key__startswith=key + ":")


def category_q(path: str | Sequence[str]) -> Q:
    """Return the filter for a category path prefix, by whole segments (a/b matches a/b/c, never a/bc)."""
    prefix = path if isinstance(path, str) else "/".join(path)
    return Q(category_path_text=prefix) | Q(category_path_text__startswith=prefix + "/")


def value_json_q(value: Any) -> Q:
    """Return the filter for a value given explicitly: JSON equality, and `null` for cards without a value."""
    if value is None:
        return Q(value_json__isnull=True) | Q(value_json=None)
    return Q(value_json=value)


def parse_node_id(raw: str | UUID) -> UUID:
    try:
        return raw if isinstance(raw, UUID) else UUID(str(raw))
    except ValueError as exc:
        raise NotFound("No memory node with this id.") from exc


def accessible_nodes(viewer: Viewer) -> QuerySet[MemoryNode]:
    """Return the nodes `viewer` may open by id; call inside the viewer's tenant context."""
    return (
        MemoryNode.objects.filter(accessible_nodes_q(viewer))
        .select_related("user")
        .defer(*HEAVY_FIELDS)
    )


def node_get(*, viewer: Viewer, node_id: str | UUID) -> MemoryNode:
    """Return the node (any status) if `viewer` may open it; otherwise NotFound, whatever the reason."""
    pk = parse_node_id(node_id)
    with tenant_context(viewer.tenant, savepoint=False):
        node = accessible_nodes(viewer).filter(pk=pk).first()
    if node is None:
        raise NotFound("No memory node with this id.")
    return node


def superseded_by_ids(*, tenant: Tenant, node_ids: list[UUID]) -> dict[UUID, UUID]:
    """Return {old id: id of the newest revision of its chain} for the given ids that were superseded.

    The newest revision is the active card whenever the chain still has one: an agent that follows
    `supersededById` lands on the card to re-read and retry against, however many supersedes happened.
    One query per link of the longest chain.
    """
    heads: dict[UUID, UUID] = {}
    with tenant_context(tenant, savepoint=False):
        frontier = {pk: pk for pk in node_ids}  # newest revision found so far → the id it answers for
        for _link in range(1000):
            successors = MemoryNode.objects.filter(
                tenant=tenant, supersedes_id__in=list(frontier)).values_list("supersedes_id", "pk")
            frontier = {new: frontier[old] for old, new in successors}
            if not frontier:
                break
            heads.update({origin: newest for newest, origin in frontier.items()})
    return heads


@dataclass(frozen=True)
class NodeHistory:
    chain: list[MemoryNode]  # oldest → newest
    events: list[MemoryAuditEvent]


def node_history(*, viewer: Viewer, node_id: str | UUID) -> NodeHistory:
    """Return the supersede chain through the node (oldest first) and the audit events of every link.

    An organizer merge supersedes several cards with one: the chain holds all of them (its audit events
    name them, `mergedFrom` on the merged card and `mergedInto` on each source), ordered by creation.
    """
    node = node_get(viewer=viewer, node_id=node_id)
    with tenant_context(viewer.tenant, savepoint=False):
        nodes = accessible_nodes(viewer)
        chain = _chain_through(nodes, [node])
        events = _chain_events(viewer, chain)
        linked = _merge_links(events) - {n.pk for n in chain}
        if linked:
            chain = _chain_through(nodes, [node, *nodes.filter(pk__in=sorted(linked, key=str))])
            events = _chain_events(viewer, chain)
    return NodeHistory(chain=chain, events=events)


def _chain_through(nodes: QuerySet[MemoryNode], start: list[MemoryNode]) -> list[MemoryNode]:
    older = supersede_chain_walk(nodes, start, direction="older", limit=1000)
    newer = supersede_chain_walk(nodes, start, direction="newer", limit=1000)
    found = {n.pk: n for n in [*older, *start, *newer]}
    return sorted(found.values(), key=lambda n: (n.created_at, n.revision))


def _chain_events(viewer: Viewer, chain: list[MemoryNode]) -> list[MemoryAuditEvent]:
    return list(MemoryAuditEvent.objects.filter(tenant=viewer.tenant, node_id__in=[n.pk for n in chain])
                .order_by("created_at", "id"))


def _merge_links(events: list[MemoryAuditEvent]) -> set[UUID]:
    linked: set[UUID] = set()
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        for ref in [*payload.get("mergedFrom", []), payload.get("mergedInto")]:
            if ref:
                linked.add(UUID(str(ref)))
    return linked


@dataclass(frozen=True)
class NodeSelector:
    type: str | None = None
    kind: str | None = None
    key: str | None = None
    value_json: object = None
    value_json_given: bool = False
    scope: str | None = None
    domain: str | None = None
    category_path_prefix: tuple[str, ...] = ()
    # A workspace named in the request narrows every match to cards of that workspace (never another's).
    workspace_id: int | None = None

    def is_empty(self) -> bool:
        """Return whether the selector names nothing (a workspace alone narrows a match, it names none)."""
        return not any([self.type, self.kind, self.key, self.value_json_given, self.scope, self.domain,
                        self.category_path_prefix])


def selector_q(selector: NodeSelector) -> Q:
    """Return the exact-match filter for a selector (API.md's memory/get and memory/forget fields)."""
    q = Q()
    if selector.workspace_id is not None:
        q &= Q(workspace_id=selector.workspace_id)
    if selector.type:
        q &= Q(type=selector.type)
    if selector.kind:
        q &= Q(kind=selector.kind)
    if selector.key:
        q &= key_q(selector.key)
    if selector.value_json_given:
        q &= value_json_q(selector.value_json)
    if selector.scope:
        q &= Q(scope=selector.scope)
    if selector.domain:
        q &= Q(domain=selector.domain)
    if selector.category_path_prefix:
        q &= category_q(selector.category_path_prefix)
    return q


def node_select(*, viewer: Viewer, selector: NodeSelector) -> MemoryNode | None:
    """Return the one active node matching the selector, None if none; RequiresConfirmation if several."""
    with tenant_context(viewer.tenant, savepoint=False):
        matches = list(
            accessible_nodes(viewer).filter(selector_q(selector), status=NodeStatus.ACTIVE)
            .order_by("-updated_at")[:21]
        )
    if len(matches) > 1:
        raise RequiresConfirmation(
            f"{len(matches)} active memories match; narrow the selector or use an id.",
            candidates=matches,
        )
    return matches[0] if matches else None


def visible_messages(viewer: Viewer) -> QuerySet[MemoryMessage]:
    """Return the evidence messages `viewer` may read; call inside the viewer's tenant context.

    The messages of the viewer's workspace; a person without owner/admin reads only the
    conversations they took part in, not their colleagues' (the pages' rule, memory.access).
    """
    messages = MemoryMessage.objects.filter(tenant=viewer.tenant, workspace=viewer.workspace)
    if viewer.restrict_to_person:
        mine = messages.filter(user=viewer.user).values("session_id")
        messages = messages.filter(session_id__in=mine)
    return messages


def session_check(viewer: Viewer, session_id: str | None) -> None:
    """Raise NotFound when a person without owner/admin names another person's conversation.

    A session is theirs when it has no messages yet or one of its messages is theirs; anyone
    else's answers like a session that does not exist.
    """
    if not viewer.restrict_to_person or not session_id:
        return
    with tenant_context(viewer.tenant, savepoint=False):
        messages = MemoryMessage.objects.filter(tenant=viewer.tenant, workspace=viewer.workspace,
                                                session_id=session_id)
        if messages.filter(user=viewer.user).exists() or not messages.exists():
            return
    raise NotFound(f"No session {session_id!r}.")


def messages_list(*, viewer: Viewer, session_id: str, limit: int = 50,
                  include_subagent: bool = True) -> list[MemoryMessage]:
    """Return the newest `limit` messages of a session the viewer may read, oldest first."""
    with tenant_context(viewer.tenant, savepoint=False):
        queryset = visible_messages(viewer).filter(session_id=session_id).select_related("user").defer(
            *HEAVY_FIELDS)
        if not include_subagent:
            queryset = queryset.filter(channel="main")
        newest = list(queryset.order_by("-created_at", "-id")[:limit])
    return list(reversed(newest))


def summary_latest(*, viewer: Viewer, session_id: str) -> MemorySummary | None:
    with tenant_context(viewer.tenant, savepoint=False):
        return (
            MemorySummary.objects.filter(tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id)
            .order_by("-created_at").first()
        )


def tenant_kinds(*, tenant: Tenant) -> dict[str, KindSpec]:
    """Return the tenant-defined kinds (added to the default catalogue for this tenant)."""
    with tenant_context(tenant, savepoint=False):
        rows = list(MemoryKind.objects.filter(tenant=tenant))
    return {
        row.name: KindSpec(
            name=row.name, slot_key=row.slot_key, type=row.type, domain=row.domain,
            category_path=tuple(row.category_path), itemized=row.itemized, default_scope=row.default_scope,
            requires_explicit_user_intent=row.requires_explicit_user_intent, value_shape=row.value_shape,
        )
        for row in rows
    }


def supersede_chain_walk(nodes: QuerySet[MemoryNode], start: list[MemoryNode], *, direction: str,
                         limit: int | None = None) -> list[MemoryNode]:
    """Return the revisions older (via `supersedesId`) or newer than `start`, nearest first, from `nodes`.

    One query per link of the chain, whatever the number of starting nodes; a link missing from
    `nodes` (another viewer's, or gone) ends that chain. Call inside the tenant context.
    """
    if direction not in ("older", "newer"):
        raise ValueError("direction is 'older' or 'newer'")
    seen = {node.pk for node in start}
    found: list[MemoryNode] = []
    frontier = list(start)
    while frontier and (limit is None or len(found) < limit):
        if direction == "older":
            links = nodes.filter(pk__in=[node.supersedes_id for node in frontier if node.supersedes_id])
        else:
            links = nodes.filter(supersedes_id__in=[node.pk for node in frontier])
        frontier = [node for node in links.order_by("created_at", "pk") if node.pk not in seen]
        if limit is not None:
            frontier = frontier[:limit - len(found)]
        seen.update(node.pk for node in frontier)
        found.extend(frontier)
    return found
