"""Signed webhooks (memory.webhooks, docs/webhooks.md): signatures, retries, pausing, walls, pages.

Real PostgreSQL and a real HTTP receiver on loopback; the dispatch runs as the in-process queue
runs it after a commit (`committed`). tests/test_webhooks_worker.py runs it on a real Celery worker.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from ekko_site.metrics import WEBHOOK_DELIVERIES
from memory.webhooks import delivery as webhook_delivery
from memory.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from memory.webhooks.receiver import verify_ekko_signature
from memory.webhooks.secrets import secret_decrypt
from memory.webhooks.services import EndpointError, endpoint_create
from memory.webhooks.signing import signature_header
from memory.webhooks.urls import UnsafeUrl, url_check
from tenants.context import tenant_context
from tenants.models import Role, Workspace
from tests.api_client import api_for
from tests.loopback import loopback_server
from tests.test_api_memory_rules import cilantro, create, write
from tests.test_pages import person, signed_in
from tests.webhook_receiver import receiver

pytestmark = pytest.mark.django_db
ALL_EVENTS = [
    "memory.created",
    "memory.updated",
    "memory.superseded",
    "memory.expired",
    "memory.forgotten",
    "extraction.completed",
]


@pytest.fixture(autouse=True)
def private_allowed(settings):  # noqa: ANN001, ANN201
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = True
    settings.EKKO_WEBHOOK_RETRY_BASE_SECONDS = 1


@pytest.fixture
def hook(monkeypatch):  # noqa: ANN001, ANN201
    """A receiver on loopback; yields (handler class, URL)."""
    handler = receiver()
    with loopback_server(handler, monkeypatch) as url:
        yield handler, url + "/hook"


def register(tenant, url, events=ALL_EVENTS, **options):  # noqa: ANN001, ANN003, ANN201
    issued = endpoint_create(tenant=tenant, url=url, events=events, **options)
    return issued


def _seed(api) -> None:  # noqa: ANN001
    api.post(
        "messages",
        {
            "sessionId": "s",
            "userId": "alice",
            "messages": [{"id": "m1", "role": "user", "content": "记住我不吃香菜"}],
        },
        expect=201,
    )


def counter(outcome: str) -> float:
    return WEBHOOK_DELIVERIES.labels(outcome=outcome)._value.get()


def deliveries(tenant) -> list[WebhookDelivery]:  # noqa: ANN001
    with tenant_context(tenant):
        return list(WebhookDelivery.objects.filter(tenant=tenant).order_by("created_at"))


# --------------------------------------------------------------------------- every event, signed


def test_each_memory_event_is_delivered_signed_and_a_forget_carries_ids_only(
    client, tenant_a, hook, committed
):
    handler, url = hook
    issued = register(tenant_a, url)
    handler.secret = issued.secret
    api = api_for(client, tenant_a)
    before = counter("delivered")
    with committed():
        _seed(api)
    steps = [
        lambda: write(api, create(cilantro()))["results"][0]["nodeId"],
        lambda: write(
            api,
            {
                "operation": "update",
                "targetId": ids[0],
                "expectedRevision": 1,
                "reason": "typo",
                "node": {"content": "推荐菜谱时一定避免香菜。"},
            },
        ),
        lambda: write(api, create(cilantro(content="完全不吃香菜，连汤也不要。")))["results"][0]["nodeId"],
        lambda: write(
            api, {"operation": "expire", "targetId": ids[2], "expectedRevision": 3, "reason": "old"}
        ),
        lambda: api.post(
            "memory/forget",
            {
                "id": ids[2],
                "expectedRevision": 4,
                "explicitUserIntent": True,
                "reason": "user asked",
                "mode": "hard",
            },
        ),
    ]
    ids: list = []
    for step in steps:  # each write commits, then its deliveries go out
        with committed():
            ids.append(step())
    node_id, newer = ids[0], ids[2]
    got = handler.requests
    # The hard forget erases the card's older revision too: one forgotten event for each.
    assert [r["json"]["type"] for r in got] == [
        "memory.created",
        "memory.updated",
        "memory.superseded",
        "memory.expired",
        "memory.forgotten",
        "memory.forgotten",
    ]
    assert all(r["verified"] for r in got), "every delivery verifies with the documented snippet"
    assert [r["headers"]["Ekko-Event"] for r in got] == [r["json"]["type"] for r in got]
    assert all(r["headers"]["Ekko-Event-Id"] == r["json"]["id"] for r in got)
    assert got[2]["json"]["data"]["supersedesId"] == node_id
    assert sorted([got[4]["json"]["data"], got[5]["json"]["data"]], key=lambda d: d["memoryId"] != newer) == [
        {"memoryId": newer, "mode": "hard"},
        {"memoryId": node_id, "mode": "hard"},
    ]
    assert got[3]["json"]["data"]["memory"]["status"] == "expired"
    assert not any("香菜".encode() in r["raw"] for r in got[4:]), "a forget carries ids only"
    assert counter("delivered") - before == 6
    assert {d.status for d in deliveries(tenant_a)} == {DeliveryStatus.DELIVERED}


def test_a_soft_forgotten_cards_content_is_never_sent_after_its_forget(client, tenant_a, hook, committed):
    handler, url = hook
    register(tenant_a, url)
    api = api_for(client, tenant_a)
    with committed():  # the created event waits (nothing sends it) until after the forget
        _seed(api)
        with transaction.atomic():
            node_id = write(api, create(cilantro()))["results"][0]["nodeId"]
            api.post(
                "memory/forget",
                {"id": node_id, "expectedRevision": 1, "explicitUserIntent": True, "reason": "user asked"},
            )
    bodies = [r["raw"] for r in handler.requests]
    assert [r["json"]["type"] for r in handler.requests] == ["memory.created", "memory.forgotten"]
    assert all("香菜".encode() not in body for body in bodies)
    assert handler.requests[1]["json"]["data"] == {"memoryId": node_id, "mode": "soft"}


def test_extraction_completed_is_delivered_with_ids_and_counts(client, tenant_a, hook, committed, settings):
    settings.EKKO_EXTRACT_DELAY_SECONDS = 0
    handler, url = hook
    register(tenant_a, url, events=["extraction.completed"])
    api = api_for(client, tenant_a)
    with committed():
        _seed(api)
        task = api.post("extract", {"sessionId": "s", "userId": "alice"}, expect=202)
    webhook_delivery.webhooks_sweep()  # the run's own after-commit dispatch needs a real commit
    assert [r["json"]["type"] for r in handler.requests] == ["extraction.completed"]
    data = handler.requests[0]["json"]["data"]
    assert data["runId"] == task["taskId"] and data["status"] == "done" and "counts" in data
    assert "香菜".encode() not in handler.requests[0]["raw"]


# --------------------------------------------------------------------------- the verifier


def test_the_verifier_refuses_a_replay_and_a_tampered_body():
    body = b'{"id":"1","type":"memory.created"}'
    header = signature_header(secret="whsec_x", body=body)
    assert verify_ekko_signature("whsec_x", body, header)
    assert not verify_ekko_signature("whsec_x", body + b" ", header), "a tampered body fails"
    assert not verify_ekko_signature("whsec_y", body, header), "another secret fails"
    old = signature_header(secret="whsec_x", body=body, timestamp=int(time.time()) - 301)
    assert not verify_ekko_signature("whsec_x", body, old), "a replay older than 5 minutes fails"
    assert not verify_ekko_signature("whsec_x", body, "garbage")


def test_the_documented_snippet_is_the_tested_code():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "webhooks.md").read_text(encoding="utf-8")
    source = (Path(webhook_delivery.__file__).parent / "receiver.py").read_text(encoding="utf-8")
    snippet = source.split("# --8<-- [start:verify]\n")[1].split("# --8<-- [end:verify]")[0]
    assert snippet.strip() in doc, "docs/webhooks.md quotes memory/webhooks/receiver.py's verifier verbatim"


# --------------------------------------------------------------------------- retries and pausing


def _due_now(tenant) -> None:  # noqa: ANN001
    with tenant_context(tenant):
        WebhookDelivery.objects.filter(tenant=tenant, status=DeliveryStatus.RETRYING).update(
            next_attempt_at=timezone.now()
        )


def test_a_500_is_retried_with_backoff_then_delivered(client, tenant_a, monkeypatch, committed):
    handler = receiver([500, 500])
    with loopback_server(handler, monkeypatch) as base:
        handler.secret = register(tenant_a, base + "/hook").secret
        api = api_for(client, tenant_a)
        failed = counter("failed")
        with committed():
            _seed(api)
            write(api, create(cilantro()))
        [first] = deliveries(tenant_a)
        assert (first.status, first.attempts, first.response_code) == (DeliveryStatus.RETRYING, 1, 500)
        assert "HTTP 500" in first.last_error
        wait = first.next_attempt_at - first.updated_at
        assert timedelta(seconds=0.5) < wait <= timedelta(seconds=1.5)
        assert webhook_delivery.webhooks_sweep() == 0, "not due yet: the sweep leaves it alone"
        _due_now(tenant_a)
        webhook_delivery.webhooks_sweep()
        [second] = deliveries(tenant_a)
        assert second.attempts == 2
        assert second.next_attempt_at - second.updated_at > timedelta(seconds=1.5), "the wait doubles"
        _due_now(tenant_a)
        assert webhook_delivery.webhooks_sweep() == 1
    [done] = deliveries(tenant_a)
    assert (done.status, done.attempts, done.response_code, done.last_error) == (
        DeliveryStatus.DELIVERED,
        3,
        204,
        "",
    )
    assert [r["answered"] for r in handler.requests] == [500, 500, 204]
    assert len({r["headers"]["Ekko-Event-Id"] for r in handler.requests}) == 1, "a retry is the same event"
    assert counter("failed") - failed == 2


def test_an_endpoint_that_keeps_failing_is_paused_and_the_page_says_why(
    client, tenant_a, monkeypatch, settings, committed
):
    settings.EKKO_WEBHOOK_PAUSE_AFTER = 2
    handler = receiver([503] * 10)
    with loopback_server(handler, monkeypatch) as base:
        issued = register(tenant_a, base + "/hook")
        api = api_for(client, tenant_a)
        paused = counter("paused")
        with committed():
            _seed(api)
            write(api, create(cilantro()))
        _due_now(tenant_a)
        webhook_delivery.webhooks_sweep()
        with tenant_context(tenant_a):
            endpoint = WebhookEndpoint.objects.get(pk=issued.endpoint.pk)
        assert not endpoint.is_active and "2 failed deliveries in a row" in endpoint.paused_reason
        assert "HTTP 503" in endpoint.paused_reason
        assert counter("paused") - paused == 1
        _due_now(tenant_a)
        assert webhook_delivery.webhooks_sweep() == 0 and len(handler.requests) == 2, (
            "paused: nothing is sent"
        )
        page = signed_in("alice")
        html = page.get("/webhooks/").content.decode()
        assert "paused" in html and "2 failed deliveries in a row" in html and "/resume/" in html
        handler.statuses.clear()
        with committed():
            response = page.post(f"/webhooks/{endpoint.pk}/resume/")
        assert response.status_code == 302
    with tenant_context(tenant_a):
        assert WebhookEndpoint.objects.get(pk=endpoint.pk).is_active
    assert [d.status for d in deliveries(tenant_a)] == [DeliveryStatus.DELIVERED]


# --------------------------------------------------------------------------- walls


def test_another_tenants_endpoint_hears_nothing(client, tenant_a, tenant_b, hook, monkeypatch, committed):
    handler, url = hook
    other = receiver()
    with loopback_server(other, monkeypatch) as other_base:
        register(tenant_b, other_base + "/b")
        register(tenant_a, url)
        with committed():
            api = api_for(client, tenant_a)
            _seed(api)
            write(api, create(cilantro()))
    assert len(handler.requests) == 1 and other.requests == []
    assert deliveries(tenant_b) == []


def test_a_workspace_bound_endpoint_hears_only_its_workspace(client, tenant_a, hook, committed):
    handler, url = hook
    with tenant_context(tenant_a):
        research = Workspace.objects.create(tenant=tenant_a, name="Research", slug="research")
    register(tenant_a, url, workspace=research)
    api = api_for(client, tenant_a)  # its writes land in the default workspace
    with committed():
        _seed(api)
        write(api, create(cilantro()))
    assert handler.requests == [] and deliveries(tenant_a) == []


def test_a_rolled_back_write_sends_nothing(tenant_a, hook, committed):
    from memory.services.audit import audit_event_record

    handler, url = hook
    register(tenant_a, url)

    class Boom(Exception):
        pass

    with committed():
        with pytest.raises(Boom), tenant_context(tenant_a), transaction.atomic():
            audit_event_record(
                tenant=tenant_a,
                event_type="create",
                node_id=None,
                workspace_id=None,
                session_id=None,
                actor="system",
                reason="r",
                payload=None,
            )
            raise Boom
    assert handler.requests == [] and deliveries(tenant_a) == []


# --------------------------------------------------------------------------- registration and the pages


@pytest.mark.parametrize(
    "url,why",
    [
        ("ftp://example.com/hook", "http"),
        ("https://user:pw@example.com/hook", "passwords"),
        ("http://127.0.0.1:9/hook", "loopback"),
        ("http://169.254.169.254/latest", "link-local"),
        ("http://10.0.0.5/hook", "private"),
        ("http://[::1]/hook", "loopback"),
    ],
)
def test_unsafe_urls_are_refused(settings, url, why):
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(UnsafeUrl, match=why):
        url_check(url)


def test_the_secret_is_stored_encrypted(tenant_a):
    issued = register(tenant_a, "https://example.com/hook")
    with tenant_context(tenant_a):
        stored = WebhookEndpoint.objects.get(pk=issued.endpoint.pk)
    assert (
        issued.secret not in stored.secret_encrypted
        and secret_decrypt(stored.secret_encrypted) == issued.secret
    )
    with pytest.raises(EndpointError, match="at least one event"):
        endpoint_create(tenant=tenant_a, url="https://example.com/x", events=[])


@pytest.fixture
def admin_page(tenant_a) -> Client:  # noqa: ANN001
    return signed_in("alice")


@pytest.mark.parametrize(
    "form,message",
    [
        ({"url": "not a url", "events": ["memory.created"]}, "http"),
        ({"url": "http://127.0.0.1/hook", "events": ["memory.created"]}, "private, loopback or link-local"),
        ({"url": "https://example.com/hook"}, "Choose at least one event."),
        ({"url": "https://example.com/hook", "events": ["memory.nope"]}, "Select a valid choice"),
    ],
)
def test_bad_input_on_the_page_says_why_and_saves_nothing(admin_page, tenant_a, settings, form, message):
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = False
    response = admin_page.post("/webhooks/", form)
    assert response.status_code == 400 and message in response.content.decode()
    with tenant_context(tenant_a):
        assert not WebhookEndpoint.objects.exists()


def test_an_admin_registers_an_endpoint_and_sees_the_secret_once(admin_page, tenant_a):
    response = admin_page.post(
        "/webhooks/", {"url": "https://example.com/hook", "events": ["memory.created"]}
    )
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    with tenant_context(tenant_a):
        endpoint = WebhookEndpoint.objects.get()
    secret = secret_decrypt(endpoint.secret_encrypted)
    assert secret in response.content.decode()
    assert secret not in admin_page.get("/webhooks/").content.decode(), "shown once"
    rotated = admin_page.post(f"/webhooks/{endpoint.pk}/rotate/").content.decode()
    with tenant_context(tenant_a):
        new_secret = secret_decrypt(WebhookEndpoint.objects.get().secret_encrypted)
    assert new_secret != secret and new_secret in rotated


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
def test_a_member_can_neither_see_nor_create_endpoints(tenant_a, role):
    register(tenant_a, "https://example.com/hook")
    person(tenant_a, "mia", role)
    page = signed_in("mia")
    assert 'href="/webhooks/"' not in page.get("/").content.decode()
    listing = page.get("/webhooks/")
    assert listing.status_code == 403 and "example.com" not in listing.content.decode()
    assert (
        page.post("/webhooks/", {"url": "https://example.org/x", "events": ["memory.created"]}).status_code
        == 403
    )
    with tenant_context(tenant_a):
        endpoint = WebhookEndpoint.objects.get()
        assert WebhookEndpoint.objects.count() == 1
    assert page.post(f"/webhooks/{endpoint.pk}/delete/").status_code == 403


def test_another_tenants_endpoint_answers_404_on_the_page(admin_page, tenant_b):
    foreign = register(tenant_b, "https://example.com/b").endpoint
    for action in ("resume", "rotate", "delete"):
        assert admin_page.post(f"/webhooks/{foreign.pk}/{action}/").status_code == 404
    with tenant_context(tenant_b):
        assert WebhookEndpoint.objects.filter(pk=foreign.pk).exists()


def test_the_body_is_compact_json_with_the_documented_fields(client, tenant_a, hook, committed):
    handler, url = hook
    register(tenant_a, url, events=["memory.created"])
    api = api_for(client, tenant_a)
    with committed():
        _seed(api)
        write(api, create(cilantro()))
    body = handler.requests[0]["json"]
    assert set(body) == {"id", "type", "createdAt", "tenant", "workspaceId", "data"}
    assert body["tenant"] == "tenant-a" and body["data"]["memory"]["title"] == "用户不吃香菜"
    assert json.loads(handler.requests[0]["raw"]) == body


def test_a_write_sends_no_extra_statement_for_an_active_endpoint(client, tenant_a, background_queue,
                                                                  django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.webhooks.outbox import webhooks_active, webhooks_active_forget

    api = api_for(client, tenant_a)
    _seed(api)

    def statements(item: str) -> int:
        with CaptureQueriesContext(connection) as captured, django_capture_on_commit_callbacks(execute=True):
            card = cilantro(itemKey=item, valueJson=item, title=f"不吃{item}", content=f"不要{item}")
            write(api, create(card))
        return len(captured)

    assert not webhooks_active(tenant_a.pk)  # the cache now knows: no endpoint
    without = statements("葱")
    assert "memory.dispatch_webhooks" not in background_queue.pending()
    register(tenant_a, "https://example.com/hook")
    webhooks_active_forget(tenant_a.pk)  # what the registration's commit does
    assert webhooks_active(tenant_a.pk)
    assert statements("姜") == without, "the after-commit check reads the cache, not the database"
    assert background_queue.pending().count("memory.dispatch_webhooks") == 1, "one dispatch per write"


def test_a_receiver_that_turned_private_is_refused_at_send_time(client, tenant_a, hook, settings,
                                                                committed):
    handler, url = hook
    register(tenant_a, url)  # allowed while EKKO_WEBHOOK_ALLOW_PRIVATE (a dev setup)
    settings.EKKO_WEBHOOK_ALLOW_PRIVATE = False
    api = api_for(client, tenant_a)
    with committed():
        _seed(api)
        write(api, create(cilantro()))
    [refused] = deliveries(tenant_a)
    assert handler.requests == [] and refused.status == DeliveryStatus.RETRYING
    assert "loopback" in refused.last_error and refused.response_code is None
