"""Stale targets answer 409 `revision_conflict` with where the card is now (issue 11, API.md errors).

An agent that read a card and acts on it after the card moved on — a newer revision, or a status
that changed (superseded by the extractor, expired, forgotten) — gets `currentRevision`, `status`
and, for a superseded card, `supersededById` (the newest revision of its chain) instead of a 400 it
cannot tell from a malformed request; and nothing changes. Tenant B holds the same card and never moves.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from memory.errors import RevisionConflict
from memory.models import MemoryAuditEvent, MemoryNode
from memory.services import node_restore
from memory.visibility import Viewer
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.memory_factories import default_workspace
from tests.test_api_memory_rules import cilantro, create, write
from tests.test_pages import signed_in

pytestmark = pytest.mark.django_db


def with_evidence(api, username: str):  # noqa: ANN001, ANN201
    """Capture the message the cards cite (m1) for `username`, and return the client."""
    api.post("messages", {"sessionId": "s-1", "userId": username, "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜。"}]}, expect=201)
    return api


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001, ANN201
    return with_evidence(api_for(client, tenant_a), "alice")


@pytest.fixture
def noise(client, tenant_b):  # noqa: ANN001, ANN201
    """Tenant B's own 香菜 card: it must not move while tenant A's requests are refused."""
    other = with_evidence(api_for(client, tenant_b), "bob")
    return write(other, create(cilantro(userId="bob")))["results"][0]


def supersede(target: str, revision: int, **node) -> dict:  # noqa: ANN003
    return {"operation": "supersede", "targetId": target, "expectedRevision": revision, "reason": "用户纠正",
            "node": {"title": "用户可接受少量香菜", "content": "香菜可以少放一点。", **node}}


def update(target: str, revision: int) -> dict:
    return {"operation": "update", "targetId": target, "expectedRevision": revision, "reason": "edit",
            "node": {"content": "推荐菜谱时绝对避免香菜。"}}


def expire(target: str, revision: int) -> dict:
    return {"operation": "expire", "targetId": target, "expectedRevision": revision, "reason": "over"}


def forget(api, target: str, revision: int, **kwargs):  # noqa: ANN001, ANN003
    body = {"id": target, "expectedRevision": revision, "reason": "用户要求忘记", "explicitUserIntent": True}
    return api.post("memory/forget", {**body, **kwargs}, expect=409, code="revision_conflict")


def snapshot(*tenants) -> list[tuple]:  # noqa: ANN002
    """Every node's status and revision and every audit event, to show a refused request changed nothing."""
    rows: list[tuple] = []
    for tenant in tenants:
        with tenant_context(tenant):
            rows += sorted(MemoryNode.objects.values_list("pk", "status", "revision", "updated_at",
                                                          "content"))
            rows += sorted(MemoryAuditEvent.objects.values_list("pk", "event_type"))
    return rows


def owner(tenant) -> Viewer:  # noqa: ANN001
    """Alice, the tenant's owner, as the memory pages act for her."""
    return Viewer(tenant=tenant, workspace=default_workspace(tenant), whole_tenant=True, read_only=False,
                  user=get_user_model().objects.get(username="alice"), actor="user:alice",
                  write_scopes=frozenset({"session", "workspace", "user"}))


def conflict_fields(body: dict) -> tuple:
    return body.get("currentRevision"), body.get("status"), body.get("supersededById")


def refused_writes(api, target: str, revision: int) -> list[dict]:  # noqa: ANN001
    """Send update, supersede, expire and both forget modes at a stale target; return the 409 bodies."""
    bodies = [write(api, operation(target, revision), expect=409, code="revision_conflict")
              for operation in (update, supersede, expire)]
    bodies += [forget(api, target, revision), forget(api, target, revision, mode="hard")]
    return bodies


def test_a_superseded_target_points_to_the_head_of_its_chain(api, tenant_a, tenant_b, noise):
    first = write(api, create(cilantro()))["results"][0]
    second = write(api, supersede(first["nodeId"], 1))["results"][0]
    third = write(api, supersede(second["nodeId"], 2, valueJson="香菜(少量)"))["results"][0]
    assert (second["revision"], third["revision"]) == (2, 3)
    before = snapshot(tenant_a, tenant_b)
    # The old revisions keep their numbers: the agent's expectedRevision matches, the status does not.
    for target, revision in ((first["nodeId"], 1), (second["nodeId"], 2)):
        for body in refused_writes(api, target, revision):
            assert conflict_fields(body) == (revision, "superseded", third["nodeId"])
            assert third["nodeId"] in body["detail"]
    # A stale revision of a superseded card says both.
    body = write(api, update(first["nodeId"], 7), expect=409, code="revision_conflict")
    assert conflict_fields(body) == (1, "superseded", third["nodeId"])
    assert snapshot(tenant_a, tenant_b) == before

    # Following supersededById lands on the card to retry against.
    head = api.get(f"memory/nodes/{first['nodeId']}")["supersededById"]
    assert head == api.get(f"memory/nodes/{second['nodeId']}")["supersededById"] == third["nodeId"]
    current = api.get(f"memory/nodes/{head}")
    assert (current["status"], current["revision"], current["supersededById"]) == ("active", 3, None)
    got = api.post("memory/get", {"key": "avoid_ingredient:香菜", "userId": "alice"})["node"]
    assert (got["id"], got["supersededById"]) == (third["nodeId"], None)
    retried = write(api, supersede(head, current["revision"], valueJson="香菜(一点点)"))["results"][0]
    assert (retried["action"], retried["revision"]) == ("superseded", 4)
    assert api.get(f"memory/nodes/{first['nodeId']}")["supersededById"] == retried["nodeId"]


def soft_forget(target: str, revision: int) -> dict:
    return {"forget": {"id": target, "expectedRevision": revision, "reason": "用户要求忘记",
                       "explicitUserIntent": True}}


def move_on(api, card: dict, change) -> None:  # noqa: ANN001
    """Change the card behind the agent's back with `change` (an update, expire or soft forget)."""
    operation = change(card["nodeId"], 1)
    if "forget" in operation:
        api.post("memory/forget", operation["forget"])
    else:
        write(api, operation)


@pytest.mark.parametrize("change,status", [(update, "active"), (expire, "expired"), (soft_forget, "deleted")])
def test_a_card_that_moved_on_answers_409_with_where_it_is_now(api, tenant_a, tenant_b, noise, change,
                                                                status):
    card = write(api, create(cilantro()))["results"][0]
    move_on(api, card, change)
    before = snapshot(tenant_a, tenant_b)
    for body in refused_writes(api, card["nodeId"], 1):
        assert conflict_fields(body) == (2, status, None)
        assert "re-read it" in body["detail"]
    if status != "active":
        # The agent read the card as it is now, yet only active cards change.
        for operation in (update, supersede, expire):
            body = write(api, operation(card["nodeId"], 2), expect=409, code="revision_conflict")
            assert conflict_fields(body) == (2, status, None)
            assert "only active memories can change" in body["detail"]
    assert snapshot(tenant_a, tenant_b) == before


def test_restore_checks_revision_and_status(api, tenant_a, tenant_b, noise):
    card = write(api, create(cilantro()))["results"][0]
    move_on(api, card, soft_forget)
    before = snapshot(tenant_a, tenant_b)
    # The memory pages and the service: a stale revision, then a card that is no longer forgotten.
    viewer = owner(tenant_a)
    page = signed_in("alice")
    stale = page.post(f"/memories/{card['nodeId']}/restore/", {"expected_revision": "1"})
    assert stale.status_code == 409
    with pytest.raises(RevisionConflict) as refused:
        node_restore(viewer=viewer, node_id=card["nodeId"], expected_revision=1, reason="back")
    assert refused.value.extra == {"currentRevision": 2, "status": "deleted"}
    assert snapshot(tenant_a, tenant_b) == before
    node_restore(viewer=viewer, node_id=card["nodeId"], expected_revision=2, reason="back")
    with pytest.raises(RevisionConflict) as refused:
        node_restore(viewer=viewer, node_id=card["nodeId"], expected_revision=3, reason="again")
    assert refused.value.extra == {"currentRevision": 3, "status": "active"}
    assert page.post(f"/memories/{card['nodeId']}/restore/", {"expected_revision": "3"}).status_code == 409


def test_restoring_a_superseded_revision_points_to_the_head(api, tenant_a):
    first = write(api, create(cilantro()))["results"][0]
    second = write(api, supersede(first["nodeId"], 1))["results"][0]
    viewer = owner(tenant_a)
    with pytest.raises(RevisionConflict) as refused:
        node_restore(viewer=viewer, node_id=first["nodeId"], expected_revision=1, reason="back")
    assert refused.value.extra == {"currentRevision": 1, "status": "superseded",
                                   "supersededById": second["nodeId"]}


def test_a_batch_with_one_stale_target_applies_nothing(api, tenant_a, tenant_b, noise):
    card = write(api, create(cilantro()))["results"][0]
    write(api, update(card["nodeId"], 1))
    before = snapshot(tenant_a, tenant_b)
    body = write(api, create(cilantro(itemKey="葱", valueJson="葱", title="不吃葱", content="不要葱")),
                 update(card["nodeId"], 1), expect=409, code="revision_conflict")
    assert conflict_fields(body) == (2, "active", None)
    assert body["errors"] == {"operations[1].expectedRevision": ["current revision is 2"]}
    assert snapshot(tenant_a, tenant_b) == before


def test_forget_still_erases_a_forgotten_card_and_forgets_an_expired_one_at_their_revision(api, tenant_a):
    forgotten, expired = write(api, create(cilantro()), create(cilantro(
        itemKey="葱", valueJson="葱", title="不吃葱", content="不要葱")))["results"]
    api.post("memory/forget", {"id": forgotten["nodeId"], "expectedRevision": 1, "reason": "r",
                               "explicitUserIntent": True})
    write(api, expire(expired["nodeId"], 1))
    erased = api.post("memory/forget", {"id": forgotten["nodeId"], "expectedRevision": 2, "mode": "hard",
                                        "reason": "erase it", "explicitUserIntent": True})
    assert erased["deletedIds"] == [forgotten["nodeId"]]
    soft = api.post("memory/forget", {"id": expired["nodeId"], "expectedRevision": 2, "reason": "r",
                                      "explicitUserIntent": True})
    assert soft["deletedIds"] == [expired["nodeId"]]
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(pk=forgotten["nodeId"]).exists()
        assert MemoryNode.objects.get(pk=expired["nodeId"]).status == "deleted"


def test_the_tool_descriptions_say_what_to_do_on_each_409(api):
    tools = {t["function"]["name"]: t["function"] for t in api.get("tools")["tools"]}
    write_text, forget_text = tools["memory_write"]["description"], tools["memory_forget"]["description"]
    for text in (write_text, forget_text):
        assert "revision_conflict" in text and "supersededById" in text and "currentRevision" in text
    assert "requires_confirmation" in forget_text and "targets" in forget_text
    assert "requires_confirmation" in tools["memory_get"]["description"]
