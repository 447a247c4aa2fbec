"""Errors that tell the truth (issue 10, defect 6): bad bodies are 400, clashes 409, only a dead store 503.

Everything goes over HTTP through the Django test client against the real test database; the
database failures are real ones (a lock held by another connection, constraints added for the
test, an unreachable server), never simulated exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from ekko_site.urls import urlpatterns as site_urlpatterns
from memory.errors import Conflict, Invalid, StoreUnavailable, from_database_error
from memory.models import MemoryMessage, MemoryNode
from tenants.context import tenant_context
from tenants.models import Workspace
from tests.api_client import api_for
from tests.memory_factories import default_workspace, make_member, make_node
from tests.test_api_context_without_a_database import database_down  # noqa: F401 - a fixture


def _defect(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a defect of ours, not of the request")


# This module is also a URLconf (`pytest.mark.urls`): the site plus one route that fails on purpose.
urlpatterns = [path("api/v1/test-defect", _defect), path("", include(site_urlpatterns))]


def _post(client, key: str, route: str, raw: str | bytes):  # noqa: ANN001, ANN202
    return client.post(f"/api/v1/{route}", data=raw, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {key}")


def _count(tenant, model) -> int:  # noqa: ANN001
    with tenant_context(tenant):
        return model.objects.filter(tenant=tenant).count()


def _invalid(response, field: str | None = None) -> dict:  # noqa: ANN001
    assert response.status_code == 400, response.content[:400]
    body = response.json()
    assert body["code"] == "invalid", body
    if field is not None:
        assert field in body.get("errors", {}), f"expected {field!r} named in errors, got {body}"
    return body


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    client.raise_request_exception = False  # a regression must show up as a 500 answer, not a traceback
    return api_for(client, tenant_a)


def _write_body(value_json: object) -> str:
    node = {"scope": "workspace", "title": "Deep", "content": "deep value", "valueJson": value_json}
    return json.dumps({"explicitUserIntent": True,
                       "operations": [{"operation": "create", "reason": "test", "node": node}]})


# --- malformed and too-deep JSON ------------------------------------------------------------------

@pytest.mark.parametrize("route", ["memory/search", "memory/write", "messages", "context", "summaries"])
def test_ten_thousand_levels_of_nesting_is_invalid_not_a_server_error(api, route):
    _invalid(_post(api.client, api.key, route, "[" * 10_000 + "]" * 10_000))
    _invalid(_post(api.client, api.key, route, '{"a":' * 10_000 + "1" + "}" * 10_000))


def test_nine_hundred_levels_inside_value_json_is_invalid_and_writes_nothing(api, tenant_a):
    raw = _write_body("__deep__").replace('"__deep__"', "[" * 900 + "]" * 900)
    _invalid(_post(api.client, api.key, "memory/write", raw))
    assert _count(tenant_a, MemoryNode) == 0


def test_nesting_beyond_the_limit_names_the_field(api, tenant_a):
    deep: object = "bottom"
    for _ in range(80):
        deep = {"next": deep}
    body = _invalid(_post(api.client, api.key, "memory/write", _write_body(deep)))
    assert any(name.startswith("operations[0].node.valueJson.next") for name in body["errors"]), body
    assert _count(tenant_a, MemoryNode) == 0


@pytest.mark.parametrize("raw", ["{", '{"all": true', "nul\x00l", b"\xff\xfe{}", '{"limit": NaN}'])
def test_malformed_json_is_invalid(api, raw):
    _invalid(_post(api.client, api.key, "memory/search", raw))


# --- values PostgreSQL cannot store ---------------------------------------------------------------

def _capture(message: dict) -> str:
    return json.dumps({"sessionId": "s-1", "messages": [{"role": "user", "content": "hello", **message}]})


@pytest.mark.parametrize("message, field", [
    ({"metadata": {"note": "x\u0000y"}}, "messages[0].metadata.note"),
    ({"metadata": {"tags": ["ok", "\u0000"]}}, "messages[0].metadata.tags[1]"),
    ({"metadata": {"bad\u0000key": 1}}, "messages[0].metadata"),
    ({"content": "hi\u0000"}, "messages[0].content"),
    ({"agentName": "a\u0000"}, "messages[0].agentName"),
], ids=["nul-in-metadata", "nul-in-metadata-list", "nul-in-metadata-key", "nul-in-content", "nul-in-agent"])
def test_nul_characters_are_invalid_with_the_field_named_and_nothing_written(api, tenant_a, message, field):
    _invalid(_post(api.client, api.key, "messages", _capture(message)), field)
    assert _count(tenant_a, MemoryMessage) == 0


@pytest.mark.parametrize("raw_message, field", [
    ('{"role": "user", "content": "hi \\ud800"}', "messages[0].content"),
    ('{"role": "user", "content": "hi", "metadata": {"k": "\\udc00 lone low"}}', "messages[0].metadata.k"),
    ('{"role": "user", "content": "hi", "metadata": {"big": 1e999}}', "messages[0].metadata.big"),
], ids=["lone-high-surrogate", "lone-low-surrogate-in-metadata", "infinite-number"])
def test_unpaired_surrogates_and_infinite_numbers_are_invalid(api, tenant_a, raw_message, field):
    raw = '{"sessionId": "s-1", "messages": [' + raw_message + "]}"
    _invalid(_post(api.client, api.key, "messages", raw), field)
    assert _count(tenant_a, MemoryMessage) == 0


def test_a_paired_surrogate_is_an_ordinary_character(api, tenant_a):
    raw = '{"sessionId": "s-1", "messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    response = _post(api.client, api.key, "messages", raw)
    assert response.status_code == 201, response.content
    assert response.json()["messages"][0]["content"] == "smile \U0001F600"


@pytest.mark.parametrize("route, body, field", [
    ("memory/write", json.loads(_write_body({"note": "a\u0000b"})), "operations[0].node.valueJson.note"),
    ("memory/search", {"valueJson": "x\u0000"}, "valueJson"),
    ("memory/get", {"valueJson": {"k": "\u0000"}}, "valueJson.k"),
    ("memory/forget", {"valueJson": "\u0000", "reason": "r", "explicitUserIntent": True}, "valueJson"),
], ids=["write", "search", "get", "forget"])
def test_nul_inside_value_json_is_invalid_on_every_route(api, tenant_a, route, body, field):
    _invalid(_post(api.client, api.key, route, json.dumps(body)), field)
    assert _count(tenant_a, MemoryNode) == 0


# --- database failures: what each one means -------------------------------------------------------

@pytest.fixture
def owner_ddl() -> Iterator:
    """Run DDL as the schema owner for one test and undo it afterwards."""
    undo: list[str] = []

    def run(sql: str, revert: str) -> None:
        with connections["owner"].cursor() as cursor:
            cursor.execute(sql)
        undo.append(revert)

    yield run
    with connections["owner"].cursor() as cursor:
        for sql in reversed(undo):
            cursor.execute(sql)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_value_the_store_refuses_is_invalid_not_store_unavailable(api, tenant_a, owner_ddl):
    owner_ddl("ALTER TABLE tenants_workspace ADD CONSTRAINT test_refused CHECK (name <> 'refused by check')",
              "ALTER TABLE tenants_workspace DROP CONSTRAINT test_refused")
    before = _count(tenant_a, Workspace)
    _invalid(_post(api.client, api.key, "workspaces", json.dumps({"name": "refused by check"})))
    assert _count(tenant_a, Workspace) == before


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_clash_with_a_concurrent_write_is_409_conflict_not_store_unavailable(api, tenant_a, owner_ddl):
    # What two concurrent creates of one slug meet; a unique index on the name makes it deterministic.
    owner_ddl("CREATE UNIQUE INDEX test_one_name ON tenants_workspace (tenant_id, name)",
              "DROP INDEX test_one_name")
    assert _post(api.client, api.key, "workspaces", json.dumps({"name": "Kitchen"})).status_code == 201
    response = _post(api.client, api.key, "workspaces", json.dumps({"name": "Kitchen"}))
    assert response.status_code == 409 and response.json()["code"] == "conflict", response.content
    with tenant_context(tenant_a):
        assert Workspace.objects.filter(tenant=tenant_a, name="Kitchen").count() == 1


@pytest.fixture
def app_statement_timeout(monkeypatch) -> Iterator[None]:  # noqa: ANN001
    """Give the app's connection a short statement timeout while another connection holds a lock."""
    connection = connections["default"]
    options = dict(connection.settings_dict["OPTIONS"])
    options["options"] = options.get("options", "") + " -c statement_timeout=300"
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    yield
    connection.close()


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_statement_timeout_is_store_unavailable(api, tenant_a, app_statement_timeout):
    with transaction.atomic(using="owner"):
        with connections["owner"].cursor() as cursor:
            cursor.execute("LOCK TABLE memory_memorymessage IN ACCESS EXCLUSIVE MODE")
        response = _post(api.client, api.key, "messages", _capture({}))
    assert response.status_code == 503 and response.json()["code"] == "store_unavailable", response.content
    assert _count(tenant_a, MemoryMessage) == 0


@pytest.mark.django_db
@pytest.mark.parametrize("sql, expected", [
    ("SELECT 1/0", Invalid),
    ("SELECT 'x'::uuid", Invalid),
    ("SELECT 2147483648::int", Invalid),
    ("CREATE TEMP TABLE t (x int NOT NULL); INSERT INTO t VALUES (NULL)", Invalid),
    ("CREATE TEMP TABLE t (x int UNIQUE); INSERT INTO t VALUES (1), (1)", Conflict),
    ("SET LOCAL statement_timeout = 50; SELECT pg_sleep(1)", StoreUnavailable),
    ("SELECT no_such_column FROM tenants_workspace", None),
])
def test_database_errors_are_classified_by_what_they_mean(sql, expected):
    with pytest.raises(DatabaseError) as caught, transaction.atomic():
        with connections["default"].cursor() as cursor:
            for statement in sql.split("; "):
                cursor.execute(statement)
    error = from_database_error(caught.value)
    assert (type(error) if error is not None else None) is expected, (caught.value, error)


@pytest.mark.urls("tests.test_clean_errors")
def test_an_api_defect_answers_json_500_not_an_html_page(api):
    response = api.client.get("/api/v1/test-defect")
    assert response.status_code == 500
    assert response.json()["code"] == "server_error"


# --- the database is down: the pages answer a friendly 503 ----------------------------------------

@pytest.fixture
def signed_in(client, tenant_a):  # noqa: ANN001
    client.raise_request_exception = False
    client.force_login(make_member(tenant=tenant_a, username="mia"))
    return client


@pytest.mark.parametrize("language, heading", [
    ("en", "Memory store unavailable"), ("zh-hans", "记忆存储暂不可用")])
def test_pages_answer_a_friendly_503_page_when_the_store_is_down(  # noqa: F811
        signed_in, database_down, language, heading):  # noqa: F811
    for url in ("/", "/memories/", "/sessions/"):
        response = signed_in.get(url, HTTP_ACCEPT_LANGUAGE=language)
        assert response.status_code == 503, (url, response.status_code)
        assert response["Content-Type"].startswith("text/html") and response["Retry-After"]
        assert heading in response.content.decode(), response.content[:500]


def test_signing_in_while_the_store_is_down_is_a_503_page(client, database_down):  # noqa: F811
    client.raise_request_exception = False
    response = client.post("/login/", {"username": "mia", "password": "whatever"})
    assert response.status_code == 503
    assert "Memory store unavailable" in response.content.decode()


def test_health_check_says_unavailable_without_internals(client, database_down):  # noqa: F811
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"
    assert "nonexistent-ekko-socket-dir" not in response.content.decode()


# --- found by schemathesis ------------------------------------------------------------------------

@pytest.mark.parametrize("workspace_id", ["²", "١٢", "99999999999999999999999"])
def test_a_workspace_id_of_unusual_digits_is_not_found(api, workspace_id):
    body = json.dumps({"workspaceId": workspace_id, "all": True})
    response = _post(api.client, api.key, "memory/search", body)
    assert response.status_code == 404 and response.json()["code"] == "not_found", response.content



@pytest.mark.parametrize("value", ['{"note": "a\\u0000b"}', '{"note": "a\\ud800b"}'],
                         ids=["nul", "lone-surrogate"])
def test_a_page_form_value_the_store_cannot_keep_is_a_400_page_and_saves_nothing(client, tenant_a, value):
    alice = get_user_model().objects.get(username="alice")
    node = make_node(tenant=tenant_a, workspace=default_workspace(tenant_a), title="Database",
                     content="Postgres", kind="decision", item_key="database", scope="workspace",
                     value_json={"engine": "postgres"})
    client.raise_request_exception = False
    client.force_login(alice)
    response = client.post(f"/memories/{node.pk}/edit/", {
        "title": "Database", "content": "Postgres", "value": value, "original_value": "", "importance": "0.5",
        "reason": "typo", "expected_revision": str(node.revision)})
    assert response.status_code == 400, response.content[:300]
    assert "Not saved" in response.content.decode()
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=node.pk).revision == node.revision
