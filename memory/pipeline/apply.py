"""Applying an extraction plan: every item through the node write service, as the system actor.

`plan_apply` works in four steps. (1) Each plan item is read into a pending write — the run
decides whose memory it is (the author of its first cited user message, else the run's user),
whether the user stated it (the item quotes a cited user message verbatim), which known card it
targets and which slots it touches — or straight into a report entry (unreadable, `ignore`, a
target the session cannot reach). (2) The guardrails (`memory.pipeline.guardrails`, one read for
the whole plan) leave alone what people and agents settled: a slot an API key or a person wrote
since the first message the run reads is skipped (`already_written`); a slot they rejected within
`EKKO_REJECTION_DAYS` is skipped (`recent_rejection`) unless a cited user message restates it
explicitly (`memory.pipeline.gating.is_explicit`), which the entry records as
`override: recent_rejection`. (3) The remaining writes go to `memory.services.node_write_bulk` in
one call with `skip_invalid`, each as `system:extractor` on behalf of its author, so every rule of
the API's `memory/write` holds: canonical key, scope policy, confidence contract, sensitive content,
the same-content test (a restatement is a noop, new content supersedes the slot), revisions, audit.
A refused write is rolled back to its savepoint and reported as skipped with its code; the others
still apply. (4) Each outcome becomes the item's report entry (`applied | noop | skipped |
ignored`), secrets redacted. Called inside the run's transaction by `memory.pipeline.runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from memory.errors import MemoryServiceError
from memory.models import MemoryNode, NodeStatus, Role
from memory.pipeline.gating import is_explicit
from memory.pipeline.guardrails import Slot, slot_history
from memory.pipeline.plans import PlanItem, SourceMessage
from memory.pipeline.sentences import redact
from memory.rules.confidence import apply_confidence_contract
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import KindSpec, resolve_kind
from memory.rules.review import EXTRACTOR_ACTOR
from memory.rules.scope_policy import AGENT_WRITABLE_SCOPES
from memory.selectors import parse_node_id
from memory.services import BulkOutcome, NodeWrite, node_write_bulk
from memory.visibility import Viewer, accessible_nodes_q, owner_ref
from tenants.models import Scope, Tenant, Workspace

__all__ = ["SYSTEM_ACTOR", "RunInput", "plan_apply"]

SYSTEM_ACTOR = EXTRACTOR_ACTOR
SYSTEM_WRITE_SCOPES = frozenset(AGENT_WRITABLE_SCOPES)


@dataclass
class RunInput:
    """What a claimed run read before it writes anything: its messages, their authors, the kinds."""

    tenant: Tenant
    workspace: Workspace
    session_id: str
    run_user: AbstractBaseUser | None
    messages: list[SourceMessage]
    authors: dict[str, int | None]
    roles: dict[str, str]
    users: dict[int, AbstractBaseUser]
    kinds: dict[str, KindSpec]

    def viewer(self, user: AbstractBaseUser | None) -> Viewer:
        """Return the system viewer that writes the session's memories on behalf of `user`."""
        return Viewer(
            tenant=self.tenant,
            workspace=self.workspace,
            session_id=self.session_id,
            user=user,
            write_scopes=SYSTEM_WRITE_SCOPES,
            read_only=False,
            actor=SYSTEM_ACTOR,
        )

    def author(self, message_ids: Sequence[str]) -> AbstractBaseUser | None:
        """Return the author of the first cited user message, else the run's user."""
        for message_id in message_ids:
            user_id = self.authors.get(message_id)
            if self.roles.get(message_id) == Role.USER and user_id in self.users:
                return self.users[user_id]
        return self.run_user


def plan_apply(source: RunInput, items: Sequence[PlanItem]) -> list[dict[str, Any]]:
    """Apply `items` in one bulk write, each item in its own savepoint; return what happened to each."""
    entries: list[dict[str, Any]] = []
    pending: list[_PendingWrite] = []
    for index, item in enumerate(items):
        read = _read_item(source, index, item)
        if isinstance(read, _PendingWrite):
            pending.append(read)
            entries.append(read.entry)
        else:
            entries.append(read)
    pending = _leave_alone(source, pending)
    outcomes = node_write_bulk(writes=[write.write for write in pending], skip_invalid=True)
    for write, outcome in zip(pending, outcomes, strict=True):
        write.entry.update(_outcome_entry(write, outcome))
    return entries


@dataclass
class _PendingWrite:
    """A plan item ready for the write service: its report entry so far, its target, the write."""

    entry: dict[str, Any]
    target: MemoryNode | None
    write: NodeWrite
    notes: list[str]
    slots: list[Slot]
    restated: bool  # a cited user message says it explicitly (记住, 以后都, "from now on")


def _read_item(source: RunInput, index: int, item: PlanItem) -> _PendingWrite | dict[str, Any]:
    ids = [i for i in item.source_message_ids if i in source.authors]
    # Reasons and details may repeat what a model wrote: results never keep a secret.
    entry: dict[str, Any] = {
        "index": index,
        "operation": item.operation,
        "reason": redact(item.reason),
        "sourceMessageIds": ids,
    }
    if item.error:
        return _skipped(entry, "invalid", item.error)
    if item.operation == "ignore":
        return {**entry, "outcome": "ignored"}
    viewer = source.viewer(source.author(ids))
    node = dict(item.node)
    target = None
    if item.target_id:
        try:
            target = MemoryNode.objects.filter(
                accessible_nodes_q(viewer), pk=parse_node_id(item.target_id)
            ).first()
        except MemoryServiceError as error:
            return _skipped(entry, error.code, error.detail)
        if target is None:
            return _skipped(entry, "not_found", "The plan's targetId names no memory this session can reach.")
    entry["kind"] = node.get("kind") or (target.kind if target is not None else None)
    explicit = _stated_by_the_user(source, item, ids)
    notes = (
        []
        if explicit or not item.explicit_user_intent
        else ["explicit intent not backed by a verbatim quote of the user; treated as inferred"]
    )
    if viewer.user is None and item.operation in ("create", "supersede"):
        try:
            if _requested_scope(source, node, target) == Scope.USER:
                node["scope"] = Scope.SESSION
                notes.append("no user is known for these messages; kept in session scope")
        except SchemaError as error:
            return _skipped(entry, error.code, error.detail)
    # A supersede without a target names a slot, not a card: a create settles that slot.
    operation = "create" if item.operation == "supersede" and target is None else item.operation
    write = NodeWrite(
        viewer=viewer,
        operations=[
            {
                "operation": operation,
                "target_id": str(target.pk) if target is not None else None,
                "expected_revision": target.revision if target is not None else None,
                "node": {**node, "value_json_given": "value_json" in node},
                "reason": item.reason,
            }
        ],
        explicit_user_intent=explicit,
        source_message_ids=ids,
    )
    texts = [m.content for m in source.messages if m.message_id in ids and m.role == Role.USER]
    return _PendingWrite(entry=entry, target=target, write=write, notes=notes,
                         slots=_slots(source, viewer.user, node, target, operation),
                         restated=any(is_explicit(text) for text in texts))


def _slots(source: RunInput, user: AbstractBaseUser | None, node: dict[str, Any], target: MemoryNode | None,
           operation: str) -> list[Slot]:
    """Return the slots a write touches: the target's key and, for a create or supersede, the new key."""
    keys = [(target.kind, target.key)] if target is not None else []
    kind = node.get("kind") or (target.kind if target is not None else None)
    if operation in ("create", "supersede") and kind:
        try:
            spec = resolve_kind(kind, source.kinds)
            item_key = node.get("item_key")
            if item_key is None and target is not None and target.kind == spec.name:
                item_key = target.item_key
            keys.append((spec.name, canonical_key(spec, item_key)))
        except SchemaError:
            pass  # the write service refuses the item with the same reason
    workspace_id = source.workspace.pk
    owners = {
        owner_ref(scope=Scope.SESSION, workspace_id=workspace_id, session_id=source.session_id, user_id=None),
        owner_ref(scope=Scope.WORKSPACE, workspace_id=workspace_id, session_id=None, user_id=None),
    }
    if user is not None:
        owners.add(owner_ref(scope=Scope.USER, workspace_id=workspace_id, session_id=None, user_id=user.pk))
    if target is not None:
        owners.add(target.owner_ref)
    return [Slot(kind=kind, key=key, owners=frozenset(owners)) for kind, key in dict.fromkeys(keys)]


def _leave_alone(source: RunInput, pending: list[_PendingWrite]) -> list[_PendingWrite]:
    """Skip the writes into slots people and agents settled (seed 001); return the writes that go ahead."""
    if not pending:
        return pending
    since = min((m.created_at for m in source.messages if m.created_at is not None), default=None)
    history = slot_history(tenant=source.tenant, slots=[slot for write in pending for slot in write.slots],
                           since=since, now=timezone.now())
    kept = []
    for write in pending:
        verdict = history.verdict(write.slots, since=since)
        if verdict is None:
            kept.append(write)
        elif verdict.code == "recent_rejection" and write.restated:
            write.entry.update(override="recent_rejection", by=verdict.actor)
            write.notes.append(f"{verdict.what}; the user restated it explicitly, so it is written again")
            kept.append(write)
        else:
            write.entry.update(_skipped({"by": verdict.actor}, verdict.code, verdict.detail))
    return kept


def _stated_by_the_user(source: RunInput, item: PlanItem, ids: list[str]) -> bool:
    """The user stated it only if the item quotes a cited user message verbatim (5+ characters)."""
    if not item.explicit_user_intent:
        return False
    texts = [m.content for m in source.messages if m.message_id in ids and m.role == Role.USER]
    _, downgraded = apply_confidence_contract(0.9, item.node.get("source_quote"), texts)
    return not downgraded


def _requested_scope(source: RunInput, node: dict[str, Any], target: MemoryNode | None) -> str | None:
    if node.get("scope"):
        return node["scope"]
    if target is not None:
        return target.scope
    return resolve_kind(node["kind"], source.kinds).default_scope if node.get("kind") else None


def _outcome_entry(pending: _PendingWrite, outcome: BulkOutcome) -> dict[str, Any]:
    operation = pending.write.operations[0]["operation"]
    if outcome.error is not None:
        target = pending.target
        if operation == "expire" and target is not None and target.status == NodeStatus.EXPIRED:
            # The service refuses to change an expired card; the plan asked for exactly that state.
            return _target_noop(target, "already expired")
        return _skipped({}, outcome.error.code, outcome.error.detail)
    [result] = outcome.results
    written = result.node
    entry: dict[str, Any] = {
        "outcome": "noop" if result.action == "noop" else "applied",
        "action": result.action,
        "nodeId": str(written.pk),
        "revision": written.revision,
        "key": written.key,
        "scope": written.scope,
        "title": written.title,
        "appliedConfidence": result.applied_confidence,
        "notes": pending.notes + result.notes,
    }
    if result.action == "noop":
        entry["detail"] = "already up to date" if operation == "update" else "already remembered"
    return entry


def _target_noop(target: MemoryNode, detail: str) -> dict[str, Any]:
    return {
        "outcome": "noop",
        "action": "noop",
        "nodeId": str(target.pk),
        "revision": target.revision,
        "detail": detail,
    }


def _skipped(entry: dict[str, Any], code: str, detail: str) -> dict[str, Any]:
    return {**entry, "outcome": "skipped", "code": code, "detail": redact(detail)}
