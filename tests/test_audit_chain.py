"""Issue 10, Deliver 6: each tenant's audit events form a hash chain that `manage.py verify_audit` checks.

Tampering is done the way an attacker with database access would: raw SQL through the owner
connection (which can switch off the guard trigger), so these tests commit their data.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, connections

from memory.audit_chain import audit_chain_verify
from memory.models import MemoryAuditEvent
from memory.rules.audit_digest import GENESIS
from memory.services.nodes import node_write_batch
from memory.visibility import Viewer
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.concurrency import side_by_side
from tests.memory_factories import default_workspace
from tests.test_api_memory_rules import cilantro, create, write

SESSION = "s-1"


def _evidence(api) -> None:  # noqa: ANN001
    api.post("messages", {"sessionId": SESSION, "userId": api.user, "messages": [
        {"id": "m1", "role": "user", "content": "记住，我以后做饭不要香菜。"}]}, expect=201)


def _cards(client, tenant, user: str, count: int = 3) -> list[dict]:  # noqa: ANN001
    api = api_for(client, tenant)
    api.user = user
    _evidence(api)
    results = []
    for index in range(count):
        results += write(api, create(cilantro(itemKey=f"菜{index}", valueJson=f"菜{index}", userId=user,
                                              title=f"不吃菜{index}")))["results"]
    first = results[0]
    write(api, {"operation": "update", "targetId": first["nodeId"], "expectedRevision": 1,
                "node": {"content": "一点都不要"}, "reason": "user corrected it"})
    api.post("memory/forget", {"id": results[1]["nodeId"], "expectedRevision": 1, "reason": "user said so",
                               "explicitUserIntent": True})
    return results


def _verify(*slugs: str) -> str:
    out = StringIO()
    call_command("verify_audit", *[f"--tenant={slug}" for slug in slugs], stdout=out, stderr=StringIO())
    return out.getvalue()


def _verify_fails(slug: str) -> str:
    out = StringIO()
    with pytest.raises(CommandError, match="broken"):
        call_command("verify_audit", f"--tenant={slug}", stdout=out, stderr=StringIO())
    return out.getvalue()


def _events(tenant) -> list[MemoryAuditEvent]:  # noqa: ANN001
    with tenant_context(tenant):
        return list(MemoryAuditEvent.objects.filter(tenant=tenant).order_by("sequence"))


def _owner_sql(sql: str, params: list) -> None:
    with connections["owner"].cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.django_db
def test_a_clean_chain_verifies_and_each_tenant_has_its_own(client, tenant_a, tenant_b):
    _cards(client, tenant_a, "alice")
    _cards(client, tenant_b, "bob", count=2)
    events = _events(tenant_a)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[0].previous_digest == GENESIS
    assert [e.previous_digest for e in events[1:]] == [e.digest for e in events[:-1]]
    assert all(len(e.content_salt) == 32 and len(e.digest) == 64 for e in events)
    assert [e.sequence for e in _events(tenant_b)] == list(range(1, len(_events(tenant_b)) + 1))
    output = _verify()
    assert f"tenant-a: {len(events)} events, chain intact" in output
    assert "tenant-b: " in output and "BROKEN" not in output


@pytest.mark.django_db
def test_a_created_event_knows_its_place_without_a_reload(tenant_a):
    with tenant_context(tenant_a):
        event = MemoryAuditEvent.objects.create(tenant=tenant_a, event_type="create", actor="system",
                                                reason="r", created_at="2026-01-01T00:00:00Z")
    assert (event.sequence, event.previous_digest) == (1, GENESIS)
    assert event.digest == _events(tenant_a)[0].digest


@pytest.mark.django_db
def test_the_application_role_cannot_rewrite_chain_fields(client, tenant_a):
    _cards(client, tenant_a, "alice", count=2)
    target = _events(tenant_a)[0]
    for assignment in ("actor = 'user:mallory'", "digest = repeat('a', 64)", "sequence = 99",
                       "content_salt = 'ffffffffffffffffffffffffffffffff'"):
        with (pytest.raises(DatabaseError, match="audit event"), tenant_context(tenant_a),
              connection.cursor() as c):
            c.execute(f"UPDATE memory_memoryauditevent SET {assignment} WHERE id = %s", [target.pk])  # noqa: S608
    _verify("tenant-a")


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_changed_reason_is_reported_at_that_row(client, tenant_a):
    _cards(client, tenant_a, "alice")
    target = _events(tenant_a)[2]
    _owner_sql("UPDATE memory_memoryauditevent SET reason = 'nothing happened' WHERE id = %s", [target.pk])
    output = _verify_fails("tenant-a")
    assert f"BROKEN at sequence 3 (event {target.pk}): reason or payload changed" in output


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_changed_actor_is_reported_at_that_row_even_with_the_guard_switched_off(client, tenant_a):
    _cards(client, tenant_a, "alice")
    target = _events(tenant_a)[1]
    _owner_sql("ALTER TABLE memory_memoryauditevent DISABLE TRIGGER ekko_audit_chain_guard; "
               "UPDATE memory_memoryauditevent SET actor = 'user:mallory' WHERE id = %s; "
               "ALTER TABLE memory_memoryauditevent ENABLE TRIGGER ekko_audit_chain_guard", [target.pk])
    output = _verify_fails("tenant-a")
    assert f"BROKEN at sequence 2 (event {target.pk}): digest mismatch" in output


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_deleted_event_is_reported_at_the_row_after_it(client, tenant_a, tenant_b):
    _cards(client, tenant_a, "alice")
    _cards(client, tenant_b, "bob", count=2)
    events = _events(tenant_a)
    _owner_sql("DELETE FROM memory_memoryauditevent WHERE id = %s", [events[3].pk])
    output = _verify_fails("tenant-a")
    assert f"BROKEN at sequence 5 (event {events[4].pk}): sequence 5 where 4 was expected" in output
    assert "tenant-b" in _verify("tenant-b")


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_content_erased_without_a_hard_forget_is_reported(client, tenant_a):
    _cards(client, tenant_a, "alice")
    target = _events(tenant_a)[0]
    with tenant_context(tenant_a), connection.cursor() as cursor:
        cursor.execute("UPDATE memory_memoryauditevent SET reason = '', payload = NULL, content_salt = '' "
                       "WHERE id = %s", [target.pk])
    output = _verify_fails("tenant-a")
    assert f"BROKEN at sequence 1 (event {target.pk}): content was erased but no hard forget" in output


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_concurrent_writers_never_fork_the_chain(tenant_a):
    workspace = default_workspace(tenant_a)
    viewer = Viewer(tenant=tenant_a, workspace=workspace, session_id="s-1", read_only=False,
                    write_scopes=frozenset({"session"}), actor="api_key:test")

    def writer(name: str) -> None:
        for index in range(8):
            node_write_batch(viewer=viewer, explicit_user_intent=False, operations=[create(
                {"kind": "task", "item_key": f"{name}-{index}", "value_json": {"status": "open"},
                 "value_json_given": True, "title": f"task {name} {index}", "content": "do it"})])

    assert not side_by_side(writer)
    report = audit_chain_verify(tenant=tenant_a)
    assert (report.intact, report.events) == (True, 16)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_deleting_the_last_events_is_reported_against_the_chain_head(client, tenant_a):
    _cards(client, tenant_a, "alice")
    events = _events(tenant_a)
    _owner_sql("DELETE FROM memory_memoryauditevent WHERE tenant_id = %s AND sequence >= %s",
               [tenant_a.pk, len(events) - 1])
    output = _verify_fails("tenant-a")
    assert f"BROKEN at sequence {len(events) - 1}" in output
    assert f"the chain head records {len(events)} events: the last ones were deleted" in output


@pytest.mark.django_db
def test_a_long_batch_in_one_statement_is_chained_in_order(tenant_a):
    with tenant_context(tenant_a):
        MemoryAuditEvent.objects.bulk_create([
            MemoryAuditEvent(tenant=tenant_a, event_type="create", actor="system", reason=f"r{index}",
                             payload={"n": index}, created_at="2026-01-01T00:00:00Z")
            for index in range(300)
        ], batch_size=120)
    events = _events(tenant_a)
    assert [e.reason for e in events] == [f"r{index}" for index in range(300)]
    report = audit_chain_verify(tenant=tenant_a, batch_size=64)
    assert (report.intact, report.events) == (True, 300)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_the_migration_chains_existing_events_and_erases_what_old_hard_forgets_left(tenant_a, tenant_b):
    import uuid

    from django.db.migrations.executor import MigrationExecutor

    from tenants.db_roles import grant_app_role

    owner = connections["owner"]
    executor = MigrationExecutor(owner)
    executor.migrate([("memory", "0005_node_kind_index")])
    erased_node, kept_node = uuid.uuid4(), uuid.uuid4()
    rows = [(tenant_a, kept_node, "create", "kept reason", '{"node": {"title": "kept"}}', "01"),
            (tenant_a, erased_node, "create", "secret reason", '{"node": {"title": "secret"}}', "02"),
            (tenant_b, kept_node, "create", "b reason", None, "03"),
            (tenant_a, erased_node, "delete", "hard reason", '{"mode": "hard"}', "04")]
    for tenant, node_id, event_type, reason, payload, minute in rows:
        _owner_sql("INSERT INTO memory_memoryauditevent (id, tenant_id, event_type, node_id, actor, reason, "
                   "payload, created_at) VALUES (%s, %s, %s, %s, 'system', %s, %s, %s)",
                   [uuid.uuid4(), tenant.pk, event_type, node_id, reason, payload,
                    f"2026-01-01T00:{minute}:00Z"])
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    grant_app_role(None, using="owner")
    _owner_sql("GRANT TRUNCATE ON ALL TABLES IN SCHEMA public TO ekko_app", [])
    events = _events(tenant_a)
    assert [(e.sequence, e.reason) for e in events] == [(1, "kept reason"), (2, ""), (3, "")]
    assert events[1].payload is None and events[2].payload == {"mode": "hard"}
    assert audit_chain_verify(tenant=tenant_a).intact and audit_chain_verify(tenant=tenant_b).intact
    with tenant_context(tenant_a):
        MemoryAuditEvent.objects.create(tenant=tenant_a, event_type="create", actor="system", reason="after",
                                        created_at="2026-01-02T00:00:00Z")
    assert [e.sequence for e in _events(tenant_a)] == [1, 2, 3, 4]
    assert audit_chain_verify(tenant=tenant_a).intact


@pytest.mark.django_db
def test_the_history_api_shows_each_event_s_place_in_the_chain(client, tenant_a):
    first = _cards(client, tenant_a, "alice", count=2)[0]
    api = api_for(client, tenant_a)
    events = api.get(f"memory/nodes/{first['nodeId']}/history")["events"]
    stored = {str(e.pk): (e.sequence, e.digest) for e in _events(tenant_a)}
    assert [(e["sequence"], e["digest"]) for e in events] == [stored[e["id"]] for e in events]
    assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)
