"""The base of every API view: authenticate, resolve the principal and tenant once, check limits.

`MemoryApiView.viewer` is memory.access's `viewer_for`: the same rule the pages use.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework import permissions
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.views import APIView

from memory.access import Principal, principal_for_api_key, principal_for_user, viewer_for
from memory.api.auth import ApiKeyAuthentication, KeyRateThrottle
from memory.api.reads import ReadAuditMixin
from memory.errors import Forbidden, TooLarge
from memory.models import MemoryNode
from memory.presenters import node_to_api
from memory.selectors import superseded_by_ids
from memory.visibility import Viewer
from tenants.context import bind_tenant
from tenants.models import ApiKey


class IsTenantCaller(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:  # noqa: ANN001
        return isinstance(request.auth, ApiKey) or bool(request.user and request.user.is_authenticated)


class MemoryApiView(ReadAuditMixin, APIView):
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
        """Return the Viewer for the workspace, session and user a request names (404 outside the rule)."""
        return viewer_for(self.principal, workspace_ref=workspace_ref, session_id=session_id,
                          user_ref=user_ref)

    def nodes_json(self, nodes: list[MemoryNode]) -> list[dict]:
        """Render cards with their successor ids and owners' usernames."""
        return self.nodes_json_groups(nodes)[0]

    def nodes_json_groups(self, *groups: list[MemoryNode]) -> list[list[dict]]:
        """Render several lists of cards with one query for their successors and one for their owners."""
        nodes = [node for group in groups for node in group]
        successors = superseded_by_ids(tenant=self.principal.tenant, node_ids=[n.pk for n in nodes])
        usernames = owner_usernames(nodes)
        self.note_reads(nodes)
        return [[node_to_api(node, superseded_by_id=successors.get(node.pk),
                             username=usernames.get(node.user_id)) for node in group] for group in groups]


def owner_usernames(nodes: list[MemoryNode]) -> dict[int, str]:
    """Return {user id: username} of the cards' owners, in one query for those not loaded with the card."""
    usernames = {node.user_id: node.user.get_username() for node in nodes
                 if node.user_id is not None and MemoryNode.user.is_cached(node)}
    missing = {node.user_id for node in nodes if node.user_id is not None} - set(usernames)
    if missing:
        user_model = get_user_model()
        found = user_model.objects.filter(pk__in=missing).values_list("pk", user_model.USERNAME_FIELD)
        usernames.update(found)
    return usernames
