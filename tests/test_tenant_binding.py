"""The tenant binding sent once per transaction: what tenants.context sends, skips and restores.

A transaction bound to a tenant already gets no second `set_config` for it; a binding never outlives
its transaction, nor a rollback to a savepoint taken before it. What the database sees is checked
with raw SQL under row-level security (each tenant has exactly one workspace, `default`).
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from tenants.context import all_tenants_context, bind_tenant, tenant_context, unbind
from tests.factories import make_tenant


@pytest.fixture(autouse=True)
def unbound_afterwards():  # noqa: ANN201
    """`bind_tenant` lasts until the request ends (tenants.middleware unbinds); here, until the test does."""
    yield
    unbind()


def visible_workspace_tenants() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tenant_id FROM tenants_workspace ORDER BY tenant_id")
        return [row[0] for row in cursor.fetchall()]


def bindings_sent(captured: CaptureQueriesContext) -> int:
    return sum("set_config('ekko.tenant_id'" in query["sql"] for query in captured.captured_queries)


def statements(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split(" ")[0] for query in captured.captured_queries]


def test_binding_the_bound_tenant_again_sends_no_setting(tenant_a, tenant_b):
    with tenant_context(tenant_a):
        with CaptureQueriesContext(connection) as captured:
            with tenant_context(tenant_a):
                assert visible_workspace_tenants() == [tenant_a.pk]
            with tenant_context(tenant_a, savepoint=False):
                assert visible_workspace_tenants() == [tenant_a.pk]
            bind_tenant(tenant_a)
        assert bindings_sent(captured) == 0
        # The savepoint of the first block, the reads, and nothing at all for the second block.
        assert statements(captured) == ["SAVEPOINT", "SELECT", "RELEASE", "SELECT"]


def test_another_tenant_inside_is_bound_and_the_outer_one_put_back(tenant_a, tenant_b):
    with tenant_context(tenant_a):
        with tenant_context(tenant_b, savepoint=False):
            assert visible_workspace_tenants() == [tenant_b.pk]
        assert visible_workspace_tenants() == [tenant_a.pk]
        with CaptureQueriesContext(connection) as captured, tenant_context(tenant_a, savepoint=False):
            assert visible_workspace_tenants() == [tenant_a.pk]
        assert bindings_sent(captured) == 0
        with all_tenants_context():
            assert visible_workspace_tenants() == sorted([tenant_a.pk, tenant_b.pk])
        assert visible_workspace_tenants() == [tenant_a.pk]


def test_a_failed_inner_block_leaves_the_outer_binding_in_force(tenant_a, tenant_b):
    with tenant_context(tenant_a):
        with pytest.raises(LookupError), tenant_context(tenant_b):
            assert visible_workspace_tenants() == [tenant_b.pk]
            raise LookupError("the savepoint rolls back, and the binding to tenant B with it")
        with CaptureQueriesContext(connection) as captured, tenant_context(tenant_a, savepoint=False):
            assert visible_workspace_tenants() == [tenant_a.pk]
        assert bindings_sent(captured) == 0


def test_a_rollback_to_an_earlier_savepoint_ends_the_binding(tenant_a):
    with transaction.atomic():
        with pytest.raises(LookupError), transaction.atomic():
            bind_tenant(tenant_a)
            raise LookupError("rolls back to a savepoint taken before the binding")
        assert visible_workspace_tenants() == []
        with tenant_context(tenant_a, savepoint=False):
            assert visible_workspace_tenants() == [tenant_a.pk]


def test_a_binding_outside_the_tenant_context_is_not_seen_after_a_nested_block(tenant_a, tenant_b):
    with transaction.atomic():
        with tenant_context(tenant_b):
            pass
        # The inner block put "no tenant" back: nothing is visible until the next binding.
        assert visible_workspace_tenants() == []


@pytest.mark.django_db(transaction=True)
def test_a_binding_does_not_outlive_its_transaction():
    tenant = make_tenant("binding-a", owner="binding-alice")
    reused = transaction.atomic()  # one Atomic for two transactions, as a decorator would be
    with reused:
        bind_tenant(tenant)
        assert visible_workspace_tenants() == [tenant.pk]
    with reused:
        assert visible_workspace_tenants() == []
        with CaptureQueriesContext(connection) as captured, tenant_context(tenant, savepoint=False):
            assert visible_workspace_tenants() == [tenant.pk]
        assert bindings_sent(captured) == 2, "bound afresh, then 'no tenant' put back"


@pytest.mark.django_db(transaction=True)
def test_a_block_that_is_the_transaction_sends_no_restore():
    tenant = make_tenant("binding-b", owner="binding-bob")
    with CaptureQueriesContext(connection) as captured, tenant_context(tenant):
        assert visible_workspace_tenants() == [tenant.pk]
    assert bindings_sent(captured) == 1, "the commit ends the setting: no set_config to put it back"
    with transaction.atomic():
        assert visible_workspace_tenants() == []
