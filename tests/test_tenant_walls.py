"""The three tenant walls: explicit context in Python, the fail-closed manager, and PostgreSQL RLS."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import ProgrammingError

from tenants.context import TenantContextMissing, all_tenants_context, tenant_context
from tenants.models import Workspace


def test_querying_a_tenant_owned_model_without_a_tenant_context_raises(tenant_a):
    with pytest.raises(TenantContextMissing, match="No tenant is bound"):
        list(Workspace.objects.all())


def test_manager_filters_to_the_bound_tenant(tenant_a, tenant_b):
    with tenant_context(tenant_a):
        slugs = {(w.tenant_id, w.slug) for w in Workspace.objects.all()}
    assert slugs == {(tenant_a.pk, "default")}


def test_all_tenants_context_sees_every_tenant(tenant_a, tenant_b):
    with all_tenants_context():
        tenant_ids = set(Workspace.objects.values_list("tenant_id", flat=True))
    assert {tenant_a.pk, tenant_b.pk} <= tenant_ids


def _raw(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall() if cursor.description else []


def test_the_application_connects_as_a_role_subject_to_rls(db):
    (user, is_super, bypass), = _raw(
        "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
    )
    assert (user, is_super, bypass) == ("ekko_app", False, False)
    (owner,), = _raw("SELECT tableowner FROM pg_tables WHERE tablename = 'memory_memorynode'")
    assert owner != "ekko_app"


def _bind_raw(tenant_id: int | str) -> None:
    _raw("SELECT set_config('ekko.tenant_id', %s, true)", [str(tenant_id)])


def test_rls_with_tenant_a_setting_hides_tenant_b_rows(tenant_a, tenant_b):
    _bind_raw(tenant_a.pk)
    rows = _raw("SELECT tenant_id FROM tenants_workspace")
    assert rows == [(tenant_a.pk,)]
    assert _raw("SELECT count(*) FROM tenants_workspace WHERE tenant_id = %s", [tenant_b.pk]) == [(0,)]
    assert _raw("SELECT count(*) FROM tenants_membership WHERE tenant_id = %s", [tenant_b.pk]) == [(0,)]


def test_rls_refuses_inserting_a_row_for_another_tenant(tenant_a, tenant_b):
    _bind_raw(tenant_a.pk)
    with pytest.raises(ProgrammingError, match="row-level security"):
        with transaction.atomic():
            _raw(
                "INSERT INTO tenants_workspace (tenant_id, name, slug, created_at) VALUES (%s, 'x', 'x', now())",
                [tenant_b.pk],
            )


def test_rls_refuses_moving_a_row_to_another_tenant(tenant_a, tenant_b):
    _bind_raw(tenant_a.pk)
    with pytest.raises(ProgrammingError, match="row-level security"):
        with transaction.atomic():
            _raw("UPDATE tenants_workspace SET tenant_id = %s", [tenant_b.pk])


def test_rls_without_a_setting_sees_no_rows(tenant_a, tenant_b):
    _bind_raw("")
    assert _raw("SELECT count(*) FROM tenants_workspace") == [(0,)]
    assert _raw("SELECT count(*) FROM tenants_apikey") == [(0,)]
    assert _raw("SELECT count(*) FROM memory_memorynode") == [(0,)]
