"""The base of every API view: authenticate, resolve the principal and tenant once, check limits."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from rest_framework import permissions
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.views import APIView

from memory.api.auth import (
    ApiKeyAuthentication,
    KeyRateThrottle,
    Principal,
    principal_for_api_key,
    principal_for_user,
)
from memory.errors import Forbidden, NotFound, TooLarge
from memory.models import MemoryNode
from memory.presenters import node_to_api
from memory.selectors import superseded_by_ids
from memory.visibility import Viewer
from tenants.context import bind_tenant, tenant_context
from tenants.models import ApiKey, Workspace, WorkspaceMember
from tenants.selectors import TenantObjectNotFound, member_resolve, workspace_resolve


class IsTenantCaller(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:  # noqa: ANN001
        return isinstance(request.auth, ApiKey) or bool(request.user and request.user.is_authenticated)


class MemoryApiView(APIView):
    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [IsTenantCaller]
    throttle_classes = [KeyRateThrottle]
    principal: Principal

    @property
    def max_body_bytes(self) -> int:
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    def initial(self, request: Request, *args, **kwargs) -> None:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise TooLarge(f"The request body is over the {self.max_body_bytes}-byte limit.")
        super().initial(request, *args, **kwargs)
        if isinstance(request.auth, ApiKey):
            principal = principal_for_api_key(request.auth)
        else:
            principal = principal_for_user(request.user, request.session)
            if principal is None:
                raise Forbidden("You are not a member of any tenant.")
        self.principal = principal
        if connection.in_atomic_block:
            bind_tenant(principal.tenant)

    def viewer(self, *, workspace_ref: str | int | None = None, session_id: str | None = None,
               user_ref: str | None = None) -> Viewer:
        """Return the Viewer for the workspace, session and user a request names."""
        return viewer_for_principal(self.principal, workspace_ref=workspace_ref, session_id=session_id,
                                    user_ref=user_ref)

    def nodes_json(self, nodes: list[MemoryNode]) -> list[dict]:
        """Render cards with their successor ids in one extra query."""
        successors = superseded_by_ids(tenant=self.principal.tenant, node_ids=[n.pk for n in nodes])
        return [node_to_api(node, superseded_by_id=successors.get(node.pk)) for node in nodes]


def _workspace(principal: Principal, ref: str | int | None) -> Workspace:
    pinned = principal.pinned_workspace_id
    if ref in (None, "") and pinned is not None:
        ref = pinned
    try:
        workspace = workspace_resolve(tenant=principal.tenant, ref=ref)
    except TenantObjectNotFound as exc:
        raise NotFound(str(exc)) from exc
    if pinned is not None and workspace.pk != pinned:
        raise Forbidden("This API key is pinned to another workspace.")
    return workspace


def _member(principal: Principal, username: str | None) -> AbstractBaseUser | None:
    if not username:
        return principal.user
    if principal.user is not None and not principal.is_admin and username != principal.user.get_username():
        raise Forbidden("You may only act for yourself.")
    try:
        return member_resolve(tenant=principal.tenant, username=username)
    except TenantObjectNotFound as exc:
        raise NotFound(str(exc)) from exc


def viewer_for_principal(principal: Principal, *, workspace_ref: str | int | None = None,
                         session_id: str | None = None, user_ref: str | None = None) -> Viewer:
    """Return the Viewer of `principal` for a workspace, session and user (the API's and the pages' rule)."""
    workspace = _workspace(principal, workspace_ref)
    user = _member(principal, user_ref)
    member_workspaces: frozenset[int] = frozenset()
    if principal.restrict_to_person and principal.user is not None:
        with tenant_context(principal.tenant):
            joined = WorkspaceMember.objects.filter(tenant=principal.tenant, user=principal.user)
            # Everyone in the tenant belongs to its default workspace.
            member_workspaces = frozenset(joined.values_list("workspace_id", flat=True)) | {
                workspace_resolve(tenant=principal.tenant, ref=None).pk}
    return Viewer(
        tenant=principal.tenant, workspace=workspace, session_id=session_id or None, user=user,
        write_scopes=principal.write_scopes, read_only=principal.read_only, actor=principal.actor,
        pinned_workspace_id=principal.pinned_workspace_id, restrict_to_person=principal.restrict_to_person,
        member_workspace_ids=member_workspaces,
    )
