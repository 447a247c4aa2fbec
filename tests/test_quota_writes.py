"""Issue 14, quotas: a create beyond a scope owner's limit is refused with 409 `quota_exceeded`.

Each rule has a test that fails without it: nothing is written by a refused create (no card, no audit
event, no after-commit work), a batch is counted whole, supersedes in place and updates/expires add
nothing, and every create path is checked — set-based and one-by-one writes, bulk extraction writes
(skipped with their reason, the run finishes), restore, imports (API, service) — under the chain lock,
so two concurrent batches cannot both pass.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from memory.errors import QuotaExceeded
from memory.models import MemoryNode
from memory.selectors import NodeSelector
from memory.services import NodeWrite, node_forget, node_restore, node_write_batch, node_write_bulk
from memory.services.forget import ForgetRequest
from memory.services.quota import cards_added, quota_require
from tenants.context import tenant_context
from tenants.models import Tenant
from tests.api_client import api_for
from tests.concurrency import side_by_side
from tests.memory_factories import default_workspace, make_member, make_node, make_workspace, operator_import
from tests.test_extraction import countdowns  # noqa: F401 - autouse: extraction runs queue in this process
from tests.test_node_write_bulk import author, avoid
from tests.test_quota import SESSION, dish, fill, set_limit, state, write_body


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    return api_for(client, tenant_a)


@pytest.fixture
def alice(tenant_a):  # noqa: ANN001
    return make_member(tenant=tenant_a, username="alice", role="owner")

# --------------------------------------------------------------------------- refusing a create


def test_a_create_beyond_the_limit_is_refused_and_changes_nothing(
    api, tenant_a, alice, django_capture_on_commit_callbacks
):
    api.post(
        "messages",
        {
            "sessionId": SESSION,
            "userId": "alice",
            "messages": [{"id": "m1", "role": "user", "content": "记住，我不吃菜9。"}],
        },
        expect=201,
    )
    fill(tenant_a, alice, 2)
    set_limit(tenant_a, 2)
    before = state(tenant_a)
    with django_capture_on_commit_callbacks() as callbacks:
        body = api.post(
            "memory/write",
            {**write_body(dish(9)), "sourceMessageIds": ["m1"]},
            expect=409,
            code="quota_exceeded",
        )
    assert (body["scope"], body["owner"], body["used"], body["limit"], body["headroom"]) == (
        "user",
        "alice",
        2,
        2,
        0,
    )
    assert state(tenant_a) == before and callbacks == []


def test_a_batch_beyond_the_headroom_is_refused_whole_and_one_that_fits_passes(api, tenant_a, alice):
    fill(tenant_a, alice, 1)
    set_limit(tenant_a, 3)
    before = state(tenant_a)
    body = api.post("memory/write", write_body(dish(1), dish(2), dish(3)), expect=409, code="quota_exceeded")
    assert body["headroom"] == 2
    assert state(tenant_a) == before
    results = api.post("memory/write", write_body(dish(1), dish(2)))["results"]
    assert [r["action"] for r in results] == ["created", "created"]
    assert api.get("memory/quota", {"userId": "alice"})["scopes"][0]["headroom"] == 0


def test_a_mixed_batch_beyond_the_headroom_is_refused_whole(api, tenant_a, alice):
    card = api.post("memory/write", write_body(dish(1)))["results"][0]
    set_limit(tenant_a, 2)
    before = state(tenant_a)
    update = {
        "operation": "update",
        "targetId": card["nodeId"],
        "expectedRevision": 1,
        "reason": "r",
        "node": {"content": "changed"},
    }
    api.post("memory/write", write_body(update, dish(2), dish(3)), expect=409, code="quota_exceeded")
    assert state(tenant_a) == before


def test_a_supersede_in_place_an_update_and_an_expire_add_nothing(api, tenant_a, alice):
    first = api.post("memory/write", write_body(dish(1), dish(2)))["results"]
    set_limit(tenant_a, 2)
    again = api.post("memory/write", write_body(dish(1, content="换了说法")))["results"][0]
    assert again["action"] == "superseded"
    assert api.post("memory/write", write_body(dish(2)))["results"][0]["action"] == "noop"
    update = {
        "operation": "update",
        "targetId": first[1]["nodeId"],
        "expectedRevision": 1,
        "reason": "r",
        "node": {"content": "changed"},
    }
    assert api.post("memory/write", write_body(update))["results"][0]["action"] == "updated"
    supersede = {
        "operation": "supersede",
        "targetId": again["nodeId"],
        "expectedRevision": 2,
        "reason": "r",
        "node": {"content": "again"},
    }
    assert api.post("memory/write", write_body(supersede))["results"][0]["action"] == "superseded"
    api.post("memory/write", write_body(dish(3)), expect=409, code="quota_exceeded")
    expire = {"operation": "expire", "targetId": first[1]["nodeId"], "expectedRevision": 2, "reason": "r"}
    # In order: the expire frees the room the create then takes.
    results = api.post("memory/write", write_body(expire, dish(3)))["results"]
    assert [r["action"] for r in results] == ["expired", "created"]
    assert api.get("memory/quota", {"userId": "alice"})["scopes"][0]["used"] == 2


def test_session_cards_are_not_counted_and_workspace_scope_has_its_own_limit(api, tenant_a, alice):
    set_limit(tenant_a, 1)
    api.post(
        "messages",
        {"sessionId": SESSION, "messages": [{"id": "m1", "role": "user", "content": "x"}]},
        expect=201,
    )
    tasks = [
        {
            "operation": "create",
            "reason": "r",
            "node": {
                "kind": "task",
                "itemKey": f"t{i}",
                "scope": "session",
                "sessionId": SESSION,
                "title": f"t{i}",
                "content": f"t{i}",
                "valueJson": {"status": "open"},
            },
        }
        for i in range(3)
    ]
    api.post("memory/write", write_body(*tasks))
    rules = [
        {
            "operation": "create",
            "reason": "r",
            "node": {
                "kind": "hard_constraint",
                "itemKey": f"rule{i}",
                "scope": "workspace",
                "title": f"rule {i}",
                "content": f"rule {i}",
                "valueJson": f"rule {i}",
            },
        }
        for i in range(2)
    ]
    api.post("memory/write", write_body(rules[0], dish(1)))
    body = api.post("memory/write", write_body(rules[1]), expect=409, code="quota_exceeded")
    assert (body["scope"], body["owner"]) == ("workspace", str(default_workspace(tenant_a).pk))


def test_a_supersede_into_another_owner_counts_there(tenant_a, alice):
    viewer = author(tenant_a, alice, "user:alice")
    session_card = make_node(
        tenant=tenant_a,
        workspace=default_workspace(tenant_a),
        kind="temporary_state",
        scope="session",
        session_id="s1",
        title="累了",
        value_json="tired",
    )
    fill(tenant_a, alice, 1)
    set_limit(tenant_a, 1)
    move = {
        "operation": "supersede",
        "target_id": str(session_card.pk),
        "expected_revision": 1,
        "reason": "r",
        "node": {"kind": "skill", "scope": "user", "item_key": "rest", "title": "休息", "content": "休息"},
    }
    with pytest.raises(QuotaExceeded), transaction.atomic():
        node_write_batch(viewer=viewer, operations=[move], explicit_user_intent=True)
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=session_card.pk).status == "active"


def test_a_restore_beyond_the_limit_is_refused(tenant_a, alice):
    viewer = author(tenant_a, alice, "user:alice")
    [card] = fill(tenant_a, alice, 1)
    node_forget(
        viewer=viewer,
        request=ForgetRequest(
            reason="r",
            explicit_user_intent=True,
            mode="soft",
            node_id=card.pk,
            expected_revision=1,
            targets=(),
            all=False,
            selector=NodeSelector(),
            purge_evidence=False,
        ),
    )
    fill(tenant_a, alice, 1, kind="skill")
    set_limit(tenant_a, 1)
    with pytest.raises(QuotaExceeded), transaction.atomic():
        node_restore(viewer=viewer, node_id=card.pk, expected_revision=2, reason="back")
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=card.pk).status == "deleted"
    set_limit(tenant_a, 2)
    assert node_restore(viewer=viewer, node_id=card.pk, expected_revision=2, reason="back").status == "active"


def test_extraction_writes_beyond_the_quota_are_skipped_with_their_reason(tenant_a, alice):
    set_limit(tenant_a, 2)
    viewer = author(tenant_a, alice, "system:extractor")
    writes = [
        NodeWrite(viewer=viewer, operations=[avoid(item)], explicit_user_intent=True)
        for item in ("香菜", "葱", "蒜")
    ]
    outcomes = node_write_bulk(writes=writes, skip_invalid=True)
    assert [o.ok for o in outcomes] == [True, True, False]
    assert (outcomes[2].error.code, outcomes[2].error.extra["headroom"]) == ("quota_exceeded", 0)
    with tenant_context(tenant_a):
        assert sorted(MemoryNode.objects.values_list("item_key", flat=True)) == sorted(["香菜", "葱"])


def test_cards_added_counts_new_ordinary_cards_less_the_retired():
    a = MemoryNode(scope="user", owner_ref="user:1", kind="skill", status="active")
    b = MemoryNode(scope="user", owner_ref="user:1", kind="skill", status="active")
    s = MemoryNode(scope="session", owner_ref="session:1:s", kind="task", status="active")
    journal = MemoryNode(scope="user", owner_ref="user:1", kind="journal", status="active")
    assert cards_added([a, s, journal]) == {"user:1": 1}
    assert cards_added([a], [b]) == {"user:1": 0}


# --------------------------------------------------------------------------- concurrency


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_batches_cannot_both_pass_the_limit(tenant_a):
    owner = make_member(tenant=tenant_a, username="alice", role="owner")
    set_limit(tenant_a, 5)
    viewer = author(tenant_a, owner, "user:alice")

    def writer(name: str) -> None:
        node_write_batch(
            viewer=viewer,
            explicit_user_intent=True,
            operations=[avoid(f"{name}-{index}") for index in range(3)],
        )

    errors = side_by_side(writer)
    assert [type(error) for error in errors] == [QuotaExceeded]
    with tenant_context(tenant_a):
        assert MemoryNode.objects.filter(status="active").count() == 3


def test_the_check_runs_under_the_chain_lock(tenant_a, alice):
    """Without the lock two writers could read the same headroom: quota_require must see a held lock."""
    from django.db import connection

    from memory.services.audit import AUDIT_CHAIN_LOCK

    seen = []

    def spy(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        if "memory_scopecardcount" in sql and sql.lstrip().startswith("SELECT"):  # the quota count
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                    "AND pid = pg_backend_pid()",
                    [AUDIT_CHAIN_LOCK],
                )
                seen.append(cursor.fetchone()[0])
        return execute(sql, params, many, context)

    viewer = author(tenant_a, alice, "user:alice")
    with connection.execute_wrapper(spy):
        node_write_batch(viewer=viewer, explicit_user_intent=True, operations=[avoid("香菜")])
        node_write_batch(
            viewer=viewer,
            explicit_user_intent=True,
            operations=[avoid("葱"), {**avoid("葱"), "node": {**avoid("葱")["node"], "content": "again"}}],
        )
    assert seen == [1, 1]  # the set-based batch, then the one-by-one batch (its second create supersedes)


def test_quota_require_passes_an_owner_that_gains_nothing(tenant_a, alice):
    fill(tenant_a, alice, 1)
    set_limit(tenant_a, 0)
    with tenant_context(tenant_a):
        quota_require(tenant=tenant_a, adding={f"user:{alice.pk}": 0})
        with pytest.raises(QuotaExceeded):
            quota_require(tenant=tenant_a, adding={f"user:{alice.pk}": 1})


# --------------------------------------------------------------------------- imports


def _export(tenant: Tenant, workspace, tmp_path):  # noqa: ANN001, ANN202
    from memory.transfer.sqlite_export import workspace_export_sqlite

    path = tmp_path / "x.sqlite"
    workspace_export_sqlite(tenant=tenant, workspace=workspace, path=path)
    return path


def test_an_import_beyond_the_limit_is_refused_whole(tenant_a, alice, tmp_path):
    source = make_workspace(tenant=tenant_a, name="Source")
    for index in range(3):
        make_node(
            tenant=tenant_a,
            workspace=source,
            kind="hard_constraint",
            scope="workspace",
            title=f"rule {index}",
            item_key=f"rule{index}",
        )
    path = _export(tenant_a, source, tmp_path)
    target = make_workspace(tenant=tenant_a, name="Target")
    set_limit(tenant_a, 2)
    before = state(tenant_a)
    with pytest.raises(QuotaExceeded) as refused, transaction.atomic():
        operator_import(tenant=tenant_a, workspace=target, path=path)
    assert (refused.value.extra["owner"], refused.value.extra["headroom"]) == (str(target.pk), 2)
    assert state(tenant_a) == before
    set_limit(tenant_a, 3)
    assert operator_import(tenant=tenant_a, workspace=target, path=path).imported.nodes == 3


def test_an_import_of_new_revisions_adds_nothing(tenant_a, alice, tmp_path):
    workspace = default_workspace(tenant_a)
    for index in range(2):
        make_node(
            tenant=tenant_a,
            workspace=workspace,
            kind="hard_constraint",
            scope="workspace",
            title=f"rule {index}",
            item_key=f"rule{index}",
        )
    path = _export(tenant_a, workspace, tmp_path)
    set_limit(tenant_a, 2)
    report = operator_import(tenant=tenant_a, workspace=workspace, path=path)
    assert report.imported.nodes == 0


def test_the_import_api_answers_quota_exceeded(client, api, tenant_a, alice, tmp_path):
    source = make_workspace(tenant=tenant_a, name="Source")
    make_node(tenant=tenant_a, workspace=source, kind="hard_constraint", scope="workspace", title="rule")
    path = _export(tenant_a, source, tmp_path)
    target = make_workspace(tenant=tenant_a, name="Target")
    set_limit(tenant_a, 0)
    with open(path, "rb") as handle:
        body = api.post(
            f"workspaces/{target.pk}/import",
            {"file": handle},
            multipart=True,
            expect=409,
            code="quota_exceeded",
        )
    assert body["headroom"] == 0
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(workspace=target).exists()


def test_an_extraction_run_that_hits_the_quota_skips_those_writes_and_finishes(
    tenant_a, alice, django_capture_on_commit_callbacks
):
    from tests.test_extraction import active_nodes, capture, extract

    capture(tenant_a, "alice", "s1", "以后做饭别给我推荐香菜，我喜欢少油少辣。")
    capture(tenant_a, "alice", "s1", "记住了，以后推荐菜谱会避开香菜，并且少油少辣。", role="assistant")
    fill(tenant_a, alice, 1)
    set_limit(tenant_a, 2)
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert run.status == "done"
    assert run.results["counts"] == {"applied": 1, "noop": 0, "skipped": 1, "ignored": 0}
    [skipped] = [item for item in run.results["items"] if item.get("outcome") == "skipped"]
    assert skipped["code"] == "quota_exceeded"
    assert len(active_nodes(tenant_a, scope="user")) == 2
