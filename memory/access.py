"""Who is calling and what they may reach: the one authorization rule of the API and the pages.

The edge (memory.api for Bearer keys and browser sessions, memory.pages for signed-in people)
resolves a `Principal` once — tenant, actor, write rights, pin, role — and turns it into the
`Viewer` of one request with `viewer_for`. The rule, written here and nowhere else:

- An API key acts for its tenant, narrowed by `readOnly`, `writeScopes` and an optional
  workspace pin (another workspace → 403 `forbidden`, the key's own limit).
- A person (browser session on the JSON API or the pages) reaches only the workspaces they
  belong to (everyone belongs to `default`) and acts only for themselves, unless their role is
  owner or admin. Any other workspace or person they name answers 404 `not_found` with the
  same words as an id that does not exist, so membership and usernames do not leak. Of a
  workspace's conversations they read and continue only their own (memory.selectors'
  `visible_messages`, `session_check`); another person's session answers 404 too.
- A workspace export holds other people's cards: persons need owner/admin (`may_export`);
  API keys export (pinned keys only their workspace). Imports need owner/admin or a writable key.

The decision is carried by the Viewer (`restrict_to_person`, `member_workspace_ids`,
`pinned_workspace_id`); the predicates that turn it into a yes or a no are
`memory.services.guards.require_workspace_reachable` / `require_acting_for`, which this edge
calls for what a request names and the write services call again for what an operation names,
so there is one copy of the rule and services apply it without importing this edge module.
This module may import tenants, memory.errors, memory.visibility, memory.selectors and
memory.transfer (for the download); nothing below the edge imports it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.http import FileResponse

from memory.errors import NotFound
from memory.selectors import session_check
from memory.services.guards import require_acting_for, require_workspace_reachable
from memory.services.quota import QuotaOwner
from memory.transfer.sqlite_export import workspace_export_sqlite
from memory.visibility import Viewer, owner_ref
from tenants.context import all_tenants_context, tenant_context
from tenants.models import (
    AGENT_WRITABLE_SCOPES,
    ApiKey,
    Membership,
    Role,
    Scope,
    Tenant,
    Workspace,
    WorkspaceMember,
)
from tenants.selectors import TenantObjectNotFound, member_resolve, workspace_resolve

SESSION_TENANT_KEY = "ekko_tenant_id"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of one request: an API key or a signed-in person in one tenant."""

    tenant: Tenant
    actor: str
    user: AbstractBaseUser | None
    api_key: ApiKey | None
    read_only: bool
    write_scopes: frozenset[str]
    pinned_workspace_id: int | None
    is_admin: bool
    restrict_to_person: bool


def principal_for_api_key(api_key: ApiKey) -> Principal:
    """Return the principal of an authenticated API key (global scope is never writable by agents)."""
    return Principal(
        tenant=api_key.tenant,
        actor=f"api_key:{api_key.prefix}",
        user=None,
        api_key=api_key,
        read_only=api_key.read_only,
        write_scopes=frozenset(s for s in api_key.write_scopes if s != Scope.GLOBAL),
        pinned_workspace_id=api_key.workspace_id,
        is_admin=False,
        restrict_to_person=False,
    )


def memberships_of(user: AbstractBaseUser) -> list[Membership]:
    """Return every membership of a signed-in person (the tenant switcher's list)."""
    # A person's tenants are what we are looking up, so this reads across tenants (docs/tenancy.md).
    with all_tenants_context():
        return list(
            Membership.all_tenants.select_related("tenant").filter(user=user).order_by("tenant__slug")
        )


def principal_for_user(
    user: AbstractBaseUser, session: Mapping[str, Any], memberships: list[Membership] | None = None
) -> Principal | None:
    """Return the principal of a signed-in person in the session's tenant, or None without a membership."""
    memberships = memberships_of(user) if memberships is None else memberships
    if not memberships:
        return None
    chosen = next((m for m in memberships if m.tenant_id == session.get(SESSION_TENANT_KEY)), memberships[0])
    admin = chosen.role in (Role.OWNER, Role.ADMIN)
    scopes = {*AGENT_WRITABLE_SCOPES} | ({Scope.GLOBAL} if admin else set())
    return Principal(
        tenant=chosen.tenant,
        actor=f"user:{user.get_username()}",
        user=user,
        api_key=None,
        read_only=chosen.role == Role.VIEWER,
        write_scopes=frozenset(str(s) for s in scopes),
        pinned_workspace_id=None,
        is_admin=admin,
        restrict_to_person=not admin,
    )


def _reachable_q(principal: Principal) -> Q:
    if principal.pinned_workspace_id is not None:
        return Q(pk=principal.pinned_workspace_id)
    if principal.restrict_to_person:
        joined = WorkspaceMember.objects.filter(tenant=principal.tenant, user=principal.user)
        # Everyone in the tenant belongs to its default workspace.
        return Q(slug=Workspace.DEFAULT_SLUG) | Q(pk__in=joined.values("workspace_id"))
    return Q()


def reachable_workspaces(principal: Principal) -> list[Workspace]:
    """Return the workspaces `principal` may name, oldest first (`GET workspaces`, the page switcher)."""
    with tenant_context(principal.tenant, savepoint=False):
        return list(
            Workspace.objects.filter(_reachable_q(principal), tenant=principal.tenant).order_by(
                "created_at", "id"
            )
        )


def viewer_for(
    principal: Principal,
    *,
    workspace_ref: str | int | None = None,
    session_id: str | None = None,
    user_ref: str | None = None,
    whole_tenant: bool = False,
) -> Viewer:
    """Return the Viewer of `principal` for the workspace, session and user a request names.

    An empty workspace means the key's pinned workspace, else `default`; an empty user means the
    person themselves (None for a key). Outside the rule: NotFound, or Forbidden for a key's pin.
    """
    member_ids: frozenset[int] = frozenset()
    if principal.restrict_to_person:
        with tenant_context(principal.tenant, savepoint=False):
            member_ids = frozenset(
                Workspace.objects.filter(_reachable_q(principal), tenant=principal.tenant).values_list(
                    "pk", flat=True
                )
            )
    if workspace_ref in (None, "") and principal.pinned_workspace_id is not None:
        workspace_ref = principal.pinned_workspace_id
    workspace = _workspace(principal.tenant, workspace_ref)
    viewer = Viewer(
        tenant=principal.tenant,
        workspace=workspace,
        session_id=session_id or None,
        user=principal.user,
        whole_tenant=whole_tenant,
        write_scopes=principal.write_scopes,
        read_only=principal.read_only,
        actor=principal.actor,
        pinned_workspace_id=principal.pinned_workspace_id,
        restrict_to_person=principal.restrict_to_person,
        member_workspace_ids=member_ids,
    )
    require_workspace_reachable(viewer, workspace.pk, ref=workspace_ref)
    session_check(viewer, viewer.session_id)
    if user_ref:
        user = person_named(viewer, user_ref)
        if user is not viewer.user:
            viewer = viewer.for_user(user)
    return viewer


def _workspace(tenant: Tenant, ref: str | int | None) -> Workspace:
    try:
        return workspace_resolve(tenant=tenant, ref=ref)
    except TenantObjectNotFound as exc:
        raise NotFound(str(exc)) from exc


def workspace_named(viewer: Viewer, ref: str | int | None) -> Workspace:
    """Return the workspace an operation names (the viewer's own when empty) if `viewer` may reach it."""
    if ref in (None, ""):
        return viewer.workspace
    workspace = _workspace(viewer.tenant, ref)
    require_workspace_reachable(viewer, workspace.pk, ref=ref)
    return workspace


def person_named(viewer: Viewer, username: str | None) -> AbstractBaseUser | None:
    """Return the member an operation names (the viewer's user when empty), if `viewer` may act for them."""
    if not username:
        return viewer.user
    if viewer.user is not None and username == viewer.user.get_username():
        return viewer.user
    require_acting_for(viewer, username=username)
    try:
        return member_resolve(tenant=viewer.tenant, username=username)
    except TenantObjectNotFound as exc:
        raise NotFound(str(exc)) from exc


def quota_owners(principal: Principal, *, workspace_ref: str | int | None = None,
                 user_ref: str | None = None) -> list[QuotaOwner]:
    """Return the scope owners whose quota `principal` may see, narrowed to a named workspace and/or user.

    Unnamed: the workspaces it may name (a pinned key's one, a person's own) and the people it may act
    for (a person: themselves; keys, owners and admins: every member). Outside the rule: as `viewer_for`.
    """
    named = workspace_ref not in (None, "") or bool(user_ref)
    viewer = viewer_for(principal, workspace_ref=workspace_ref, user_ref=user_ref)
    if named:
        workspaces = [viewer.workspace] if workspace_ref not in (None, "") else []
        people = [viewer.user] if user_ref else []
    else:
        workspaces = reachable_workspaces(principal)
        people = [principal.user] if principal.restrict_to_person else _members(principal.tenant)
    return quota_owners_of(workspaces, people)


def quota_owners_of(workspaces: Iterable[Workspace],
                    people: Iterable[AbstractBaseUser | None]) -> list[QuotaOwner]:
    """Return the workspace-scope owners of `workspaces`, then the user-scope owners of `people`."""
    def owner(scope: str, workspace_id: int, user_id: int | None) -> str:
        # A user-scope card belongs to its person in every workspace: the workspace is not in its owner.
        return owner_ref(scope=scope, workspace_id=workspace_id, session_id=None, user_id=user_id)

    return [
        *(QuotaOwner(scope=Scope.WORKSPACE, label=str(w.pk), owner_ref=owner(Scope.WORKSPACE, w.pk, None))
          for w in workspaces),
        *(QuotaOwner(scope=Scope.USER, label=p.get_username(), owner_ref=owner(Scope.USER, 0, p.pk))
          for p in people if p is not None),
    ]


def _members(tenant: Tenant) -> list[AbstractBaseUser]:
    with tenant_context(tenant, savepoint=False):
        memberships = Membership.objects.filter(tenant=tenant).select_related("user")
        return sorted((m.user for m in memberships), key=lambda user: user.get_username())


def operations_check(viewer: Viewer, operations: Iterable[Mapping[str, Any]]) -> None:
    """Refuse a write batch naming a workspace, person or session outside the rule, before it runs.

    A batch names the same few places in every operation: each distinct one is checked once, in order.
    """
    checked: set[tuple[Any, Any, Any]] = set()
    for operation in operations:
        node = operation.get("node") or {}
        named = (node.get("workspace_id"), node.get("user_id"), node.get("session_id"))
        if named in checked:
            continue
        checked.add(named)
        workspace = workspace_named(viewer, node.get("workspace_id"))
        person_named(viewer, node.get("user_id"))
        there = (
            viewer
            if workspace.pk == viewer.workspace.pk
            else dataclasses.replace(viewer, workspace=workspace)
        )
        session_check(there, node.get("session_id"))


def may_create_workspace(principal: Principal) -> bool:
    """Return whether `principal` may add a workspace (writable unpinned keys, owners, admins)."""
    if principal.user is not None:
        return principal.is_admin
    return not principal.read_only and principal.pinned_workspace_id is None


def may_export(principal: Principal) -> bool:
    """Return whether `principal` may download a workspace with everyone's cards (keys, owners, admins)."""
    return principal.user is None or principal.is_admin


def may_import(principal: Principal) -> bool:
    """Return whether `principal` may import a workspace file (writable keys, owners, admins)."""
    return not principal.read_only and (principal.user is None or principal.is_admin)


def sqlite_download(viewer: Viewer) -> FileResponse:
    """Export the viewer's workspace to a temporary file and stream it as an attachment (API and pages)."""
    tenant, workspace = viewer.tenant, viewer.workspace
    descriptor, path = tempfile.mkstemp(prefix="ekko-export-", suffix=".sqlite")
    os.close(descriptor)
    try:
        workspace_export_sqlite(tenant=tenant, workspace=workspace, path=path)
        handle = open(path, "rb")  # noqa: SIM115 - FileResponse closes it
    finally:
        os.unlink(path)  # the open handle keeps the data until the response is sent
    response = FileResponse(
        handle,
        as_attachment=True,
        filename=f"{tenant.slug}-{workspace.slug}.sqlite",
        content_type="application/vnd.sqlite3",
    )
    response["Cache-Control"] = "no-store"
    return response
