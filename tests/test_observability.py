"""Metrics, request ids and JSON logs, over real HTTP against the served app (tests/served.py).

The served app runs with EKKO_METRICS_TOKEN, PROMETHEUS_MULTIPROC_DIR (two workers, samples added up)
and EKKO_LOG_FORMAT=json.
"""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tenants.services import api_key_create
from tests.factories import make_tenant
from tests.served import METRICS_TOKEN, served_app  # noqa: F401 - the fixture

LABELS = {"route", "method", "status", "arm", "outcome", "le"}


def scrape(url: str) -> str:
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain")
    return response.text


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", f"Basic {METRICS_TOKEN}"])
def test_metrics_need_the_token(served_app, transactional_db, authorization):  # noqa: F811
    headers = {"Authorization": authorization} if authorization else {}
    response = httpx.get(f"{served_app.url}/metrics", headers=headers)
    assert response.status_code == 401 and "ekko_" not in response.text


def test_metrics_are_off_without_a_token(client, settings, db):  # noqa: ANN001
    settings.EKKO_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


def test_a_search_shows_in_the_histograms_without_tenant_data(served_app, transactional_db):  # noqa: F811
    tenant = make_tenant("secret-tenant-slug", owner="alice")
    key = api_key_create(tenant=tenant).raw_key
    headers = {"Authorization": f"Bearer {key}"}
    written = httpx.post(f"{served_app.url}/api/v1/memory/write", headers=headers, json={
        "operations": [{"operation": "create", "reason": "told", "node": {
            "kind": "hard_constraint", "itemKey": "deploys", "scope": "workspace", "title": "Deploys",
            "content": "Deploys happen on Tuesdays only."}}], "explicitUserIntent": True})
    assert written.status_code == 200, written.text
    node_id = written.json()["results"][0]["nodeId"]
    for body in ({"queryText": "tuesdays deploys", "sessionId": "private-session-7"},
                 {"kinds": ["hard_constraint"]}):
        searched = httpx.post(f"{served_app.url}/api/v1/memory/search", headers=headers, json=body)
        assert searched.status_code == 200
    assert httpx.get(f"{served_app.url}/api/v1/memory/nodes/{node_id}", headers=headers).status_code == 200

    text = scrape(served_app.url)
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples
               if s.name.startswith("ekko_")]
    routes = {s.labels.get("route") for s in samples if s.name == "ekko_http_request_duration_seconds_count"}
    assert {"api-memory-search", "api-memory-write", "api-node"} <= routes
    arms = {s.labels["arm"]: s.value for s in samples if s.name == "ekko_search_arm_duration_seconds_count"}
    assert arms.get("structured", 0) >= 1 and arms.get("keyword", 0) + arms.get("keyword_vector", 0) >= 1
    assert {"ekko_embedding_queue_depth", "ekko_extraction_queue_depth"} <= {s.name for s in samples}
    assert all(set(s.labels) <= LABELS for s in samples), {tuple(s.labels) for s in samples}
    for private in ("secret-tenant-slug", node_id, "private-session-7", "tuesdays", str(tenant.pk) + "/"):
        assert private not in text
    assert "/api/v1/" not in text  # routes are pattern names, never paths


def test_the_request_id_is_answered_and_on_the_json_log_lines(served_app, transactional_db):  # noqa: F811
    key = api_key_create(tenant=make_tenant("tenant-a", owner="alice")).raw_key
    missing = "00000000-0000-0000-0000-000000000000"
    response = httpx.get(f"{served_app.url}/api/v1/memory/nodes/{missing}",
                         headers={"Authorization": f"Bearer {key}", "X-Request-ID": "trace-4711"})
    assert response.status_code == 404 and response.headers["X-Request-ID"] == "trace-4711"
    forged = httpx.get(f"{served_app.url}/healthz", headers={"X-Request-ID": 'bad id {"level":"x"}'})
    generated = forged.headers["X-Request-ID"]
    assert len(generated) == 32 and generated.isalnum()
    assert httpx.get(f"{served_app.url}/healthz").headers["X-Request-ID"] != generated

    lines = [json.loads(line) for line in served_app.log.read_text().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("request_id") == "trace-4711"]
    assert mine and mine[0]["level"] == "WARNING" and mine[0]["logger"] == "django.request"
    assert missing in mine[0]["message"]


def test_mcp_requests_carry_a_request_id_too(served_app, transactional_db):  # noqa: F811
    response = httpx.post(f"{served_app.url}/mcp", headers={"X-Request-ID": "mcp-trace-1"}, json={})
    assert response.status_code == 401 and response.headers["X-Request-ID"] == "mcp-trace-1"
    routes = {s.labels.get("route") for family in text_string_to_metric_families(scrape(served_app.url))
              for s in family.samples if s.name == "ekko_http_request_duration_seconds_count"}
    assert "mcp" in routes
