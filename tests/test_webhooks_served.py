"""Signed webhooks end to end over real HTTP: the served app (gunicorn, uvicorn worker, its in-process
background queue as `make run` has it) takes API writes and delivers their events to a loopback receiver,
which checks each signature with the documented verifier."""

from __future__ import annotations

import time

import httpx
import pytest

from memory.webhooks.services import endpoint_create
from tenants.services import api_key_create
from tests.factories import make_tenant
from tests.loopback import loopback_server
from tests.served import served_app  # noqa: F401 - the fixture
from tests.webhook_receiver import receiver

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for_events(handler: type, count: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(handler.requests) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return handler.requests


def test_api_writes_on_the_served_app_are_delivered_signed_and_a_hard_forget_carries_ids_only(
    served_app, monkeypatch, settings  # noqa: F811
):
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = True
    tenant, other = make_tenant("hooked", owner="alice"), make_tenant("other", owner="bob")
    key = api_key_create(tenant=tenant).raw_key
    handler, other_handler = receiver(), receiver()
    with (loopback_server(handler, monkeypatch) as url,
          loopback_server(other_handler, monkeypatch) as other_url):
        handler.secret = endpoint_create(tenant=tenant, url=url + "/hook",
                                         events=["memory.created", "memory.forgotten"]).secret
        other_handler.secret = endpoint_create(tenant=other, url=other_url + "/hook",
                                               events=["memory.created", "memory.forgotten"]).secret
        api = httpx.Client(base_url=f"{served_app.url}/api/v1/", headers={"Authorization": f"Bearer {key}"})
        node = {"kind": "hard_constraint", "itemKey": "launch", "scope": "workspace", "title": "Launch",
                "content": "The launch date is secret: 3 March."}
        written = api.post("memory/write", json={
            "operations": [{"operation": "create", "reason": "the user said so", "node": node}],
            "explicitUserIntent": True})
        assert written.status_code == 200, written.text
        node_id = written.json()["results"][0]["nodeId"]
        forgotten = api.post("memory/forget", json={"id": node_id, "expectedRevision": 1, "mode": "hard",
                                                    "explicitUserIntent": True, "reason": "user asked"})
        assert forgotten.status_code == 200, forgotten.text

        requests = wait_for_events(handler, 2)
    assert [r["json"]["type"] for r in requests] == ["memory.created", "memory.forgotten"]
    assert all(r["verified"] and r["path"] == "/hook" for r in requests)
    assert requests[0]["headers"]["Ekko-Event-Id"] == requests[0]["json"]["id"]
    assert b"3 March" not in requests[1]["raw"]
    assert requests[1]["json"]["data"] == {"memoryId": node_id, "mode": "hard"}
    assert other_handler.requests == []
