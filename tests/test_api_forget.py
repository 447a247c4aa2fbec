"""Rule 10: forgetting — soft keeps an audited row, hard erases row, index entry, vector and content."""

from __future__ import annotations

import pytest
from django.db import connection

from memory.models import MemoryAuditEvent, MemoryNode
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.test_api_memory_rules import cilantro, create, write

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    api.post("messages", {"sessionId": "s-1", "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜，也不要葱。"}]}, expect=201)
    return api


def _two_avoidances(api) -> list[dict]:  # noqa: ANN001
    return write(api, create(cilantro()), create(cilantro(itemKey="葱", valueJson="葱", title="不吃葱",
                                                          content="不要葱")))["results"]


def forget(api, body, **kwargs):  # noqa: ANN001, ANN003
    return api.post("memory/forget", {"reason": "user asked to forget", "explicitUserIntent": True, **body}, **kwargs)


def test_rule10_soft_forget_keeps_an_audited_row_that_is_never_retrieved_again(api, tenant_a):
    node = _two_avoidances(api)[0]
    result = forget(api, {"id": node["nodeId"], "expectedRevision": 1})
    assert result == {"deletedIds": [node["nodeId"]], "mode": "soft"}
    stored = api.get(f"memory/nodes/{node['nodeId']}")
    assert (stored["status"], stored["revision"]) == ("deleted", 2)
    assert api.post("memory/get", {"key": "avoid_ingredient:香菜", "userId": "alice"})["node"] is None
    found = api.post("memory/search", {"userId": "alice", "queryText": "香菜", "all": True})
    assert node["nodeId"] not in {n["id"] for n in found["exact"] + found["relevant"]}
    events = api.get(f"memory/nodes/{node['nodeId']}/history")["events"]
    assert [e["eventType"] for e in events] == ["create", "delete"]


def test_rule10_hard_forget_removes_row_index_entry_vector_and_content(api, tenant_a):
    node = _two_avoidances(api)[0]
    forget(api, {"id": node["nodeId"], "expectedRevision": 1, "mode": "hard"})
    api.get(f"memory/nodes/{node['nodeId']}", expect=404, code="not_found")
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('ekko.tenant_id', %s, true)", [str(tenant_a.pk)])
        cursor.execute("SELECT count(*) FROM memory_memorynode WHERE search_vector @@ to_tsquery('simple', '香菜')")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM memory_memorynode WHERE id = %s", [node["nodeId"]])
        assert cursor.fetchone()[0] == 0
    with tenant_context(tenant_a):
        payloads = list(MemoryAuditEvent.objects.filter(node_id=node["nodeId"]).values_list("payload", flat=True))
    # The delete event keeps the slot's keyed digest (the extractor's recent rejections), no content.
    [kept] = [payload for payload in payloads if payload]
    assert kept["mode"] == "hard" and set(kept) == {"mode", "slot"} and len(kept["slot"]) == 64
    assert "香菜" not in str(payloads)


def test_rule10_hard_forget_erases_the_older_revisions_too(api, tenant_a):
    first = write(api, create(cilantro()))["results"][0]
    second = write(api, create(cilantro(content="少放香菜")))["results"][0]
    forget(api, {"id": second["nodeId"], "expectedRevision": 2, "mode": "hard"})
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(pk__in=[first["nodeId"], second["nodeId"]]).exists()


def test_rule10_a_selector_matching_several_needs_confirmation(api, tenant_a):
    nodes = _two_avoidances(api)
    body = forget(api, {"kind": "food_avoidance"}, expect=409, code="requires_confirmation")
    assert {c["id"] for c in body["candidates"]} == {n["nodeId"] for n in nodes}
    with tenant_context(tenant_a):
        assert MemoryNode.objects.filter(status="active").count() == 2


def test_rule10_all_or_explicit_targets_confirm_a_multi_match(api, tenant_a):
    nodes = _two_avoidances(api)
    targeted = forget(api, {"targets": [{"id": nodes[0]["nodeId"], "expectedRevision": 1}]})
    assert targeted["deletedIds"] == [nodes[0]["nodeId"]]
    everything = forget(api, {"all": True})
    assert everything["deletedIds"] == [nodes[1]["nodeId"]]


def test_rule10_a_selector_matching_one_forgets_it(api):
    nodes = _two_avoidances(api)
    result = forget(api, {"key": "avoid_ingredient:葱"})
    assert result["deletedIds"] == [nodes[1]["nodeId"]]


def test_rule10_forget_needs_explicit_intent_and_a_reason(api, tenant_a):
    node = _two_avoidances(api)[0]
    forget(api, {"id": node["nodeId"], "expectedRevision": 1, "explicitUserIntent": False}, expect=403,
           code="forbidden")
    api.post("memory/forget", {"id": node["nodeId"], "expectedRevision": 1, "explicitUserIntent": True},
             expect=400, code="invalid")
    api.post("memory/forget", {"id": node["nodeId"], "expectedRevision": 1, "explicitUserIntent": True,
                               "reason": "   "}, expect=400, code="invalid")
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=node["nodeId"]).status == "active"


def test_rule10_forget_with_no_target_at_all_is_invalid(api):
    forget(api, {}, expect=400, code="invalid")


def test_forget_of_a_foreign_or_unknown_id_is_not_found(api):
    forget(api, {"id": "00000000-0000-0000-0000-000000000000", "expectedRevision": 1}, expect=404, code="not_found")
