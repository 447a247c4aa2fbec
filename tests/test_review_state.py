"""Review state (issue 14, seed 001): the extractor's cards wait for review; agents' and people's do not.

One rule (`memory.rules.review.review_state_for`) decides it on every write path; `memory/write`
`accept` marks an unreviewed card reviewed through the write service, with an audit event, under
the same revision, reach and write-scope rules as `update`. Tenant B holds the same card and never moves.
"""

from __future__ import annotations

import pytest

from memory.models import MemoryAuditEvent, MemoryNode
from memory.rules.review import EXTRACTOR_ACTOR, REVIEW_LEGEND, confidence_band, review_mark, review_state_for
from memory.search.context import build_context
from memory.services import NodeWrite, node_write_batch, node_write_bulk
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.services import api_key_create
from tests.api_client import api_for
from tests.memory_factories import default_workspace, make_workspace
from tests.test_api_memory_rules import cilantro, create, write
from tests.test_context_pack import world  # noqa: F401 - fixture: tenant A's session with tenant B as noise
from tests.test_stale_targets import owner, snapshot, with_evidence
from tests.test_turn_lifecycle import REMEMBER, Turns
from tests.test_webhooks import hook, register  # noqa: F401 - hook: a receiver on loopback

pytestmark = pytest.mark.django_db


# --------------------------------------------------------------------------- the rule, without a database

@pytest.mark.parametrize(("actor", "operation", "current", "changed", "expected"), [
    ("system:extractor", "create", None, True, "unreviewed"),
    ("system:extractor", "supersede", None, True, "unreviewed"),
    ("system:extractor", "update", "reviewed", True, "unreviewed"),
    ("system:extractor", "update", "reviewed", False, "reviewed"),  # evidence only: a person's review stays
    ("system:extractor", "update", "unreviewed", False, "unreviewed"),
    ("api_key:abc", "create", None, True, "reviewed"),
    ("api_key:abc", "update", "unreviewed", False, "reviewed"),
    ("user:alice", "update", "unreviewed", True, "reviewed"),
    ("user:alice", "accept", "unreviewed", False, "reviewed"),
])
def test_review_state_rule(actor, operation, current, changed, expected):  # noqa: ANN001
    assert review_state_for(actor=actor, operation=operation, current=current, changed=changed) == expected


# --------------------------------------------------------------------------- who writes decides

def extractor_viewer(tenant, workspace=None) -> Viewer:  # noqa: ANN001
    return Viewer(tenant=tenant, workspace=workspace or default_workspace(tenant), session_id="s-1",
                  write_scopes=frozenset({"session", "workspace", "user"}), read_only=False,
                  actor=EXTRACTOR_ACTOR)


def extractor_card(tenant, **node) -> dict:  # noqa: ANN001, ANN003
    """Write a workspace card the way the extractor does (node_write_bulk as system:extractor)."""
    draft = {"kind": "hard_constraint", "item_key": "no-orm-raw", "scope": "workspace",
             "title": "不用原生 SQL", "content": "项目里不用原生 SQL。", "value_json": "不用原生 SQL",
             "value_json_given": True, **node}
    [outcome] = node_write_bulk(writes=[NodeWrite(
        viewer=extractor_viewer(tenant, node.pop("workspace", None)), explicit_user_intent=False,
        operations=[{"operation": "create", "node": draft, "reason": "inferred"}])], skip_invalid=False)
    [result] = outcome.results
    return {"id": str(result.node.pk), "revision": result.node.revision}


def test_the_extractors_card_is_unreviewed_and_the_agents_own_write_is_reviewed(
        client, tenant_a, django_capture_on_commit_callbacks):  # noqa: ANN001
    turns = Turns(api_for(client, tenant_a), tenant_a, django_capture_on_commit_callbacks)
    turns.turn(REMEMBER)
    [card] = turns.cards(status="active")
    assert card.review_state == "unreviewed"
    assert turns.api.get(f"memory/nodes/{card.pk}")["reviewState"] == "unreviewed"

    agent = with_evidence(api_for(client, tenant_a), "alice")
    coriander = cilantro(itemKey="芫荽", valueJson="芫荽", title="用户不吃芫荽")
    written = write(agent, create(coriander))["results"][0]
    node = agent.get(f"memory/nodes/{written['nodeId']}")
    assert node["reviewState"] == "reviewed"
    found = agent.post("memory/search", {"all": True, "userId": "alice"})
    assert {n["id"]: n["reviewState"] for n in found["exact"] + found["relevant"]} == {
        str(card.pk): "unreviewed", written["nodeId"]: "reviewed"}


def test_a_persons_edit_of_an_unreviewed_card_makes_it_reviewed_and_is_audited(tenant_a):  # noqa: ANN001
    card = extractor_card(tenant_a)
    node_write_batch(viewer=owner(tenant_a), explicit_user_intent=False, operations=[
        {"operation": "update", "target_id": card["id"], "expected_revision": 1, "reason": "page edit",
         "node": {"content": "项目里不用原生 SQL（改过）。"}}])
    with tenant_context(tenant_a):
        node = MemoryNode.objects.get(pk=card["id"])
        event = MemoryAuditEvent.objects.filter(node_id=card["id"], event_type="update").get()
    assert (node.review_state, node.revision) == ("reviewed", 2)
    assert event.payload["before"]["review_state"] == "unreviewed"
    assert event.payload["after"]["review_state"] == "reviewed"


def test_an_extractor_restatement_keeps_a_persons_review(tenant_a):  # noqa: ANN001
    card = extractor_card(tenant_a)
    node_write_batch(viewer=owner(tenant_a), explicit_user_intent=False, operations=[
        {"operation": "accept", "target_id": card["id"], "expected_revision": 1, "reason": "ok"}])
    again = {"operation": "update", "target_id": card["id"], "expected_revision": 2, "reason": "again",
             "node": {"content": "项目里不用原生 SQL。"}}
    restated = NodeWrite(viewer=extractor_viewer(tenant_a), explicit_user_intent=False, operations=[again])
    [outcome] = node_write_bulk(writes=[restated], skip_invalid=False)
    assert outcome.results[0].action == "noop"
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=card["id"]).review_state == "reviewed"


# --------------------------------------------------------------------------- memory/write accept

def accept(target: str, revision: int) -> dict:
    return {"operation": "accept", "targetId": target, "expectedRevision": revision, "reason": "用户确认"}


def test_accept_marks_an_unreviewed_card_reviewed_with_an_audit_event(client, tenant_a, tenant_b):  # noqa: ANN001
    noise = extractor_card(tenant_b)
    card = extractor_card(tenant_a)
    api = api_for(client, tenant_a)
    before = snapshot(tenant_b)
    [result] = write(api, accept(card["id"], 1), intent=False, sources=())["results"]
    assert (result["operation"], result["action"], result["nodeId"], result["revision"]) == (
        "accept", "accepted", card["id"], 2)
    node = api.get(f"memory/nodes/{card['id']}")
    assert (node["reviewState"], node["revision"], node["content"]) == ("reviewed", 2, "项目里不用原生 SQL。")
    history = api.get(f"memory/nodes/{card['id']}/history")
    accepted = [e for e in history["events"] if e["eventType"] == "accept"]
    assert len(accepted) == 1 and accepted[0]["actor"].startswith("api_key:")
    assert snapshot(tenant_b) == before
    with tenant_context(tenant_b):
        assert MemoryNode.objects.get(pk=noise["id"]).review_state == "unreviewed"


def test_accept_refuses_stale_reviewed_inactive_foreign_and_read_only(client, tenant_a, tenant_b):  # noqa: ANN001
    card = extractor_card(tenant_a)
    reviewed = write(with_evidence(api_for(client, tenant_a), "alice"), create(cilantro()))["results"][0]
    foreign = extractor_card(tenant_b)
    elsewhere = make_workspace(tenant=tenant_a, name="Elsewhere")
    api = api_for(client, tenant_a)
    pinned = api_for(client, tenant_a, workspace=elsewhere)
    read_only = api_for(client, tenant_a, read_only=True)
    before = snapshot(tenant_a, tenant_b)

    stale = write(api, accept(card["id"], 2), intent=False, sources=(), expect=409, code="revision_conflict")
    assert (stale["currentRevision"], stale["status"]) == (1, "active")
    write(api, accept(reviewed["nodeId"], 1), intent=False, sources=(), expect=409, code="conflict")
    write(api, accept(foreign["id"], 1), intent=False, sources=(), expect=404, code="not_found")
    write(pinned, accept(card["id"], 1), intent=False, sources=(), expect=404, code="not_found")
    write(read_only, accept(card["id"], 1), intent=False, sources=(), expect=403, code="forbidden")
    narrow = api_for(client, tenant_a, write_scopes=["session"])
    write(narrow, accept(card["id"], 1), intent=False, sources=(), expect=403, code="forbidden")
    api.post("memory/write", {"operations": [{"operation": "accept", "reason": "no target"}],
                              "explicitUserIntent": False}, expect=400, code="invalid")
    assert snapshot(tenant_a, tenant_b) == before

    api.post("memory/forget", {"id": card["id"], "expectedRevision": 1, "reason": "不要",
                               "explicitUserIntent": True})
    gone = write(api, accept(card["id"], 2), intent=False, sources=(), expect=409, code="revision_conflict")
    assert gone["status"] == "deleted"


def test_tools_and_schema_name_accept(client, tenant_a):  # noqa: ANN001
    tools = api_for(client, tenant_a).get("tools")
    [memory_write] = [t["function"] for t in tools["tools"] if t["function"]["name"] == "memory_write"]
    operation = memory_write["parameters"]["properties"]["operations"]["items"]["properties"]["operation"]
    assert "accept" in operation["enum"]
    node = client.get("/api/schema/?format=json").json()["components"]["schemas"]["MemoryNode"]
    assert "reviewState" in node["required"]


# --------------------------------------------------------------------------- context marks

@pytest.mark.parametrize(("confidence", "band"), [
    (0.95, "h"), (0.8, "h"), (0.79, "m"), (0.5, "m"), (0.49, "l"), (0.0, "l"), (None, "?")])
def test_confidence_bands(confidence, band):  # noqa: ANN001
    assert confidence_band(confidence) == band
    assert review_mark("unreviewed", confidence) == f"*{band}"
    assert review_mark("reviewed", confidence) == ""


def test_context_marks_unreviewed_cards_with_their_band_and_adds_the_legend(world):  # noqa: ANN001, F811
    world.node(title="用户不吃香菜", item_key="香菜", review_state="reviewed", confidence=0.95)
    world.node(title="用户可能不吃芫荽", item_key="芫荽", review_state="unreviewed", confidence=0.85)
    world.node(title="用户也许少吃辣", item_key="辣", review_state="unreviewed", confidence=0.6)
    world.node(title="用户大概不吃葱", item_key="葱", review_state="unreviewed", confidence=0.4)
    prompt = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000).prompt
    lines = prompt.splitlines()
    assert lines[0] == REVIEW_LEGEND
    assert "- 用户不吃香菜" in lines
    assert {"- *h 用户可能不吃芫荽", "- *m 用户也许少吃辣", "- *l 用户大概不吃葱"} <= set(lines)
    assert sum(line.startswith("- *") for line in lines) == 3


def test_context_without_unreviewed_cards_has_no_legend(world):  # noqa: ANN001, F811
    world.node(title="用户不吃香菜", item_key="香菜", review_state="reviewed", confidence=0.95)
    prompt = build_context(viewer=world.viewer, query_text="香菜", token_budget=4000).prompt
    assert "- 用户不吃香菜" in prompt.splitlines()
    assert REVIEW_LEGEND not in prompt and "*h" not in prompt


# --------------------------------------------------------------------------- webhooks

def test_accept_is_delivered_as_memory_updated(client, tenant_a, hook, committed, settings):  # noqa: ANN001, F811
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on loopback
    handler, url = hook
    with committed():
        card = extractor_card(tenant_a)
    with committed():  # the endpoint's commit clears the cached "no endpoint" of the create
        handler.secret = register(tenant_a, url, events=["memory.updated"]).secret
    with committed():
        write(api_for(client, tenant_a), accept(card["id"], 1), intent=False, sources=())
    [delivered] = handler.requests
    assert delivered["json"]["type"] == "memory.updated" and delivered["verified"]
    memory = delivered["json"]["data"]["memory"]
    assert (memory["id"], memory["reviewState"], memory["revision"]) == (card["id"], "reviewed", 2)


# --------------------------------------------------------------------------- the Python client

def test_the_python_client_accepts_over_http(live_server, tenant_a):  # noqa: ANN001
    from ekko_client import EkkoClient, errors

    card = extractor_card(tenant_a)
    with EkkoClient(live_server.url, api_key_create(tenant=tenant_a).raw_key) as ekko:
        assert ekko.memory_node_get(card["id"]).review_state == "unreviewed"
        [result] = ekko.memory_write(operations=[accept(card["id"], 1)]).results
        assert (result.action, result.revision) == ("accepted", 2)
        assert ekko.memory_node_get(card["id"]).review_state == "reviewed"
        with pytest.raises(errors.Conflict):
            ekko.memory_write(operations=[accept(card["id"], 2)])
