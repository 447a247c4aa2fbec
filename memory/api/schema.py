"""OpenAPI details drf-spectacular cannot infer: the Bearer scheme and a fix for free-form nullable JSON."""

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
