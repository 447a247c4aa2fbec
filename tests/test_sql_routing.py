"""The SQL routing check itself (tests/sql_routing.py, tenant_predicates.py): what it flags and lets by."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection, connections

import tests.sql_routing as routing
from tests.tenant_predicates import check, to_postgres

TABLES = frozenset({"memory_memorynode", "memory_memoryauditevent", "tenants_workspace"})
ROOT = Path(__file__).resolve().parent.parent

PINNED = [
    'SELECT * FROM "memory_memorynode" WHERE ("memory_memorynode"."tenant_id" = %s '
    'AND "memory_memorynode"."id" = %s)',
    "SELECT * FROM memory_memorynode WHERE tenant_id IN (%s) AND id = ANY(%s)",
    "SELECT * FROM memory_memorynode WHERE tenant_id::bigint = NULLIF(current_setting(%s, true), '')::bigint",
    "SELECT n.id FROM memory_memorynode n JOIN tenants_workspace w ON w.id = n.workspace_id "
    "AND w.tenant_id = n.tenant_id WHERE n.tenant_id = %s",
    "SELECT * FROM memory_memorynode n WHERE n.tenant_id = %s AND EXISTS "
    "(SELECT 1 FROM memory_memoryauditevent e WHERE e.tenant_id = n.tenant_id AND e.node_id = n.id)",
    "SELECT * FROM memory_memorynode n, LATERAL (SELECT 1 FROM memory_memoryauditevent e "
    "WHERE e.tenant_id = n.tenant_id) l WHERE n.tenant_id = %s",
    "WITH recent AS (SELECT id FROM memory_memorynode WHERE tenant_id = %s) SELECT * FROM recent",
    "SELECT id FROM memory_memorynode WHERE tenant_id = %s UNION ALL "
    "SELECT node_id FROM memory_memoryauditevent WHERE tenant_id = %s",
    "UPDATE memory_memorynode SET status = %s WHERE tenant_id = %s AND id = %s",
    "DELETE FROM memory_memorynode WHERE tenant_id = %s AND id IN (%s, %s)",
    "INSERT INTO memory_memorynode (id, tenant_id) VALUES (%s, %s), (%s, %s) RETURNING id",
    "INSERT INTO memory_memorynode (id, tenant_id) SELECT id, tenant_id FROM staging",
    "SELECT * FROM memory_memorynode WHERE tenant_id = %(tenant)s AND title LIKE %(pattern)s",
    "EXPLAIN SELECT * FROM memory_memorynode WHERE tenant_id = 5 ORDER BY embedding <=> '[1]' LIMIT 5",
    "SELECT relname FROM pg_class WHERE relname = 'memory_memorynode'",
    "SELECT pg_advisory_xact_lock(%s, (%s %% 2147483647)::int)",
]

UNPINNED = [
    ("SELECT * FROM memory_memorynode WHERE id = %s", ["memory_memorynode"]),
    ("UPDATE memory_memorynode SET status = %s WHERE id = %s", ["memory_memorynode"]),
    ("DELETE FROM memory_memorynode WHERE id = ANY(%s)", ["memory_memorynode"]),
    ("SELECT * FROM memory_memorynode WHERE tenant_id = %s OR id = %s", ["memory_memorynode"]),
    ("SELECT * FROM memory_memorynode WHERE tenant_id IN (%s, %s)", ["memory_memorynode"]),
    ("SELECT * FROM memory_memorynode WHERE tenant_id = workspace_id", ["memory_memorynode"]),
    ('SELECT * FROM "memory_memorynode" INNER JOIN "tenants_workspace" '
     'ON ("memory_memorynode"."workspace_id" = "tenants_workspace"."id") '
     'WHERE "memory_memorynode"."tenant_id" = %s',
     ["tenants_workspace"]),
    ("SELECT * FROM memory_memorynode n WHERE n.tenant_id = %s AND n.id IN "
     "(SELECT node_id FROM memory_memoryauditevent)", ["memory_memoryauditevent"]),
    ("SELECT c.id, (SELECT b.id FROM memory_memorynode b WHERE b.tenant_id = %s) "
     "FROM memory_memorynode c WHERE c.id = ANY(%s)", ["memory_memorynode"]),
    ("WITH every AS (SELECT id FROM memory_memorynode) SELECT * FROM every", ["memory_memorynode"]),
    ("SELECT id FROM memory_memorynode WHERE tenant_id = %s "
     "UNION SELECT node_id FROM memory_memoryauditevent",
     ["memory_memoryauditevent"]),
    ("INSERT INTO memory_memorynode (id) VALUES (%s)", ["memory_memorynode"]),
    ("INSERT INTO memory_memoryauditevent (tenant_id, node_id) SELECT tenant_id, id FROM memory_memorynode",
     ["memory_memorynode"]),
]


@pytest.mark.parametrize("sql", PINNED)
def test_a_statement_pinned_to_one_tenant_passes(sql):
    verdict = check(to_postgres(sql, True), TABLES)
    assert verdict.ok, verdict.describe()


@pytest.mark.parametrize(("sql", "tables"), UNPINNED)
def test_a_statement_that_can_reach_every_shard_is_flagged(sql, tables):
    verdict = check(to_postgres(sql, True), TABLES)
    assert list(verdict.unpinned) == tables, verdict.describe()


@pytest.mark.parametrize("sql", ["TRUNCATE memory_memorynode", "CREATE INDEX i ON memory_memorynode (kind)",
                                 "LOCK TABLE tenants_workspace", "ANALYZE memory_memorynode"])
def test_a_utility_statement_on_a_tenant_table_is_flagged_as_such(sql):
    assert check(sql, TABLES).problem.startswith("utility statement")


def test_a_statement_the_parser_cannot_read_is_flagged_not_passed():
    assert check("SELECT FROM memory_memorynode WHERE (", TABLES).problem.startswith("not parsed")


def test_placeholders_become_postgres_parameters_and_lists_are_folded():
    sql = to_postgres("SELECT %s, %(a)s, %(a)s, '5%%' WHERE x IN (%s, %s, %s)", True)
    assert sql == "SELECT $1, $2, $2, '5%' WHERE x IN ($3, $4, $5)"
    assert to_postgres("SELECT '5%'", False) == "SELECT '5%'"
    assert check(sql, TABLES).statement == "SELECT $1, …, '5%' WHERE x IN ($3, …)"


def test_the_tenant_tables_are_read_from_the_models():
    tables = routing.tenant_tables()
    assert {"memory_memorynode", "memory_memorymessage", "memory_memoryauditevent", "memory_auditchainhead",
            "memory_memoryreadevent", "memory_extractionrun", "memory_memorykind", "memory_memorysummary",
            "tenants_workspace", "tenants_workspacemember", "tenants_membership", "tenants_apikey"} <= tables
    assert not tables & {"tenants_tenant", "auth_user", "django_session"}


def _send(recorder: routing.Recorder, sql: str, params: object = (1,)) -> str:
    return recorder.wrapper(lambda *args: "sent", sql, params, False, {})


def _sweep(recorder: routing.Recorder, sql: str) -> str:
    return _send(recorder, sql)


def test_the_recorder_keeps_each_offending_statement_once_with_its_line_and_tests():
    recorder = routing.Recorder(lambda: TABLES, allowlist=())
    recorder.current_test = "tests/x.py::one"
    for _ in range(2):
        assert _send(recorder, "SELECT * FROM memory_memorynode WHERE id = %s") == "sent"
    recorder.current_test = "tests/x.py::two"
    _send(recorder, "SELECT * FROM memory_memorynode WHERE id = %s")
    _send(recorder, "SELECT * FROM memory_memorynode WHERE tenant_id = %s AND id = %s")
    _send(recorder, "SELECT 1")
    (finding,) = recorder.findings.values()
    assert finding.count == 3 and finding.tests == ["tests/x.py::one", "tests/x.py::two"]
    assert finding.sent_from.startswith("tests/test_sql_routing.py:") and finding.sent_from.endswith("_send")
    assert "no tenant_id predicate on memory_memorynode" in "\n".join(recorder.report())


def test_an_allowlisted_function_on_the_stack_lets_the_statement_by():
    sweep = routing.CrossShard("tests.test_sql_routing._sweep", "a sweep")
    recorder = routing.Recorder(lambda: TABLES, allowlist=(sweep,))
    _sweep(recorder, "SELECT * FROM memory_memorynode")
    assert not recorder.findings
    _send(recorder, "SELECT * FROM memory_memorynode")
    assert len(recorder.findings) == 1


def test_a_sender_only_exception_counts_only_the_code_that_sent_the_statement():
    own_look = routing.CrossShard("tests.test_sql_routing._send", "the tests' own look", sender_only=True)
    callers = routing.CrossShard("tests.test_sql_routing._sweep", "a sweep", sender_only=True)
    recorder = routing.Recorder(lambda: TABLES, allowlist=(own_look, callers))
    _sweep(recorder, "SELECT * FROM memory_memorynode")  # sent by _send, called from _sweep
    assert not recorder.findings
    recorder = routing.Recorder(lambda: TABLES, allowlist=(callers,))
    _sweep(recorder, "SELECT * FROM memory_memorynode")
    assert len(recorder.findings) == 1


def test_findings_of_the_worker_process_are_merged(tmp_path):
    worker = routing.Recorder(lambda: TABLES, allowlist=(), sink=tmp_path / "worker-1.jsonl")
    worker.current_test = "tests/test_worker.py::w"
    _send(worker, "UPDATE memory_memorynode SET status = %s WHERE id = %s")
    mine = routing.Recorder(lambda: TABLES, allowlist=())
    mine.merge(tmp_path)
    (finding,) = mine.findings.values()
    assert finding.tests == ["tests/test_worker.py::w"]
    assert json.loads((tmp_path / "worker-1.jsonl").read_text())["statement"] == finding.statement


def test_the_session_fails_when_a_statement_was_found(monkeypatch, tmp_path):
    recorder = routing.Recorder(lambda: TABLES, allowlist=())
    monkeypatch.setattr(routing, "_recorder", recorder)
    monkeypatch.setattr(routing, "_directory", SimpleNamespace(name=str(tmp_path)))
    session = SimpleNamespace(exitstatus=0)
    routing.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0
    _send(recorder, "SELECT * FROM memory_memorynode")
    routing.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1


@pytest.mark.skipif(routing._recorder is None, reason="the check is off (-p no:tests.sql_routing)")
@pytest.mark.django_db
def test_every_connection_of_the_suite_is_watched_including_other_threads():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert routing._recorder is not None and routing._recorder.wrapper in connection.execute_wrappers
    seen: list[bool] = []

    def other_thread() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT 1")
            seen.append(routing._recorder.wrapper in connections["default"].execute_wrappers)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == [True]


def test_every_exception_is_documented_in_the_scale_out_guide():
    guide = (ROOT / "docs" / "scale-out.md").read_text(encoding="utf-8")
    missing = [entry.origin for entry in routing.ALLOWLIST if f"`{entry.origin}`" not in guide]
    assert not missing, f"List {missing} with their reasons in docs/scale-out.md (cross-tenant statements)"
