"""The tenant context: which tenant the current code runs for, in Python and in PostgreSQL.

Binding a tenant does two things inside one transaction: it sets a context variable that
`TenantOwnedModel.objects` reads (the ORM wall: no context, no query), and it sets the
transaction-local PostgreSQL setting `ekko.tenant_id` that the row-level-security policies
read (the database wall). The only way past both is `all_tenants_context()`, used in the few
places listed in docs/tenancy.md.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.db import connections, transaction

if TYPE_CHECKING:
    from tenants.models import Tenant

ALL_TENANTS = "*"
_current: contextvars.ContextVar[int | str | None] = contextvars.ContextVar("ekko_tenant", default=None)


class TenantContextMissing(RuntimeError):
    """A tenant-owned model was queried with no tenant bound."""


def current_tenant_id() -> int | str | None:
    """Return the bound tenant id, `ALL_TENANTS` inside an all-tenants context, or None."""
    return _current.get()


def require_tenant_id() -> int | str:
    tenant_id = _current.get()
    if tenant_id is None:
        raise TenantContextMissing(
            "No tenant is bound. Wrap the code in `tenant_context(tenant)` (or pass `tenant=` to a "
            "service that does); use `Model.all_tenants` only in the places listed in docs/tenancy.md."
        )
    return tenant_id


def _set_database_tenant(using: str, tenant_value: str, all_tenants: bool) -> None:
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT set_config('ekko.tenant_id', %s, true), set_config('ekko.all_tenants', %s, true)",
            [tenant_value, "on" if all_tenants else ""],
        )


def bind_tenant(tenant: Tenant | int, *, using: str = "default") -> None:
    """Bind `tenant` for the rest of the current transaction (e.g. an ATOMIC_REQUESTS request)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    if not connections[using].in_atomic_block:
        raise RuntimeError("bind_tenant() needs an open transaction: the database setting is transaction-local.")
    _set_database_tenant(using, str(tenant_id), all_tenants=False)
    _current.set(tenant_id)


def unbind() -> None:
    _current.set(None)


@contextmanager
def tenant_context(tenant: Tenant | int, *, using: str = "default") -> Iterator[None]:
    """Run the block in a transaction bound to `tenant` (restoring the outer binding afterwards)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    outer = _current.get()
    token = _current.set(tenant_id)
    try:
        with transaction.atomic(using=using):
            _set_database_tenant(using, str(tenant_id), all_tenants=False)
            yield
            # On an exception the savepoint's rollback undoes the setting already; restore on success only.
            _restore_database_binding(using, outer)
    finally:
        _current.reset(token)


@contextmanager
def all_tenants_context(*, using: str = "default") -> Iterator[None]:
    """Lift the tenant walls for the block. Loud on purpose: see docs/tenancy.md for the allowed callers."""
    outer = _current.get()
    token = _current.set(ALL_TENANTS)
    try:
        with transaction.atomic(using=using):
            _set_database_tenant(using, "", all_tenants=True)
            yield
            _restore_database_binding(using, outer)
    finally:
        _current.reset(token)


def _restore_database_binding(using: str, outer: int | str | None) -> None:
    if outer == ALL_TENANTS:
        _set_database_tenant(using, "", all_tenants=True)
    else:
        _set_database_tenant(using, "" if outer is None else str(outer), all_tenants=False)
