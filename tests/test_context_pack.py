"""The context pack (DESIGN rules 9, 11, 12): layers, budget, always-recalled kinds, failure handling."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, OperationalError
from django.utils import timezone

from memory.models import MemoryNode
from memory.rules.text import count_tokens
from memory.search import context as context_module
from memory.search.context import build_context
from memory.search.embeddings import get_provider
from tenants.context import tenant_context
from tests.memory_factories import (
    default_workspace,
    make_member,
    make_message,
    make_node,
    make_summary,
    make_viewer,
)

LONG_CHINESE = "今天我们讨论了项目的数据库迁移方案，决定先在测试环境演练，然后再安排上线窗口。" * 6
LONG_ENGLISH = "We walked through the migration plan, the rollback steps and who is on call tonight. " * 6


@pytest.fixture
def world(tenant_a, tenant_b):
    ws_a, ws_b = default_workspace(tenant_a), default_workspace(tenant_b)
    ann = make_member(tenant=tenant_a, username="ann")
    bea = make_member(tenant=tenant_b, username="bea")
    make_node(tenant=tenant_b, workspace=ws_b, title="B 租户：不吃香菜", content="不吃香菜", user=bea)
    make_message(tenant=tenant_b, workspace=ws_b, session_id="s1", content="B 租户的消息：香菜")
    make_summary(tenant=tenant_b, workspace=ws_b, session_id="s1", summary="B 租户的摘要")

    class World:
        tenant, workspace, user = tenant_a, ws_a, ann
        viewer = make_viewer(tenant=tenant_a, workspace=ws_a, session_id="s1", user=ann)

        @staticmethod
        def node(**kwargs):
            kwargs.setdefault("user", ann)
            return make_node(tenant=tenant_a, workspace=ws_a, **kwargs)

        @staticmethod
        def message(content, **kwargs):
            kwargs.setdefault("session_id", "s1")
            return make_message(tenant=tenant_a, workspace=ws_a, content=content, **kwargs)

        @staticmethod
        def summary(text, **kwargs):
            return make_summary(tenant=tenant_a, workspace=ws_a, session_id="s1", summary=text, **kwargs)

    return World


def fill_everything(world) -> None:
    """A busy session: long turns, a summary chain, many memories of every kind."""
    start = timezone.now() - timedelta(hours=2)
    for i in range(30):
        world.message(
            (LONG_CHINESE if i % 2 else LONG_ENGLISH) + f" #{i}",
            role="user" if i % 2 else "assistant",
            created_at=start + timedelta(minutes=i),
        )
    first = world.summary("第一段摘要：讨论需求。")
    world.summary(
        "第二段摘要：确定了迁移方案。" * 20,
        parent=first,
        current_goal="完成数据库迁移",
        pending_work=["演练", "上线"],
    )
    world.node(title="称呼用户为老板", kind="interaction_contract", value_json={"addressUserAs": "老板"})
    world.node(title="回答用中文", kind="language_preference", value_json="中文")
    for i in range(25):
        world.node(title=f"偏好 {i}：" + "少油少辣，不要香菜。" * 3, item_key=f"item{i}", importance=0.5)
    for i in range(10):
        world.node(
            title=f"任务 {i}",
            content="迁移演练" * 5,
            kind="task",
            scope="session",
            session_id="s1",
            user=None,
            value_json={"status": "open"},
        )


# --------------------------------------------------------------------------- budget


@pytest.mark.parametrize("budget", [0, 50, 200, 4000])
def test_context_prompt_never_exceeds_the_token_budget(world, budget) -> None:
    fill_everything(world)
    pack = build_context(
        viewer=world.viewer, query_text="数据库迁移 香菜 what did we decide", token_budget=budget
    )
    assert count_tokens(pack.prompt) <= budget
    assert pack.diagnostics["usedTokens"] == count_tokens(pack.prompt)
    assert pack.diagnostics["tokenBudget"] == budget
    assert pack.diagnostics["storeStatus"] == "ok"


def test_context_budget_cuts_long_term_first_then_short_term(world) -> None:
    fill_everything(world)
    small = build_context(viewer=world.viewer, query_text="迁移", token_budget=200)
    medium = build_context(viewer=world.viewer, query_text="迁移", token_budget=600)
    large = build_context(viewer=world.viewer, query_text="迁移", token_budget=4000)
    assert small.recent_messages, "working memory survives the smallest useful budget"
    assert len(small.used_memory_ids) <= len(medium.used_memory_ids) <= len(large.used_memory_ids)
    assert len(large.used_memory_ids) == 20, "nodes 10-20: the cap is 20"
    assert large.latest_summary is not None
    # Seed 004's split: while the other layers still want room, working memory keeps to its half.
    assert len(medium.used_memory_ids) < 20
    working_section = medium.prompt[medium.prompt.index("Recent messages:") :]
    assert count_tokens(working_section) <= 600 // 2


def test_context_unused_layer_budget_flows_to_the_others(world) -> None:
    # No messages and no summary: long-term memory may use the whole budget.
    for i in range(25):
        world.node(title=f"偏好 {i}", content="少油少辣" * 4, item_key=f"item{i}")
    pack = build_context(viewer=world.viewer, query_text="晚饭", token_budget=400)
    assert count_tokens(pack.prompt) > 400 * 20 // 100
    assert count_tokens(pack.prompt) <= 400
    # Without memories, the session history may use the whole budget.
    for i in range(8):
        world.message(LONG_ENGLISH + str(i))
    only_history = build_context(
        viewer=make_viewer(tenant=world.tenant, workspace=world.workspace, session_id="s1"),
        query_text="",
        token_budget=1000,
    )
    assert count_tokens(only_history.prompt) > 1000 // 2


# --------------------------------------------------------------------------- layers and order


def test_context_recent_messages_are_3_to_8_oldest_first_and_never_subagent(world) -> None:
    start = timezone.now() - timedelta(minutes=30)
    messages = [world.message(f"第 {i} 句话", created_at=start + timedelta(minutes=i)) for i in range(12)]
    world.message(
        "子代理的长篇推理", channel="subagent", role="assistant", created_at=start + timedelta(minutes=20)
    )
    world.message("另一个会话", session_id="s2", created_at=start + timedelta(minutes=21))
    pack = build_context(viewer=world.viewer, query_text="你好", token_budget=4000)
    assert [m.pk for m in pack.recent_messages] == [m.pk for m in messages[-8:]]
    assert "子代理" not in pack.prompt and "另一个会话" not in pack.prompt
    few = build_context(viewer=world.viewer, query_text="你好", token_budget=60)
    assert 1 <= len(few.recent_messages) <= 8
    assert few.recent_messages[-1].pk == messages[-1].pk, "the latest turn is the last to go"


def test_context_has_the_latest_summary_of_the_chain(world) -> None:
    first = world.summary("旧摘要")
    world.summary("新摘要：决定用 PostgreSQL", parent=first, pending_work=["写迁移脚本"])
    pack = build_context(viewer=world.viewer, query_text="数据库", token_budget=4000)
    assert pack.latest_summary.summary.startswith("新摘要")
    assert "新摘要：决定用 PostgreSQL" in pack.prompt and "写迁移脚本" in pack.prompt
    assert "旧摘要" not in pack.prompt


def test_context_always_recalled_kinds_come_first(world) -> None:
    for i in range(15):
        world.node(title=f"非常重要的偏好 {i}", content="少油", item_key=f"p{i}", importance=1.0)
    contract = world.node(
        title="称呼用户为老板",
        kind="interaction_contract",
        importance=0.1,
        value_json={"addressUserAs": "老板"},
    )
    access = world.node(title="字体要大", kind="accessibility_need", importance=0.1, item_key="large_font")
    pack = build_context(viewer=world.viewer, query_text="少油", token_budget=60)
    assert set(pack.used_memory_ids[:2]) == {contract.pk, access.pk}
    assert pack.prompt.startswith("Always apply:\n")
    assert len(pack.used_memory_ids) < 17, "the budget is too small for every preference"


def test_standing_cards_are_read_in_their_indexes_order(world) -> None:
    """The pack's two standing reads walk node_recalled_idx and node_standing_idx (and stop at their
    limit) instead of sorting every standing card of the viewer."""
    from django.db import connection

    world.node(title="称呼用户为老板", kind="interaction_contract", value_json={"addressUserAs": "老板"})
    world.node(title="少油", content="少油")
    plans = []

    def explain(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        if sql.startswith("SELECT") and "ORDER BY" in sql and "importance" in sql:
            plans.append("")
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_sort = off")  # a handful of rows sorts faster than walked
                cursor.execute("EXPLAIN " + sql, params)
                plans[-1] = "\n".join(row[0] for row in cursor.fetchall())
                cursor.execute("RESET enable_sort")
        return execute(sql, params, many, context)

    with tenant_context(world.tenant), connection.execute_wrapper(explain):
        standing = context_module.node_list_standing(viewer=world.viewer, now=timezone.now())
    assert [node.kind for node in standing][:1] == ["interaction_contract"]
    assert "node_recalled_idx" in plans[0] and "node_standing_idx" in plans[1], plans


def test_context_sorts_nodes_into_tasks_constraints_preferences_and_relevant(world) -> None:
    task = world.node(
        title="写迁移脚本",
        kind="task",
        scope="session",
        session_id="s1",
        user=None,
        value_json={"status": "open"},
    )
    world.node(
        title="已完成的任务",
        kind="task",
        scope="session",
        session_id="s1",
        user=None,
        value_json={"status": "done"},
    )
    rule = world.node(title="周五前不能发布", kind="hard_constraint", scope="workspace", user=None)
    preference = world.node(title="不吃香菜", content="做饭别放香菜")
    recipe = world.node(title="番茄炒蛋不放香菜", kind="recipe", value_json={"steps": 3})
    other_session = world.node(
        title="别的会话的任务",
        kind="task",
        scope="session",
        session_id="s2",
        user=None,
        value_json={"status": "open"},
    )
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert [n.pk for n in pack.active_tasks] == [task.pk]
    assert [n.pk for n in pack.constraints] == [rule.pk]
    assert [n.pk for n in pack.preferences] == [preference.pk]
    assert [n.pk for n in pack.relevant_nodes] == [recipe.pk]
    assert set(pack.used_memory_ids) == {task.pk, rule.pk, preference.pk, recipe.pk}
    assert other_session.pk not in pack.used_memory_ids and "已完成的任务" not in pack.prompt
    for node in (task, rule, preference, recipe):
        assert node.title in pack.prompt
        assert str(node.pk) not in pack.prompt, "the prompt carries no ids"
    assert pack.diagnostics["retrievedNodeCount"] == 4


def test_context_recalls_relevant_older_messages_of_the_session(world) -> None:
    start = timezone.now() - timedelta(hours=1)
    old = world.message("我们约定数据库用 PostgreSQL 18", created_at=start)
    for i in range(10):
        world.message(f"闲聊 {i}", created_at=start + timedelta(minutes=i + 1))
    pack = build_context(viewer=world.viewer, query_text="PostgreSQL", token_budget=4000)
    assert [m.pk for m in pack.relevant_messages] == [old.pk]
    assert old.pk not in {m.pk for m in pack.recent_messages}
    assert "Earlier in this conversation:\nuser: 我们约定数据库用 PostgreSQL 18" in pack.prompt


def test_context_recalls_across_languages(world) -> None:
    """A Chinese question recalls the English card and the English turn that mean it (vector arm)."""

    def embedded(text: str) -> list[float]:
        return get_provider().embed([text])[0]

    card = world.node(
        title="Hates coriander",
        content="The user hates coriander in any dish.",
        kind="recipe",
        embedding=embedded("Hates coriander\nThe user hates coriander in any dish."),
    )
    world.node(title="Launch on Friday", content="The launch is on Friday.", kind="recipe",
               embedding=embedded("Launch on Friday\nThe launch is on Friday."))
    start = timezone.now() - timedelta(hours=1)
    turn = world.message("I never eat coriander, it tastes like soap", created_at=start,
                         embedding=embedded("I never eat coriander, it tastes like soap"))
    for i in range(10):
        world.message(f"闲聊 {i}", created_at=start + timedelta(minutes=i + 1))
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert [n.pk for n in pack.relevant_nodes][0] == card.pk, "memory/search's ranking: the nearest card leads"
    assert [m.pk for m in pack.relevant_messages] == [turn.pk]


def test_context_never_shows_tenant_b(world) -> None:
    fill_everything(world)
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert "B 租户" not in pack.prompt


def test_context_bumps_access_counts_of_used_nodes_only(world, committed) -> None:
    used = world.node(title="不吃香菜")
    expired = world.node(
        title="今天不吃辣", kind="temporary_state", expires_at=timezone.now() - timedelta(hours=1)
    )
    with committed():  # the bump is applied after the commit, in the background
        build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    with tenant_context(world.tenant):
        used_after, expired_after = MemoryNode.objects.get(pk=used.pk), MemoryNode.objects.get(pk=expired.pk)
    assert (used_after.access_count, used_after.revision) == (1, used.revision)
    assert expired_after.access_count == 0


def test_build_context_query_count_is_capped(world, django_assert_max_num_queries) -> None:
    fill_everything(world)
    get_provider()  # load the model outside the measured block
    # One tenant transaction for the pack (savepoint, bind, unbind, release) and one savepoint the
    # parts fall back to; recent messages, summary, standing cards (the always-recalled ones, then
    # the rest); the searches add ef_search, the text arms, the cards' select, the turns that follow
    # the best messages and the winning messages' select; the access bump is queued for after the
    # commit: the count does not grow with the data.
    with django_assert_max_num_queries(16):
        build_context(viewer=world.viewer, query_text="迁移 香菜", token_budget=4000)


# --------------------------------------------------------------------------- failure never blocks


def fake_database_failure(*args, **kwargs):
    """Stands in for one of our own selectors when simulating a database failure."""
    raise OperationalError("simulated: server closed the connection unexpectedly")


def test_context_degrades_when_one_part_fails(world, monkeypatch) -> None:
    world.summary("会话摘要")
    world.message("你好")
    node = world.node(title="不吃香菜")
    monkeypatch.setattr(context_module, "summary_get_latest", fake_database_failure)
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert pack.diagnostics["storeStatus"] == "degraded"
    assert pack.diagnostics["warnings"] == [
        "latest summary unavailable (OperationalError); the pack was built without it."
    ]
    assert pack.latest_summary is None and "会话摘要" not in pack.prompt
    assert pack.recent_messages and pack.used_memory_ids == [node.pk]


def test_context_degrades_when_the_search_fails(world, monkeypatch) -> None:
    world.node(title="不吃香菜")
    monkeypatch.setattr(context_module, "search_nodes", fake_database_failure)
    monkeypatch.setattr(context_module, "search_messages", fake_database_failure)
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert pack.diagnostics["storeStatus"] == "degraded"
    assert len(pack.diagnostics["warnings"]) == 2
    assert pack.preferences, "standing memories still arrive from their own selector"


def test_context_is_disabled_when_every_part_fails(world, monkeypatch) -> None:
    world.node(title="不吃香菜")
    for name in (
        "message_list_recent",
        "summary_get_latest",
        "node_list_standing",
        "search_nodes",
        "search_messages",
    ):
        monkeypatch.setattr(context_module, name, fake_database_failure)
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert pack.diagnostics["storeStatus"] == "disabled"
    assert len(pack.diagnostics["warnings"]) == 5
    assert pack.prompt == "" and pack.used_memory_ids == [] and pack.recent_messages == []


def test_context_failure_inside_the_database_rolls_back_only_that_part(world, monkeypatch) -> None:
    """A real failing statement (not a fake): the part's savepoint rolls back and later parts still run."""
    world.message("你好")
    world.node(title="不吃香菜")
    real_summary = context_module.summary_get_latest

    def summary_with_a_broken_statement(*, viewer):
        with tenant_context(viewer.tenant):
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")  # division_by_zero: a DataError, a DatabaseError
        return real_summary(viewer=viewer)

    monkeypatch.setattr(context_module, "summary_get_latest", summary_with_a_broken_statement)
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert pack.diagnostics["storeStatus"] == "degraded"
    assert pack.recent_messages and pack.preferences
    assert issubclass(OperationalError, DatabaseError)


def test_context_failed_read_without_a_savepoint_spoils_no_later_part(world, monkeypatch) -> None:
    """A read joins the pack's transaction without a savepoint of its own (`savepoint=False`): when
    its statement fails, the pack rolls back to its own savepoint so the later parts still run."""
    world.message("你好")
    world.node(title="不吃香菜")

    def summary_with_a_broken_statement(*, viewer):
        from django.db import connection

        with tenant_context(viewer.tenant, savepoint=False), connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")  # division_by_zero aborts the transaction

    monkeypatch.setattr(context_module, "summary_get_latest", summary_with_a_broken_statement)
    pack = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000)
    assert pack.diagnostics["warnings"] == [
        "latest summary unavailable (DataError); the pack was built without it."
    ]
    assert pack.recent_messages and pack.preferences and pack.used_memory_ids
