"""What one API request costs outside the search arms: statements per request, the API-key cache, the
access-count bump after the commit.

The budgets count every statement the request thread sends through the test client (the test's
transaction makes the request a savepoint: two of them). They do not grow with the data; bench/
request_overheads.py reports the same requests' statements and times on a seeded tenant.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import MemoryNode
from memory.pipeline import tasks
from memory.search.embeddings import get_provider
from tenants.context import tenant_context
from tenants.services import api_key_create, api_key_revoke
from tests.api_client import Api
from tests.factories import make_tenant
from tests.test_api_memory_rules import cilantro, create, write

pytestmark = pytest.mark.django_db
SESSION = "s-1"


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    issued = api_key_create(tenant=tenant_a, name="agent")
    api = Api(client, issued.raw_key)
    api.api_key = issued.api_key
    api.post("messages", {"sessionId": SESSION, "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜，也不要葱。"}]}, expect=201)
    return api


@pytest.fixture
def cards(api) -> list[str]:  # noqa: ANN001
    results = write(api, create(cilantro()), create(cilantro(itemKey="葱", valueJson="葱", title="不吃葱",
                                                               content="不要葱")))["results"]
    return [r["nodeId"] for r in results]


def access_counts(tenant, node_ids) -> list[int]:  # noqa: ANN001
    with tenant_context(tenant):
        counts = dict(MemoryNode.objects.filter(pk__in=node_ids).values_list("pk", "access_count"))
    return [counts[MemoryNode._meta.pk.to_python(node_id)] for node_id in node_ids]


def sent(captured: CaptureQueriesContext, prefix: str) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"].startswith(prefix)]


# --------------------------------------------------------------------------- API keys


def test_a_revoked_key_is_refused_at_once_though_its_tenant_is_remembered(api, tenant_a):
    api.get("workspaces")  # the process now remembers where the key lives
    api_key_revoke(tenant=tenant_a, api_key_id=api.api_key.pk)
    api.get("workspaces", expect=401)


@pytest.mark.django_db(transaction=True)
def test_a_remembered_key_costs_one_binding_and_one_read(client):
    """Each request its own transaction, as in production: the tenant is bound once, by the key's edge."""
    issued = api_key_create(tenant=make_tenant("keys-a", owner="key-alice"))
    api = Api(client, issued.raw_key)
    api.get("workspaces")
    with CaptureQueriesContext(connection) as captured:
        api.get("workspaces")
    assert [q["sql"][:30] for q in captured.captured_queries] == [
        "BEGIN",
        "SELECT set_config('ekko.tenant",
        'SELECT "tenants_apikey"."id", ',
        'SELECT "tenants_workspace"."id',
        "COMMIT",
    ]


# --------------------------------------------------------------------------- access counts


def test_a_search_bumps_access_counts_after_its_commit_in_one_update(api, cards, tenant_a, committed):
    with CaptureQueriesContext(connection) as request_only:
        api.post("memory/search", {"userId": "alice", "queryText": "香菜 葱", "all": True})
    assert not sent(request_only, 'UPDATE "memory_memorynode"'), "the request path sends no UPDATE"
    assert access_counts(tenant_a, cards) == [0, 0]
    with CaptureQueriesContext(connection) as captured, committed():
        api.post("memory/search", {"userId": "alice", "queryText": "香菜 葱", "all": True})
        api.post("context", {"sessionId": SESSION, "userId": "alice", "queryText": "做饭 香菜",
                             "tokenBudget": 2000})
    updates = sent(captured, 'UPDATE "memory_memorynode" SET "access_count"')
    assert len(updates) == 2, "one UPDATE per request's batch"
    assert access_counts(tenant_a, cards)[0] == 2


def test_a_broker_outage_applies_the_access_counts_at_once(api, cards, tenant_a, monkeypatch, committed):
    def broker_down(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(tasks.record_access, "delay", broker_down)
    with committed():
        api.post("memory/search", {"userId": "alice", "key": "avoid_ingredient"})
    assert access_counts(tenant_a, cards) == [1, 1]


def test_a_failed_request_counts_no_access(api, cards, tenant_a, committed):
    with committed():
        api.post("memory/search", {"userId": "nobody", "queryText": "香菜"}, expect=404, code="not_found")
    assert access_counts(tenant_a, cards) == [0, 0]


# --------------------------------------------------------------------------- statements per request


# In the test's transaction a request is a savepoint (+2 statements) and the tenant stays bound from
# the request before (the binding is not sent again); in production each request is a transaction of
# its own that sends the binding once: one statement fewer than these budgets.
@pytest.mark.parametrize(("path", "body", "budget"), [
    # savepoint; key; workspace; member; ef_search, arms, cards; successors, owners; release
    ("memory/search", {"userId": "alice", "queryText": "香菜 葱", "limit": 20}, 10),
    # the same without the text arms
    ("memory/search", {"userId": "alice", "kinds": ["food_avoidance"], "valueJson": "香菜"}, 8),
    # savepoint; key; workspace; member; the pack's savepoint, recent messages, summary, standing
    # cards (always-recalled, then the rest), both searches (ef_search, arms, cards; ef_search, arms);
    # successors, owners; release
    ("context", {"sessionId": SESSION, "userId": "alice", "queryText": "做饭 香菜", "tokenBudget": 2000}, 17),
])
def test_reads_send_a_fixed_number_of_statements(api, cards, django_assert_max_num_queries, path, body,
                                                 budget):
    get_provider()  # load the model outside the measured block
    api.post(path, body)
    for i in range(5):
        more = cilantro(itemKey=f"菜{i}", valueJson=f"菜{i}", title=f"不吃菜{i}", content="香菜 葱")
        write(api, create(more))
    with django_assert_max_num_queries(budget):
        api.post(path, body)


def test_a_write_sends_a_fixed_number_of_statements(api, cards, django_assert_max_num_queries):
    write(api, create(cilantro(itemKey="蒜", valueJson="蒜", title="不吃蒜", content="不要蒜")))
    # savepoint; key; workspace; the card's owner; the service's savepoint, audit-chain lock, kinds,
    # cited messages, owner, slot occupant, the owner's quota count, the insert (in a savepoint), audit
    # event; releases
    with django_assert_max_num_queries(17):
        write(api, create(cilantro(itemKey="姜", valueJson="姜", title="不吃姜", content="不要姜")))
