"""Card drafts: what a write knows (viewer, intent, evidence, kinds, clock) and the validation that turns
an operation's `node` into an unsaved `MemoryNode` under DESIGN rules 4–7.

Both write paths use it: the one-by-one operations of `memory.services.nodes` and the set-based
creates of `memory.services.node_creates`; neither touches the database here except to resolve
references (workspaces, members, cited messages), each looked up once per write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from memory.errors import Invalid, NotFound, SensitiveContent, from_schema_error
from memory.models import MemoryMessage, MemoryNode, NodeStatus
from memory.rules.confidence import apply_confidence_contract
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key
from memory.rules.journal import journal_entry, journal_item_key
from memory.rules.kinds import JOURNAL_KIND, KindSpec, resolve_kind
from memory.rules.node_text import node_search_text
from memory.rules.review import review_state_for
from memory.rules.scope_policy import validate_scope_for_write
from memory.rules.sensitive import find_sensitive_node_content
from memory.rules.values import normalize_value, validate_value
from memory.services.guards import require_acting_for, require_workspace_reachable, require_write_scope
from memory.visibility import Viewer, owner_ref
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
class Evidence:
    message_ids: list[str]
    session_id: str | None
    texts: list[str]


def evidence_load(viewer: Viewer, source_message_ids: Sequence[str]) -> Evidence:
    ids = list(dict.fromkeys(source_message_ids))
    if not ids:
        return Evidence([], None, [])
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
    return Evidence(ids, rows[0][1], [row[2] for row in rows])


class WriteContext:
    """What one write knows: the viewer, its intent and evidence, the tenant's kinds, the clock and the
    audit-chain lock."""

    def __init__(self, viewer: Viewer, explicit_user_intent: bool, evidence: Evidence,
                 extra_kinds: Mapping[str, KindSpec], chain_lock: Callable[[], None]) -> None:
        self.viewer = viewer
        # Takes the tenant's audit-chain lock (once): called before the write locks or writes any row.
        self.chain_lock = chain_lock
        self.explicit = explicit_user_intent
        self.evidence = evidence
        self.extra_kinds = extra_kinds
        self.now = timezone.now()
        # A batch names the same workspace and member in every operation: resolve each once.
        self._workspaces: dict[Any, Workspace] = {}
        self._users: dict[str, AbstractBaseUser] = {}

    def kind(self, name: str) -> KindSpec:
        try:
            return resolve_kind(name, self.extra_kinds)
        except SchemaError as exc:
            raise from_schema_error(exc) from exc

    def workspace(self, ref: Any) -> Workspace:
        if ref in (None, ""):
            return self.viewer.workspace
        if ref not in self._workspaces:
            try:
                self._workspaces[ref] = workspace_resolve(tenant=self.viewer.tenant, ref=ref)
            except TenantObjectNotFound as exc:
                raise NotFound(str(exc)) from exc
        return self._workspaces[ref]

    def user(self, username: str | None) -> AbstractBaseUser | None:
        if not username:
            return self.viewer.user
        # Checked before the lookup: an unknown member and someone else answer alike.
        require_acting_for(self.viewer, username=username)
        if username not in self._users:
            try:
                self._users[username] = member_resolve(tenant=self.viewer.tenant, username=username)
            except TenantObjectNotFound as exc:
                raise NotFound(str(exc)) from exc
        return self._users[username]


def search_text_of(node: MemoryNode) -> str:
    return node_search_text(title=node.title, content=node.content, value_json=node.value_json,
                            item_key=node.item_key, tags=node.tags, entities=node.entities)


def refuse_sensitive(draft: dict[str, Any]) -> None:
    reason = find_sensitive_node_content(
        title=draft.get("title"), content=draft.get("content"), item_key=draft.get("item_key"),
        value_json=draft.get("value_json"), tags=draft.get("tags") or (),
        entities=draft.get("entities") or ())
    if reason:
        raise SensitiveContent(
            f"Refused: the memory carries a secret or personal identifier ({reason}). Never store it.",
            errors={"node": [reason]},
        )


def node_prepare(ctx: WriteContext, draft: dict[str, Any], *,
                  base: MemoryNode | None) -> tuple[MemoryNode, WriteResult]:
    """Validate and normalise a create/supersede draft into an unsaved node (DESIGN rules 4–7)."""
    kind_name = draft.get("kind") or (base.kind if base is not None else None)
    if not kind_name:
        raise Invalid("create needs a `kind` from the catalogue.", errors={"node.kind": ["required"]})
    spec = ctx.kind(kind_name)
    item_key = draft.get("item_key") if draft.get("item_key") is not None else (
        base.item_key if base is not None and base.kind == spec.name else None)
    journal = spec.name == JOURNAL_KIND
    try:
        if journal:
            item_key = journal_item_key(item_key, now=ctx.now, zone_name=settings.EKKO_JOURNAL_TIME_ZONE)
        key = canonical_key(spec, item_key)
        value = normalize_value(spec, draft["value_json"]) if draft.get("value_json_given") else (
            base.value_json if base is not None else None)
        if journal:
            value = journal_entry(value, draft.get("content"))
        validate_value(spec, value)
        requested_scope = draft.get("scope") or (base.scope if base is not None else spec.default_scope)
        require_write_scope(ctx.viewer, requested_scope)
        scope = validate_scope_for_write(
            spec=spec, scope=requested_scope, explicit_user_intent=ctx.explicit,
            expires_at_set=draft.get("expires_at") is not None, allowed_scopes=ctx.viewer.write_scopes,
        )
    except SchemaError as exc:
        raise from_schema_error(exc) from exc
    if journal and scope != Scope.USER:
        raise Invalid("A journal entry lives in its writer's user scope: write it with scope user "
                      "(the default) and explicitUserIntent: true.",
                      errors={"node.scope": [f"journal in {scope} scope"]})
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
    refuse_sensitive({**draft, "item_key": item_key, "value_json": value})
    default_confidence, default_importance = EXPLICIT_DEFAULTS if ctx.explicit else INFERRED_DEFAULTS
    requested_confidence = draft.get("confidence", default_confidence)
    confidence, downgraded = apply_confidence_contract(
        requested_confidence, draft.get("source_quote"), ctx.evidence.texts)
    title = draft.get("title") or (base.title if base is not None else "") or (item_key if journal else "")
    content = value if journal else draft.get("content") or (base.content if base is not None else "")
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
        review_state=review_state_for(actor=ctx.viewer.actor, operation="create"),
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
