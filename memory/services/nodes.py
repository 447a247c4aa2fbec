"""Node writes: create, update, supersede and expire memory cards under every rule of DESIGN.md.

`node_write_batch` applies one caller's operations all or nothing (the API's `memory/write`);
`node_write_bulk` applies many callers' writes in one transaction (extraction writes each plan
item as its author, imports write many rows as one importer), the same rules for each.
Each write validates and normalises its draft (kind, canonical key, value, scope policy, explicit
intent, confidence contract, sensitive content), settles the slot (same content → noop, new
content → supersede), bumps revisions and writes its audit event in the same transaction;
embeddings are announced once the transaction commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.errors import (
    Invalid,
    MemoryServiceError,
    NotFound,
    RevisionConflict,
    SensitiveContent,
    from_schema_error,
)
from memory.models import AuditEventType, MemoryMessage, MemoryNode, NodeStatus
from memory.presenters import node_to_api
from memory.rules.confidence import apply_confidence_contract
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import KindSpec, resolve_kind
from memory.rules.node_text import node_search_text, same_content
from memory.rules.scope_policy import validate_scope_for_write
from memory.rules.sensitive import find_sensitive_node_content
from memory.rules.values import normalize_value, validate_value
from memory.selectors import accessible_nodes, parse_node_id, superseded_by_ids, tenant_kinds
from memory.services.audit import audit_chain_lock, audit_node_change
from memory.services.events import nodes_written_announce
from memory.services.guards import (
    require_acting_for,
    require_batch_size,
    require_node_writable,
    require_workspace_reachable,
    require_write_scope,
    require_writer,
)
from memory.visibility import Viewer, owner_ref
from tenants.context import tenant_context
from tenants.models import Scope, Workspace
from tenants.selectors import TenantObjectNotFound, member_resolve, workspace_resolve

EXPLICIT_DEFAULTS = (0.98, 0.9)  # seed 003: (confidence, importance) for explicit statements
INFERRED_DEFAULTS = (0.7, 0.6)


@dataclass
class WriteResult:
    operation: str
    action: str  # created|updated|superseded|expired|noop
    node: MemoryNode
    applied_confidence: float
    auto_downgraded: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class _Evidence:
    message_ids: list[str]
    session_id: str | None
    texts: list[str]


def _load_evidence(viewer: Viewer, source_message_ids: Sequence[str]) -> _Evidence:
    ids = list(dict.fromkeys(source_message_ids))
    if not ids:
        return _Evidence([], None, [])
    rows = list(
        MemoryMessage.objects.filter(tenant=viewer.tenant, message_id__in=ids)
        .values_list("message_id", "session_id", "content", "workspace_id")
    )
    found = {row[0] for row in rows}
    missing = [i for i in ids if i not in found]
    if missing:
        raise Invalid("sourceMessageIds must name messages already captured in this tenant.",
                      errors={"sourceMessageIds": [f"unknown message id {m!r}" for m in missing]})
    sessions = {(row[3], row[1]) for row in rows}
    if len(sessions) > 1:
        raise Invalid("sourceMessageIds must all come from one session.",
                      errors={"sourceMessageIds": ["messages of several sessions"]})
    return _Evidence(ids, rows[0][1], [row[2] for row in rows])


class _WriteContext:
    """What one write knows: the viewer, its intent and evidence, the tenant's kinds and the clock."""

    def __init__(self, viewer: Viewer, explicit_user_intent: bool, evidence: _Evidence,
                 extra_kinds: Mapping[str, KindSpec]) -> None:
        self.viewer = viewer
        self.explicit = explicit_user_intent
        self.evidence = evidence
        self.extra_kinds = extra_kinds
        self.now = timezone.now()

    def kind(self, name: str) -> KindSpec:
        try:
            return resolve_kind(name, self.extra_kinds)
        except SchemaError as exc:
            raise from_schema_error(exc) from exc

    def workspace(self, ref: Any) -> Workspace:
        if ref in (None, ""):
            return self.viewer.workspace
        try:
            workspace = workspace_resolve(tenant=self.viewer.tenant, ref=ref)
        except TenantObjectNotFound as exc:
            raise NotFound(str(exc)) from exc
        return workspace

    def user(self, username: str | None) -> AbstractBaseUser | None:
        if not username:
            return self.viewer.user
        # Checked before the lookup: an unknown member and someone else answer alike.
        require_acting_for(self.viewer, username=username)
        try:
            return member_resolve(tenant=self.viewer.tenant, username=username)
        except TenantObjectNotFound as exc:
            raise NotFound(str(exc)) from exc


def _search_text(node: MemoryNode) -> str:
    return node_search_text(title=node.title, content=node.content, value_json=node.value_json,
                            item_key=node.item_key, tags=node.tags, entities=node.entities)


def _refuse_sensitive(draft: dict[str, Any]) -> None:
    reason = find_sensitive_node_content(
        title=draft.get("title"), content=draft.get("content"), item_key=draft.get("item_key"),
        value_json=draft.get("value_json"), tags=draft.get("tags") or (),
        entities=draft.get("entities") or ())
    if reason:
        raise SensitiveContent(
            f"Refused: the memory carries a secret or personal identifier ({reason}). Never store it.",
            errors={"node": [reason]},
        )


def _prepare_node(ctx: _WriteContext, draft: dict[str, Any], *,
                  base: MemoryNode | None) -> tuple[MemoryNode, WriteResult]:
    """Validate and normalise a create/supersede draft into an unsaved node (DESIGN rules 4–7)."""
    kind_name = draft.get("kind") or (base.kind if base is not None else None)
    if not kind_name:
        raise Invalid("create needs a `kind` from the catalogue.", errors={"node.kind": ["required"]})
    spec = ctx.kind(kind_name)
    item_key = draft.get("item_key") if draft.get("item_key") is not None else (
        base.item_key if base is not None and base.kind == spec.name else None)
    try:
        key = canonical_key(spec, item_key)
        value = normalize_value(spec, draft["value_json"]) if draft.get("value_json_given") else (
            base.value_json if base is not None else None)
        validate_value(spec, value)
        requested_scope = draft.get("scope") or (base.scope if base is not None else spec.default_scope)
        require_write_scope(ctx.viewer, requested_scope)
        scope = validate_scope_for_write(
            spec=spec, scope=requested_scope, explicit_user_intent=ctx.explicit,
            expires_at_set=draft.get("expires_at") is not None, allowed_scopes=ctx.viewer.write_scopes,
        )
    except SchemaError as exc:
        raise from_schema_error(exc) from exc
    workspace = ctx.workspace(draft.get("workspace_id")) if draft.get("workspace_id") or base is None else (
        base.workspace)
    require_workspace_reachable(ctx.viewer, workspace.pk)
    session_id = draft.get("session_id") or (base.session_id if base is not None else None) or (
        ctx.evidence.session_id or ctx.viewer.session_id)
    user = (ctx.user(draft.get("user_id")) if draft.get("user_id") or base is None or base.user_id is None
            else base.user)
    if scope == Scope.SESSION and not session_id:
        raise Invalid("Session-scope memory needs a sessionId.", errors={"node.sessionId": ["required"]})
    if scope == Scope.USER and user is None:
        raise Invalid("User-scope memory needs a userId (a member of this tenant).",
                      errors={"node.userId": ["required"]})
    if (ctx.evidence.session_id and session_id and scope == Scope.SESSION
            and ctx.evidence.session_id != session_id):
        raise Invalid("sourceMessageIds must come from the same session as the memory.",
                      errors={"sourceMessageIds": ["other session"]})
    _refuse_sensitive({**draft, "item_key": item_key, "value_json": value})
    default_confidence, default_importance = EXPLICIT_DEFAULTS if ctx.explicit else INFERRED_DEFAULTS
    requested_confidence = draft.get("confidence", default_confidence)
    confidence, downgraded = apply_confidence_contract(
        requested_confidence, draft.get("source_quote"), ctx.evidence.texts)
    title = draft.get("title") or (base.title if base is not None else "")
    content = draft.get("content") or (base.content if base is not None else "")
    node = MemoryNode(
        tenant=ctx.viewer.tenant,
        workspace=workspace,
        user=user if scope in (Scope.USER, Scope.SESSION) else None,
        session_id=session_id if scope == Scope.SESSION else (session_id or None),
        scope=scope,
        owner_ref=owner_ref(scope=scope, workspace_id=workspace.pk, session_id=session_id,
                            user_id=user.pk if user is not None else None),
        kind=spec.name,
        item_key=item_key if spec.itemized else None,
        key=key,
        domain=draft.get("domain") or spec.domain,
        category_path=list(draft.get("category_path") or spec.category_path),
        type=draft.get("type") or spec.type,
        value_json=value,
        title=title,
        content=content,
        status=NodeStatus.ACTIVE,
        confidence=confidence,
        importance=draft.get("importance", default_importance),
        tags=list(dict.fromkeys(draft.get("tags") or [])),
        entities=list(dict.fromkeys(draft.get("entities") or [])),
        source_message_ids=ctx.evidence.message_ids,
        explicit_user_intent=ctx.explicit,
        created_at=ctx.now,
        updated_at=ctx.now,
        expires_at=draft.get("expires_at"),
    )
    node.category_path_text = "/".join(node.category_path)
    notes = [f"scope downgraded from {requested_scope} to {scope}"] if scope != requested_scope else []
    if downgraded:
        notes.append(f"confidence downgraded from {requested_confidence} to {confidence}: high confidence "
                     "needs a verbatim quote (sourceQuote, >= 5 characters) from the cited messages")
    return node, WriteResult(operation="", action="", node=node, applied_confidence=confidence,
                             auto_downgraded=downgraded, notes=notes)


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


def _locked_target(ctx: _WriteContext, target_id: Any, expected_revision: int | None, *,
                   index: int) -> MemoryNode:
    if target_id is None or expected_revision is None:
        raise Invalid("update, supersede and expire need targetId and expectedRevision "
                      "(from memory/search or get).",
                      errors={f"operations[{index}]": ["targetId and expectedRevision are required"]})
    pk = parse_node_id(target_id)
    node = accessible_nodes(ctx.viewer).select_for_update(of=("self",)).filter(pk=pk).first()
    if node is None:
        raise NotFound("No memory node with this id.")
    require_current(ctx.viewer, node, expected_revision, field=f"operations[{index}]")
    require_node_writable(ctx.viewer, node)
    return node


def _save_new(ctx: _WriteContext, node: MemoryNode) -> MemoryNode:
    node.search_text = _search_text(node)
    try:
        with transaction.atomic():
            node.save(force_insert=True)
    except IntegrityError as exc:
        raise RevisionConflict(
            "Another write filled this memory slot at the same time; re-read and retry.") from exc
    return node


def _create(ctx: _WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    node, result = _prepare_node(ctx, op["node"], base=None)
    occupant = (
        MemoryNode.objects.select_for_update()
        .filter(tenant=ctx.viewer.tenant, scope=node.scope, owner_ref=node.owner_ref, key=node.key,
                status=NodeStatus.ACTIVE)
        .first()
    )
    if occupant is not None and same_content(occupant, node):
        result.node, result.action = occupant, "noop"
        return result
    if occupant is not None:
        return _replace(ctx, occupant, node, result, reason=op["reason"])
    _save_new(ctx, node)
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.CREATE, node=node, reason=op["reason"],
                      payload={"node": node_to_api(node)})
    result.action = "created"
    return result


def _replace(ctx: _WriteContext, old: MemoryNode, node: MemoryNode, result: WriteResult, *,
             reason: str) -> WriteResult:
    """Supersede `old` by the unsaved `node` (rule 2): old → superseded, new → revision + 1, linked."""
    MemoryNode.objects.filter(pk=old.pk).update(status=NodeStatus.SUPERSEDED, updated_at=ctx.now)
    node.supersedes_id = old.pk
    node.parent_id = old.parent_id or old.pk
    node.revision = old.revision + 1
    node.access_count = 0
    _save_new(ctx, node)
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.SUPERSEDE, node=node, reason=reason,
           payload={"supersededId": str(old.pk), "node": node_to_api(node)})
    result.node, result.action = node, "superseded"
    return result


def _supersede(ctx: _WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    target = _locked_target(ctx, op.get("target_id"), op.get("expected_revision"), index=index)
    node, result = _prepare_node(ctx, op.get("node") or {}, base=target)
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


def _update(ctx: _WriteContext, op: dict[str, Any], index: int) -> WriteResult:
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
    _refuse_sensitive({**draft, **changes})
    result = WriteResult(operation="update", action="noop", node=target, applied_confidence=target.confidence)
    if "confidence" in changes:
        changes["confidence"], result.auto_downgraded = apply_confidence_contract(
            changes["confidence"], draft.get("source_quote"), ctx.evidence.texts)
        result.applied_confidence = changes["confidence"]
    changes = {name: value for name, value in changes.items() if getattr(target, name) != value}
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
    target.search_text = _search_text(target)
    target.save()
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.UPDATE, node=target, reason=op["reason"],
           payload={"before": before, "after": {n: _jsonable(getattr(target, n)) for n in changes},
                    "revision": target.revision})
    result.action = "updated"
    return result


def _expire(ctx: _WriteContext, op: dict[str, Any], index: int) -> WriteResult:
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


_OPERATIONS = {"create": _create, "update": _update, "supersede": _supersede, "expire": _expire}


def _apply(ctx: _WriteContext, operations: Sequence[dict[str, Any]]) -> list[WriteResult]:
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


def node_write_bulk(*, writes: Sequence[NodeWrite], skip_invalid: bool) -> list[BulkOutcome]:
    """Apply many writes of one tenant in one transaction, under the rules of `node_write_batch`.

    Each write is all or nothing. With `skip_invalid` a refused write (400/403/404/409) is rolled
    back to its savepoint and its error returned in its outcome while the others apply; without it
    the first refusal is raised and nothing is written. Embeddings are announced once, after commit.
    """
    if not writes:
        return []
    tenant = writes[0].viewer.tenant
    if any(write.viewer.tenant.pk != tenant.pk for write in writes):
        raise ValueError("node_write_bulk writes into one tenant; split the writes by tenant.")
    outcomes: list[BulkOutcome] = []
    with tenant_context(tenant):
        audit_chain_lock(tenant=tenant)
        kinds = tenant_kinds(tenant=tenant)
        for write in writes:
            try:
                with transaction.atomic() if skip_invalid else nullcontext():
                    require_writer(write.viewer)
                    ctx = _WriteContext(write.viewer, write.explicit_user_intent,
                                        _load_evidence(write.viewer, write.source_message_ids), kinds)
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
    """Apply create/update/supersede/expire operations atomically: all of them or none (400/403/404/409)."""
    require_writer(viewer)
    require_batch_size(len(operations))
    write = NodeWrite(viewer=viewer, operations=operations, explicit_user_intent=explicit_user_intent,
                      source_message_ids=source_message_ids)
    [outcome] = node_write_bulk(writes=[write], skip_invalid=False)
    return outcome.results


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value
