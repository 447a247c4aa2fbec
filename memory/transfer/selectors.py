"""The reads every transfer direction shares: the tenant's workspace, a workspace's audit events, members.

A workspace named by a caller is looked up inside its tenant and is "not found" otherwise, like any
foreign id. Audit events belong to a workspace when they carry it, or when they carry none and
name one of its nodes. Usernames in a file name people only when they are members of the tenant.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q

from memory.errors import NotFound
from memory.models import MemoryAuditEvent, MemoryNode
from tenants.models import Membership, Tenant, Workspace

__all__ = ["audit_events_of", "members_named", "workspace_in_tenant"]


def workspace_in_tenant(tenant: Tenant, workspace: Workspace | int) -> Workspace:
    """Return `workspace` re-read inside `tenant`; NotFound when it is another tenant's or gone."""
    workspace_id = workspace if isinstance(workspace, int) else workspace.pk
    found = Workspace.objects.filter(tenant=tenant, pk=workspace_id).first()
    if found is None:
        raise NotFound("No such workspace in this tenant.")
    return found


def audit_events_of(tenant: Tenant, workspace: Workspace) -> Any:
    """Return the queryset of the audit events a workspace export carries."""
    node_ids = MemoryNode.objects.filter(tenant=tenant, workspace=workspace).values("id")
    return MemoryAuditEvent.objects.filter(
        Q(workspace=workspace) | Q(workspace__isnull=True, node_id__in=node_ids), tenant=tenant
    )


def members_named(tenant: Tenant, usernames: Iterable[str]) -> dict[str, int]:
    """Return username → user id for the names that are members of `tenant` (others are left out)."""
    names = sorted(set(usernames))
    if not names:
        return {}
    members = Membership.objects.filter(tenant=tenant, user__username__in=names)
    return dict(members.values_list("user__username", "user_id"))
