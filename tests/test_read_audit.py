"""Issue 10, Deliver 5: who (key or person) read which card, when, through which endpoint.

Reads are written after the request in one batch per request, kept EKKO_READ_AUDIT_DAYS days,
shown on the card page and filterable in Django admin.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory.models import MemoryReadEvent
from memory.pipeline import tasks
from memory.services.reads import node_reads_write, read_events_sweep
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.test_api_memory_rules import cilantro, create, write

pytestmark = pytest.mark.django_db
SESSION = "s-1"


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a, name="reader")
    api.post("messages", {"sessionId": SESSION, "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜，也不要葱。"}]}, expect=201)
    return api


@pytest.fixture
def cards(api) -> list[str]:  # noqa: ANN001
    results = write(api, create(cilantro()), create(cilantro(itemKey="葱", valueJson="葱", title="不吃葱",
                                                               content="不要葱")))["results"]
    return [r["nodeId"] for r in results]


def _reads(tenant, **filters) -> list[tuple[str, str, str]]:  # noqa: ANN001, ANN003
    with tenant_context(tenant):
        rows = MemoryReadEvent.objects.filter(tenant=tenant, **filters).order_by("id")
        return [(str(r.node_id), r.endpoint, r.actor) for r in rows]


def test_every_read_endpoint_files_the_cards_it_handed_out(api, cards, tenant_a, committed):
    first, second = cards
    with committed():
        api.post("memory/search", {"userId": "alice", "queryText": "香菜 葱", "all": True})
        api.post("memory/get", {"key": "avoid_ingredient:香菜", "userId": "alice"})
        api.get(f"memory/nodes/{second}")
        api.get(f"memory/nodes/{second}/history")
        api.post("context", {"sessionId": SESSION, "userId": "alice", "queryText": "做饭",
                             "tokenBudget": 2000})
    reads = _reads(tenant_a)
    actor = {r[2] for r in reads}
    assert len(actor) == 1 and actor.pop().startswith("api_key:")
    by_endpoint: dict[str, set[str]] = {}
    for node_id, endpoint, _ in reads:
        by_endpoint.setdefault(endpoint, set()).add(node_id)
    assert by_endpoint["memory/search"] == {first, second}
    assert by_endpoint["memory/get"] == {first}
    assert by_endpoint["memory/nodes/{id}"] == {second}
    assert by_endpoint["history"] == {second}
    assert by_endpoint["context"] <= {first, second} and by_endpoint["context"]


def test_writes_failures_and_other_tenants_file_no_reads(api, cards, tenant_a, tenant_b, client,
                                                         committed):
    with committed():
        write(api, create(cilantro(itemKey="蒜", valueJson="蒜", title="不吃蒜", content="不要蒜")))
        api.get("memory/nodes/00000000-0000-0000-0000-000000000000", expect=404, code="not_found")
        api_for(client, tenant_b).get(f"memory/nodes/{cards[0]}", expect=404, code="not_found")
    assert _reads(tenant_a) == []
    assert _reads(tenant_b) == []


def test_one_request_is_one_insert_whatever_the_number_of_cards(api, cards, committed):
    with CaptureQueriesContext(connection) as queries, committed():
        found = api.post("memory/search", {"userId": "alice", "queryText": "香菜 葱", "all": True})
    assert len(found["exact"] + found["relevant"]) == 2
    insert = 'INSERT INTO "memory_memoryreadevent"'
    inserts = [q for q in queries.captured_queries if q["sql"].startswith(insert)]
    assert len(inserts) == 1


def test_a_broker_outage_writes_the_batch_at_once(api, cards, tenant_a, monkeypatch, committed):
    def broker_down(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(tasks.record_reads, "delay", broker_down)
    with committed():
        api.get(f"memory/nodes/{cards[0]}")
    assert [endpoint for _, endpoint, _ in _reads(tenant_a)] == ["memory/nodes/{id}"]


def test_the_sweep_deletes_reads_past_the_retention_in_every_tenant(tenant_a, tenant_b, settings):
    settings.EKKO_READ_AUDIT_DAYS = 10
    now = timezone.now()
    for tenant in (tenant_a, tenant_b):
        for age in (11, 9):
            node_reads_write(tenant_id=tenant.pk, node_ids=[f"00000000-0000-0000-0000-0000000000{age:02d}"],
                             endpoint="memory/get", actor="api_key:x", user_id=None, api_key_id=None,
                             read_at=(now - timedelta(days=age)).isoformat())
    assert read_events_sweep(now=now) == 2
    for tenant in (tenant_a, tenant_b):
        with tenant_context(tenant):
            ages = [(now - r.created_at).days for r in MemoryReadEvent.objects.filter(tenant=tenant)]
        assert ages == [9]
    assert read_events_sweep(now=now) == 0


def test_the_card_page_says_who_read_it_this_week(api, cards, client, tenant_a, committed):
    with committed():
        for _ in range(3):
            api.get(f"memory/nodes/{cards[0]}")
    client.force_login(get_user_model().objects.get(username="alice"))
    with committed():
        page = client.get(f"/memories/{cards[0]}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"Read by agent key {api.key[:12]}… 3 times this week" in text
    assert ("pages", "user:alice") in {(endpoint, actor) for _, endpoint, actor in _reads(tenant_a)}
    again = client.get(f"/memories/{cards[0]}/").content.decode()
    assert "1 time this week" in again


def test_admin_filters_reads_by_tenant_actor_endpoint_and_date(api, cards, client, tenant_a, tenant_b,
                                                               committed):
    with committed():
        api.get(f"memory/nodes/{cards[0]}")
        api.post("memory/get", {"key": "avoid_ingredient:香菜", "userId": "alice"})
    node_reads_write(tenant_id=tenant_b.pk, node_ids=[cards[1]], endpoint="context", actor="api_key:other",
                     user_id=None, api_key_id=None, read_at=timezone.now().isoformat())
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.com", "ops-password-1"))
    base = "/admin/memory/memoryreadevent/"
    everything = client.get(base)
    assert everything.status_code == 200 and everything.context["cl"].result_count == 3
    today = timezone.now().date()
    for query, expected in [
        (f"?tenant__id__exact={tenant_a.pk}", 2),
        ("?actor=api_key:other", 1),
        ("?endpoint=memory/get", 1),
        (f"?created_at__gte={today}&created_at__lt={today + timedelta(days=1)}", 3),
        (f"?created_at__lt={today - timedelta(days=1)}", 0),
    ]:
        response = client.get(base + query)
        assert response.status_code == 200, query
        assert response.context["cl"].result_count == expected, query
    assert client.get(base + "add/").status_code == 403
