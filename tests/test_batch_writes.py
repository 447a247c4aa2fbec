"""Issue 13: batched `memory/write` creates and `messages` capture are set-based and keep every rule.

A write made only of creates on distinct slots is validated whole, then written in a few statements
(memory.services.node_creates); a capture batch is looked up in one query and inserted in one
(memory.services.messages). Each test names the rule it holds; the statement counts fail on the
one-by-one paths.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, transaction

from memory.audit_chain import audit_chain_verify
from memory.models import AuditEventType, MemoryAuditEvent, MemoryMessage, MemoryNode
from memory.services import NodeWrite, node_write_batch, node_write_bulk
from memory.services.embeddings import nodes_embed
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.concurrency import side_by_side
from tests.memory_factories import default_workspace, make_member, make_node
from tests.test_api_memory_rules import cilantro, create, write
from tests.test_node_write_bulk import author, avoid

SESSION = "s-1"


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    api.post("messages", {"sessionId": SESSION, "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜。"}]}, expect=201)
    return api


def dish(index: int, **node) -> dict:  # noqa: ANN003
    return create(cilantro(itemKey=f"菜{index}", valueJson=f"菜{index}", title=f"不吃菜{index}", **node),
                  reason=f"card {index}")


def events(tenant) -> list[tuple[str, str, str]]:  # noqa: ANN001
    with tenant_context(tenant):
        return list(MemoryAuditEvent.objects.filter(node_id__isnull=False).order_by("sequence")
                    .values_list("event_type", "node_id", "reason"))


@contextmanager
def statements() -> Iterator[list[str]]:
    """Collect the SQL this thread sends in the block (the test client's requests reset Django's log)."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


def chain_intact(tenant) -> bool:  # noqa: ANN001
    return audit_chain_verify(tenant=tenant).intact


def test_a_batch_of_creates_writes_one_audit_event_per_card_in_order_and_the_chain_verifies(api, tenant_a):
    with statements() as queries:
        results = write(api, *[dish(i) for i in range(100)])["results"]
    assert [r["action"] for r in results] == ["created"] * 100
    assert [(t, str(n), r) for t, n, r in events(tenant_a)] == [
        (AuditEventType.CREATE, r["nodeId"], f"card {i}") for i, r in enumerate(results)]
    with tenant_context(tenant_a):
        stored = {str(n.pk): n for n in MemoryNode.objects.all()}
    assert {r["nodeId"] for r in results} == set(stored)
    assert all(stored[r["nodeId"]].search_text and stored[r["nodeId"]].revision == 1 for r in results)
    assert chain_intact(tenant_a)
    # Set-based: the request's statements do not grow with the cards (one by one it sent ~6 per card).
    assert len(queries) < 40, [sql[:80] for sql in queries]


def test_a_batch_on_occupied_slots_answers_noop_for_same_content_and_supersedes_new_content(api, tenant_a):
    first = write(api, dish(0), dish(1))["results"]
    again = write(api, dish(0), dish(1, content="一点都不要"), dish(2))["results"]
    assert [r["action"] for r in again] == ["noop", "superseded", "created"]
    assert again[0]["nodeId"] == first[0]["nodeId"]
    assert again[1]["revision"] == 2 and again[1]["nodeId"] != first[1]["nodeId"]
    with tenant_context(tenant_a):
        old = MemoryNode.objects.get(pk=first[1]["nodeId"])
        new = MemoryNode.objects.get(pk=again[1]["nodeId"])
    assert old.status == "superseded" and new.supersedes_id == old.pk and new.parent_id == old.pk
    assert [(t, str(n)) for t, n, _ in events(tenant_a)][2:] == [
        (AuditEventType.SUPERSEDE, again[1]["nodeId"]), (AuditEventType.CREATE, again[2]["nodeId"])]
    assert chain_intact(tenant_a)


def test_a_batch_naming_one_slot_twice_applies_its_creates_in_order(api, tenant_a):
    results = write(api, dish(0), dish(0, content="改了"), dish(0, content="改了"))["results"]
    assert [r["action"] for r in results] == ["created", "superseded", "noop"]
    assert [r["revision"] for r in results] == [1, 2, 2]
    assert chain_intact(tenant_a)


@pytest.mark.parametrize(("bad", "status", "code"), [
    ({"kind": "no_such_kind"}, 400, "invalid"),
    ({"content": "我的密码是 hunter2024"}, 400, "sensitive_content"),
    ({"userId": "nobody"}, 404, "not_found"),
])
def test_one_invalid_create_refuses_the_whole_batch_and_writes_nothing(api, tenant_a, bad, status, code):
    operations = [dish(0), dish(1), dish(2, **bad), dish(3)]
    body = write(api, *operations, expect=status, code=code)
    alone = write(api, dish(2, **bad), expect=status, code=code)
    assert body == alone  # the error the one-by-one path gives for that operation alone
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.exists()
    assert events(tenant_a) == []


def test_bulk_skips_an_invalid_write_of_several_creates_whole_and_applies_the_others(tenant_a):
    alice = make_member(tenant=tenant_a, username="alice", role="owner")
    viewer = author(tenant_a, alice, "user:alice")
    good = NodeWrite(viewer=viewer, operations=[avoid("香菜"), avoid("葱")], explicit_user_intent=True)
    bad = NodeWrite(viewer=viewer, operations=[avoid("蒜"), {**avoid("姜"), "node": {
        **avoid("姜")["node"], "kind": "no_such_kind"}}], explicit_user_intent=True)
    later = NodeWrite(viewer=viewer, operations=[avoid("韭菜"), avoid("香菜")], explicit_user_intent=True)
    outcomes = node_write_bulk(writes=[good, bad, later], skip_invalid=True)
    assert [o.ok for o in outcomes] == [True, False, True]
    assert [r.action for r in outcomes[2].results] == ["created", "noop"]
    with tenant_context(tenant_a):
        keys = sorted(MemoryNode.objects.values_list("item_key", flat=True))
    assert keys == sorted(["香菜", "葱", "韭菜"])
    assert len(events(tenant_a)) == 3 and chain_intact(tenant_a)


# --------------------------------------------------------------------------- capture


def turn(index: int, **fields) -> dict:  # noqa: ANN003
    return {"id": f"c{index}", "role": "user" if index % 2 == 0 else "assistant",
            "content": f"message number {index} of the batch", **fields}


def test_a_capture_batch_is_stored_in_order_with_few_statements(api, tenant_a):
    with statements() as queries:
        body = api.post("messages", {"sessionId": SESSION, "messages": [turn(i) for i in range(100)]},
                        expect=201)
    assert [m["id"] for m in body["messages"]] == [f"c{i}" for i in range(100)]
    listed = api.get("messages", {"sessionId": SESSION, "limit": 200})["messages"]
    assert [m["id"] for m in listed] == ["m1", *[f"c{i}" for i in range(100)]]
    assert len(queries) < 30, [sql[:80] for sql in queries]


def test_a_capture_batch_answers_known_ids_and_repeats_with_the_stored_message(api, tenant_a):
    api.post("messages", {"sessionId": SESSION, "messages": [turn(0)]}, expect=201)
    body = api.post("messages", {"sessionId": SESSION, "messages": [turn(0), turn(1), turn(1)]}, expect=201)
    assert [m["id"] for m in body["messages"]] == ["c0", "c1", "c1"]
    with tenant_context(tenant_a):
        assert MemoryMessage.objects.filter(message_id__in=["c0", "c1"]).count() == 2


@pytest.mark.parametrize("batch", [
    [turn(5), turn(0, content="other words")],           # an id already stored with other content
    [turn(5), turn(6), turn(5, content="other words")],  # an id repeated in the batch with other content
])
def test_a_capture_batch_reusing_an_id_for_other_content_stores_nothing(api, tenant_a, batch):
    api.post("messages", {"sessionId": SESSION, "messages": [turn(0)]}, expect=201)
    index = len(batch) - 1
    body = api.post("messages", {"sessionId": SESSION, "messages": batch}, expect=400, code="invalid")
    assert list(body["errors"]) == [f"messages[{index}].id"]
    with tenant_context(tenant_a):
        assert not MemoryMessage.objects.filter(message_id__in=["c5", "c6"]).exists()


# --------------------------------------------------------------------------- vectors


@pytest.mark.django_db(transaction=True)
def test_embedding_skips_a_row_another_transaction_holds_instead_of_waiting(tenant_a):
    workspace = default_workspace(tenant_a)
    alice = make_member(tenant=tenant_a, username="alice", role="owner")
    with tenant_context(tenant_a):
        nodes = [make_node(tenant=tenant_a, workspace=workspace, user=alice, title=f"card {i}")
                 for i in range(3)]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with tenant_context(tenant_a), transaction.atomic():
            MemoryNode.objects.select_for_update().filter(pk=nodes[1].pk).first()
            held.set()
            release.wait(30)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        stored = nodes_embed(tenant_id=tenant_a.pk, node_ids=[str(n.pk) for n in nodes])
    finally:
        release.set()
        holder.join()
    assert stored == 2
    with tenant_context(tenant_a):
        missing = set(MemoryNode.objects.filter(embedding__isnull=True).values_list("pk", flat=True))
    assert missing == {nodes[1].pk}


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_of_one_tenant_chain_every_event_once(tenant_a):
    """The chain lock is taken after validation: two writers' batches still never fork the chain."""
    alice = make_member(tenant=tenant_a, username="alice", role="owner")
    viewer = author(tenant_a, alice, "user:alice")

    def writer(name: str) -> None:
        for batch in range(3):
            node_write_batch(viewer=viewer, explicit_user_intent=True, operations=[
                avoid(f"{name}{batch}-{index}") for index in range(20)])

    assert not side_by_side(writer)
    report = audit_chain_verify(tenant=tenant_a)
    assert (report.intact, report.events) == (True, 120)
