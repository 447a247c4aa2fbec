"""Factories for memory rows (nodes, messages, summaries) and viewers; each requires tenant= and workspace=.

They write rows directly with the ORM inside `tenant_context`, filling `search_text` and `owner_ref`
exactly as the write service does, so retrieval tests do not depend on the write path.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from memory.models import MemoryMessage, MemoryNode, MemorySummary
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import DEFAULT_KINDS
from memory.rules.text import count_tokens, segment_for_search
from memory.transfer.import_rules import importer_viewer
from memory.transfer.report import ImportReport
from memory.transfer.sqlite_import import workspace_import_sqlite
from memory.visibility import Viewer, owner_ref
from tenants.context import tenant_context
from tenants.models import Role, Tenant, Workspace
from tenants.services import membership_set, workspace_create

_sequence = itertools.count(1)


def default_workspace(tenant: Tenant) -> Workspace:
    with tenant_context(tenant):
        return Workspace.objects.get(tenant=tenant, slug=Workspace.DEFAULT_SLUG)


def make_workspace(*, tenant: Tenant, name: str) -> Workspace:
    return workspace_create(tenant=tenant, name=name)


def make_member(*, tenant: Tenant, username: str, role: str = Role.MEMBER) -> AbstractBaseUser:
    user, _ = get_user_model().objects.get_or_create(username=username)
    membership_set(tenant=tenant, user=user, role=role)
    return user


def make_viewer(
    *,
    tenant: Tenant,
    workspace: Workspace,
    session_id: str | None = "s1",
    user: AbstractBaseUser | None = None,
    whole_tenant: bool = False,
) -> Viewer:
    return Viewer(
        tenant=tenant, workspace=workspace, session_id=session_id, user=user, whole_tenant=whole_tenant
    )


def make_node(
    *,
    tenant: Tenant,
    workspace: Workspace,
    title: str,
    content: str = "",
    kind: str = "food_avoidance",
    item_key: str | None = None,
    scope: str = "user",
    user: AbstractBaseUser | None = None,
    session_id: str | None = None,
    value_json: Any = None,
    status: str = "active",
    confidence: float = 0.9,
    importance: float = 0.6,
    explicit_user_intent: bool = True,
    tags: list[str] | None = None,
    entities: list[str] | None = None,
    updated_at: datetime | None = None,
    expires_at: datetime | None = None,
    embedding: list[float] | None = None,
    key: str | None = None,
    type: str | None = None,
    domain: str | None = None,
    category_path: list[str] | None = None,
    review_state: str = "reviewed",
) -> MemoryNode:
    """Create a card of `kind` (the default catalogue fills key, type, domain and category path)."""
    spec = DEFAULT_KINDS[kind]
    if spec.itemized and item_key is None and key is None:
        item_key = f"item{next(_sequence)}"
    if scope == "user" and user is None:
        raise ValueError("A user-scope node needs user=; pass the member it belongs to.")
    if scope == "session" and session_id is None:
        raise ValueError("A session-scope node needs session_id=.")
    path = list(category_path if category_path is not None else spec.category_path)
    updated = updated_at or timezone.now()
    tags, entities = tags or [], entities or []
    with tenant_context(tenant):
        return MemoryNode.objects.create(
            tenant=tenant,
            workspace=workspace,
            user=user if scope == "user" else None,
            session_id=session_id if scope == "session" else None,
            scope=scope,
            owner_ref=owner_ref(
                scope=scope,
                workspace_id=workspace.pk,
                session_id=session_id,
                user_id=user.pk if user is not None else None,
            ),
            kind=kind,
            item_key=item_key,
            key=key or canonical_key(spec, item_key),
            domain=domain or spec.domain,
            category_path=path,
            category_path_text="/".join(path),
            type=type or spec.type,
            value_json=value_json,
            title=title,
            content=content,
            status=status,
            review_state=review_state,
            confidence=confidence,
            importance=importance,
            tags=tags,
            entities=entities,
            explicit_user_intent=explicit_user_intent,
            created_at=updated,
            updated_at=updated,
            expires_at=expires_at,
            search_text=segment_for_search(title, content, " ".join(tags), " ".join(entities)),
            embedding=embedding,
        )


def make_message(
    *,
    tenant: Tenant,
    workspace: Workspace,
    session_id: str,
    content: str,
    role: str = "user",
    channel: str = "main",
    created_at: datetime | None = None,
    message_id: str | None = None,
    embedding: list[float] | None = None,
) -> MemoryMessage:
    number = next(_sequence)
    with tenant_context(tenant):
        return MemoryMessage.objects.create(
            tenant=tenant,
            workspace=workspace,
            message_id=message_id or f"m{number}",
            session_id=session_id,
            role=role,
            content=content,
            channel=channel,
            token_count=count_tokens(content),
            created_at=created_at or timezone.now() + timedelta(microseconds=number),
            search_text=segment_for_search(content),
            embedding=embedding,
        )


def make_summary(
    *,
    tenant: Tenant,
    workspace: Workspace,
    session_id: str,
    summary: str,
    parent: MemorySummary | None = None,
    current_goal: str | None = None,
    pending_work: list[str] | None = None,
    created_at: datetime | None = None,
) -> MemorySummary:
    with tenant_context(tenant):
        return MemorySummary.objects.create(
            tenant=tenant,
            workspace=workspace,
            session_id=session_id,
            parent_summary=parent,
            from_message_id="m0",
            to_message_id="m1",
            summary=summary,
            current_goal=current_goal,
            pending_work=pending_work or [],
            created_at=created_at or timezone.now() + timedelta(microseconds=next(_sequence)),
        )


def operator_import(*, tenant: Tenant, workspace: Workspace | int, path: Any, actor: str = "system",
                    **options: Any) -> ImportReport:
    """Import an SQLite file as an operator would (`manage.py import_workspace`): every agent scope."""
    # The operator speaks from the tenant's default workspace; the import itself resolves (and may
    # refuse) `workspace`, so a foreign one still answers not_found.
    viewer = importer_viewer(tenant=tenant, workspace=default_workspace(tenant), actor=actor)
    return workspace_import_sqlite(tenant=tenant, workspace=workspace, path=path, viewer=viewer, actor=actor,
                                   **options)
