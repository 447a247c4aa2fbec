"""The Python client (clients/python) against the running service over real HTTP, sync and async."""

from __future__ import annotations

import asyncio
import json
import time
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from ekko_client import AsyncEkkoClient, EkkoClient, RetryPolicy, errors, models

from tenants.services import api_key_create
from tests.loopback import loopback_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(tenant_a) -> str:  # noqa: ANN001
    return api_key_create(tenant=tenant_a, name="client").raw_key


@pytest.fixture
def client(live_server, key) -> EkkoClient:  # noqa: ANN001
    with EkkoClient(live_server.url, key) as ekko:
        yield ekko


def _create(ekko: EkkoClient, evidence: list[str], **node: object) -> models.WriteResultItem:
    draft = {
        "kind": "food_avoidance",
        "itemKey": "cilantro",
        "scope": "user",
        "userId": "alice",
        "title": "Avoids cilantro",
        "content": "alice avoids cilantro",
        **node,
    }
    written = ekko.memory_write(
        operations=[{"operation": "create", "node": draft, "reason": "told us"}],
        explicit_user_intent=True,
        source_message_ids=evidence,
    )
    return written.results[0]


def test_every_operation_of_the_schema_has_a_method_on_both_clients(live_server):  # noqa: ANN001
    schema = httpx.get(live_server.url + "/api/schema/", params={"format": "json"}).json()
    operations = {
        op["operationId"]
        for name, path in schema["paths"].items()
        if name.startswith("/api/v1/")  # /mcp and /metrics are other protocols, not API operations
        for op in path.values()
        if isinstance(op, dict) and "operationId" in op
    }
    assert operations, "the schema lists no operation"
    for client_class in (EkkoClient, AsyncEkkoClient):
        missing = sorted(op for op in operations if not callable(getattr(client_class, op, None)))
        assert not missing, f"{client_class.__name__} has no method for {missing}"


def test_a_turn_with_the_sync_client(client, tenant_a):  # noqa: ANN001
    captured = client.messages_capture(
        session_id="s1",
        user_id="alice",
        messages=[{"id": "m1", "role": "user", "content": "I never eat cilantro."}],
    )
    assert [m.id for m in captured.messages] == ["m1"]
    written = _create(client, ["m1"])
    assert written.action == "created"

    found = client.memory_search(query_text="cilantro", user_id="alice", session_id="s1")
    assert [n.id for n in found.exact + found.relevant] == [written.node_id]
    node = client.memory_node_get(written.node_id)
    assert isinstance(node, models.MemoryNode) and node.source_message_ids == ["m1"]
    assert [n.id for n in client.memory_node_history(written.node_id).chain] == [written.node_id]

    pack = client.context(session_id="s1", user_id="alice", query_text="what can I cook?")
    assert "cilantro" in pack.prompt and written.node_id in pack.used_memory_ids
    assert client.messages_search(query_text="cilantro", session_id="s1").messages[0].id == "m1"
    assert client.tools().tools

    forgotten = client.memory_forget(id=written.node_id, expected_revision=node.revision, reason="asked to")
    assert forgotten.deleted_ids == [written.node_id]
    assert client.memory_get(kind="food_avoidance").node is None


def test_each_api_error_is_its_own_exception(client, live_server, tenant_a, tenant_b):  # noqa: ANN001
    client.messages_capture(session_id="s1", messages=[{"id": "m1", "role": "user", "content": "hi"}])
    written = _create(client, ["m1"])
    with pytest.raises(errors.RevisionConflict) as conflict:
        client.memory_write(
            operations=[
                {"operation": "expire", "targetId": written.node_id, "expectedRevision": 7, "reason": "stale"}
            ]
        )
    assert conflict.value.status == 409 and conflict.value.current_revision == written.revision

    with pytest.raises(errors.Invalid) as invalid:
        client.memory_write(
            operations=[{"operation": "create", "node": {"kind": "no_such_kind"}, "reason": "x"}]
        )
    assert invalid.value.code == "invalid" and invalid.value.status == 400

    with EkkoClient(live_server.url, api_key_create(tenant=tenant_b).raw_key) as other:
        with pytest.raises(errors.NotFound):
            other.memory_node_get(written.node_id)
    with EkkoClient(live_server.url, api_key_create(tenant=tenant_a, read_only=True).raw_key) as reader:
        with pytest.raises(errors.Forbidden):
            _create(reader, [])
    with EkkoClient(live_server.url, "ekko_not-a-key") as stranger:
        with pytest.raises(errors.Unauthenticated) as refused:
            stranger.workspaces_list()
    assert refused.value.status == 401


def test_the_async_client_does_the_same_over_the_same_server(live_server, key):  # noqa: ANN001
    async def turn() -> tuple[str, list[str]]:
        async with AsyncEkkoClient(live_server.url, key) as ekko:
            await ekko.messages_capture(
                session_id="s2", messages=[{"id": "a1", "role": "user", "content": "Call me Sam."}]
            )
            written = await ekko.memory_write(
                operations=[
                    {
                        "operation": "create",
                        "reason": "told us",
                        "node": {
                            "kind": "interaction_contract",
                            "scope": "user",
                            "userId": "alice",
                            "valueJson": {"addressUserAs": "Sam"},
                            "title": "Call the user Sam",
                            "content": "The user wants to be called Sam",
                        },
                    }
                ],
                explicit_user_intent=True,
                source_message_ids=["a1"],
            )
            found = await ekko.memory_search(kinds=["interaction_contract"], user_id="alice")
            with pytest.raises(errors.NotFound):
                await ekko.memory_node_get("00000000-0000-0000-0000-000000000000")
            return written.results[0].node_id, [n.id for n in found.exact]

    node_id, found = asyncio.run(turn())
    assert found == [node_id]


def test_a_rate_limited_call_is_retried_after_retry_after(client, settings):  # noqa: ANN001
    statuses: list[int] = []
    settings.EKKO_RATE_LIMIT = "1/s"
    http = httpx.Client(event_hooks={"response": [lambda response: statuses.append(response.status_code)]})
    with EkkoClient(client._base, client._headers["Authorization"].split()[1], http=http) as ekko:
        started = time.monotonic()
        for _ in range(3):
            ekko.workspaces_list()
        elapsed = time.monotonic() - started
    assert 429 in statuses and statuses.count(200) == 3
    assert elapsed >= 1.0, "the retry did not wait for Retry-After"


class _Scripted(BaseHTTPRequestHandler):
    """Answers the statuses in `script` in turn (an outage, then recovery), recording each request."""

    script: list[int] = []
    requests: list[dict] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        type(self).requests.append({"path": self.path, "at": time.monotonic()})
        status = self.script.pop(0) if self.script else 200
        body = (
            {"workspaces": []}
            if status == 200
            else {
                "code": {503: "store_unavailable", 409: "conflict"}.get(status, "invalid"),
                "detail": "scripted",
            }
        )
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_503_is_retried_with_backoff_and_other_errors_are_not(monkeypatch):  # noqa: ANN001
    _Scripted.script = [503, 503]
    with (
        loopback_server(_Scripted, monkeypatch) as url,
        EkkoClient(url, "k", retry=RetryPolicy(backoff=0.1)) as ekko,
    ):
        assert ekko.workspaces_list().workspaces == []
        gaps = [b["at"] - a["at"] for a, b in zip(_Scripted.requests, _Scripted.requests[1:], strict=False)]
        assert len(_Scripted.requests) == 3 and gaps[1] > gaps[0] * 1.2, gaps

        _Scripted.requests.clear()
        _Scripted.script = [409]
        with pytest.raises(errors.Conflict):
            ekko.workspaces_list()
        assert len(_Scripted.requests) == 1

        _Scripted.requests.clear()
        _Scripted.script = [503] * 10
    with (
        loopback_server(_Scripted, monkeypatch) as url,
        EkkoClient(url, "k", retry=RetryPolicy(max_retries=2, backoff=0.01)) as ekko,
    ):
        with pytest.raises(errors.StoreUnavailable):
            ekko.workspaces_list()
        assert len(_Scripted.requests) == 3


def test_every_server_error_code_has_its_exception():
    from memory import errors as server_errors

    codes = {
        cls.code
        for cls in vars(server_errors).values()
        if isinstance(cls, type) and issubclass(cls, server_errors.MemoryServiceError) and cls.code
    }
    codes |= {
        "unauthenticated",
        "rate_limited",
    }  # rendered by DRF's own exceptions (memory/api/exceptions.py)
    for code in codes:
        assert errors.error_for(400, {"code": code, "detail": ""}).__class__ is not errors.EkkoError, code


def test_the_agent_loop_example_runs_a_whole_turn(live_server, key, tenant_a):  # noqa: ANN001
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "clients/python/examples/agent_turn.py"
    run = subprocess.run(
        [
            sys.executable,
            str(example),
            "--url",
            live_server.url,
            "--key",
            key,
            "--user",
            "alice",
            "--session",
            "loop-1",
            "I'm allergic to peanuts. What should I cook tonight?",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "4. captured the reply" in run.stdout and "Avoids peanuts" in run.stdout
    with EkkoClient(live_server.url, key) as ekko:
        turn = ekko.messages_list("loop-1").messages
        assert [m.role for m in turn] == ["user", "assistant"]
        remembered = ekko.memory_search(kinds=["food_avoidance"], user_id="alice").exact
        assert [n.source_message_ids for n in remembered] == [[turn[0].id]]
