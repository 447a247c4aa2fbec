"""Reads of tenant-level objects by the ids an API body or URL names; missing and foreign answer alike."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from tenants.context import tenant_context
from tenants.models import Membership, Tenant, Workspace


class TenantObjectNotFound(LookupError):
    """The id names nothing in this tenant (it may exist in another one: callers answer 404 either way)."""


def workspace_resolve(*, tenant: Tenant, ref: str | int | None,
                      default: Workspace | None = None) -> Workspace:
    """Return the tenant's workspace named by id or slug (the `default` workspace when `ref` is empty)."""
    with tenant_context(tenant, savepoint=False):
        if ref in (None, ""):
            if default is not None:
                return default
            lookup = {"slug": Workspace.DEFAULT_SLUG}
        elif isinstance(ref, int) or (str(ref).isascii() and str(ref).isdigit()):  # not int("²")
            lookup = {"pk": int(ref)}
        else:
            lookup = {"slug": str(ref)}
        workspace = Workspace.objects.filter(tenant=tenant, **lookup).first()
    if workspace is None:
        raise TenantObjectNotFound(f"No workspace {ref!r}.")
    return workspace


def member_resolve(*, tenant: Tenant, username: str) -> AbstractBaseUser:
    """Return the user named `username` if they are a member of `tenant`."""
    with tenant_context(tenant, savepoint=False):
        membership = (
            Membership.objects.select_related("user").filter(tenant=tenant, user__username=username).first()
        )
    if membership is None:
        raise TenantObjectNotFound(f"No member {username!r}.")
    return membership.user
