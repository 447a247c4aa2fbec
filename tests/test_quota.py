"""Issue 14, quotas and the ladder: what `GET memory/quota` reports, to whom, and at what cost.

The ladder's thresholds (exactly at 100/50/20/5 left and one above), what a quota counts, who sees
which scope owner (never another tenant's or a workspace out of reach), a new limit that applies at
once, and the one grouped read over the active-slot index. The refusals of creates beyond a limit are
in tests/test_quota_writes.py, which shares this module's helpers.
"""

from __future__ import annotations

import itertools

import pytest

from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode
from memory.services.quota import Level, ladder_level, tightest
from tenants.context import tenant_context
from tenants.models import Tenant
from tests.api_client import api_for, api_for_person
from tests.memory_factories import default_workspace, make_member, make_node, make_workspace
from tests.test_extraction import countdowns  # noqa: F401 - autouse: extraction runs queue in this process

SESSION = "s-1"


def set_limit(tenant: Tenant, limit: int) -> None:
    """Change the limit as an operator would; `tenant` (the fixture the services get) follows."""
    Tenant.objects.filter(pk=tenant.pk).update(card_limit=limit)
    tenant.card_limit = limit


_fillers = itertools.count()


def fill(tenant: Tenant, user, count: int, **fields) -> list[MemoryNode]:  # noqa: ANN001, ANN003
    """Add `count` active user-scope cards of `user` directly (not through the write path)."""
    workspace = default_workspace(tenant)
    numbers = [next(_fillers) for _ in range(count)]
    return [
        make_node(
            tenant=tenant,
            workspace=workspace,
            user=user,
            title=f"filler {n}",
            item_key=f"filler{n}",
            **fields,
        )
        for n in numbers
    ]


def dish(index: int, **node) -> dict:  # noqa: ANN003
    node = {
        "kind": "food_avoidance",
        "itemKey": f"菜{index}",
        "scope": "user",
        "userId": "alice",
        "valueJson": f"菜{index}",
        "title": f"不吃菜{index}",
        "content": f"推荐菜谱时避免菜{index}。",
        **node,
    }
    return {"operation": "create", "node": node, "reason": f"card {index}"}


def write_body(*operations: dict) -> dict:
    return {"operations": list(operations), "explicitUserIntent": True}


def state(tenant: Tenant) -> tuple:
    with tenant_context(tenant):
        return (
            sorted(MemoryNode.objects.values_list("pk", "status", "revision")),
            MemoryAuditEvent.objects.count(),
            MemoryMessage.objects.count(),
        )


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    return api_for(client, tenant_a)


@pytest.fixture
def alice(tenant_a):  # noqa: ANN001
    return make_member(tenant=tenant_a, username="alice", role="owner")


# --------------------------------------------------------------------------- the ladder


@pytest.mark.parametrize(
    "headroom, level",
    [
        (101, Level.NORMAL),
        (100, Level.NOTICE),
        (51, Level.NOTICE),
        (50, Level.DEGRADED),
        (21, Level.DEGRADED),
        (20, Level.CRITICAL),
        (6, Level.CRITICAL),
        (5, Level.EXHAUSTED),
        (0, Level.EXHAUSTED),
    ],
)
def test_the_ladder_level_follows_the_headroom_at_each_threshold(headroom, level):
    assert ladder_level(headroom) == level


def test_the_tightest_level_wins():
    assert tightest([Level.NORMAL, Level.CRITICAL, Level.NOTICE]) == Level.CRITICAL
    assert tightest([]) == Level.NORMAL


@pytest.mark.parametrize(
    "headroom, level",
    [
        (101, "normal"),
        (100, "notice"),
        (51, "notice"),
        (50, "degraded"),
        (21, "degraded"),
        (20, "critical"),
        (6, "critical"),
        (5, "exhausted"),
    ],
)
def test_quota_reports_the_level_of_each_owner_and_the_tightest(api, tenant_a, alice, headroom, level):
    fill(tenant_a, alice, 3)
    set_limit(tenant_a, 3 + headroom)
    body = api.get("memory/quota", {"userId": "alice"})
    assert body == {
        "level": level,
        "scopes": [
            {
                "scope": "user",
                "owner": "alice",
                "used": 3,
                "limit": 3 + headroom,
                "headroom": headroom,
                "unreviewed": 0,
                "oldestUnreviewedDays": None,
                "level": level,
            }
        ],
    }


def test_quota_counts_only_ordinary_active_cards_and_the_unreviewed(api, tenant_a, alice):
    from datetime import timedelta

    from django.utils import timezone

    workspace = default_workspace(tenant_a)
    fill(tenant_a, alice, 2)
    old = fill(tenant_a, alice, 1)[0]
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk=old.pk).update(
            review_state="unreviewed", created_at=timezone.now() - timedelta(days=3, hours=1)
        )
    make_node(
        tenant=tenant_a, workspace=workspace, user=alice, title="gone", item_key="gone", status="deleted"
    )
    make_node(
        tenant=tenant_a, workspace=workspace, user=alice, title="old", item_key="old", status="superseded"
    )
    make_node(
        tenant=tenant_a,
        workspace=workspace,
        kind="task",
        scope="session",
        session_id=SESSION,
        title="session card",
        value_json={"status": "open"},
    )
    make_node(
        tenant=tenant_a, workspace=workspace, kind="hard_constraint", scope="workspace", title="ws card"
    )
    body = api.get("memory/quota")
    scopes = {(row["scope"], row["owner"]): row for row in body["scopes"]}
    assert scopes[("user", "alice")]["used"] == 3
    assert (scopes[("user", "alice")]["unreviewed"], scopes[("user", "alice")]["oldestUnreviewedDays"]) == (
        1,
        3,
    )
    assert scopes[("workspace", str(workspace.pk))]["used"] == 1
    assert body["level"] == "normal"


# --------------------------------------------------------------------------- who sees which owner


def test_a_key_sees_its_tenants_workspaces_and_members_never_another_tenants(
    client, api, tenant_a, tenant_b, alice
):
    bob = make_member(tenant=tenant_b, username="bob", role="owner")
    fill(tenant_b, bob, 4)
    carol = make_member(tenant=tenant_a, username="carol")
    fill(tenant_a, carol, 1)
    hermes = make_workspace(tenant=tenant_a, name="Hermes")
    body = api.get("memory/quota")
    owners = [(row["scope"], row["owner"], row["used"]) for row in body["scopes"]]
    ws_a = default_workspace(tenant_a)
    assert owners == [
        ("workspace", str(ws_a.pk), 0),
        ("workspace", str(hermes.pk), 0),
        ("user", "alice", 0),
        ("user", "carol", 1),
    ]
    assert str(default_workspace(tenant_b).pk) not in {row["owner"] for row in body["scopes"]}


def test_a_pinned_key_sees_only_its_workspace(client, tenant_a, alice):
    hermes = make_workspace(tenant=tenant_a, name="Hermes")
    make_node(
        tenant=tenant_a,
        workspace=default_workspace(tenant_a),
        kind="hard_constraint",
        scope="workspace",
        title="default's",
    )
    pinned = api_for(client, tenant_a, workspace=hermes)
    body = pinned.get("memory/quota")
    assert [(r["scope"], r["owner"]) for r in body["scopes"]] == [
        ("workspace", str(hermes.pk)),
        ("user", "alice"),
    ]
    pinned.get("memory/quota", {"workspaceId": "default"}, expect=403, code="forbidden")


def test_a_member_sees_their_own_scope_and_workspaces_only(client, tenant_a, alice):
    from tenants.models import WorkspaceMember

    mia = make_member(tenant=tenant_a, username="mia")
    ben = make_member(tenant=tenant_a, username="ben")
    x, y = make_workspace(tenant=tenant_a, name="X"), make_workspace(tenant=tenant_a, name="Y")
    with tenant_context(tenant_a):
        WorkspaceMember.objects.create(tenant=tenant_a, workspace=x, user=mia)
    fill(tenant_a, ben, 2)
    make_node(tenant=tenant_a, workspace=y, kind="hard_constraint", scope="workspace", title="y's")
    body = api_for_person("mia").get("memory/quota")
    assert [(r["scope"], r["owner"]) for r in body["scopes"]] == [
        ("workspace", str(default_workspace(tenant_a).pk)),
        ("workspace", str(x.pk)),
        ("user", "mia"),
    ]
    api_for_person("mia").get("memory/quota", {"workspaceId": y.pk}, expect=404, code="not_found")
    api_for_person("mia").get("memory/quota", {"userId": "ben"}, expect=404, code="not_found")


def test_a_new_limit_applies_at_once_to_a_key_the_process_remembers(api, tenant_a, alice):
    assert api.get("memory/quota", {"userId": "alice"})["scopes"][0]["limit"] == 500
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=7)
    assert api.get("memory/quota", {"userId": "alice"})["scopes"][0]["limit"] == 7


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_the_quota_count_reads_the_active_slot_index(tenant_a):
    """The grouped read runs over `node_active_slot_uniq` (tenant, scope, owner_ref, key; active)."""
    from django.db import connection, connections

    from memory.services.quota import scope_usage

    users = [make_member(tenant=tenant_a, username=f"u{index}") for index in range(20)]
    workspace = default_workspace(tenant_a)
    with tenant_context(tenant_a), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_memorynode (id, tenant_id, workspace_id, user_id, scope, owner_ref, kind,"
            " key, domain, category_path, category_path_text, type, title, content, status, confidence,"
            " importance, tags, entities, source_message_ids, explicit_user_intent, revision, created_at,"
            " updated_at, access_count, search_text, embedding_model, review_state)"
            " SELECT gen_random_uuid(), %s, %s, u.id, 'user', 'user:' || u.id, 'skill', 'skill:' || g,"
            " 'd', '{}', '', 'skill', 't', 'c', 'active', 0.9, 0.5, '{}', '{}', '{}', true, 1, now(), now(),"
            " 0, '', '', 'reviewed' FROM generate_series(1, 500) g, unnest(%s::int[]) AS u(id)",
            [tenant_a.pk, workspace.pk, [user.pk for user in users]],
        )
    with connections["owner"].cursor() as cursor:
        cursor.execute("ANALYZE memory_memorynode")  # the app role may not; autovacuum does in production
    plans: list[str] = []

    def explain(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        if "GROUP BY" in sql and "owner_ref" in sql and not sql.startswith("EXPLAIN"):
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + sql, params)
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
        return execute(sql, params, many, context)

    with tenant_context(tenant_a), connection.execute_wrapper(explain):
        usage = scope_usage(tenant_a, [f"user:{users[0].pk}", f"workspace:{workspace.pk}"])
    assert usage[f"user:{users[0].pk}"].used == 500
    assert "node_active_slot_uniq" in plans[0], plans[0]


def test_the_quota_endpoint_costs_the_same_statements_for_more_owners(
    api, tenant_a, alice, django_assert_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            api.get("memory/quota")
        return len(captured)

    make_member(tenant=tenant_a, username="carol")
    statements()  # the first request looks the key up; later ones only re-read it
    few = statements()
    for index in range(8):
        make_member(tenant=tenant_a, username=f"member{index}")
        make_workspace(tenant=tenant_a, name=f"Workspace {index}")
    assert (
        statements() == few == 7
    )  # key, default workspace, workspaces, members, the grouped count, savepoints
