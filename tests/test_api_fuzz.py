"""No malformed body ever gets a 5xx: hypothesis throws JSON shaped like each request at every POST route."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api_client import api_for, openapi_schema

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63) | st.floats(allow_nan=False)
    | st.text(max_size=40) | st.sampled_from(["香菜", "00000000-0000-0000-0000-000000000000", "default", "all"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def _post_routes() -> list[tuple[str, list[str]]]:
    """Every POST operation with the property names of its request body (for plausible-looking keys)."""
    schema = openapi_schema()
    routes = []
    for path, operations in schema["paths"].items():
        post = operations.get("post")
        if not path.startswith("/api/v1/") or post is None or "{" in path:
            continue
        ref = post.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        component = schema["components"]["schemas"].get(ref.get("$ref", "").rsplit("/", 1)[-1], {})
        routes.append((path.removeprefix("/api/v1/"), sorted(component.get("properties", {}))))
    return routes


POST_ROUTES = _post_routes()


def bodies(field_names: list[str]) -> st.SearchStrategy:
    keys = st.sampled_from(field_names) if field_names else st.text(max_size=8)
    return st.one_of(json_values, st.dictionaries(keys, json_values, max_size=len(field_names) or 3))


@pytest.mark.parametrize("path, fields", POST_ROUTES, ids=[p for p, _ in POST_ROUTES])
def test_malformed_bodies_never_get_a_server_error(client, tenant_a, path, fields):
    api = api_for(client, tenant_a)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=bodies(fields))
    def check(body):  # noqa: ANN001, ANN202
        response = client.post(f"/api/v1/{path}", data=json.dumps(body), content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {api.key}")
        assert response.status_code < 500, (body, response.content[:300])
        if response.status_code >= 400:
            assert response.json()["code"]

    check()


def test_every_post_route_is_fuzzed():
    assert {"memory/write", "memory/forget", "memory/search", "messages", "context"} <= {p for p, _ in POST_ROUTES}
