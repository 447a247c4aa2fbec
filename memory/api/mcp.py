"""The MCP server at `/mcp`: the memory tools over the SDK's streamable HTTP transport (stateless, JSON).

Every tool call is the API request of its route (`memory.api.tools.TOOLS`), sent in-process to the
Django application with the caller's own `Authorization` header: the same authentication, rate limit,
transaction, serializers, services and error bodies as the REST endpoint, with no second copy of any
rule. A 4xx body `{code, detail, errors}` comes back as a tool error (`isError`) whose text is that
JSON. The HTTP request to `/mcp` itself needs a valid key (401 with the API's body otherwise); a
read-only key is offered the read tools only (a write tool it calls anyway answers `forbidden`, from
the API).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from django.urls import reverse
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.responses import JSONResponse

from memory.api.tools import TOOLS, tool_definitions
from tenants.services import api_key_authenticate

KEY_SCOPE = "ekko.api_key"
INSTRUCTIONS = (
    "Ekko Memory: the user's long-term memory. Call memory_context at the start of a turn (or "
    "memory_search for a question), memory_write only for what the user asked to remember or clearly "
    "stated, memory_forget when the user asks to forget. A tool error's text is the API's error body: "
    "act on its `code`.")
# The caller's headers a tool call passes on to its API request (the key, the proxy's view of the client).
FORWARDED_HEADERS = (b"authorization", b"host", b"x-forwarded-for", b"x-forwarded-proto", b"x-request-id",
                     b"user-agent")


@dataclass(frozen=True)
class CallerKey:
    """What the `/mcp` edge learnt of the caller's key: enough to choose the tools it is offered."""

    read_only: bool


def _header(scope: dict[str, Any], name: bytes) -> str:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), "")


def _error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"code": code, "detail": detail}, status_code=status, headers=headers)


def _caller_key(raw_key: str) -> CallerKey | None:
    close_old_connections()  # what Django does around a request, for this connection outside one
    try:
        api_key = api_key_authenticate(raw_key)
        return None if api_key is None else CallerKey(read_only=api_key.read_only)
    finally:
        close_old_connections()


class McpEndpoint:
    """ASGI app of `/mcp`: check the host and the Bearer key, then hand the request to the SDK."""

    def __init__(self, django_app: Any) -> None:
        self.server = Server("ekko-memory", version="1.0.0", instructions=INSTRUCTIONS,
                             on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        self.sessions = StreamableHTTPSessionManager(app=self.server, json_response=True, stateless=True,
                                                     max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        self.django_app = django_app

    def run(self) -> Any:
        """Return the context manager that keeps the SDK's task group alive (the ASGI lifespan)."""
        return self.sessions.run()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        host, _ = split_domain_port(_header(scope, b"host"))
        if not validate_host(host, settings.ALLOWED_HOSTS):
            response = _error(400, "invalid", "This host is not served here (DJANGO_ALLOWED_HOSTS).")
            await response(scope, receive, send)
            return
        keyword, _, raw_key = _header(scope, b"authorization").partition(" ")
        key = await sync_to_async(_caller_key)(raw_key.strip()) if keyword == "Bearer" and raw_key else None
        if key is None:
            response = _error(401, "unauthenticated",
                              "Send `Authorization: Bearer <api key>` with a valid key.",
                              headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[KEY_SCOPE] = key
        await self.sessions.handle_request(scope, receive, send)

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        key: CallerKey = ctx.request.scope["state"][KEY_SCOPE]
        definitions = await sync_to_async(tool_definitions)()
        return types.ListToolsResult(tools=[
            types.Tool(name=d["function"]["name"], description=d["function"]["description"],
                       input_schema=d["function"]["parameters"])
            for d in definitions if not (key.read_only and TOOLS[d["function"]["name"]].writes)
        ])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            body: Any = {"code": "not_found", "detail": f"No tool {params.name!r}; tools/list names them."}
            return _result(body, is_error=True)
        status, body = await self.api_request(ctx.request.scope, tool.route, params.arguments or {})
        return _result(body, is_error=not 200 <= status < 300)

    async def api_request(self, scope: dict[str, Any], route: str,
                          arguments: dict[str, Any]) -> tuple[int, Any]:
        """Send a tool's arguments as the body of its API route, as the caller; return status and body."""
        headers = [(k.decode(), v.decode("latin-1")) for k, v in scope["headers"] if k in FORWARDED_HEADERS]
        client = scope.get("client") or ("127.0.0.1", 0)
        transport = httpx.ASGITransport(app=self.django_app, client=tuple(client))
        base_url = f"{scope.get('scheme', 'http')}://{_header(scope, b'host') or 'localhost'}"
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
            response = await http.post(reverse(route), json=arguments, headers=headers)
        try:
            return response.status_code, response.json()
        except ValueError:  # not the API's answer (a redirect to https, a proxy's page): say so, not more
            return response.status_code, {"code": "server_error",
                                          "detail": f"The API answered {response.status_code} without JSON."}


def _result(body: Any, *, is_error: bool) -> types.CallToolResult:
    text = types.TextContent(text=json.dumps(body, ensure_ascii=False))
    return types.CallToolResult(content=[text], structured_content=body if isinstance(body, dict) else None,
                                is_error=is_error)
