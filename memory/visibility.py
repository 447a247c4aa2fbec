"""Who sees which memory: the one place that turns a viewer into a node filter.

A viewer is the resolved caller of one request (API key or browser user) plus the
conversation it speaks for: a workspace, optionally a session and a user. Visible nodes are
session-scope nodes of that session (in that workspace), workspace-scope nodes of that
workspace, user-scope nodes of that user (in any workspace: they follow the person), and
the tenant's global nodes. Admin browser users may see the whole tenant (`whole_tenant`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q

from tenants.models import Scope, Tenant, Workspace


@dataclass(frozen=True)
class Viewer:
    tenant: Tenant
    workspace: Workspace
    session_id: str | None = None
    user: AbstractBaseUser | None = None
    whole_tenant: bool = False
    # Which scopes the caller may write; reads are governed by visibility alone.
    write_scopes: frozenset[str] = field(default_factory=frozenset)
    read_only: bool = True
    actor: str = "system"
    # An API key pinned to one workspace reaches only that workspace (and tenant-global nodes).
    pinned_workspace_id: int | None = None
    # Browser members and viewers reach only their own memories and their workspaces' (not admins).
    restrict_to_person: bool = False
    member_workspace_ids: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.workspace.tenant_id != self.tenant.pk:
            raise ValueError("The viewer's workspace belongs to another tenant.")

    def for_user(self, user: AbstractBaseUser | None) -> Viewer:
        """Return this viewer speaking for `user` (someone the rule lets it act for)."""
        return dataclasses.replace(self, user=user)


def visible_nodes_q(viewer: Viewer, scopes: list[str] | None = None) -> Q:
    """Return the filter for nodes `viewer` may read, narrowed to `scopes` when given."""
    wanted = set(scopes or Scope.values)
    if viewer.whole_tenant:
        return Q(tenant_id=viewer.tenant.pk, scope__in=sorted(wanted))
    parts = Q(pk__in=[])
    if Scope.SESSION in wanted and viewer.session_id:
        parts |= Q(scope=Scope.SESSION, workspace_id=viewer.workspace.pk, session_id=viewer.session_id)
    if Scope.WORKSPACE in wanted:
        parts |= Q(scope=Scope.WORKSPACE, workspace_id=viewer.workspace.pk)
    if Scope.USER in wanted and viewer.user is not None:
        parts |= Q(scope=Scope.USER, user_id=viewer.user.pk)
    if Scope.GLOBAL in wanted:
        parts |= Q(scope=Scope.GLOBAL)
    return Q(tenant_id=viewer.tenant.pk) & parts


def accessible_nodes_q(viewer: Viewer) -> Q:
    """Return the filter for nodes `viewer` may open by id (any status): the tenant, narrowed by pin or person."""
    tenant = Q(tenant_id=viewer.tenant.pk)
    if viewer.restrict_to_person:
        user_id = viewer.user.pk if viewer.user is not None else None
        return tenant & (
            Q(scope=Scope.USER, user_id=user_id)
            | Q(scope__in=[Scope.WORKSPACE, Scope.SESSION], workspace_id__in=sorted(viewer.member_workspace_ids))
            | Q(scope=Scope.SESSION, user_id=user_id)
            | Q(scope=Scope.GLOBAL)
        )
    if viewer.pinned_workspace_id is not None:
        return tenant & (Q(workspace_id=viewer.pinned_workspace_id) | Q(scope=Scope.GLOBAL))
    return tenant


def owner_ref(*, scope: str, workspace_id: int, session_id: str | None, user_id: int | None) -> str:
    """Return the slot owner for a node: who the memory belongs to within its scope."""
    if scope == Scope.SESSION:
        return f"session:{workspace_id}:{session_id}"
    if scope == Scope.WORKSPACE:
        return f"workspace:{workspace_id}"
    if scope == Scope.USER:
        return f"user:{user_id}"
    return "global"
