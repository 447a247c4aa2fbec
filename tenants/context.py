"""The tenant context: which tenant the current code runs for, in Python and in PostgreSQL.

Binding a tenant does two things inside one transaction: it sets a context variable that
`TenantOwnedModel.objects` reads (the ORM wall: no context, no query), and it sets the
transaction-local PostgreSQL setting `ekko.tenant_id` that the row-level-security policies
read (the database wall). The only way past both is `all_tenants_context()`, used in the few
places listed in docs/tenancy.md.

The connection remembers which binding its open transaction carries, so binding the same tenant
again (a selector inside a service inside a request bound at its edge) sends nothing: a request
sets `ekko.tenant_id` once. That memory sees only bindings made here; bind through this module,
never with a `set_config` of your own.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


class _Witness:
    """A no-op on-commit callback that stands for one database binding (see `_binding_in_force`)."""

    __slots__ = ()

    def __call__(self) -> None:
        return None


@dataclass(frozen=True)
class _DatabaseBinding:
    tenant_value: str
    all_tenants: bool
    witness: _Witness


def _binding_in_force(using: str) -> _DatabaseBinding | None:
    """Return the binding the connection's open transaction carries, or None when it carries none we set.

    Django drops a transaction's on-commit callbacks exactly when PostgreSQL drops its `SET LOCAL`
    values: at commit, at rollback, and at a rollback to a savepoint taken before them (a released
    savepoint keeps both). So the witness callback registered with each binding is still queued
    precisely while that binding is in force, whatever happened to the transaction in between.
    """
    connection = connections[using]
    binding: _DatabaseBinding | None = getattr(connection, "ekko_tenant_binding", None)
    if binding is None or not connection.in_atomic_block:
        return None
    if any(hook is binding.witness for _savepoints, hook, _robust in connection.run_on_commit):
        return binding
    return None


def _set_database_tenant(using: str, tenant_value: str, all_tenants: bool) -> None:
    """Bind the transaction's RLS settings; a no-op when they are bound so already."""
    current = _binding_in_force(using)
    if current is not None and (current.tenant_value, current.all_tenants) == (tenant_value, all_tenants):
        return
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT set_config('ekko.tenant_id', %s, true), set_config('ekko.all_tenants', %s, true)",
            [tenant_value, "on" if all_tenants else ""],
        )
    witness = _Witness()
    transaction.on_commit(witness, using=using)
    connections[using].ekko_tenant_binding = _DatabaseBinding(tenant_value, all_tenants, witness)


def bind_tenant(tenant: Tenant | int, *, using: str = "default") -> None:
    """Bind `tenant` for the rest of the current transaction (e.g. an ATOMIC_REQUESTS request).

    Binding the tenant the transaction is bound to already sends nothing.
    """
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    if not connections[using].in_atomic_block:
        raise RuntimeError(
            "bind_tenant() needs an open transaction: the database setting is transaction-local.")
    _set_database_tenant(using, str(tenant_id), all_tenants=False)
    _current.set(tenant_id)


def unbind() -> None:
    _current.set(None)


@contextmanager
def tenant_context(tenant: Tenant | int, *, using: str = "default", savepoint: bool = True) -> Iterator[None]:
    """Run the block in a transaction bound to `tenant` (restoring the outer binding afterwards).

    Outside a transaction the block is one; inside one it is a savepoint, and the setting is sent
    only when the transaction is not bound to `tenant` already. `savepoint=False` is for reads,
    which have nothing to undo: inside a transaction bound to `tenant` the block then runs in it as
    it is, without a statement of its own (code that catches a database error to carry on opens its
    own `transaction.atomic()`, as Django requires anyway).
    """
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    token = _current.set(tenant_id)
    try:
        with _database_binding(using, str(tenant_id), all_tenants=False, savepoint=savepoint):
            yield
    finally:
        _current.reset(token)


@contextmanager
def all_tenants_context(*, using: str = "default") -> Iterator[None]:
    """Lift the tenant walls for the block. Loud on purpose: see docs/tenancy.md for the allowed callers."""
    token = _current.set(ALL_TENANTS)
    try:
        with _database_binding(using, "", all_tenants=True, savepoint=True):
            yield
    finally:
        _current.reset(token)


@contextmanager
def _database_binding(using: str, tenant_value: str, *, all_tenants: bool, savepoint: bool) -> Iterator[None]:
    current = _binding_in_force(using)
    if not savepoint and current is not None and (current.tenant_value, current.all_tenants) == (
            tenant_value, all_tenants):
        yield
        return
    connection = connections[using]
    outermost = not connection.in_atomic_block
    with transaction.atomic(using=using):
        _set_database_tenant(using, tenant_value, all_tenants)
        try:
            yield
        except BaseException:
            # The savepoint's rollback puts the outer binding back in the database; say so here too.
            connection.ekko_tenant_binding = current
            raise
        if not outermost:
            # A released savepoint keeps the setting: put the outer binding (or none) back. The
            # outermost block needs nothing: its commit ends the setting.
            outer = (current.tenant_value, current.all_tenants) if current is not None else ("", False)
            _set_database_tenant(using, *outer)
