"""Who may call what: authentication, read-only keys, workspace pins, rate limits, and tenant crossing.

`test_every_route_refuses_another_tenants_ids` walks the URLconf: a new API route without a
crossing case fails the suite until someone says how tenant B's ids reach it.
"""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.urls import URLPattern

from memory.api import urls as api_urls
from memory.models import MemoryNode
from tenants.context import tenant_context
from tenants.models import Workspace
from tenants.services import api_key_create, api_key_revoke, workspace_create
from tests.api_client import Api, api_for


def _seed(api: Api, user: str) -> dict:
    api.post("messages", {"sessionId": "s", "userId": user, "messages": [
        {"id": "m1", "role": "user", "content": "记住我不吃香菜"}]}, expect=201)
    node = api.post("memory/write", {"operations": [{"operation": "create", "reason": "r", "node": {
        "kind": "food_avoidance", "itemKey": "香菜", "userId": user, "valueJson": "香菜", "title": "不吃香菜",
        "content": "不吃香菜"}}], "explicitUserIntent": True, "sourceMessageIds": ["m1"]})["results"][0]
    return node


@pytest.fixture
def two_tenants(client, tenant_a, tenant_b):  # noqa: ANN001
    api_a, api_b = api_for(client, tenant_a), api_for(client, tenant_b)
    node_b = _seed(api_b, "bob")
    node_b["extractTaskId"] = api_b.post("extract", {"sessionId": "s"}, expect=202)["taskId"]
    node_b["organizeRunId"] = api_b.post("memory/organize", {"userId": "bob"}, expect=202)["runId"]
    with tenant_context(tenant_b):
        workspace_b = Workspace.objects.get(slug="default").pk
    return api_a, node_b, workspace_b


def _crossing_requests(node_b: dict, ws_b: int) -> dict[str, list[tuple[str, str, dict]]]:
    node_id = node_b["nodeId"]
    return {
        "api-messages": [("POST", "messages", {"sessionId": "s", "workspaceId": ws_b,
                                               "messages": [{"role": "user", "content": "hi"}]}),
                         ("GET", "messages", {"sessionId": "s", "workspaceId": ws_b})],
        "api-messages-search": [("POST", "messages/search", {"queryText": "香菜", "workspaceId": ws_b})],
        "api-memory-search": [("POST", "memory/search", {"queryText": "香菜", "workspaceId": ws_b}),
                              ("POST", "memory/search", {"queryText": "香菜", "userId": "bob"})],
        "api-node": [("GET", f"memory/nodes/{node_id}", {})],
        "api-node-history": [("GET", f"memory/nodes/{node_id}/history", {})],
        "api-memory-get": [("POST", "memory/get", {"kind": "food_avoidance", "workspaceId": ws_b}),
                           ("POST", "memory/get", {"kind": "food_avoidance", "userId": "bob"})],
        "api-memory-write": [("POST", "memory/write", {"operations": [{
            "operation": "update", "targetId": node_id, "expectedRevision": 1, "reason": "r",
            "node": {"content": "hijack"}}], "explicitUserIntent": True})],
        "api-memory-forget": [("POST", "memory/forget", {"id": node_id, "expectedRevision": 1, "reason": "r",
                                                          "explicitUserIntent": True, "mode": "hard"})],
        "api-context": [("POST", "context", {"sessionId": "s", "workspaceId": ws_b, "queryText": "吃什么"})],
        "api-summaries": [("POST", "summaries", {"sessionId": "s", "workspaceId": ws_b, "fromMessageId": "m1",
                                                 "toMessageId": "m1", "summary": "x"})],
        "api-workspace-export": [("GET", f"workspaces/{ws_b}/export.sqlite", {})],
        "api-workspace-import": [("POST", f"workspaces/{ws_b}/import", {})],
        "api-summaries-latest": [("GET", "summaries/latest", {"sessionId": "s", "workspaceId": ws_b})],
        "api-extract": [("POST", "extract", {"sessionId": "s", "workspaceId": ws_b}),
                        ("POST", "extract", {"sessionId": "s", "userId": "bob"})],
        "api-extract-status": [("GET", f"extract/{node_b['extractTaskId']}", {})],
        "api-memory-quota": [("GET", "memory/quota", {"workspaceId": ws_b}),
                             ("GET", "memory/quota", {"userId": "bob"})],
        "api-memory-organize": [("POST", "memory/organize", {"scope": "workspace", "workspaceId": ws_b}),
                                ("POST", "memory/organize", {"userId": "bob"})],
        "api-memory-organize-status": [("GET", f"memory/organize/{node_b['organizeRunId']}", {})],
        "api-memory-organize-item": [("POST", f"memory/organize/{node_b['organizeRunId']}/items/"
                                      "00000000-0000-0000-0000-000000000000", {"decision": "apply"})],
    }


# Routes that carry no tenant-owned id at all, with the reason.
NO_TENANT_IDS = {
    "api-tools": "static tool definitions",
    "api-workspaces": "lists the caller's own workspaces; checked by test_workspace_list_shows_only_own_tenant",
}


def _api_route_names() -> list[str]:
    return [p.name for p in api_urls.urlpatterns if isinstance(p, URLPattern)]


def test_every_api_route_has_a_tenant_crossing_case(two_tenants):
    api_a, node_b, ws_b = two_tenants
    covered = set(_crossing_requests(node_b, ws_b)) | set(NO_TENANT_IDS)
    missing = set(_api_route_names()) - covered
    assert not missing, f"add tenant-crossing cases for {sorted(missing)}"


@pytest.mark.parametrize("route", sorted(set(_api_route_names()) - set(NO_TENANT_IDS)))
def test_every_route_refuses_another_tenants_ids(two_tenants, tenant_b, route):
    api_a, node_b, ws_b = two_tenants
    for method, path, body in _crossing_requests(node_b, ws_b)[route]:
        api_a.call(method, path, body, expect=404, code="not_found")
    with tenant_context(tenant_b):
        node = MemoryNode.objects.get(pk=node_b["nodeId"])
    assert (node.status, node.revision, node.content) == ("active", 1, "不吃香菜")


def test_a_missing_id_and_a_foreign_id_answer_identically(two_tenants):
    api_a, node_b, _ = two_tenants
    foreign = api_a.get(f"memory/nodes/{node_b['nodeId']}", expect=404)
    missing = api_a.get("memory/nodes/00000000-0000-0000-0000-000000000000", expect=404)
    garbage = api_a.get("memory/nodes/not-a-uuid", expect=404)
    assert foreign == missing == garbage


def test_workspace_list_shows_only_own_tenant(two_tenants, tenant_a):
    api_a, _, ws_b = two_tenants
    listed = api_a.get("workspaces")["workspaces"]
    assert [w["slug"] for w in listed] == ["default"] and str(ws_b) not in {w["id"] for w in listed}
    created = api_a.post("workspaces", {"name": "Project Hermes"}, expect=201)
    assert created["slug"] == "project-hermes"


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer ekko_wrong", "Token abc", "Bearer"])
def test_missing_or_invalid_keys_are_unauthenticated(client, tenant_a, header):
    kwargs = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.post("/api/v1/memory/search", data="{}", content_type="application/json", **kwargs)
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"


def test_a_revoked_key_is_refused(client, tenant_a):
    issued = api_key_create(tenant=tenant_a)
    api = Api(client, issued.raw_key)
    api.get("workspaces")
    api_key_revoke(tenant=tenant_a, api_key_id=issued.api_key.pk)
    api.get("workspaces", expect=401, code="unauthenticated")


def test_a_pinned_key_reaches_only_its_workspace(client, tenant_a):
    hermes = workspace_create(tenant=tenant_a, name="Hermes")
    pinned = api_for(client, tenant_a, workspace=hermes)
    assert [w["slug"] for w in pinned.get("workspaces")["workspaces"]] == ["hermes"]
    pinned.post("messages", {"sessionId": "s", "workspaceId": "default",
                             "messages": [{"role": "user", "content": "x"}]}, expect=403, code="forbidden")
    stored = pinned.post("messages", {"sessionId": "s", "messages": [{"role": "user", "content": "x"}]},
                         expect=201)
    assert stored["messages"][0]["workspaceId"] == str(hermes.pk)


def test_per_key_rate_limit_answers_429_with_retry_after(client, tenant_a, settings):
    settings.EKKO_RATE_LIMIT = "3/min"
    cache.clear()
    api = api_for(client, tenant_a)
    for _ in range(3):
        api.get("workspaces")
    body = api.get("workspaces", expect=429, code="rate_limited")
    assert int(api.last_response["Retry-After"]) >= 1 and "detail" in body
    other_key = api_for(client, tenant_a)
    other_key.get("workspaces")
    cache.clear()


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b'"text"', b"null", b"\xff\xfe", b'{"queryText": {"a": 1}}'])
def test_malformed_bodies_are_invalid(client, tenant_a, raw):
    api = api_for(client, tenant_a)
    body = api.call("POST", "memory/search", raw=raw, expect=400, code="invalid")
    assert body["detail"]


@pytest.mark.parametrize("body, field", [
    ({"scopes": ["planet"]}, "scopes[0]"),
    ({"types": ["mood"]}, "types[0]"),
    ({"limit": 500}, "limit"),
    ({"limit": "many"}, "limit"),
])
def test_unknown_enum_values_and_wrong_types_name_the_field(client, tenant_a, body, field):
    errors = api_for(client, tenant_a).post("memory/search", body, expect=400, code="invalid")["errors"]
    assert field in errors, errors


def test_browser_sessions_need_csrf_on_the_api(client, tenant_a):
    from django.http import HttpRequest
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    # django-axes throttles sign-ins by request address, so authenticate() needs a request.
    browser.login(request=HttpRequest(), username="alice", password="pw-for-tests-1")
    response = browser.post("/api/v1/memory/search", data=json.dumps({"all": True}),
                            content_type="application/json")
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert "CSRF" in response.json()["detail"]
    assert browser.get("/api/v1/workspaces").status_code == 200


def test_tools_are_openai_functions_generated_from_the_request_schemas(client, tenant_a):
    tools = api_for(client, tenant_a).get("tools")["tools"]
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    assert set(by_name) == {"memory_search", "memory_get", "memory_write", "memory_forget", "memory_context"}
    assert sorted(by_name["memory_context"]["parameters"]["required"]) == ["queryText", "sessionId"]
    write = by_name["memory_write"]["parameters"]
    assert sorted(write["required"]) == ["explicitUserIntent", "operations"]
    operation = write["properties"]["operations"]["items"]
    assert operation["properties"]["operation"]["enum"] == ["create", "update", "supersede", "expire", "accept"]
    assert "$ref" not in json.dumps(tools)
    assert "queryText" in by_name["memory_search"]["parameters"]["properties"]
