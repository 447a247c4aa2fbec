"""Node writes: create, update, supersede and expire memory cards under every rule of DESIGN.md.

`node_write_batch` applies one caller's operations all or nothing (the API's `memory/write`);
`node_write_bulk` applies many callers' writes in one transaction (extraction writes each plan
item as its author, imports write many rows as one importer), the same rules for each.
Each write validates and normalises its drafts (`node_drafts`: kind, canonical key, value, scope
policy, explicit intent, confidence contract, sensitive content), settles the slot (same content →
noop, new content → supersede), bumps revisions and writes its audit event in the same transaction;
embeddings are announced once the transaction commits. A write made only of creates on distinct
slots is applied set-based (`node_creates`: validate all, then one slot lookup, one insert of the
cards, one of their audit events); every other write runs its operations one by one, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from memory.errors import Conflict, Invalid, MemoryServiceError, NotFound, RevisionConflict, from_schema_error
from memory.models import AuditEventType, MemoryNode, NodeStatus, ReviewState
from memory.rules.confidence import apply_confidence_contract
from memory.rules.errors import SchemaError
from memory.rules.kinds import JOURNAL_KIND
from memory.rules.node_text import same_content
from memory.rules.review import review_state_for
from memory.rules.values import normalize_value, validate_value
from memory.selectors import accessible_nodes, parse_node_id, superseded_by_ids, tenant_kinds
from memory.services.audit import audit_chain_lock, audit_node_change
from memory.services.events import nodes_written_announce
from memory.services.guards import require_batch_size, require_node_writable, require_writer
from memory.services.journal import journal_append
from memory.services.node_creates import (
    create_payload,
    creates_apply,
    nodes_insert,
    slot_occupants,
    slot_of,
    successor_link,
    supersede_payload,
)
from memory.services.node_drafts import (
    WriteContext,
    WriteResult,
    evidence_load,
    node_prepare,
    refuse_sensitive,
    search_text_of,
)
from memory.services.quota import cards_added, quota_require
from memory.visibility import Viewer
from tenants.context import tenant_context

__all__ = ["BulkOutcome", "NodeWrite", "WriteResult", "node_write_batch", "node_write_bulk",
           "require_current"]


def require_current(viewer: Viewer, node: MemoryNode, expected_revision: int, *, field: str = "",
                    statuses: Sequence[str] = (NodeStatus.ACTIVE,), action: str = "change") -> None:
    """Raise 409 revision_conflict unless `node` is still at `expected_revision` with one of `statuses`.

    Superseding leaves the old revision's number as it was, so the status is checked as well: a
    stale view of a superseded card answers with the newest revision of its chain to retry against.
    """
    if node.revision == expected_revision and node.status in statuses:
        return
    field = f"{field}." if field else ""
    head = (superseded_by_ids(tenant=viewer.tenant, node_ids=[node.pk]).get(node.pk)
            if node.status == NodeStatus.SUPERSEDED else None)
    if node.revision != expected_revision:
        detail = (f"Memory {node.pk} is at revision {node.revision} ({node.status}), not "
                  f"{expected_revision}; re-read it and retry with the current revision, or drop the change.")
        errors = {f"{field}expectedRevision": [f"current revision is {node.revision}"]}
    else:
        allowed = " or ".join(statuses)
        detail = f"Memory {node.pk} is {node.status}; only {allowed} memories can {action}."
        errors = {f"{field}targetId": [f"status is {node.status}"]}
    if head is not None:
        detail += f" It was superseded: memory {head} is the newest revision; read that one and retry."
    raise RevisionConflict(detail, errors=errors, current_revision=node.revision, node_status=node.status,
                           superseded_by_id=head)


def _locked_target(ctx: WriteContext, target_id: Any, expected_revision: int | None, *,
                   index: int) -> MemoryNode:
    if target_id is None or expected_revision is None:
        raise Invalid("update, supersede, expire and accept need targetId and expectedRevision "
                      "(from memory/search or get).",
                      errors={f"operations[{index}]": ["targetId and expectedRevision are required"]})
    pk = parse_node_id(target_id)
    node = accessible_nodes(ctx.viewer).select_for_update(of=("self",)).filter(pk=pk).first()
    if node is None:
        raise NotFound("No memory node with this id.")
    require_current(ctx.viewer, node, expected_revision, field=f"operations[{index}]")
    require_node_writable(ctx.viewer, node)
    return node


def _create(ctx: WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    node, result = node_prepare(ctx, op["node"], base=None)
    occupant = slot_occupants(ctx, [slot_of(node)]).get(slot_of(node))
    if occupant is not None and node.kind == JOURNAL_KIND:
        return journal_append(ctx, occupant, node, result, reason=op["reason"])
    if occupant is not None and same_content(occupant, node):
        result.node, result.action = occupant, "noop"
        return result
    if occupant is not None:
        return _replace(ctx, occupant, node, result, reason=op["reason"])
    quota_require(tenant=ctx.viewer.tenant, adding=cards_added([node]))
    nodes_insert([node])
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.CREATE, node=node, reason=op["reason"],
                      payload=create_payload(node))
    result.action = "created"
    return result


def _replace(ctx: WriteContext, old: MemoryNode, node: MemoryNode, result: WriteResult, *,
             reason: str) -> WriteResult:
    """Supersede `old` by the unsaved `node` (rule 2): old → superseded, new → revision + 1, linked."""
    quota_require(tenant=ctx.viewer.tenant, adding=cards_added([node], [old]))
    MemoryNode.objects.filter(pk=old.pk).update(status=NodeStatus.SUPERSEDED, updated_at=ctx.now)
    successor_link(old, node)
    nodes_insert([node])
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.SUPERSEDE, node=node, reason=reason,
                      payload=supersede_payload(old, node))
    result.node, result.action = node, "superseded"
    return result


def _supersede(ctx: WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    target = _locked_target(ctx, op.get("target_id"), op.get("expected_revision"), index=index)
    node, result = node_prepare(ctx, op.get("node") or {}, base=target)
    if JOURNAL_KIND in (target.kind, node.kind):
        raise Invalid("A journal card is never superseded: create appends an entry to its date, "
                      "update edits it.",
                      errors={f"operations[{index}].operation": ["supersede of a journal card"]})
    if (node.scope, node.owner_ref, node.key) != (target.scope, target.owner_ref, target.key):
        occupied = MemoryNode.objects.filter(
            tenant=ctx.viewer.tenant, scope=node.scope, owner_ref=node.owner_ref, key=node.key,
            status=NodeStatus.ACTIVE).exists()
        if occupied:
            raise Invalid("The new memory's slot already holds an active memory; supersede that one instead.",
                          errors={f"operations[{index}].node": ["slot taken"]})
    return _replace(ctx, target, node, result, reason=op["reason"])


UPDATABLE_FIELDS = ("title", "content", "value_json", "confidence", "importance", "tags", "entities",
                    "expires_at", "domain", "category_path", "type")


def _update(ctx: WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    target = _locked_target(ctx, op.get("target_id"), op.get("expected_revision"), index=index)
    draft = dict(op.get("node") or {})
    if draft.get("kind") and ctx.kind(draft["kind"]).name != target.kind:
        raise Invalid("update keeps the kind; use supersede to move a memory to another kind.",
                      errors={f"operations[{index}].node.kind": ["cannot change on update"]})
    if draft.get("scope") and draft["scope"] != target.scope:
        raise Invalid("update keeps the scope; use supersede to move a memory to another scope.",
                      errors={f"operations[{index}].node.scope": ["cannot change on update"]})
    spec = ctx.kind(target.kind)
    changes: dict[str, Any] = {}
    for name in UPDATABLE_FIELDS:
        if name == "value_json":
            if draft.get("value_json_given"):
                try:
                    value = normalize_value(spec, draft["value_json"])
                    validate_value(spec, value)
                except SchemaError as exc:
                    raise from_schema_error(exc) from exc
                changes[name] = value
        elif name in draft and draft[name] is not None:
            changes[name] = list(draft[name]) if isinstance(draft[name], list | tuple) else draft[name]
    refuse_sensitive({**draft, **changes})
    result = WriteResult(operation="update", action="noop", node=target, applied_confidence=target.confidence)
    if "confidence" in changes:
        changes["confidence"], result.auto_downgraded = apply_confidence_contract(
            changes["confidence"], draft.get("source_quote"), ctx.evidence.texts)
        result.applied_confidence = changes["confidence"]
    changes = {name: value for name, value in changes.items() if getattr(target, name) != value}
    review_state = review_state_for(actor=ctx.viewer.actor, operation="update", current=target.review_state,
                                    changed=bool(changes))
    if review_state != target.review_state:
        changes["review_state"] = review_state
    if not changes and not ctx.evidence.message_ids:
        return result
    before = {name: _jsonable(getattr(target, name)) for name in changes}
    for name, value in changes.items():
        setattr(target, name, value)
    if ctx.evidence.message_ids:
        target.source_message_ids = list(
            dict.fromkeys([*target.source_message_ids, *ctx.evidence.message_ids]))
    target.category_path_text = "/".join(target.category_path)
    target.revision += 1
    target.updated_at = ctx.now
    target.search_text = search_text_of(target)
    target.save()
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.UPDATE, node=target, reason=op["reason"],
           payload={"before": before, "after": {n: _jsonable(getattr(target, n)) for n in changes},
                    "revision": target.revision})
    result.action = "updated"
    return result


def _expire(ctx: WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    target = _locked_target(ctx, op.get("target_id"), op.get("expected_revision"), index=index)
    target.status = NodeStatus.EXPIRED
    target.expires_at = target.expires_at if target.expires_at and target.expires_at <= ctx.now else ctx.now
    target.revision += 1
    target.updated_at = ctx.now
    target.save(update_fields=["status", "expires_at", "revision", "updated_at"])
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.EXPIRE, node=target, reason=op["reason"],
           payload={"revision": target.revision})
    return WriteResult(operation="expire", action="expired", node=target,
                       applied_confidence=target.confidence)


def _accept(ctx: WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    target = _locked_target(ctx, op.get("target_id"), op.get("expected_revision"), index=index)
    if target.review_state != ReviewState.UNREVIEWED:
        raise Conflict(f"Memory {target.pk} is already {target.review_state}; only unreviewed memories "
                       "can be accepted. Nothing to do.",
                       errors={f"operations[{index}].targetId": [f"review state is {target.review_state}"]})
    before = target.review_state
    target.review_state = review_state_for(actor=ctx.viewer.actor, operation="accept")
    target.revision += 1
    target.updated_at = ctx.now
    target.save(update_fields=["review_state", "revision", "updated_at"])
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.ACCEPT, node=target, reason=op["reason"],
                      payload={"before": {"review_state": before},
                               "after": {"review_state": target.review_state}, "revision": target.revision})
    return WriteResult(operation="accept", action="accepted", node=target,
                       applied_confidence=target.confidence)


_OPERATIONS = {"create": _create, "update": _update, "supersede": _supersede, "expire": _expire,
               "accept": _accept}


def _apply(ctx: WriteContext, operations: Sequence[dict[str, Any]]) -> list[WriteResult]:
    bulk = creates_apply(ctx, operations)
    if bulk is not None:
        return bulk
    ctx.chain_lock()
    results = []
    for index, op in enumerate(operations):
        apply_operation = _OPERATIONS.get(op.get("operation"))
        if apply_operation is None:
            raise Invalid(f"operation must be one of {', '.join(_OPERATIONS)}.",
                          errors={f"operations[{index}].operation": ["unknown operation"]})
        result = apply_operation(ctx, op, index)
        result.operation = op["operation"]
        results.append(result)
    return results


@dataclass(frozen=True)
class NodeWrite:
    """One author's operations, applied all or nothing under that author's viewer and intent."""

    viewer: Viewer
    operations: Sequence[dict[str, Any]]
    explicit_user_intent: bool
    source_message_ids: Sequence[str] = ()


@dataclass
class BulkOutcome:
    """What became of one `NodeWrite`: its results, or the error that refused it (nothing of it applied)."""

    results: list[WriteResult] = field(default_factory=list)
    error: MemoryServiceError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _ChainLock:
    """The tenant's audit-chain lock, taken at most once per transaction (memory.services.audit)."""

    def __init__(self, tenant: Any) -> None:
        self.tenant, self.held = tenant, False

    def __call__(self) -> None:
        if not self.held:
            audit_chain_lock(tenant=self.tenant)
            self.held = True


def node_write_bulk(*, writes: Sequence[NodeWrite], skip_invalid: bool) -> list[BulkOutcome]:
    """Apply many writes of one tenant in one transaction, under the rules of `node_write_batch`.

    Each write is all or nothing. With `skip_invalid` a refused write (400/403/404/409) is rolled
    back to its savepoint and its error returned in its outcome while the others apply; without it
    the first refusal is raised and nothing is written. Embeddings are announced once, after commit.
    The audit-chain lock is taken first, for the whole transaction.
    """
    return _write_all(writes, skip_invalid=skip_invalid, lock_first=True)


def _write_all(writes: Sequence[NodeWrite], *, skip_invalid: bool, lock_first: bool) -> list[BulkOutcome]:
    if not writes:
        return []
    tenant = writes[0].viewer.tenant
    if any(write.viewer.tenant.pk != tenant.pk for write in writes):
        raise ValueError("node_write_bulk writes into one tenant; split the writes by tenant.")
    outcomes: list[BulkOutcome] = []
    with tenant_context(tenant):
        chain_lock = _ChainLock(tenant)
        if lock_first:
            chain_lock()
        kinds = tenant_kinds(tenant=tenant)
        for write in writes:
            try:
                with transaction.atomic() if skip_invalid else nullcontext():
                    require_writer(write.viewer)
                    ctx = WriteContext(write.viewer, write.explicit_user_intent,
                                       evidence_load(write.viewer, write.source_message_ids), kinds,
                                       chain_lock)
                    outcomes.append(BulkOutcome(results=_apply(ctx, write.operations)))
            except MemoryServiceError as exc:
                if not skip_invalid:
                    raise
                outcomes.append(BulkOutcome(error=exc))
        nodes_written_announce(
            tenant_id=tenant.pk,
            node_ids=[r.node.pk for outcome in outcomes for r in outcome.results
                      if r.action in ("created", "superseded", "updated")])
    return outcomes


def node_write_batch(*, viewer: Viewer, operations: Sequence[dict[str, Any]], explicit_user_intent: bool,
                     source_message_ids: Sequence[str] = ()) -> list[WriteResult]:
    """Apply create/update/supersede/expire/accept operations atomically: all or none (400/403/404/409)."""
    require_writer(viewer)
    require_batch_size(len(operations))
    write = NodeWrite(viewer=viewer, operations=operations, explicit_user_intent=explicit_user_intent,
                      source_message_ids=source_message_ids)
    # One write, no savepoints: the chain lock waits until its drafts are validated (node_creates).
    [outcome] = _write_all([write], skip_invalid=False, lock_first=False)
    return outcome.results


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value
