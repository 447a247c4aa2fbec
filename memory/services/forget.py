"""Forgetting and restoring memory cards (DESIGN rule 10).

Soft forget keeps an audited `deleted` row that is never retrieved again; hard forget deletes the
row (and with it the search index entry and vector) together with the older revisions of its
chain and everything derived from it, and answers with an erasure receipt (memory.services.erasure).
Restore brings a soft-forgotten card back when its slot is free.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.utils import timezone

from memory.errors import Forbidden, Invalid, NotFound, RequiresConfirmation
from memory.models import AuditEventType, MemoryNode, NodeStatus
from memory.selectors import NodeSelector, accessible_nodes, parse_node_id, selector_q
from memory.services.audit import audit_chain_lock, audit_node_change
from memory.services.erasure import ErasureReceipt, nodes_erase
from memory.services.guards import require_node_writable, require_writer
from memory.services.nodes import require_current
from memory.services.quota import cards_added, quota_require
from memory.visibility import Viewer
from tenants.context import tenant_context


@dataclass(frozen=True)
class ForgetRequest:
    reason: str
    explicit_user_intent: bool
    mode: str = "soft"
    node_id: Any = None
    expected_revision: int | None = None
    targets: tuple[tuple[Any, int], ...] = ()
    all: bool = False
    selector: NodeSelector = field(default_factory=NodeSelector)
    # Hard mode only: also erase the evidence messages and redact the summaries that cover them.
    purge_evidence: bool = False


@dataclass(frozen=True)
class ForgetResult:
    forgotten: list[UUID]
    # Hard mode: the cards the extractor derived from the same evidence, erased with them.
    derived: list[UUID] = field(default_factory=list)
    receipt: ErasureReceipt | None = None

    # Callers written before receipts existed read the answer as the list of forgotten ids.
    def __iter__(self) -> Iterator[UUID]:
        return iter(self.forgotten)

    def __len__(self) -> int:
        return len(self.forgotten)


def node_forget(*, viewer: Viewer, request: ForgetRequest) -> ForgetResult:
    """Forget memories (rule 10): soft keeps an audited `deleted` row, hard erases them with a receipt."""
    require_writer(viewer)
    if not request.explicit_user_intent:
        raise Forbidden("Forgetting needs explicitUserIntent: true (the user asked for it).",
                        errors={"explicitUserIntent": ["must be true"]})
    if not (request.reason or "").strip():
        raise Invalid("Say why the memory is forgotten.", errors={"reason": ["required"]})
    if request.purge_evidence and request.mode != "hard":
        raise Invalid("purgeEvidence erases the conversation too; it needs mode: hard.",
                      errors={"purgeEvidence": ["only with mode hard"]})
    with tenant_context(viewer.tenant):
        audit_chain_lock(tenant=viewer.tenant)
        nodes = _forget_targets(viewer, request)
        for node in nodes:
            require_node_writable(viewer, node)
        forgotten = [node.pk for node in nodes]
        if request.mode == "hard":
            erasure = nodes_erase(viewer=viewer, nodes=nodes, purge_evidence=request.purge_evidence)
            return ForgetResult(forgotten=forgotten, derived=erasure.derived_ids, receipt=erasure.receipt)
        now = timezone.now()
        for node in nodes:
            node.status, node.revision, node.updated_at = NodeStatus.DELETED, node.revision + 1, now
            node.save(update_fields=["status", "revision", "updated_at"])
            audit_node_change(viewer=viewer, event_type=AuditEventType.DELETE, node=node,
                              reason=request.reason, payload={"mode": "soft", "revision": node.revision})
    return ForgetResult(forgotten=forgotten)


def _forget_targets(viewer: Viewer, request: ForgetRequest) -> list[MemoryNode]:
    nodes = accessible_nodes(viewer).select_for_update(of=("self",))
    by_id = ([(request.node_id, request.expected_revision)] if request.node_id is not None else []) + list(
        request.targets)
    if by_id:
        chosen = []
        for index, (node_id, expected_revision) in enumerate(by_id):
            node = nodes.filter(pk=parse_node_id(node_id)).first()
            if node is None:
                raise NotFound("No memory node with this id.")
            if expected_revision is None:
                raise Invalid("Forgetting by id needs expectedRevision.",
                              errors={f"targets[{index}].expectedRevision": ["required"]})
            # A forgotten or expired card may still be forgotten (or erased); a superseded one points on.
            require_current(viewer, node, expected_revision, field=f"targets[{index}]", action="be forgotten",
                            statuses=(NodeStatus.ACTIVE, NodeStatus.EXPIRED, NodeStatus.DELETED))
            if request.mode != "hard" and node.status == NodeStatus.DELETED:
                continue
            chosen.append(node)
        return chosen
    if request.selector.is_empty() and not request.all:
        raise Invalid("Name what to forget: id, targets, a selector (kind, key, …) or all: true.")
    matches = list(
        nodes.filter(selector_q(request.selector), status=NodeStatus.ACTIVE).order_by("-updated_at"))
    if len(matches) > 1 and not request.all:
        raise RequiresConfirmation(
            f"{len(matches)} memories match; confirm with `targets` (id + expectedRevision) or `all: true`.",
            candidates=matches[:50],
        )
    return matches


def node_restore(*, viewer: Viewer, node_id: Any, expected_revision: int, reason: str) -> MemoryNode:
    """Bring a soft-forgotten memory back (its slot must be free)."""
    require_writer(viewer)
    with tenant_context(viewer.tenant):
        audit_chain_lock(tenant=viewer.tenant)
        node = (accessible_nodes(viewer).select_for_update(of=("self",))
                .filter(pk=parse_node_id(node_id)).first())
        if node is None:
            raise NotFound("No memory node with this id.")
        require_current(viewer, node, expected_revision, statuses=(NodeStatus.DELETED,),
                        action="be restored")
        require_node_writable(viewer, node)
        if MemoryNode.objects.filter(tenant=viewer.tenant, scope=node.scope, owner_ref=node.owner_ref,
                                     key=node.key, status=NodeStatus.ACTIVE).exists():
            raise Invalid("Another active memory holds this slot now; forget or supersede it first.")
        node.status = NodeStatus.ACTIVE
        quota_require(tenant=viewer.tenant, adding=cards_added([node]))
        node.status, node.revision, node.updated_at = NodeStatus.ACTIVE, node.revision + 1, timezone.now()
        node.save(update_fields=["status", "revision", "updated_at"])
        audit_node_change(viewer=viewer, event_type=AuditEventType.RESTORE, node=node, reason=reason,
                          payload={"revision": node.revision})
    return node
