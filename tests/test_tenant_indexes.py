"""Big tenants' own search structures (memory.tenant_indexes) on the real database, and the capped keyword arm.

The sweep builds a tenant's partial HNSW index and term statistics when it crosses the threshold,
keeps them down to half of it, drops them below that or when the tenant is deleted, rebuilds an
interrupted build; searches return the same cards and messages, with the same scores, with and
without them, and the vector arm's own statement can walk the tenant's index.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, connections

from memory.models import MemoryNode, MemoryTermStat
from memory.search import hybrid, keyword_arm
from memory.search.embeddings import get_provider
from memory.search.keyword_arm import KEYWORD_ROWS_READ, CappedPlan, TermStats, capped_plan
from memory.search.messages import search_messages
from memory.search.retrieval import MemoryQuery, search_nodes
from memory.tenant_indexes import existing_indexes, index_name, sweep_plan, tenant_indexes_sweep
from tenants.context import tenant_context
from tests.memory_factories import default_workspace, make_member, make_message, make_node, make_viewer

CARDS = [
    ("Avoid coriander", "The user never eats coriander, not even a little."),
    ("Peanut allergy", "The user is allergic to peanuts; check every sauce."),
    ("Morning coffee", "The user drinks black coffee every morning before work."),
    ("Deploy on Fridays", "The team never deploys on Fridays; releases go out on Tuesdays."),
    ("Python at work", "The user writes Python at work and Rust at home."),
    ("Cat named Mochi", "The user has a cat named Mochi who likes the sofa."),
    ("不吃香菜", "用户不吃香菜，点菜时提醒。"),
    ("每周五开会", "团队每周五下午开周会。"),
    ("Running", "The user runs every Saturday morning in the park."),
    ("Tea in the evening", "In the evening the user drinks green tea instead of coffee."),
]
QUERIES = ["coriander", "coffee morning", "what does the user drink", "猫", "deploy release", "sofa"]


@pytest.fixture(autouse=True)
def no_tenant_indexes_left(request):  # noqa: ANN001, ANN201
    """Drop the tenants' own indexes a test built: flushing a test's rows leaves DDL behind, and a later
    test (memory.index_health's) would report them as a deleted tenant's."""
    yield
    if request.node.get_closest_marker("django_db") is None:
        return
    with connections["owner"].cursor() as cursor:
        for index in existing_indexes():
            cursor.execute(f'DROP INDEX IF EXISTS "{index.name}"')


@pytest.fixture
def small_thresholds(monkeypatch):  # noqa: ANN001, ANN201
    """Make a few dozen rows a big tenant: a term of two rows is common, a set of 20 rows is big."""
    monkeypatch.setattr(MemoryTermStat, "KEPT_FROM", 2)
    monkeypatch.setattr(hybrid, "ROW_COUNT_REUSE_FROM", 20)
    hybrid._row_counts.clear()
    hybrid._big_tenants.clear()
    keyword_arm.forget_term_stats()
    yield
    hybrid._row_counts.clear()
    hybrid._big_tenants.clear()
    keyword_arm.forget_term_stats()


def _fill(tenant, *, copies: int, with_messages: bool = True):  # noqa: ANN001, ANN202
    workspace = default_workspace(tenant)
    user = make_member(tenant=tenant, username=f"{tenant.slug}-user")
    texts = [f"{title}\n{content}" for title, content in CARDS]
    vectors = get_provider().embed(texts)
    for copy in range(copies):
        for (title, content), vector in zip(CARDS, vectors, strict=True):
            make_node(tenant=tenant, workspace=workspace, user=user, title=f"{title} {copy}", content=content,
                      kind="project_context", scope="workspace" if copy % 2 else "user", embedding=vector)
            if with_messages:
                make_message(tenant=tenant, workspace=workspace, session_id=f"s{copy}", content=content,
                             embedding=vector)
    return make_viewer(tenant=tenant, workspace=workspace, session_id=None, user=user)


def _answers(viewer):  # noqa: ANN001, ANN202
    provider = get_provider()
    found = {}
    for text in QUERIES:
        vector = provider.embed([text])[0]
        # Twice: the first search counts the rows, the second may use what the count told it.
        for _ in range(2):
            cards = search_nodes(viewer=viewer, query=MemoryQuery(query_text=text, limit=10), record_access=False,
                                 query_embedding=vector)
            messages, _ = search_messages(viewer=viewer, query_text=text, limit=10, query_embedding=vector)
        found[text] = ([(hit["nodeId"], hit["score"]) for hit in cards.diagnostics["hits"]],
                       [(message.message_id, round(score, 9)) for message, score in messages])
    return found


def _own_indexes(tenant) -> set[str]:  # noqa: ANN001
    return {index.name for index in existing_indexes() if index.tenant_id == tenant.pk and index.valid}


def _stats(tenant, source: str = "node") -> dict[str, int]:  # noqa: ANN001
    with tenant_context(tenant):
        return dict(MemoryTermStat.objects.filter(tenant=tenant, source=source).values_list("term", "documents"))


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_the_sweep_gives_a_big_tenant_its_index_and_statistics_and_takes_them_back(tenant_a, tenant_b,
                                                                                    small_thresholds):
    _fill(tenant_a, copies=4)  # 40 cards, 40 messages
    _fill(tenant_b, copies=1)
    names = {index_name(kind, tenant_a.pk, method) for kind in ("node", "message") for method in ("hnsw", "gin")}

    result = tenant_indexes_sweep(threshold=30)
    assert set(result.created) == names and _own_indexes(tenant_a) == names and not _own_indexes(tenant_b)
    with connections["owner"].cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef(%s::regclass), pg_get_indexdef(%s::regclass)",
                       [index_name("node", tenant_a.pk), index_name("message", tenant_a.pk, "gin")])
        hnsw, gin = cursor.fetchone()
    assert "USING hnsw (embedding vector_cosine_ops)" in hnsw and f"(tenant_id = {tenant_a.pk})" in hnsw
    assert "memory_memorymessage USING gin (search_vector)" in gin and f"(tenant_id = {tenant_a.pk})" in gin
    stats = _stats(tenant_a)
    # Each card's words are in its four copies; a card's own number (its title's "0" .. "3") is in ten.
    assert stats[""] == 40 and stats["coriand"] == 4 and stats["0"] == 10 and _stats(tenant_a, "message")
    assert not _stats(tenant_b)
    assert tenant_indexes_sweep(threshold=30).plan.create == []  # nothing to do the second time

    # Down to 20 rows: above half the threshold, the tenant keeps both.
    with tenant_context(tenant_a):
        doomed = list(MemoryNode.objects.filter(tenant=tenant_a).order_by("pk").values_list("pk", flat=True)[:20])
        MemoryNode.objects.filter(tenant=tenant_a, pk__in=doomed).delete()
    assert sweep_plan(threshold=30).drop == [] and _own_indexes(tenant_a) == names
    # Down to 10: the card index and statistics go, the message ones stay.
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(tenant=tenant_a, pk__in=list(
            MemoryNode.objects.filter(tenant=tenant_a).values_list("pk", flat=True)[:10])).delete()
    result = tenant_indexes_sweep(threshold=30)
    node_indexes = {index_name("node", tenant_a.pk, method) for method in ("hnsw", "gin")}
    assert set(result.dropped) == node_indexes and result.plan.clear == [("node", tenant_a.pk)]
    assert _own_indexes(tenant_a) == names - node_indexes and not _stats(tenant_a) and _stats(tenant_a, "message")

    out = StringIO()
    call_command("tenant_indexes", "--from", "30", "--dry-run", stdout=out)
    assert "would build 0, drop 0" in out.getvalue()


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_deleted_tenants_index_is_dropped_and_an_interrupted_build_is_built_again(tenant_b, small_thresholds):
    _fill(tenant_b, copies=3, with_messages=False)
    tenant_indexes_sweep(threshold=30)
    gone = tenant_b.pk + 1000  # a tenant deleted since its index was built
    node_gone, node_b = index_name("node", gone), index_name("node", tenant_b.pk)
    with connections["owner"].cursor() as cursor:
        cursor.execute(f"CREATE INDEX {node_gone} ON memory_memorynode USING hnsw (embedding vector_cosine_ops) "
                       f"WHERE tenant_id = {gone}")
        # What a cancelled CREATE INDEX CONCURRENTLY leaves behind.
        cursor.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", [node_b])
    assert {index.name: index.valid for index in existing_indexes() if index.method == "hnsw"} == {
        node_gone: True, node_b: False}
    result = tenant_indexes_sweep(threshold=30)
    assert set(result.dropped) == {node_gone, node_b} and result.created == [node_b]
    assert {index.name: index.valid for index in existing_indexes()} == {
        node_b: True, index_name("node", tenant_b.pk, "gin"): True}


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_searches_are_the_same_with_and_without_a_tenants_index_and_statistics(tenant_a, tenant_b,
                                                                              small_thresholds):
    viewer = _fill(tenant_a, copies=4)
    _fill(tenant_b, copies=2)
    before = _answers(viewer)
    assert all(cards for cards, _ in before.values()) and any(messages for _, messages in before.values())

    result = tenant_indexes_sweep(threshold=30)
    assert index_name("node", tenant_a.pk) in result.created and ("node", tenant_a.pk) in result.refreshed
    keyword_arm.forget_term_stats()
    sent = []
    with connection.execute_wrapper(lambda execute, sql, *rest: sent.append(sql) or execute(sql, *rest)):
        after = _answers(viewer)
    assert after == before
    # The second search of each pair took its frequencies from the statistics (the capped arm).
    assert any(sql.startswith("WITH df AS MATERIALIZED") or "UNION ALL (SELECT 'f'" in sql for sql in sent)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_the_vector_arms_statement_can_walk_the_tenants_own_index(tenant_a, tenant_b, small_thresholds):
    viewer = _fill(tenant_a, copies=4, with_messages=False)
    tenant_indexes_sweep(threshold=30)
    vector = get_provider().embed(["coffee"])[0]
    plans = []

    def explain(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        if "UNION ALL" in sql and not plans:
            plans.append("")
            with connection.cursor() as cursor:
                # A 40-row tenant is sorted faster than walked; price sorting out to see the index is usable.
                cursor.execute("SET LOCAL enable_sort = off")
                cursor.execute("EXPLAIN " + sql, params)
                plans[0] = "\n".join(row[0] for row in cursor.fetchall())
                cursor.execute("SET LOCAL enable_sort = on")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        search_nodes(viewer=viewer, query=MemoryQuery(query_text="coffee", limit=10), record_access=False,
                     query_embedding=vector)
    assert f"Index Scan using {index_name('node', tenant_a.pk)}" in plans[0]


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_keyword_match_is_a_gin_index_condition_under_row_level_security(tenant_a, tenant_b):
    """`search_vector @@ q` can use a GIN index for the application's role (migration 0010). Without a
    leakproof ts_match_vq, row-level security keeps it a filter evaluated on every row of the tenant, and
    a big tenant's keyword search reads all of its rows."""
    _fill(tenant_a, copies=1, with_messages=False)
    with tenant_context(tenant_a), connection.cursor() as cursor:
        # Price out every other way to the rows: only the GIN index, or reading the table, remains.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN SELECT id FROM memory_memorynode "
                       "WHERE search_vector @@ to_tsquery('simple', %s)", ["coriand"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on node_search_gin" in plan, plan


def test_the_capped_arm_reads_the_rarest_terms_that_fit_and_pairs_the_two_rarest_when_none_does():
    stats = TermStats(collection=100_000, documents={"der": 22_000, "nutzer": 16_000, "feta": 2_800,
                                                     "isst": 3_900, "brie": 300, "kaese": 700})
    # "zzz" is absent: rarer than any kept term, counted exactly in the statement.
    plan = capped_plan(["der", "brie", "zzz", "kaese", "feta"], stats)
    assert plan == CappedPlan(frequencies=[22_000, 300, None, 700, 2_800], read=[2, 1], pair=None)
    assert sum([MemoryTermStat.KEPT_FROM, 300]) <= KEYWORD_ROWS_READ < sum([MemoryTermStat.KEPT_FROM, 300, 700])
    plan = capped_plan(["isst", "der", "nutzer", "feta"], stats)
    assert plan.read == [3] and plan.pair == (3, 0)
    assert capped_plan(["der"], stats).pair is None
