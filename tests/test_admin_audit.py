"""Django admin audit for operators: the per-tenant overview (members, workspaces, memory counts by
status, API keys with last use) and the read-only audit trail with filters and links to node history.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from memory.models import MemoryAuditEvent, MemoryNode
from memory.services import ForgetRequest, message_append_batch, node_forget, node_write_batch
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Role, Tenant, Workspace
from tenants.services import api_key_authenticate, api_key_create, membership_set


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):  # noqa: ANN001
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator(client, db):  # noqa: ANN001
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "ops-password-1")
    client.force_login(user)
    return client


def _viewer(tenant: Tenant, username: str, actor: str) -> Viewer:
    with tenant_context(tenant):
        workspace = Workspace.objects.get(slug="default")
    return Viewer(
        tenant=tenant,
        workspace=workspace,
        session_id="s1",
        user=get_user_model().objects.get(username=username),
        write_scopes=frozenset({"session", "workspace", "user"}),
        read_only=False,
        actor=actor,
    )


def _write(tenant: Tenant, username: str, item: str, actor: str = "api_key:ekko_agent") -> MemoryNode:
    viewer = _viewer(tenant, username, actor)
    message_append_batch(
        viewer=viewer, session_id="s1", messages=[{"role": "user", "content": f"我不吃{item}"}]
    )
    return node_write_batch(
        viewer=viewer,
        explicit_user_intent=True,
        operations=[
            {
                "operation": "create",
                "reason": f"said no {item}",
                "node": {
                    "kind": "food_avoidance",
                    "item_key": item,
                    "value_json": item,
                    "value_json_given": True,
                    "title": f"不吃{item}",
                    "content": f"不吃{item}",
                },
            }
        ],
    )[0].node


@pytest.fixture
def audited(tenant_a, tenant_b):  # noqa: ANN001
    kept = _write(tenant_a, "alice", "香菜")
    soft = _write(tenant_a, "alice", "葱", actor="user:alice")
    hard = _write(tenant_a, "alice", "蒜")
    viewer = _viewer(tenant_a, "alice", "user:alice")
    node_forget(
        viewer=viewer,
        request=ForgetRequest(
            reason="不要了", explicit_user_intent=True, node_id=soft.pk, expected_revision=1
        ),
    )
    node_forget(
        viewer=viewer,
        request=ForgetRequest(
            reason="彻底删除", explicit_user_intent=True, mode="hard", node_id=hard.pk, expected_revision=1
        ),
    )
    membership_set(tenant=tenant_a, user=get_user_model().objects.create_user("vic"), role=Role.VIEWER)
    issued = api_key_create(tenant=tenant_a, name="kitchen-bot")
    api_key_authenticate(issued.raw_key)
    api_key_create(tenant=tenant_a, name="unused")
    _write(tenant_b, "bob", "香菜")
    return {"kept": kept, "soft": soft, "hard": hard, "key": issued.api_key}


def _cells(html: str, slug: str) -> str:
    row_start = html.index(f">{slug}</a>")
    return html[row_start : html.index("</tr>", row_start)]


def test_tenant_list_shows_members_workspaces_memory_counts_and_key_use(operator, audited):
    response = operator.get("/admin/tenants/tenant/")
    assert response.status_code == 200
    row = _cells(response.content.decode(), "tenant-a")
    # members 2, workspaces 1, active 1, forgotten 1 (the hard one is gone), active keys 2
    values = dict(re.findall(r'class="field-(\w+)[^"]*">(.*?)</t[dh]>', row))
    assert values["member_count"] == "2" and values["workspace_count"] == "1"
    assert (
        values["active_memories"] == "1"
        and values["forgotten_memories"] == "1"
        and values["active_keys"] == "2"
    )
    assert values["last_key_use"] not in ("", "-")
    assert "tenant__id__exact=" in row


def test_tenant_list_costs_the_same_queries_for_more_tenants(
    operator, audited, django_assert_max_num_queries
):
    from tests.factories import make_tenant

    for index in range(5):
        make_tenant(f"extra-{index}", owner=f"owner-{index}")
    with django_assert_max_num_queries(12):
        assert operator.get("/admin/tenants/tenant/").status_code == 200


def test_tenant_page_shows_counts_by_status_members_and_keys_with_last_use(operator, audited, tenant_a):
    html = operator.get(f"/admin/tenants/tenant/{tenant_a.pk}/change/").content.decode()
    assert "<th>active</th><td>0</td><td>0</td><td>1</td><td>0</td><td><strong>1</strong>" in html
    assert "<th>deleted</th>" in html and "kitchen-bot" in html and "vic" in html
    assert "field-last_used_at" in html
    assert f"/admin/memory/memoryauditevent/?tenant__id__exact={tenant_a.pk}" in html


def test_audit_events_are_read_only(operator, audited):
    with all_events() as events:
        event = events.first()
    assert operator.get(f"/admin/memory/memoryauditevent/{event.pk}/change/").status_code == 200
    assert (
        operator.post(f"/admin/memory/memoryauditevent/{event.pk}/change/", {"reason": "x"}).status_code
        == 403
    )
    assert operator.get(f"/admin/memory/memoryauditevent/{event.pk}/delete/").status_code == 403
    assert operator.get("/admin/memory/memoryauditevent/add/").status_code == 403
    assert operator.get(f"/admin/memory/memorynode/{audited['kept'].pk}/delete/").status_code == 403
    changelist = operator.get("/admin/memory/memoryauditevent/").content.decode()
    assert 'name="_selected_action"' not in changelist  # no bulk delete action either


class all_events:  # noqa: N801 - a tiny context manager reading across tenants like the admin does
    def __enter__(self):  # noqa: ANN204
        from tenants.context import all_tenants_context

        self._context = all_tenants_context()
        self._context.__enter__()
        return MemoryAuditEvent.all_tenants.order_by("created_at")

    def __exit__(self, *exc):  # noqa: ANN002, ANN204
        return self._context.__exit__(*exc)


def test_audit_filters_by_actor_event_type_date_and_tenant(operator, audited, tenant_a, tenant_b):
    base = "/admin/memory/memoryauditevent/"
    by_actor = operator.get(base, {"actor": "user:alice"}).content.decode()
    assert "不要了" in by_actor and "said no 香菜" not in by_actor
    assert "user:alice" in operator.get(base).content.decode()  # offered as a filter choice
    by_type = operator.get(base, {"event_type__exact": "delete"}).content.decode()
    # Defect 7 (issue 10): a hard forget keeps no reason text; its delete event is still listed.
    assert "不要了" in by_type and "彻底删除" not in by_type and "said no 葱" not in by_type
    assert str(audited["hard"].pk)[:8] in by_type
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    by_date = operator.get(base, {"created_at__gte": midnight.isoformat()}).content.decode()
    assert "said no 香菜" in by_date
    long_ago = midnight.replace(year=2000).isoformat()
    assert "said no" not in operator.get(base, {"created_at__lt": long_ago}).content.decode()
    only_b = operator.get(base, {"tenant__id__exact": tenant_b.pk}).content.decode()
    assert "said no 香菜" in only_b and "不要了" not in only_b


def test_audit_event_links_to_the_node_history(operator, audited):
    soft = audited["soft"]
    html = operator.get("/admin/memory/memoryauditevent/").content.decode()
    assert f"/admin/memory/memoryauditevent/?node_id={soft.pk}" in html
    assert f"/admin/memory/memorynode/{soft.pk}/change/" in html
    hard = audited["hard"]
    assert f"/admin/memory/memorynode/{hard.pk}/change/" not in html  # erased: history only
    history = operator.get("/admin/memory/memoryauditevent/", {"node_id": str(soft.pk)}).content.decode()
    assert "said no 葱" in history and "不要了" in history and "said no 香菜" not in history
    node_page = operator.get(f"/admin/memory/memorynode/{soft.pk}/change/").content.decode()
    assert "不要了" in node_page and "said no 葱" in node_page


def test_audit_list_query_count_does_not_grow_with_events(
    operator, audited, tenant_a, django_assert_max_num_queries
):
    for index in range(20):
        _write(tenant_a, "alice", f"菜{index}")
    with django_assert_max_num_queries(20):
        assert operator.get("/admin/memory/memoryauditevent/").status_code == 200
