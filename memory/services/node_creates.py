"""Set-based creates: a write made only of creates on distinct slots (one or a hundred), in a handful of
statements.

The rules are those of the one-by-one path (`nodes._create`), in the same order: every draft is
validated first (`node_prepare`; the first invalid one refuses the write and nothing is written),
then one locked lookup finds the active cards of all the slots, same content answers `noop`, new
content supersedes (`successor_link`), and one UPDATE retires the superseded cards, one INSERT
adds the new ones and one INSERT their audit events, in operation order, so the chain's trigger
links them exactly as it would one by one. The tenant's audit-chain lock is taken after the
validation, before the first row lock, so concurrent writes validate side by side. Two creates on
one slot depend on their order (the second supersedes or repeats the first): such a write goes
one by one. The whole write is checked against the scope owners' card quotas once, before the
first row changes (`quota.quota_require`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from memory.errors import RevisionConflict
from memory.models import AuditEventType, MemoryNode, NodeStatus
from memory.presenters import node_to_api
from memory.rules.kinds import JOURNAL_KIND
from memory.rules.node_text import same_content
from memory.services.audit import NodeChange, audit_node_changes
from memory.services.node_drafts import WriteContext, WriteResult, node_prepare, search_text_of
from memory.services.quota import cards_added, quota_require
from memory.services.rows_insert import rows_insert

Slot = tuple[str, str, str]  # (scope, owner_ref, key): at most one active card each


def slot_of(node: MemoryNode) -> Slot:
    return node.scope, node.owner_ref, node.key


def successor_link(old: MemoryNode, node: MemoryNode) -> None:
    """Make the unsaved `node` the next revision of `old` (rule 2): linked, revision + 1, unread."""
    node.supersedes_id = old.pk
    node.parent_id = old.parent_id or old.pk
    node.revision = old.revision + 1
    node.access_count = 0


def create_payload(node: MemoryNode) -> dict[str, Any]:
    return {"node": node_to_api(node)}


def supersede_payload(old: MemoryNode, node: MemoryNode) -> dict[str, Any]:
    return {"supersededId": str(old.pk), "node": node_to_api(node)}


def nodes_insert(nodes: Sequence[MemoryNode]) -> None:
    """Insert new cards in one statement; a slot another write filled meanwhile answers 409."""
    if not nodes:
        return
    for node in nodes:
        node.search_text = search_text_of(node)
    try:
        with transaction.atomic():
            rows_insert(MemoryNode, nodes)
    except IntegrityError as exc:
        raise RevisionConflict(
            "Another write filled this memory slot at the same time; re-read and retry.") from exc


def slot_occupants(ctx: WriteContext, slots: Sequence[Slot]) -> dict[Slot, MemoryNode]:
    """Lock and return the active cards of `slots` (one query, grouped by scope owner)."""
    keys_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    for scope, owner, key in slots:
        keys_of[(scope, owner)].append(key)
    match = Q()
    for (scope, owner), keys in keys_of.items():
        match |= Q(scope=scope, owner_ref=owner, key__in=keys)
    rows = (MemoryNode.objects.select_for_update().filter(match, tenant=ctx.viewer.tenant,
                                                          status=NodeStatus.ACTIVE).order_by("pk"))
    return {slot_of(node): node for node in rows}


def creates_apply(ctx: WriteContext, operations: Sequence[dict[str, Any]]) -> list[WriteResult] | None:
    """Apply a write of creates set-based; None when it needs the one-by-one path (nothing done then)."""
    if not operations or any(op.get("operation") != "create" for op in operations):
        return None
    prepared = [node_prepare(ctx, op["node"], base=None) for op in operations]
    slots = [slot_of(node) for node, _ in prepared]
    if len(set(slots)) < len(slots) or any(node.kind == JOURNAL_KIND for node, _ in prepared):
        return None  # journal creates append to their date's card: memory.services.journal
    ctx.chain_lock()  # validated without it: concurrent writes of the tenant validate side by side
    occupants = slot_occupants(ctx, slots)
    retired: list[MemoryNode | None] = []
    for node, result in prepared:
        result.operation = "create"
        occupant = occupants.get(slot_of(node))
        if occupant is not None and same_content(occupant, node):
            result.node, result.action = occupant, "noop"
        elif occupant is not None:
            successor_link(occupant, node)
            result.action = "superseded"
        else:
            result.action = "created"
        retired.append(occupant)
    written = [(node, old) for old, (node, r) in zip(retired, prepared, strict=True) if r.action != "noop"]
    quota_require(tenant=ctx.viewer.tenant,
                  adding=cards_added([node for node, _ in written], [old for _, old in written if old]))
    superseded = [old.pk for old, (_, r) in zip(retired, prepared, strict=True) if r.action == "superseded"]
    if superseded:
        MemoryNode.objects.filter(pk__in=superseded).update(status=NodeStatus.SUPERSEDED, updated_at=ctx.now)
    nodes_insert([node for node, result in prepared if result.action != "noop"])
    changes: list[NodeChange] = [
        (AuditEventType.SUPERSEDE, node, op["reason"], supersede_payload(old, node))
        if result.action == "superseded"
        else (AuditEventType.CREATE, node, op["reason"], create_payload(node))
        for op, old, (node, result) in zip(operations, retired, prepared, strict=True)
        if result.action != "noop"]
    if changes:
        audit_node_changes(viewer=ctx.viewer, changes=changes)
    return [result for _, result in prepared]
