"""Who the signed-in person is for one page request: membership → principal → viewer, resolved once.

The tenant comes from the same session key the browser API reads (memory.access's
`SESSION_TENANT_KEY`), and the principal and Viewer from the same functions, so the pages and the
API apply one rule; the workspace comes from `SESSION_WORKSPACE_KEY`. Everything a page shows or
changes goes through the `Viewer` built here, and so through memory.visibility's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

from memory.access import (
    Principal,
    may_export,
    may_import,
    memberships_of,
    principal_for_user,
    quota_owners_of,
    reachable_workspaces,
    viewer_for,
)
from memory.errors import Forbidden, NotFound
from memory.models import MemoryNode
from memory.pages import labels
from memory.services.quota import Level, OwnerQuota, quota_report
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Membership, Role, Tenant, Workspace

SESSION_WORKSPACE_KEY = "ekko_workspace_id"


@dataclass(frozen=True)
class PageAccess:
    """The resolved caller of one page request and what the switchers may offer them."""

    principal: Principal
    viewer: Viewer
    memberships: list[Membership]
    workspaces: list[Workspace]

    @property
    def tenant(self) -> Tenant:
        return self.principal.tenant

    @property
    def workspace(self) -> Workspace:
        return self.viewer.workspace

    @property
    def role(self) -> str:
        return next((m.role for m in self.memberships if m.tenant_id == self.tenant.pk), Role.VIEWER)

    @property
    def role_label(self) -> str:
        return str(labels.ROLES.get(self.role, self.role))

    @property
    def is_admin(self) -> bool:
        return self.principal.is_admin

    @property
    def can_write(self) -> bool:
        return not self.principal.read_only

    @property
    def can_export(self) -> bool:
        return may_export(self.principal)

    @property
    def can_import(self) -> bool:
        return may_import(self.principal)

    @cached_property
    def quota_banner(self) -> OwnerQuota | None:
        """Return the tightest of this person's own scope and their workspaces past normal, else None.

        Whatever the role, the banner is about the person: their user scope and the workspaces the
        switcher offers them. Read (one grouped count) when a full page renders it, never for fragments.
        """
        owners = quota_owners_of(self.workspaces, [self.principal.user])
        with tenant_context(self.tenant, savepoint=False):  # also for pages rendered outside the view
            report = quota_report(tenant=self.tenant, owners=owners)
        return report.tightest_owner if report.level != Level.NORMAL else None

    def workspace_name(self, workspace_id: int | str) -> str:
        return next((w.name for w in self.workspaces if str(w.pk) == str(workspace_id)), str(workspace_id))

    def can_change(self, node: MemoryNode) -> bool:
        """Return whether this person may edit, forget or restore `node` (the services decide the same)."""
        return self.can_write and node.scope in self.principal.write_scopes


def page_access(request: HttpRequest) -> PageAccess | None:
    """Return the caller's access for this request, or None when they belong to no tenant."""
    memberships = memberships_of(request.user)
    principal = principal_for_user(request.user, request.session, memberships)
    if principal is None:
        return None
    workspaces = reachable_workspaces(principal)
    wanted = request.session.get(SESSION_WORKSPACE_KEY)
    # A workspace left in the session that the person no longer reaches falls back to `default`.
    reachable = wanted in {w.pk for w in workspaces}
    # Admins see the whole tenant (memory.visibility); search follows the same rule.
    viewer = viewer_for(
        principal, workspace_ref=wanted if reachable else None, whole_tenant=principal.is_admin
    )
    return PageAccess(principal=principal, viewer=viewer, memberships=memberships, workspaces=workspaces)


def tenant_page(view: Any) -> Any:
    """Decorate a page view: sign-in required, access resolved, tenant bound, 404/403 mapped."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        access = page_access(request)
        if access is None:
            return render(request, "pages/no_tenant.html", status=403)
        request.ekko = access  # type: ignore[attr-defined]
        try:
            with tenant_context(access.tenant):
                response = view(request, access, *args, **kwargs)
        except NotFound as exc:
            # Another tenant's id and a missing id answer alike.
            raise Http404(exc.detail) from exc
        except Forbidden:
            response = render(request, "pages/forbidden.html", {"access": access}, status=403)
        # The same URL answers a full page or a fragment depending on HX-Request.
        patch_vary_headers(response, ["HX-Request"])
        return response

    return wrapper


def wants_fragment(request: HttpRequest) -> bool:
    """Return whether to answer with the page's fragment (htmx request, not a history restore)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.history_restore_request
