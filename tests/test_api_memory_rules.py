"""The memory rules of DESIGN.md (1–7, 10) through the agent API, one test per rule, named after it."""

from __future__ import annotations

import pytest

from memory.models import MemoryAuditEvent, MemoryKind, MemoryMessage, MemoryNode, MemorySummary
from tenants.context import tenant_context
from tests.api_client import api_for

SESSION = "s-1"


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    return api_for(client, tenant_a)


@pytest.fixture
def evidence(api):  # noqa: ANN001
    api.post("messages", {"sessionId": SESSION, "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜。"},
        {"id": "m2", "role": "assistant", "content": "好的，记住了。"},
        {"id": "m3", "role": "user", "content": "Remember that I prefer answers in English."},
    ]}, expect=201)
    return ["m1"]


def cilantro(**node):  # noqa: ANN003
    return {"kind": "food_avoidance", "itemKey": "香菜", "scope": "user", "userId": "alice", "valueJson": "香菜",
            "title": "用户不吃香菜", "content": "推荐菜谱时避免香菜。", **node}


def write(api, *operations, intent=True, sources=("m1",), **kwargs):  # noqa: ANN001, ANN002, ANN003
    return api.post("memory/write", {"operations": list(operations), "explicitUserIntent": intent,
                                     "sourceMessageIds": list(sources)}, **kwargs)


def create(node, reason="user asked"):  # noqa: ANN001
    return {"operation": "create", "node": node, "reason": reason}


def count(tenant, model, **filters) -> int:  # noqa: ANN001, ANN003
    with tenant_context(tenant):
        return model.objects.filter(**filters).count()


# --- rule 1 ---------------------------------------------------------------------------------------

def test_rule1_messages_are_append_only_and_capture_is_idempotent_on_client_ids(api, tenant_a, evidence):
    again = api.post("messages", {"sessionId": SESSION, "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜。"}]}, expect=201)
    assert again["messages"][0]["id"] == "m1"
    assert count(tenant_a, MemoryMessage, message_id="m1") == 1
    api.post("messages", {"sessionId": SESSION, "messages": [{"id": "m1", "role": "user", "content": "changed"}]},
             expect=400, code="invalid")
    listed = api.get("messages", {"sessionId": SESSION})["messages"]
    assert [m["id"] for m in listed] == ["m1", "m2", "m3"]
    assert listed[0]["content"] == "记住，我以后做饭不要香菜。"


def test_rule1_summaries_append_to_a_chain(api, evidence):
    first = api.post("summaries", {"sessionId": SESSION, "fromMessageId": "m1", "toMessageId": "m2",
                                   "summary": "用户不吃香菜", "constraints": ["不要香菜"]}, expect=201)
    second = api.post("summaries", {"sessionId": SESSION, "fromMessageId": "m3", "toMessageId": "m3",
                                    "summary": "prefers English"}, expect=201)
    assert first["parentSummaryId"] is None and second["parentSummaryId"] == first["id"]
    api.post("summaries", {"sessionId": SESSION, "parentSummaryId": first["id"], "fromMessageId": "m3",
                           "toMessageId": "m3", "summary": "fork"}, expect=409, code="revision_conflict")
    assert api.get("summaries/latest", {"sessionId": SESSION})["summary"]["id"] == second["id"]
    assert api.get("summaries/latest", {"sessionId": "nobody"})["summary"] is None


def test_rule1_summary_must_cite_messages_of_its_session(api, tenant_a, evidence):
    api.post("summaries", {"sessionId": SESSION, "fromMessageId": "m1", "toMessageId": "nope", "summary": "x"},
             expect=400, code="invalid")
    assert count(tenant_a, MemorySummary) == 0


# --- rule 2 ---------------------------------------------------------------------------------------

def test_rule2_same_slot_same_content_is_a_noop(api, tenant_a, evidence):
    first = write(api, create(cilantro()))["results"][0]
    again = write(api, create(cilantro()))["results"][0]
    assert (first["action"], again["action"]) == ("created", "noop")
    assert again["nodeId"] == first["nodeId"] and again["revision"] == 1
    assert count(tenant_a, MemoryNode) == 1


def test_rule2_same_slot_new_content_supersedes_the_old_node(api, tenant_a, evidence):
    first = write(api, create(cilantro()))["results"][0]
    second = write(api, create(cilantro(title="用户可接受少量香菜", content="香菜可以少放一点。")))["results"][0]
    assert second["action"] == "superseded" and second["revision"] == 2 and second["key"] == first["key"]
    old = api.get(f"memory/nodes/{first['nodeId']}")
    new = api.get(f"memory/nodes/{second['nodeId']}")
    assert old["status"] == "superseded" and old["supersededById"] == new["id"]
    assert new["status"] == "active" and new["supersedesId"] == old["id"]
    assert count(tenant_a, MemoryNode, status="active") == 1


# --- rule 3 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("operation", ["update", "supersede", "expire"])
def test_rule3_a_stale_expected_revision_is_a_conflict(api, tenant_a, evidence, operation):
    node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
    body = {"operation": operation, "targetId": node_id, "expectedRevision": 7, "reason": "r",
            "node": {"content": "changed"}}
    write(api, body, expect=409, code="revision_conflict")
    assert api.get(f"memory/nodes/{node_id}")["revision"] == 1


def test_rule3_update_without_expected_revision_is_invalid(api, evidence):
    node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
    write(api, {"operation": "update", "targetId": node_id, "reason": "r", "node": {"content": "x"}},
          expect=400, code="invalid")


def test_rule3_forget_by_id_checks_the_revision(api, evidence):
    node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
    api.post("memory/forget", {"id": node_id, "expectedRevision": 3, "reason": "r", "explicitUserIntent": True},
             expect=409, code="revision_conflict")


def test_update_changes_in_place_and_keeps_previous_values_in_the_audit_trail(api, evidence):
    node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
    result = write(api, {"operation": "update", "targetId": node_id, "expectedRevision": 1, "reason": "typo",
                         "node": {"content": "推荐菜谱时一律避免香菜。", "importance": 0.8}})["results"][0]
    assert (result["action"], result["nodeId"], result["revision"]) == ("updated", node_id, 2)
    history = api.get(f"memory/nodes/{node_id}/history")
    update = [e for e in history["events"] if e["eventType"] == "update"][0]
    assert update["payload"]["before"]["content"] == "推荐菜谱时避免香菜。"
    assert update["payload"]["after"]["content"] == "推荐菜谱时一律避免香菜。"


def test_expire_sets_status_expired_and_bumps_the_revision(api, evidence):
    node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
    result = write(api, {"operation": "expire", "targetId": node_id, "expectedRevision": 1, "reason": "old"})
    assert result["results"][0]["action"] == "expired"
    node = api.get(f"memory/nodes/{node_id}")
    assert (node["status"], node["revision"]) == ("expired", 2) and node["expiresAt"] is not None


# --- rule 4 ---------------------------------------------------------------------------------------

def test_rule4_the_server_generates_canonical_keys_from_kind_and_item_key(api, evidence):
    result = write(api, create(cilantro(kind="disliked_ingredient", itemKey="  Coriander Leaves ")))["results"][0]
    node = api.get(f"memory/nodes/{result['nodeId']}")
    assert node["key"] == "avoid_ingredient:coriander_leaves" and node["kind"] == "food_avoidance"
    assert (node["type"], node["domain"], node["categoryPath"]) == (
        "preference", "生活技能", ["生活技能", "做饭", "饮食偏好"])


def test_rule4_values_normalise(api, evidence):
    result = write(api, create({"kind": "flavor_profile", "scope": "user", "userId": "alice", "valueJson": "少油少辣",
                                "title": "少油少辣", "content": "口味清淡"}))["results"][0]
    assert api.get(f"memory/nodes/{result['nodeId']}")["valueJson"] == {"oil": "low", "spicy": "low"}


@pytest.mark.parametrize("node, field", [
    ({"kind": "no_such_kind"}, "node.kind"),
    ({"kind": "interaction_contract", "itemKey": None, "valueJson": {"colour": "blue"}}, "node.valueJson"),
    ({"kind": "food_avoidance", "itemKey": "2026-11-30T10:00:00"}, "node.itemKey"),
    ({"kind": "food_avoidance", "itemKey": None}, "node.itemKey"),
])
def test_rule4_unknown_kinds_bad_item_keys_and_bad_value_shapes_are_invalid(api, tenant_a, evidence, node, field):
    body = write(api, create(cilantro(**node)), expect=400, code="invalid")
    assert field in body["errors"]
    assert count(tenant_a, MemoryNode) == 0


def test_rule4_tenants_may_add_their_own_kinds(api, tenant_a, tenant_b, evidence):
    with tenant_context(tenant_a):
        MemoryKind.objects.create(tenant=tenant_a, name="wine_preference", slot_key="wine", type="preference",
                                  domain="生活技能", category_path=["生活技能", "饮品"], itemized=True,
                                  default_scope="user", value_shape="string")
    result = write(api, create({"kind": "wine_preference", "itemKey": "Riesling", "userId": "alice",
                                "valueJson": "dry", "title": "Likes dry Riesling", "content": "dry"}))
    assert result["results"][0]["key"] == "wine:riesling"
    other = api_for(api.client, tenant_b)
    other.post("messages", {"sessionId": SESSION, "messages": [{"id": "b1", "role": "user", "content": "x"}]},
               expect=201)
    write(other, create({"kind": "wine_preference", "itemKey": "Riesling", "userId": "bob", "valueJson": "dry",
                         "title": "t", "content": "c"}), sources=["b1"], expect=400, code="invalid")


# --- rule 5 ---------------------------------------------------------------------------------------

def test_rule5_agents_never_write_global_memory(api, tenant_a, evidence):
    write(api, create(cilantro(scope="global")), expect=403, code="forbidden")
    assert count(tenant_a, MemoryNode) == 0


def test_rule5_a_scope_outside_the_keys_write_scopes_is_forbidden(client, tenant_a, evidence):
    session_only = api_for(client, tenant_a, write_scopes=["session"])
    write(session_only, create(cilantro()), expect=403, code="forbidden")


def test_rule5_user_scope_without_explicit_intent_falls_back_to_session(api, evidence):
    result = write(api, create(cilantro(sessionId=SESSION)), intent=False)["results"][0]
    assert result["scope"] == "session" and any("downgraded" in note for note in result["notes"])


def test_rule5_temporary_state_never_enters_user_scope_without_expiry(api, evidence):
    node = {"kind": "temporary_state", "itemKey": "stomach", "scope": "user", "userId": "alice",
            "valueJson": "胃不舒服", "title": "今天胃不舒服", "content": "少辣"}
    write(api, create(node), expect=400, code="invalid")
    ok = write(api, create({**node, "expiresAt": "2030-01-01T00:00:00Z"}))
    assert ok["results"][0]["scope"] == "user"


def test_read_only_keys_cannot_write(client, tenant_a):
    read_only = api_for(client, tenant_a, read_only=True)
    write(read_only, create(cilantro()), sources=[], expect=403, code="forbidden")
    read_only.post("messages", {"sessionId": SESSION, "messages": [{"role": "user", "content": "hi"}]},
                   expect=403, code="forbidden")


# --- rule 6 ---------------------------------------------------------------------------------------

def test_rule6_high_confidence_without_a_verbatim_quote_is_downgraded(api, evidence):
    result = write(api, create(cilantro(confidence=0.99)))["results"][0]
    assert result["autoDowngraded"] is True and result["appliedConfidence"] < 0.8
    assert api.get(f"memory/nodes/{result['nodeId']}")["confidence"] == result["appliedConfidence"]


def test_rule6_high_confidence_with_a_quote_from_the_evidence_stays(api, evidence):
    result = write(api, create(cilantro(confidence=0.99, sourceQuote="我以后做饭不要香菜")))["results"][0]
    assert result["autoDowngraded"] is False and result["appliedConfidence"] == 0.99


def test_rule6_a_quote_that_is_not_in_the_cited_messages_does_not_count(api, evidence):
    result = write(api, create(cilantro(confidence=0.99, sourceQuote="I never eat cilantro")))["results"][0]
    assert result["autoDowngraded"] is True


# --- rule 7 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", ["我的密码是 hunter2024", "my api key is sk-proj-abcdefghijklmnop123456",
                                     "card 4111 1111 1111 1111", "身份证号 11010519491231002X"])
def test_rule7_sensitive_content_is_refused(api, tenant_a, evidence, content):
    write(api, create(cilantro(content=content)), expect=400, code="sensitive_content")
    assert count(tenant_a, MemoryNode) == 0 and count(tenant_a, MemoryAuditEvent) == 0


# --- evidence whitelist and batches ---------------------------------------------------------------

def test_source_message_ids_must_be_captured_messages_of_this_tenant(api, client, tenant_b, evidence):
    write(api, create(cilantro()), sources=["never-captured"], expect=400, code="invalid")
    other = api_for(client, tenant_b)
    other.post("messages", {"sessionId": SESSION, "messages": [{"id": "b-only", "role": "user", "content": "x"}]},
               expect=201)
    write(api, create(cilantro()), sources=["b-only"], expect=400, code="invalid")


def test_source_message_ids_must_come_from_one_session(api, evidence):
    api.post("messages", {"sessionId": "s-2", "messages": [{"id": "other", "role": "user", "content": "x"}]},
             expect=201)
    write(api, create(cilantro()), sources=["m1", "other"], expect=400, code="invalid")


def test_a_batch_is_all_or_nothing(api, tenant_a, evidence):
    write(api, create(cilantro()), create(cilantro(itemKey="葱", scope="global")), expect=403, code="forbidden")
    assert count(tenant_a, MemoryNode) == 0 and count(tenant_a, MemoryAuditEvent) == 0


def test_every_mutation_writes_one_audit_event_in_the_same_transaction(api, tenant_a, evidence):
    node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
    write(api, {"operation": "update", "targetId": node_id, "expectedRevision": 1, "reason": "r",
                "node": {"importance": 0.5}})
    new_id = write(api, {"operation": "supersede", "targetId": node_id, "expectedRevision": 2, "reason": "r",
                         "node": {"content": "少放香菜"}})["results"][0]["nodeId"]
    write(api, {"operation": "expire", "targetId": new_id, "expectedRevision": 3, "reason": "r"})
    with tenant_context(tenant_a):
        events = list(MemoryAuditEvent.objects.order_by("created_at").values_list("event_type", "actor"))
    assert [e for e, _ in events] == ["create", "update", "supersede", "expire"]
    assert all(actor.startswith("api_key:ekko_") for _, actor in events)


def test_too_many_operations_is_too_large(api, evidence):
    write(api, *[create(cilantro(itemKey=f"item{i}")) for i in range(101)], expect=413, code="too_large")


def test_a_body_over_the_limit_is_too_large(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    api.post("messages", {"sessionId": SESSION, "messages": [{"role": "user", "content": "x" * 2000}]},
             expect=413, code="too_large")
