"""Applying an extraction plan: each item through the node write service, as the system actor.

`plan_apply` writes a plan's items one by one, each in its own savepoint, through
`memory.services.nodes.node_write_batch` as `system:extractor`, so the same rules and the same
audit apply as for the API. An item that breaks a rule (sensitive content, a bad kind, a stale
target) is skipped with its code and reason; the others still apply. Items that restate what is
already remembered are no-ops. Each item's outcome is reported (`applied | noop | skipped |
ignored`) with secrets redacted. `RunInput` is what the run read: the messages, their authors and
roles, the tenant's kinds; it decides whose memory an item is (the author of its first cited user
message) and whether the user stated it (the item quotes a cited user message verbatim). Called
inside the run's transaction by `memory.pipeline.runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from memory.errors import MemoryServiceError, NotFound
from memory.models import MemoryNode, NodeStatus, Role
from memory.pipeline.plans import PlanItem, SourceMessage
from memory.pipeline.sentences import redact
from memory.rules.confidence import apply_confidence_contract
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import KindSpec, resolve_kind
from memory.rules.scope_policy import AGENT_WRITABLE_SCOPES
from memory.rules.values import normalize_value
from memory.selectors import parse_node_id
from memory.services.nodes import node_write_batch
from memory.visibility import Viewer, accessible_nodes_q, visible_nodes_q
from tenants.models import Scope, Tenant, Workspace

__all__ = ["SYSTEM_ACTOR", "RunInput", "plan_apply"]

SYSTEM_ACTOR = "system:extractor"
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
    """Apply `items` in order, each in its own savepoint; return what happened to each."""
    applier = _Applier(source)
    return [applier.apply(index, item) for index, item in enumerate(items)]


class _Applier:
    """Apply plan items one by one, each in its own savepoint, recording what happened to each."""

    def __init__(self, source: RunInput) -> None:
        self.source = source

    def _explicit(self, item: PlanItem, ids: list[str]) -> bool:
        """The user stated it only if the item quotes a cited user message verbatim (5+ characters)."""
        if not item.explicit_user_intent:
            return False
        texts = [m.content for m in self.source.messages if m.message_id in ids and m.role == Role.USER]
        _, downgraded = apply_confidence_contract(0.9, item.node.get("source_quote"), texts)
        return not downgraded

    def apply(self, index: int, item: PlanItem) -> dict[str, Any]:
        ids = [i for i in item.source_message_ids if i in self.source.authors]
        # Reasons and details may repeat what a model wrote: results never keep a secret.
        base: dict[str, Any] = {
            "index": index,
            "operation": item.operation,
            "reason": redact(item.reason),
            "sourceMessageIds": ids,
        }
        if item.error:
            return {**base, "outcome": "skipped", "code": "invalid", "detail": redact(item.error)}
        if item.operation == "ignore":
            return {**base, "outcome": "ignored"}
        try:
            return self._write(base, item, ids)
        except SchemaError as error:
            return {**base, "outcome": "skipped", "code": error.code, "detail": redact(error.detail)}
        except MemoryServiceError as error:
            return {**base, "outcome": "skipped", "code": error.code, "detail": redact(error.detail)}

    def _write(self, base: dict[str, Any], item: PlanItem, ids: list[str]) -> dict[str, Any]:
        viewer = self.source.viewer(self.source.author(ids))
        explicit = self._explicit(item, ids)
        notes = (
            []
            if explicit or not item.explicit_user_intent
            else ["explicit intent not backed by a verbatim quote of the user; treated as inferred"]
        )
        node = dict(item.node)
        operation = item.operation
        target = None
        if item.target_id:
            target = MemoryNode.objects.filter(
                accessible_nodes_q(viewer), pk=parse_node_id(item.target_id)
            ).first()
            if target is None:
                raise NotFound("The plan's targetId names no memory this session can reach.")
        kind_name = node.get("kind") or (target.kind if target is not None else None)
        base["kind"] = kind_name
        if operation in ("create", "supersede") and kind_name:
            spec = resolve_kind(kind_name, self.source.kinds)
            item_key = node.get("item_key") or (target.item_key if target is not None else None)
            key = canonical_key(spec, item_key)
            base["key"] = key
            scope = node.get("scope") or (target.scope if target is not None else spec.default_scope)
            if scope == Scope.USER and viewer.user is None:
                scope = node["scope"] = Scope.SESSION
                notes.append("no user is known for these messages; kept in session scope")
            needs_intent = scope == Scope.USER or (
                scope != Scope.SESSION and spec.requires_explicit_user_intent
            )
            effective = Scope.SESSION if needs_intent and not explicit else scope
            same = MemoryNode.objects.filter(
                visible_nodes_q(viewer), status=NodeStatus.ACTIVE, key=key, scope=effective
            ).first()
            if same is not None and _same_memory(spec, node, same):
                return {
                    **base,
                    "outcome": "noop",
                    "action": "noop",
                    "nodeId": str(same.pk),
                    "revision": same.revision,
                    "scope": same.scope,
                    "detail": "already remembered",
                }
            if operation == "supersede" and target is None:
                if same is None:
                    operation = "create"
                else:
                    target = same
        if operation == "update" and target is not None and _unchanged(target, node, self.source.kinds):
            return {
                **base,
                "outcome": "noop",
                "action": "noop",
                "nodeId": str(target.pk),
                "revision": target.revision,
                "detail": "already up to date",
            }
        if target is not None and target.status != NodeStatus.ACTIVE:
            if operation == "expire" and target.status == NodeStatus.EXPIRED:
                return {
                    **base,
                    "outcome": "noop",
                    "action": "noop",
                    "nodeId": str(target.pk),
                    "revision": target.revision,
                    "detail": "already expired",
                }
            return {
                **base,
                "outcome": "skipped",
                "code": "invalid",
                "nodeId": str(target.pk),
                "detail": f"the target is {target.status} now (applied before, or changed since)",
            }
        operation_data = {
            "operation": operation,
            "target_id": str(target.pk) if target is not None else None,
            "expected_revision": target.revision if target is not None else None,
            "node": {**node, "value_json_given": "value_json" in node},
            "reason": item.reason,
        }
        with transaction.atomic():
            [result] = node_write_batch(
                viewer=viewer,
                operations=[operation_data],
                explicit_user_intent=explicit,
                source_message_ids=ids,
            )
        written = result.node
        return {
            **base,
            "outcome": "noop" if result.action == "noop" else "applied",
            "action": result.action,
            "nodeId": str(written.pk),
            "revision": written.revision,
            "key": written.key,
            "scope": written.scope,
            "title": written.title,
            "appliedConfidence": result.applied_confidence,
            "notes": notes + result.notes,
        }


def _same_memory(spec: KindSpec, node: dict[str, Any], existing: MemoryNode) -> bool:
    if "value_json" in node and node["value_json"] is not None:
        return normalize_value(spec, node["value_json"]) == existing.value_json
    return bool(node.get("title")) and node.get("title") == existing.title


def _unchanged(target: MemoryNode, node: dict[str, Any], kinds: dict[str, KindSpec]) -> bool:
    spec = resolve_kind(target.kind, kinds)
    for name, value in node.items():
        if name in ("source_quote", "kind", "confidence"):
            continue
        if name == "value_json":
            value = normalize_value(spec, value)
        if not hasattr(target, name) or getattr(target, name) != value:
            return False
    return True
