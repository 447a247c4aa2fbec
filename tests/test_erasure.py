"""Issue 10, Deliver 4 and defect 7: a hard forget removes the card's content everywhere, with a receipt.

The marker tests write a unique word through the real API and a real extraction run, hard-forget,
then grep every text, varchar, array, tsvector and json/jsonb column of every table as the owner
(which row-level security does not hide), so they commit their data.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from django.db import connections

from ekko_site.inprocess import drain_background
from memory.audit_chain import audit_chain_verify
from memory.models import ExtractionRun, MemoryAuditEvent, MemoryMessage, MemoryNode
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.test_api_memory_rules import create, write

SESSION = "s-erase"
MARKER = "zorblatt"
TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "ARRAY", "tsvector")


def marker_hits(marker: str) -> dict[str, int]:
    """Return `table.column → rows` holding `marker` anywhere in the database (owner connection)."""
    hits: dict[str, int] = {}
    with connections["owner"].cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type = ANY(%s) ORDER BY table_name, column_name",
            [list(TEXT_TYPES)])
        columns = cursor.fetchall()
        assert len(columns) > 50, "the column walk found too little: check TEXT_TYPES"
        for table, column in columns:
            cursor.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}"::text ILIKE %s',  # noqa: S608
                           [f"%{marker}%"])
            count = cursor.fetchone()[0]
            if count:
                hits[f"{table}.{column}"] = count
    return hits


def _story(api, marker: str, committed=None) -> dict:  # noqa: ANN001
    """Evidence, an extracted card, an agent card with history, a summary: all holding `marker`.

    `committed` wraps the capture so its after-commit work (the extraction run) has run after it;
    without one (committed data) the queued background work is run after the capture.
    """
    with committed() if committed else nullcontext():
        api.post("messages", {"sessionId": SESSION, "userId": "alice", "messages": [
            {"id": "e1", "role": "user", "content": f"记住，我以后做饭不要{marker}。"},
            {"id": "e2", "role": "assistant", "content": "好的，记住了。"},
        ]}, expect=201)
    drain_background()
    with tenant_context(api.tenant):
        extracted = list(MemoryNode.objects.filter(source_message_ids__contains=["e1"]))
        runs = list(ExtractionRun.objects.filter(session_id=SESSION))
    assert extracted and runs, "the explicit 记住 message should have run an extraction that wrote a card"
    note = {"kind": "correction", "itemKey": f"{marker}_note", "scope": "session", "sessionId": SESSION,
            "title": f"别放{marker}", "content": f"用户说过不要{marker}"}
    agent = write(api, create(note, reason=f"user mentioned {marker}"), sources=("e1",))["results"][0]
    updated = write(api, {"operation": "update", "targetId": agent["nodeId"], "expectedRevision": 1,
                          "node": {"content": f"真的不要{marker}"}, "reason": f"{marker} again"},
                    sources=("e1",))["results"][0]
    api.post("summaries", {"sessionId": SESSION, "fromMessageId": "e1", "toMessageId": "e2",
                           "summary": f"用户不吃{marker}", "preferences": [f"无{marker}"]}, expect=201)
    return {"node": updated, "extracted": [str(n.pk) for n in extracted]}


def _hard_forget(api, story: dict, **body) -> dict:  # noqa: ANN001, ANN003
    node = story["node"]
    return api.post("memory/forget", {
        "id": node["nodeId"], "expectedRevision": node["revision"], "mode": "hard",
        "reason": f"please forget {MARKER}", "explicitUserIntent": True, **body})


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    api.tenant = tenant_a
    return api


@pytest.fixture
def noise(client, tenant_b):  # noqa: ANN001
    other = api_for(client, tenant_b)
    other.tenant = tenant_b
    other.post("messages", {"sessionId": SESSION, "userId": "bob", "messages": [
        {"id": "e1", "role": "user", "content": "记住，我以后做饭不要quuxberry。"},
        {"id": "e2", "role": "assistant", "content": "好的，记住了。"}]}, expect=201)  # a whole turn
    return other


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_marker_is_gone_from_every_column_after_a_hard_forget_with_purge_evidence(api, noise, tenant_b):
    story = _story(api, MARKER)
    assert {"memory_memorymessage.content", "memory_memorynode.title", "memory_memoryauditevent.reason",
            "memory_memorysummary.summary", "memory_extractionrun.results"} <= set(marker_hits(MARKER))
    answer = _hard_forget(api, story, purgeEvidence=True)
    assert set(answer["derivedIds"]) == set(story["extracted"])
    assert marker_hits(MARKER) == {}
    noise_hits = marker_hits("quuxberry")
    assert "memory_memorymessage.content" in noise_hits and "memory_memorynode.title" in noise_hits
    removed = answer["receipt"]["removed"]
    assert removed["memory_memorymessage"] == 1  # e1, the cited one; e2 was never evidence
    assert removed["memory_memorysummary"] == 1 and removed["memory_extractionrun"] >= 1
    assert removed["memory_memorynode"] == 1 + len(story["extracted"])  # the card and the derived one
    assert audit_chain_verify(tenant=api.tenant).intact and audit_chain_verify(tenant=tenant_b).intact


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_without_purge_evidence_the_marker_stays_only_in_messages_and_summaries(api):
    story = _story(api, MARKER)
    answer = _hard_forget(api, story)
    assert "memory_memorymessage" not in answer["receipt"]["removed"]
    tables = {column.split(".")[0] for column in marker_hits(MARKER)}
    assert tables == {"memory_memorymessage", "memory_memorysummary"}
    assert audit_chain_verify(tenant=api.tenant).intact


@pytest.mark.django_db
def test_the_receipt_is_a_content_free_event_of_the_chain(api, tenant_a, committed):
    story = _story(api, MARKER, committed)
    answer = _hard_forget(api, story)
    receipt = answer["receipt"]
    assert set(receipt) == {"id", "removed", "createdAt", "digest"}
    assert answer["deletedIds"] == [story["node"]["nodeId"]] and answer["mode"] == "hard"
    with tenant_context(tenant_a):
        event = MemoryAuditEvent.objects.get(pk=receipt["id"])
        deletes = list(MemoryAuditEvent.objects.filter(event_type="delete", node_id=story["node"]["nodeId"]))
    assert (event.event_type, event.digest, event.reason) == ("erase", receipt["digest"], "")
    assert event.payload["receipt"]["removed"] == receipt["removed"]
    assert MARKER not in str(event.payload) and all(d.reason == "" for d in deletes)
    report = audit_chain_verify(tenant=tenant_a)
    assert report.intact and report.head_digest == receipt["digest"]


@pytest.mark.django_db
def test_purge_evidence_needs_hard_mode(api, tenant_a, committed):
    story = _story(api, MARKER, committed)
    body = api.post("memory/forget", {"id": story["node"]["nodeId"], "expectedRevision": 2,
                                      "purgeEvidence": True, "reason": "x", "explicitUserIntent": True},
                    expect=400, code="invalid")
    assert "purgeEvidence" in body["errors"]
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=story["node"]["nodeId"]).status == "active"
        assert MemoryMessage.objects.filter(message_id="e1").exists()


@pytest.mark.django_db
def test_a_soft_forget_reason_is_erased_by_the_later_hard_forget(api, tenant_a, committed):
    story = _story(api, MARKER, committed)
    node_id = story["node"]["nodeId"]
    api.post("memory/forget", {"id": node_id, "expectedRevision": 2, "reason": f"soft {MARKER}",
                               "explicitUserIntent": True})
    api.post("memory/forget", {"id": node_id, "expectedRevision": 3, "mode": "hard", "reason": "now for good",
                               "explicitUserIntent": True})
    with tenant_context(tenant_a):
        reasons = list(MemoryAuditEvent.objects.filter(node_id=node_id).values_list("reason", "payload"))
    assert reasons and all(reason == "" for reason, _ in reasons)
    assert MARKER not in str(reasons)


@pytest.mark.django_db
def test_a_restricted_member_purges_only_their_own_words(client, tenant_a, committed):
    from django.contrib.auth import get_user_model

    from tests.memory_factories import make_member

    make_member(tenant=tenant_a, username="mia")
    agent = api_for(client, tenant_a)
    with committed():
        agent.post("messages", {"sessionId": SESSION, "userId": "alice", "messages": [
            {"id": "w1", "role": "user", "content": f"项目里不要用{MARKER}库。"}]}, expect=201)
        card = write(agent, create({"kind": "project_context", "itemKey": "lib", "title": f"不用{MARKER}",
                                    "content": "项目约定"}), intent=False, sources=("w1",))["results"][0]
    client.force_login(get_user_model().objects.get(username="mia"))
    from tests.api_client import Api

    member = Api(client, None)
    answer = member.post("memory/forget", {"id": card["nodeId"], "expectedRevision": 1, "mode": "hard",
                                           "purgeEvidence": True, "reason": "x", "explicitUserIntent": True})
    assert answer["receipt"]["removed"]["memory_memorymessage"] == 0  # alice's message stays hers
    with tenant_context(tenant_a):
        assert MemoryMessage.objects.filter(message_id="w1").exists()
        assert not MemoryNode.objects.filter(pk=card["nodeId"]).exists()
    with committed():
        member.post("messages", {"sessionId": "mia-1", "messages": [
            {"id": "w2", "role": "user", "content": f"记住，我不喝{MARKER}茶。"}]}, expect=201)
        own = write(member, create({"kind": "project_context", "itemKey": "tea", "title": f"不喝{MARKER}茶",
                                    "content": "个人习惯"}), intent=False, sources=("w2",))["results"][0]
    answer = member.post("memory/forget", {"id": own["nodeId"], "expectedRevision": 1, "mode": "hard",
                                           "purgeEvidence": True, "reason": "x", "explicitUserIntent": True})
    assert answer["receipt"]["removed"]["memory_memorymessage"] == 1  # her own words go
    with tenant_context(tenant_a):
        assert not MemoryMessage.objects.filter(message_id="w2").exists()


@pytest.mark.django_db
def test_the_erased_card_page_shows_its_receipt_to_whoever_erased_it(client, tenant_a, committed):
    from django.contrib.auth import get_user_model

    from tests.memory_factories import make_member

    api = api_for(client, tenant_a)
    api.tenant = tenant_a
    story = _story(api, MARKER, committed)
    answer = _hard_forget(api, story)
    node_id = story["node"]["nodeId"]
    client.force_login(get_user_model().objects.get(username="alice"))  # the tenant owner
    page = client.get(f"/memories/{node_id}/")
    assert page.status_code == 404
    text = page.content.decode()
    assert answer["receipt"]["id"] in text and answer["receipt"]["digest"] in text and MARKER not in text
    derived = client.get(f"/memories/{story['extracted'][0]}/")
    assert derived.status_code == 404 and answer["receipt"]["id"] in derived.content.decode()
    make_member(tenant=tenant_a, username="mia")
    client.force_login(get_user_model().objects.get(username="mia"))
    assert answer["receipt"]["id"] not in client.get(f"/memories/{node_id}/").content.decode()
