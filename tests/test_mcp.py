"""The MCP server at /mcp, end to end: the SDK's own client over real HTTP against the served app.

Each tool call is the API request of its route (memory.api.mcp), so these tests check the wiring — the
tool list and its schemas, the key at the HTTP edge, API errors as tool errors with the API's code — not
the memory rules again, which the API tests own.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tenants.services import api_key_create, api_key_revoke
from tests.factories import make_tenant
from tests.served import served_app  # noqa: F401 - the fixture

READ_TOOLS = ["memory_search", "memory_get", "memory_context"]
ALL_TOOLS = ["memory_search", "memory_get", "memory_write", "memory_forget", "memory_context"]


def over_mcp(url: str, key: str, *calls: tuple[str, dict[str, Any] | None]) -> list[Any]:
    """Open one SDK client session on /mcp with `key` and make `calls` in order: ("tools/list", None)
    lists the tools, (name, arguments) calls one; return their results."""

    async def session_run() -> list[Any]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            async with streamable_http_client(f"{url}/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    results = []
                    for name, arguments in calls:
                        if name == "tools/list":
                            results.append((await session.list_tools()).tools)
                        else:
                            results.append(await session.call_tool(name, arguments))
                    return results

    return asyncio.run(session_run())


def body_of(result: Any) -> dict[str, Any]:
    """Return the JSON a tool result carries in its text content (the API's response or error body)."""
    assert len(result.content) == 1 and result.content[0].type == "text"
    return json.loads(result.content[0].text)


def tool_error(result: Any, code: str) -> dict[str, Any]:
    body = body_of(result)
    assert result.is_error and body["code"] == code, f"expected a tool error {code!r}, got {body}"
    return body


def tool_ok(result: Any) -> dict[str, Any]:
    body = body_of(result)
    assert not result.is_error, f"the tool call failed: {body}"
    assert result.structured_content == body
    return body


def create_call(item: str, content: str) -> tuple[str, dict[str, Any]]:
    node = {"kind": "hard_constraint", "itemKey": item, "scope": "workspace", "title": item,
            "content": content}
    operation = {"operation": "create", "reason": "the user said so", "node": node}
    return ("memory_write", {"operations": [operation], "explicitUserIntent": True})


@pytest.fixture
def keys(transactional_db):  # noqa: ANN001, ANN201
    tenant_a, tenant_b = make_tenant("tenant-a", owner="alice"), make_tenant("tenant-b", owner="bob")
    return {"a": api_key_create(tenant=tenant_a).raw_key,
            "a_read_only": api_key_create(tenant=tenant_a, read_only=True).raw_key,
            "b": api_key_create(tenant=tenant_b).raw_key}


def test_the_tool_list_is_get_tools(served_app, keys):  # noqa: F811
    tools = over_mcp(served_app.url, keys["a"], ("tools/list", None))[0]
    assert [t.name for t in tools] == ALL_TOOLS
    listed = httpx.get(f"{served_app.url}/api/v1/tools", headers={"Authorization": f"Bearer {keys['a']}"})
    definitions = {t["function"]["name"]: t["function"] for t in listed.json()["tools"]}
    assert list(definitions) == ALL_TOOLS
    for tool in tools:
        assert tool.input_schema == definitions[tool.name]["parameters"], tool.name
        assert tool.description == definitions[tool.name]["description"]


def test_write_search_get_conflict_forget(served_app, keys):  # noqa: F811
    (write,) = over_mcp(served_app.url, keys["a"], create_call("database", "Production runs on PostgreSQL."))
    assert tool_ok(write)["done"] is True
    node_id = tool_ok(write)["results"][0]["nodeId"]
    search, get, stale, forget, after = over_mcp(
        served_app.url, keys["a"],
        ("memory_search", {"queryText": "PostgreSQL"}),
        ("memory_get", {"kind": "hard_constraint", "key": "hard_constraint:database"}),
        ("memory_write", {"operations": [{"operation": "update", "targetId": node_id, "expectedRevision": 7,
                                          "node": {"scope": "workspace", "title": "database",
                                                   "content": "Production runs on MySQL."},
                                          "reason": "stale"}], "explicitUserIntent": True}),
        ("memory_forget", {"id": node_id, "expectedRevision": 1, "reason": "the user asked",
                           "explicitUserIntent": True}),
        ("memory_search", {"all": True}),
    )
    found = tool_ok(search)
    assert node_id in [n["id"] for n in found["exact"] + found["relevant"]]
    assert tool_ok(get)["node"]["id"] == node_id
    conflict = tool_error(stale, "revision_conflict")
    assert conflict["currentRevision"] == 1 and conflict["status"] == "active"
    assert tool_ok(forget)["deletedIds"] == [node_id]
    assert tool_ok(after)["exact"] == []


def test_context_and_invalid_arguments(served_app, keys):  # noqa: F811
    context, invalid, unknown = over_mcp(
        served_app.url, keys["a"],
        ("memory_context", {"sessionId": "s-1", "queryText": "what database?", "tokenBudget": 500}),
        ("memory_search", {"limit": "many"}),
        ("memory_remember", {}),
    )
    pack = tool_ok(context)
    assert pack["diagnostics"]["tokenBudget"] == 500 and "prompt" in pack
    assert "limit" in tool_error(invalid, "invalid")["errors"]
    tool_error(unknown, "not_found")


def test_a_read_only_key_is_offered_the_read_tools_only(served_app, keys):  # noqa: F811
    tools, write, forget, search = over_mcp(
        served_app.url, keys["a_read_only"],
        ("tools/list", None),
        create_call("editor", "Use vim."),
        ("memory_forget", {"all": True, "reason": "try", "explicitUserIntent": True}),
        ("memory_search", {"all": True}),
    )
    assert [t.name for t in tools] == READ_TOOLS
    tool_error(write, "forbidden")
    tool_error(forget, "forbidden")
    assert tool_ok(search)["exact"] == []


def test_another_tenants_card_is_not_found(served_app, keys):  # noqa: F811
    (write,) = over_mcp(served_app.url, keys["b"], create_call("secret", "Tenant B's own plan."))
    b_node = tool_ok(write)["results"][0]["nodeId"]
    expire, forget, search = over_mcp(
        served_app.url, keys["a"],
        ("memory_write", {"operations": [{"operation": "expire", "targetId": b_node, "expectedRevision": 1,
                                          "reason": "probe"}], "explicitUserIntent": True}),
        ("memory_forget", {"id": b_node, "expectedRevision": 1, "mode": "hard", "reason": "probe",
                           "explicitUserIntent": True}),
        ("memory_search", {"queryText": "plan"}),
    )
    tool_error(expire, "not_found")
    tool_error(forget, "not_found")
    found = tool_ok(search)
    assert b_node not in [n["id"] for n in found["exact"] + found["relevant"]]


@pytest.mark.parametrize("authorization", [None, "Bearer ekko_not-a-real-key", "Basic YWxpY2U6cHc="])
def test_without_a_valid_key_mcp_answers_401(served_app, keys, authorization):  # noqa: F811
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    response = httpx.post(f"{served_app.url}/mcp", headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_revoked_key_is_refused_at_once(served_app, keys):  # noqa: F811
    issued = api_key_create(tenant=make_tenant("tenant-c", owner="carol"))
    assert [t.name for t in over_mcp(served_app.url, issued.raw_key, ("tools/list", None))[0]] == ALL_TOOLS
    api_key_revoke(tenant=issued.api_key.tenant, api_key_id=issued.api_key.pk)
    response = httpx.post(f"{served_app.url}/mcp", headers={"Authorization": f"Bearer {issued.raw_key}"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"


def test_the_same_served_app_answers_the_pages_and_documents_mcp(served_app, transactional_db):  # noqa: F811
    assert httpx.get(f"{served_app.url}/login/").status_code == 200
    assert httpx.get(f"{served_app.url}/api/docs/").status_code == 200
    schema = httpx.get(f"{served_app.url}/api/schema/?format=json").json()
    assert {"/mcp", "/metrics"} <= set(schema["paths"]) and "/mcp" in schema["info"]["description"]
