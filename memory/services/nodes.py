"""Every write to memory: evidence capture, summaries, node writes and forgets, access counting.

Each public function takes the resolved viewer (and so the tenant) explicitly, runs in one
transaction bound to that tenant, writes its audit events in the same transaction and queues
background work with `transaction.on_commit`. Views, serializers, admin and tasks never save
memory rows themselves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from memory.errors import (
    Forbidden,
    Invalid,
    NotFound,
    RequiresConfirmation,
    RevisionConflict,
    SensitiveContent,
    from_schema_error,
)
from memory.models import (
    AuditEventType,
    MemoryAuditEvent,
    MemoryMessage,
    MemoryNode,
    MemorySummary,
    NodeStatus,
)
from memory.pipeline import background
from memory.presenters import node_to_api
from memory.rules.schema import (
    DEFAULT_KINDS,
    KindSpec,
    SchemaError,
    apply_confidence_contract,
    canonical_key,
    find_sensitive_content,
    normalize_value,
    resolve_kind,
    validate_scope_for_write,
    validate_value,
)
from memory.rules.text import count_tokens, segment_for_search
from memory.selectors import NodeSelector, accessible_nodes, parse_node_id, selector_q, tenant_kinds
from memory.visibility import Viewer, owner_ref
from tenants.context import tenant_context
from tenants.models import Scope, Tenant, Workspace
from tenants.selectors import TenantObjectNotFound, member_resolve, workspace_resolve

MAX_OPERATIONS = 100
EXPLICIT_DEFAULTS = (0.98, 0.9)  # seed 003: (confidence, importance) for explicit statements
INFERRED_DEFAULTS = (0.7, 0.6)


# --- evidence -------------------------------------------------------------------------------------

def _generated_message_id(*, workspace_id: int, session_id: str, role: str, content: str,
                          created_at: datetime | None) -> str:
    if created_at is None:
        return f"msg_{uuid4().hex}"
    # A client retrying the same timestamped message gets the same id, so the capture stays idempotent.
    digest = hashlib.sha256(
        json.dumps([workspace_id, session_id, role, content, created_at.isoformat()]).encode()
    ).hexdigest()
    return f"msg_{digest[:32]}"


def message_append_batch(*, viewer: Viewer, session_id: str, messages: Sequence[dict[str, Any]]) -> list[MemoryMessage]:
    """Append evidence messages (append-only; a repeated client id with the same content is a no-op)."""
    if len(messages) > MAX_OPERATIONS:
        from memory.errors import TooLarge

        raise TooLarge(f"At most {MAX_OPERATIONS} messages per request; send them in batches.")
    now = timezone.now()
    stored: list[MemoryMessage] = []
    created_ids: list[int] = []
    with tenant_context(viewer.tenant):
        for index, data in enumerate(messages):
            created_at = data.get("created_at")
            message_id = data.get("id") or _generated_message_id(
                workspace_id=viewer.workspace.pk, session_id=session_id, role=data["role"],
                content=data["content"], created_at=created_at,
            )
            existing = MemoryMessage.objects.filter(
                tenant=viewer.tenant, workspace=viewer.workspace, message_id=message_id
            ).first()
            if existing is not None:
                if (existing.session_id, existing.role, existing.content) != (session_id, data["role"],
                                                                              data["content"]):
                    raise Invalid(
                        f"Message id {message_id!r} already holds different content; evidence is append-only, "
                        "so send the new message with a new id.",
                        errors={f"messages[{index}].id": ["already used for different content"]},
                    )
                stored.append(existing)
                continue
            message = MemoryMessage.objects.create(
                tenant=viewer.tenant,
                workspace=viewer.workspace,
                message_id=message_id,
                session_id=session_id,
                user=viewer.user,
                parent_id=data.get("parent_id"),
                role=data["role"],
                content=data["content"],
                channel=data.get("channel") or "main",
                agent_name=data.get("agent_name") or "",
                metadata=data.get("metadata"),
                token_count=count_tokens(data["content"]),
                # Messages of one batch keep their order even when they share a clock tick.
                created_at=created_at or now + timedelta(microseconds=index),
                search_text=segment_for_search(data["content"]),
            )
            stored.append(message)
            created_ids.append(message.pk)
        if created_ids:
            tenant_id, workspace_id = viewer.tenant.pk, viewer.workspace.pk
            transaction.on_commit(
                lambda: background.after_messages_captured(tenant_id, workspace_id, session_id, created_ids)
            )
    return stored


def summary_append(*, viewer: Viewer, session_id: str, data: dict[str, Any]) -> MemorySummary:
    """Append a summary to the session's chain; it links to the latest one (a stale parent → 409)."""
    with tenant_context(viewer.tenant):
        latest = (
            MemorySummary.objects.select_for_update()
            .filter(tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id)
            .order_by("-created_at").first()
        )
        parent_ref = data.get("parent_summary_id")
        if parent_ref is not None and (latest is None or str(latest.pk) != str(parent_ref)):
            if latest is None:
                raise NotFound("parentSummaryId names no summary of this session.")
            raise RevisionConflict(
                f"The session's latest summary is {latest.pk}; summaries append to the end of the chain.",
                errors={"parentSummaryId": [f"expected {latest.pk}"]},
            )
        known = set(
            MemoryMessage.objects.filter(
                tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id,
                message_id__in=[data["from_message_id"], data["to_message_id"]],
            ).values_list("message_id", flat=True)
        )
        missing = {"fromMessageId": data["from_message_id"], "toMessageId": data["to_message_id"]}
        errors = {name: ["not a message of this session"] for name, value in missing.items() if value not in known}
        if errors:
            raise Invalid("fromMessageId and toMessageId must name messages of this session.", errors=errors)
        try:
            with transaction.atomic():
                return MemorySummary.objects.create(
                    tenant=viewer.tenant, workspace=viewer.workspace, session_id=session_id, parent_summary=latest,
                    from_message_id=data["from_message_id"], to_message_id=data["to_message_id"],
                    summary=data["summary"], current_goal=data.get("current_goal"),
                    **{name: data.get(name) or [] for name in (
                        "constraints", "preferences", "decisions", "completed_work", "pending_work",
                        "known_issues")},
                    created_at=max(timezone.now(), latest.created_at + timedelta(microseconds=1))
                    if latest else timezone.now(),
                )
        except IntegrityError as exc:
            raise RevisionConflict("Another summary was appended at the same time; fetch the latest and retry.") \
                from exc


# --- node writes ----------------------------------------------------------------------------------

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


def _content_signature(node: MemoryNode | dict[str, Any]) -> tuple:
    get = node.get if isinstance(node, dict) else lambda name, default=None: getattr(node, name, default)
    return (json.dumps(get("value_json"), sort_keys=True, ensure_ascii=False), get("title"), get("content"))


def _search_text(node: MemoryNode) -> str:
    value = node.value_json if isinstance(node.value_json, str) else (
        json.dumps(node.value_json, ensure_ascii=False) if node.value_json is not None else "")
    return segment_for_search(node.title, node.content, value, node.item_key, " ".join(node.tags),
                              " ".join(node.entities))


class _WriteContext:
    """What one `node_write_batch` call knows: the viewer, its intent, evidence and the tenant's kinds."""

    def __init__(self, viewer: Viewer, explicit_user_intent: bool, evidence: _Evidence) -> None:
        self.viewer = viewer
        self.explicit = explicit_user_intent
        self.evidence = evidence
        self.extra_kinds = tenant_kinds(tenant=viewer.tenant)
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
        if self.viewer.pinned_workspace_id not in (None, workspace.pk):
            raise Forbidden("This API key is pinned to another workspace.")
        return workspace

    def user(self, username: str | None) -> AbstractBaseUser | None:
        if not username:
            return self.viewer.user
        try:
            return member_resolve(tenant=self.viewer.tenant, username=username)
        except TenantObjectNotFound as exc:
            raise NotFound(str(exc)) from exc

    def require_scope_writable(self, scope: str) -> None:
        if scope == Scope.GLOBAL and Scope.GLOBAL not in self.viewer.write_scopes:
            raise Forbidden("Agents never write global memory.", errors={"node.scope": ["global is read-only"]})
        if scope not in self.viewer.write_scopes:
            raise Forbidden(f"This caller may not write {scope}-scope memory.",
                            errors={"node.scope": [f"allowed: {', '.join(sorted(self.viewer.write_scopes))}"]})


def _refuse_sensitive(draft: dict[str, Any]) -> None:
    value = draft.get("value_json")
    reason = find_sensitive_content(
        draft.get("title"), draft.get("content"), draft.get("item_key"),
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False) if value is not None else None,
        *(draft.get("tags") or []), *(draft.get("entities") or []),
    )
    if reason:
        raise SensitiveContent(
            f"Refused: the memory carries a secret or personal identifier ({reason}). Never store it.",
            errors={"node": [reason]},
        )


def _prepare_node(ctx: _WriteContext, draft: dict[str, Any], *, base: MemoryNode | None) -> tuple[MemoryNode, WriteResult]:
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
        ctx.require_scope_writable(requested_scope)
        scope = validate_scope_for_write(
            spec=spec, scope=requested_scope, explicit_user_intent=ctx.explicit,
            expires_at_set=draft.get("expires_at") is not None, allowed_scopes=ctx.viewer.write_scopes,
        )
    except SchemaError as exc:
        raise from_schema_error(exc) from exc
    workspace = ctx.workspace(draft.get("workspace_id")) if draft.get("workspace_id") or base is None else (
        base.workspace)
    session_id = draft.get("session_id") or (base.session_id if base is not None else None) or (
        ctx.evidence.session_id or ctx.viewer.session_id)
    user = ctx.user(draft.get("user_id")) if draft.get("user_id") or base is None or base.user_id is None else base.user
    if scope == Scope.SESSION and not session_id:
        raise Invalid("Session-scope memory needs a sessionId.", errors={"node.sessionId": ["required"]})
    if scope == Scope.USER and user is None:
        raise Invalid("User-scope memory needs a userId (a member of this tenant).",
                      errors={"node.userId": ["required"]})
    if ctx.evidence.session_id and session_id and scope == Scope.SESSION and ctx.evidence.session_id != session_id:
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
        notes.append(f"confidence downgraded from {requested_confidence} to {confidence}: high confidence needs a "
                     "verbatim quote (sourceQuote, >= 5 characters) from the cited messages")
    return node, WriteResult(operation="", action="", node=node, applied_confidence=confidence,
                             auto_downgraded=downgraded, notes=notes)


def _audit(ctx: _WriteContext, *, event_type: str, node: MemoryNode, reason: str, payload: dict | None) -> None:
    MemoryAuditEvent.objects.create(
        tenant=ctx.viewer.tenant, workspace_id=node.workspace_id, event_type=event_type, node_id=node.pk,
        session_id=node.session_id, user=ctx.viewer.user, actor=ctx.viewer.actor, reason=reason,
        payload=payload, created_at=timezone.now(),
    )


def _locked_target(ctx: _WriteContext, target_id: Any, expected_revision: int | None, *, index: int) -> MemoryNode:
    if target_id is None or expected_revision is None:
        raise Invalid("update, supersede and expire need targetId and expectedRevision (from memory/search or get).",
                      errors={f"operations[{index}]": ["targetId and expectedRevision are required"]})
    pk = parse_node_id(target_id)
    node = accessible_nodes(ctx.viewer).select_for_update(of=("self",)).filter(pk=pk).first()
    if node is None:
        raise NotFound("No memory node with this id.")
    if node.revision != expected_revision:
        raise RevisionConflict(
            f"Memory {node.pk} is at revision {node.revision}, not {expected_revision}; re-read it and retry.",
            errors={f"operations[{index}].expectedRevision": [f"current revision is {node.revision}"]},
            currentRevision=node.revision,
        )
    if node.status != NodeStatus.ACTIVE:
        raise Invalid(f"Memory {node.pk} is {node.status}; only active memories change.",
                      errors={f"operations[{index}].targetId": [f"status is {node.status}"]})
    ctx.require_scope_writable(node.scope)
    return node


def _save_new(ctx: _WriteContext, node: MemoryNode) -> MemoryNode:
    node.search_text = _search_text(node)
    try:
        with transaction.atomic():
            node.save(force_insert=True)
    except IntegrityError as exc:
        raise RevisionConflict("Another write filled this memory slot at the same time; re-read and retry.") from exc
    return node


def _create(ctx: _WriteContext, op: dict[str, Any], index: int) -> WriteResult:
    node, result = _prepare_node(ctx, op["node"], base=None)
    occupant = (
        MemoryNode.objects.select_for_update()
        .filter(tenant=ctx.viewer.tenant, scope=node.scope, owner_ref=node.owner_ref, key=node.key,
                status=NodeStatus.ACTIVE)
        .first()
    )
    if occupant is not None and _content_signature(occupant) == _content_signature(node):
        result.node, result.action = occupant, "noop"
        return result
    if occupant is not None:
        return _replace(ctx, occupant, node, result, reason=op["reason"])
    _save_new(ctx, node)
    _audit(ctx, event_type=AuditEventType.CREATE, node=node, reason=op["reason"], payload={"node": node_to_api(node)})
    result.action = "created"
    return result


def _replace(ctx: _WriteContext, old: MemoryNode, node: MemoryNode, result: WriteResult, *, reason: str) -> WriteResult:
    """Supersede `old` by the unsaved `node` (rule 2): old → superseded, new → revision + 1, linked."""
    MemoryNode.objects.filter(pk=old.pk).update(status=NodeStatus.SUPERSEDED, updated_at=ctx.now)
    node.supersedes_id = old.pk
    node.parent_id = old.parent_id or old.pk
    node.revision = old.revision + 1
    node.access_count = 0
    _save_new(ctx, node)
    _audit(ctx, event_type=AuditEventType.SUPERSEDE, node=node, reason=reason,
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


UPDATABLE_FIELDS = ("title", "content", "value_json", "confidence", "importance", "tags", "entities", "expires_at",
                    "domain", "category_path", "type")


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
        target.source_message_ids = list(dict.fromkeys([*target.source_message_ids, *ctx.evidence.message_ids]))
    target.category_path_text = "/".join(target.category_path)
    target.revision += 1
    target.updated_at = ctx.now
    target.search_text = _search_text(target)
    target.save()
    _audit(ctx, event_type=AuditEventType.UPDATE, node=target, reason=op["reason"],
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
    _audit(ctx, event_type=AuditEventType.EXPIRE, node=target, reason=op["reason"],
           payload={"revision": target.revision})
    return WriteResult(operation="expire", action="expired", node=target, applied_confidence=target.confidence)


_OPERATIONS = {"create": _create, "update": _update, "supersede": _supersede, "expire": _expire}


def node_write_batch(*, viewer: Viewer, operations: Sequence[dict[str, Any]], explicit_user_intent: bool,
                     source_message_ids: Sequence[str] = ()) -> list[WriteResult]:
    """Apply create/update/supersede/expire operations atomically: all of them or none (400/403/404/409)."""
    if viewer.read_only:
        raise Forbidden("This API key is read-only.")
    if len(operations) > MAX_OPERATIONS:
        from memory.errors import TooLarge

        raise TooLarge(f"At most {MAX_OPERATIONS} operations per request; split the batch.")
    with tenant_context(viewer.tenant):
        ctx = _WriteContext(viewer, explicit_user_intent, _load_evidence(viewer, source_message_ids))
        results = []
        for index, op in enumerate(operations):
            result = _OPERATIONS[op["operation"]](ctx, op, index)
            result.operation = op["operation"]
            results.append(result)
        changed = [r.node.pk for r in results if r.action in ("created", "superseded", "updated")]
        if changed:
            tenant_id = viewer.tenant.pk
            transaction.on_commit(lambda: background.after_nodes_written(tenant_id, changed))
    return results


# --- forget and restore ---------------------------------------------------------------------------

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


def node_forget(*, viewer: Viewer, request: ForgetRequest) -> list[UUID]:
    """Forget memories (rule 10): soft keeps an audited `deleted` row, hard removes row, index and vector."""
    if viewer.read_only:
        raise Forbidden("This API key is read-only.")
    if not request.explicit_user_intent:
        raise Forbidden("Forgetting needs explicitUserIntent: true (the user asked for it).",
                        errors={"explicitUserIntent": ["must be true"]})
    if not (request.reason or "").strip():
        raise Invalid("Say why the memory is forgotten.", errors={"reason": ["required"]})
    with tenant_context(viewer.tenant):
        ctx = _WriteContext(viewer, True, _Evidence([], None, []))
        nodes = _forget_targets(ctx, request)
        for node in nodes:
            ctx.require_scope_writable(node.scope)
        forgotten = [node.pk for node in nodes]
        if request.mode == "hard":
            _hard_delete(ctx, nodes, reason=request.reason)
        else:
            for node in nodes:
                node.status, node.revision, node.updated_at = NodeStatus.DELETED, node.revision + 1, ctx.now
                node.save(update_fields=["status", "revision", "updated_at"])
                _audit(ctx, event_type=AuditEventType.DELETE, node=node, reason=request.reason,
                       payload={"mode": "soft", "revision": node.revision})
    return forgotten


def _forget_targets(ctx: _WriteContext, request: ForgetRequest) -> list[MemoryNode]:
    nodes = accessible_nodes(ctx.viewer).select_for_update(of=("self",))
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
            if node.revision != expected_revision:
                raise RevisionConflict(
                    f"Memory {node.pk} is at revision {node.revision}, not {expected_revision}; re-read it.",
                    currentRevision=node.revision)
            if request.mode != "hard" and node.status == NodeStatus.DELETED:
                continue
            chosen.append(node)
        return chosen
    if request.selector.is_empty() and not request.all:
        raise Invalid("Name what to forget: id, targets, a selector (kind, key, …) or all: true.")
    matches = list(nodes.filter(selector_q(request.selector), status=NodeStatus.ACTIVE).order_by("-updated_at"))
    if len(matches) > 1 and not request.all:
        raise RequiresConfirmation(
            f"{len(matches)} memories match; confirm with `targets` (id + expectedRevision) or `all: true`.",
            candidates=matches[:50],
        )
    return matches


def _hard_delete(ctx: _WriteContext, nodes: list[MemoryNode], *, reason: str) -> None:
    """Delete rows (and with them their index entries and vectors), older revisions included; audit keeps no content."""
    doomed: dict[UUID, MemoryNode] = {node.pk: node for node in nodes}
    frontier = [node.supersedes_id for node in nodes if node.supersedes_id]
    while frontier:
        older = list(MemoryNode.objects.filter(tenant=ctx.viewer.tenant, pk__in=frontier).exclude(pk__in=doomed))
        doomed.update({node.pk: node for node in older})
        frontier = [node.supersedes_id for node in older if node.supersedes_id]
    for node in doomed.values():
        _audit(ctx, event_type=AuditEventType.DELETE, node=node, reason=reason, payload={"mode": "hard"})
    # Earlier audit events held snapshots of the content: a hard forget erases those too.
    MemoryAuditEvent.objects.filter(tenant=ctx.viewer.tenant, node_id__in=list(doomed)).exclude(
        payload={"mode": "hard"}).update(payload=None)
    MemoryNode.objects.filter(tenant=ctx.viewer.tenant, pk__in=list(doomed)).delete()


def node_restore(*, viewer: Viewer, node_id: Any, expected_revision: int, reason: str) -> MemoryNode:
    """Bring a soft-forgotten memory back (its slot must be free)."""
    if viewer.read_only:
        raise Forbidden("This caller is read-only.")
    with tenant_context(viewer.tenant):
        ctx = _WriteContext(viewer, True, _Evidence([], None, []))
        node = accessible_nodes(viewer).select_for_update(of=("self",)).filter(pk=parse_node_id(node_id)).first()
        if node is None:
            raise NotFound("No memory node with this id.")
        if node.revision != expected_revision:
            raise RevisionConflict(f"Memory {node.pk} is at revision {node.revision}, not {expected_revision}.",
                                   currentRevision=node.revision)
        if node.status != NodeStatus.DELETED:
            raise Invalid(f"Only forgotten memories can be restored; this one is {node.status}.")
        ctx.require_scope_writable(node.scope)
        if MemoryNode.objects.filter(tenant=viewer.tenant, scope=node.scope, owner_ref=node.owner_ref, key=node.key,
                                     status=NodeStatus.ACTIVE).exists():
            raise Invalid("Another active memory holds this slot now; forget or supersede it first.")
        node.status, node.revision, node.updated_at = NodeStatus.ACTIVE, node.revision + 1, ctx.now
        node.save(update_fields=["status", "revision", "updated_at"])
        _audit(ctx, event_type=AuditEventType.RESTORE, node=node, reason=reason, payload={"revision": node.revision})
    return node


def nodes_expire_due(*, now: datetime | None = None, limit_per_tenant: int = 1000) -> int:
    """Mark active nodes whose `expiresAt` has passed as expired (the Celery beat sweep); return the count."""
    now = now or timezone.now()
    expired = 0
    for tenant in Tenant.objects.all():
        with tenant_context(tenant):
            due = list(MemoryNode.objects.select_for_update(skip_locked=True)
                       .filter(tenant=tenant, status=NodeStatus.ACTIVE, expires_at__lte=now)[:limit_per_tenant])
            for node in due:
                node.status, node.revision, node.updated_at = NodeStatus.EXPIRED, node.revision + 1, now
                node.save(update_fields=["status", "revision", "updated_at"])
                MemoryAuditEvent.objects.create(
                    tenant=tenant, workspace_id=node.workspace_id, event_type=AuditEventType.EXPIRE, node_id=node.pk,
                    session_id=node.session_id, actor="system:expiry", reason="expiresAt passed",
                    payload={"revision": node.revision}, created_at=now)
            expired += len(due)
    return expired


def node_access_record(*, tenant: Tenant, node_ids: Iterable[UUID]) -> None:
    """Count one retrieval of each node (seed 004) without touching its revision or updatedAt."""
    ids = list(dict.fromkeys(node_ids))
    if not ids:
        return
    with tenant_context(tenant):
        # A lost access count after a crash is harmless; not waiting for the WAL flush keeps reads fast.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
        MemoryNode.objects.filter(tenant=tenant, pk__in=ids).update(
            access_count=F("access_count") + 1, last_accessed_at=timezone.now()
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


__all__ = ["DEFAULT_KINDS", "ForgetRequest", "WriteResult", "message_append_batch", "node_access_record",
           "node_forget", "node_restore", "node_write_batch", "nodes_expire_due", "summary_append"]
