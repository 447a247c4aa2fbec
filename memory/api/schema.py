"""OpenAPI details drf-spectacular cannot infer: the Bearer scheme, a fix for free-form nullable JSON, and
the endpoints outside DRF (`/mcp`, `/metrics`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "memory.api.auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema) -> dict[str, str]:  # noqa: ANN001
        return {"type": "http", "scheme": "bearer", "description": "An Ekko API key (`create_api_key`)."}


def _free_form_nullable(node: Any) -> Any:
    # `oneOf: [{}, {type: null}]` rejects null (it matches both branches); any JSON value is meant.
    if isinstance(node, dict):
        one_of = node.get("oneOf")
        if isinstance(one_of, list) and len(one_of) == 2 and {} in one_of and {"type": "null"} in one_of:
            rest = {k: v for k, v in node.items() if k != "oneOf"}
            return rest
        return {key: _free_form_nullable(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_free_form_nullable(item) for item in node]
    return node


def free_form_nullable_hook(result: dict, generator, request, public) -> dict:  # noqa: ANN001
    return _free_form_nullable(result)


MCP_DESCRIPTION = (
    "The MCP server (Model Context Protocol, streamable HTTP transport, stateless, JSON responses): "
    "JSON-RPC 2.0 messages such as `initialize`, `tools/list` and `tools/call`. Tools: `memory_search`, "
    "`memory_get`, `memory_write`, `memory_forget` and `memory_context`, whose input schemas are exactly "
    "the parameters of `GET /api/v1/tools`. Each call is the request of its API operation (memory_search "
    "→ memory/search, memory_get → memory/get, memory_write → memory/write, memory_forget → memory/forget, "
    "memory_context → context) made with the caller's key, so rules, limits and errors are the API's: an "
    "API error comes back as a tool result with `isError: true` whose text is the API's error body "
    "`{code, detail, errors}`. Same Bearer API keys; a read-only key is offered the read tools only. No or "
    "an invalid key answers 401 before any JSON-RPC. Served by the ASGI entry (ekko_site.asgi); see "
    "docs/mcp.md for a client's configuration.")
METRICS_DESCRIPTION = (
    "Prometheus metrics (text exposition format): request latency per route "
    "(`ekko_http_request_duration_seconds`), search latency per arm (`ekko_search_arm_duration_seconds`), "
    "embedding and extraction queue depths (`ekko_embedding_queue_depth`, `ekko_extraction_queue_depth`), "
    "extraction outcomes (`ekko_extractions_total`) and webhook deliveries "
    "(`ekko_webhook_deliveries_total`). Off (404) unless `EKKO_METRICS_TOKEN` is set; then it needs "
    "`Authorization: Bearer <EKKO_METRICS_TOKEN>` (not an API key). See docs/operations.md.")


def service_endpoints_hook(result: dict, generator, request, public) -> dict:  # noqa: ANN001
    """Add the endpoints outside DRF: `/mcp` (the MCP server) and `/metrics` (Prometheus)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    result["components"]["securitySchemes"]["metricsToken"] = {
        "type": "http", "scheme": "bearer", "description": "The value of EKKO_METRICS_TOKEN."}
    result["paths"]["/mcp"] = {"post": {
        "operationId": "mcp", "tags": ["mcp"], "summary": "MCP server (streamable HTTP)",
        "description": MCP_DESCRIPTION, "security": [{"apiKey": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "description": "A JSON-RPC 2.0 request or notification."}}}},
        "responses": {
            "200": {"description": "The JSON-RPC response.", "content": {"application/json": {"schema": {
                "type": "object", "description": "A JSON-RPC 2.0 response."}}}},
            "202": {"description": "A notification was accepted."},
            "400": {"description": "A host outside DJANGO_ALLOWED_HOSTS.", "content": error},
            "401": {"description": "No, an unknown or a revoked API key.", "content": error},
        }}}
    result["paths"]["/metrics"] = {"get": {
        "operationId": "metrics", "tags": ["operations"], "summary": "Prometheus metrics",
        "description": METRICS_DESCRIPTION, "security": [{"metricsToken": []}],
        "responses": {
            "200": {"description": "The metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}},
            "401": {"description": "EKKO_METRICS_TOKEN is set and was not sent."},
            "404": {"description": "Metrics are off (EKKO_METRICS_TOKEN is unset)."},
        }}}
    return result
