"""An API test client: Bearer auth or a signed-in browser session (with CSRF), status + error-code assertions,
and OpenAPI validation of every response."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import resolve
from referencing import Registry, Resource

from tenants.models import Tenant
from tenants.services import api_key_create


@cache
def openapi_schema() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


def _openapi_path(path: str) -> str:
    route = resolve(path.split("?")[0]).route
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def validate_response(method: str, path: str, status: int, body: Any) -> None:
    """Fail when `body` does not match the documented response of this operation and status."""
    schema = openapi_schema()
    operation = schema["paths"][_openapi_path(path)][method.lower()]
    responses = operation["responses"]
    documented = responses.get(str(status))
    assert documented is not None, f"{method} {path} answered {status}, which the OpenAPI schema does not document"
    content = documented.get("content", {}).get("application/json")
    if content is None:
        return
    registry = Registry().with_resource("urn:ekko", Resource.from_contents(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": schema["components"]}))
    subschema = json.loads(json.dumps(content["schema"]).replace("#/components", "urn:ekko#/components"))
    jsonschema.Draft202012Validator(subschema, registry=registry).validate(body)


class Api:
    def __init__(self, client: Client, key: str | None, *, csrf_token: str | None = None) -> None:
        self.client = client
        self.key = key
        self.csrf_token = csrf_token

    def _headers(self) -> dict[str, str]:
        if self.csrf_token:
            return {"HTTP_X_CSRFTOKEN": self.csrf_token}
        return {"HTTP_AUTHORIZATION": f"Bearer {self.key}"} if self.key else {}

    def call(self, method: str, path: str, body: Any = None, *, expect: int = 200, code: str | None = None,
             raw: bytes | None = None, multipart: bool = False) -> Any:
        url = "/api/v1/" + path
        kwargs: dict[str, Any] = self._headers()
        if method == "GET":
            response = self.client.get(url, body or {}, **kwargs)
        elif multipart:
            response = getattr(self.client, method.lower())(url, data=body or {}, **kwargs)
        else:
            payload = raw if raw is not None else json.dumps(body)
            response = getattr(self.client, method.lower())(url, data=payload, content_type="application/json",
                                                            **kwargs)
        data = response.json() if response.get("Content-Type", "").startswith("application/json") else None
        shown = data or (b"<a file>" if response.streaming else response.content[:500])
        assert response.status_code == expect, f"{method} {url} → {response.status_code}: {shown}"
        if code is not None:
            assert data is not None and data.get("code") == code, f"expected code {code!r}, got {data}"
        if data is not None:
            validate_response(method, url, response.status_code, data)
        self.last_response = response
        return data

    def get(self, path: str, params: dict | None = None, **kwargs: Any) -> Any:
        return self.call("GET", path, params, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.call("POST", path, body, **kwargs)


def api_for(client: Client, tenant: Tenant, **key_options: Any) -> Api:
    return Api(client, api_key_create(tenant=tenant, **key_options).raw_key)


def api_for_person(username: str) -> Api:
    """Return an API client signed in as `username` through the browser session, CSRF enforced."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.get(username=username))
    client.get("/")  # the dashboard sets the CSRF cookie a browser would send back
    token = client.cookies["csrftoken"].value
    return Api(client, None, csrf_token=token)
