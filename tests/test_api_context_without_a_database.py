"""Rule 11: with the database unreachable the context endpoint still answers; writes say they failed."""

from __future__ import annotations

import json

import pytest
from django.db import connections


@pytest.fixture
def database_down(django_db_blocker, monkeypatch):  # noqa: ANN001, ANN201
    connection = connections["default"]
    with django_db_blocker.unblock():
        connection.close()
        monkeypatch.setitem(connection.settings_dict, "HOST", "/nonexistent-ekko-socket-dir")
        monkeypatch.setitem(connection.settings_dict, "PORT", "1")
        yield
        connection.close()


def _post(client, path: str, body: dict):  # noqa: ANN001, ANN202
    return client.post(f"/api/v1/{path}", data=json.dumps(body), content_type="application/json",
                       HTTP_AUTHORIZATION="Bearer ekko_any-key-the-store-cannot-check")


def test_context_answers_200_disabled_when_the_store_is_down(client, database_down):
    response = _post(client, "context", {"sessionId": "s", "queryText": "今晚吃什么？", "tokenBudget": 500})
    assert response.status_code == 200
    body = response.json()
    assert body["diagnostics"]["storeStatus"] == "disabled" and body["diagnostics"]["enabled"] is False
    assert body["diagnostics"]["warnings"] and body["prompt"] == "" and body["usedMemoryIds"] == []
    assert body["diagnostics"]["tokenBudget"] == 500


@pytest.mark.parametrize("path, body", [
    ("memory/write", {"operations": [], "explicitUserIntent": True}),
    ("messages", {"sessionId": "s", "messages": [{"role": "user", "content": "hi"}]}),
    ("memory/search", {"all": True}),
])
def test_other_endpoints_say_the_store_is_unavailable_and_never_report_success(client, database_down, path, body):
    response = _post(client, path, body)
    assert response.status_code == 503
    assert response.json()["code"] == "store_unavailable"
