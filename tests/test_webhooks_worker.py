"""Signed webhooks on a real Celery worker (marked `worker`): after-commit dispatch, retries, rollbacks."""

from __future__ import annotations

import json

import pytest

from memory.models import MemoryAuditEvent
from memory.services.audit import audit_event_record
from memory.webhooks.models import DeliveryStatus, WebhookDelivery
from memory.webhooks.services import endpoint_create
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.loopback import loopback_server
from tests.test_api_memory_rules import cilantro, create, write
from tests.test_webhooks import ALL_EVENTS
from tests.test_worker import queue  # noqa: F401 - fixture: a private queue on the test Redis
from tests.webhook_receiver import receiver
from tests.worker import celery_worker, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
WORKER_ENV = {
    "EKKO_WEBHOOK_ALLOW_PRIVATE": "true",
    "EKKO_WEBHOOK_RETRY_BASE_SECONDS": "1",
    "no_proxy": "127.0.0.1",
    "NO_PROXY": "127.0.0.1",
}


def test_the_worker_delivers_after_commit_retries_a_500_and_sends_nothing_for_a_rollback(
    client, tenant_a, queue, monkeypatch, settings, capsys,  # noqa: F811
):
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = True
    handler = receiver([500])
    with loopback_server(handler, monkeypatch) as base, celery_worker(queue, WORKER_ENV):
        issued = endpoint_create(tenant=tenant_a, url=base + "/hook", events=ALL_EVENTS)
        handler.secret = issued.secret

        class Boom(Exception):
            pass

        with pytest.raises(Boom), tenant_context(tenant_a):
            audit_event_record(
                tenant=tenant_a,
                event_type="create",
                node_id=None,
                workspace_id=None,
                session_id=None,
                actor="system",
                reason="rolled back",
                payload=None,
            )
            raise Boom
        api = api_for(client, tenant_a)
        api.post(
            "messages",
            {
                "sessionId": "s",
                "userId": "alice",
                "messages": [{"id": "m1", "role": "user", "content": "记住我不吃香菜"}],
            },
            expect=201,
        )
        node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
        # The first answer is a 500: the worker waits 1 s, then the sweep's retry (beat) delivers it.
        wait_for(lambda: len(handler.requests) >= 1, timeout=60, what="the first delivery attempt")
        from memory.webhooks.tasks import retry_webhooks

        def retried() -> bool:
            retry_webhooks.delay()
            return len(handler.requests) >= 2

        wait_for(retried, timeout=60, what="the retried delivery")
    first, second = handler.requests[:2]
    assert (first["answered"], second["answered"]) == (500, 204)
    assert second["verified"] and second["json"]["type"] == "memory.created"
    assert second["json"]["data"]["memoryId"] == node_id
    with tenant_context(tenant_a):
        [delivery] = WebhookDelivery.objects.filter(tenant=tenant_a)
        assert not MemoryAuditEvent.objects.filter(reason="rolled back").exists()
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.DELIVERED, 2, 204)
    with capsys.disabled():  # one real signed delivery, as the loopback receiver saw it
        print("\n--- captured delivery ---")
        print("\n".join(f"{k}: {v}" for k, v in second["headers"].items()))
        print(json.dumps(second["json"], ensure_ascii=False, indent=1))
