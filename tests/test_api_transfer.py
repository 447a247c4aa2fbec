"""Workspace export/import over the API: the file is the Ekko local format; bad files change nothing."""

from __future__ import annotations

import sqlite3

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from memory.models import MemoryNode
from tenants.context import tenant_context
from tenants.services import workspace_create
from tests.api_client import api_for, validate_response
from tests.test_api_memory_rules import cilantro, create


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    api.post("messages", {"sessionId": "s", "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住我不吃香菜"}]}, expect=201)
    api.post("memory/write", {"operations": [create(cilantro()), create({
        "kind": "hard_constraint", "itemKey": "no_friday_deploys", "valueJson": "never deploy on Fridays",
        "title": "No deploys on Fridays", "content": "The team never deploys on Fridays."})],
        "explicitUserIntent": True, "sourceMessageIds": ["m1"]})
    return api


def _export(api, workspace: str, tmp_path) -> bytes:  # noqa: ANN001
    response = api.client.get(f"/api/v1/workspaces/{workspace}/export.sqlite",
                              HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/vnd.sqlite3"
    assert "attachment" in response["Content-Disposition"]
    return b"".join(response.streaming_content)


def _import(api, workspace: str, data: bytes, name: str = "w.sqlite"):  # noqa: ANN001, ANN202
    return api.client.post(f"/api/v1/workspaces/{workspace}/import",
                           {"file": SimpleUploadedFile(name, data, content_type="application/vnd.sqlite3")},
                           HTTP_AUTHORIZATION=f"Bearer {api.key}")


def test_export_is_an_sqlite_file_where_fts_finds_chinese(api, tmp_path):
    path = tmp_path / "export.sqlite"
    path.write_bytes(_export(api, "default", tmp_path))
    with sqlite3.connect(path) as db:
        titles = [row[0] for row in db.execute(
            "SELECT n.title FROM memory_nodes_fts f JOIN memory_nodes n ON n.rowid = f.rowid "
            "WHERE memory_nodes_fts MATCH '香菜'")]
        keys = {row[0] for row in db.execute("SELECT key FROM memory_nodes")}
    assert titles == ["用户不吃香菜"] and keys == {"avoid_ingredient:香菜", "hard_constraint:no_friday_deploys"}


def test_import_into_another_workspace_copies_with_a_report(api, tenant_a, tmp_path):
    data = _export(api, "default", tmp_path)
    workspace_create(tenant=tenant_a, name="Laptop")
    response = _import(api, "laptop", data)
    assert response.status_code == 200, response.content
    report = response.json()
    validate_response("POST", "/api/v1/workspaces/laptop/import", 200, report)
    assert report["mode"] == "copy"
    # The workspace card is copied; the user card follows alice, whose slot already holds it: skipped.
    assert report["imported"]["messages"] == 1 and report["imported"]["nodes"] == 1
    assert report["skipped"]["nodes"] == 1 and report["conflictCount"] == 0
    again = _import(api, "laptop", data).json()
    assert again["imported"]["nodes"] == 0 and again["skipped"]["nodes"] >= 1
    with tenant_context(tenant_a):
        copied = list(MemoryNode.objects.filter(workspace__slug="laptop").values_list("key", flat=True))
    assert copied == ["hard_constraint:no_friday_deploys"]


@pytest.mark.parametrize("data", [b"not sqlite at all", b"SQLite format 3\x00" + b"\x00" * 50])
def test_a_bad_file_is_invalid_and_writes_nothing(api, tenant_a, data):
    with tenant_context(tenant_a):
        before = MemoryNode.objects.count()
    response = _import(api, "default", data)
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    with tenant_context(tenant_a):
        assert MemoryNode.objects.count() == before


def test_import_needs_a_file_and_write_rights(api, client, tenant_a):
    response = api.client.post("/api/v1/workspaces/default/import", {}, HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert response.status_code == 400 and response.json()["errors"] == {"file": ["required"]}
    read_only = api_for(client, tenant_a, read_only=True)
    response = _import(read_only, "default", b"x")
    assert response.status_code == 403 and response.json()["code"] == "forbidden"


def test_an_import_over_the_api_obeys_the_keys_write_scopes(api, tenant_a, tmp_path):
    """A key that may write only session memory cannot bring user or workspace cards in through a file."""
    data = _export(api, "default", tmp_path)
    laptop = workspace_create(tenant=tenant_a, name="Laptop")
    narrow = api_for(api.client, tenant_a, write_scopes=["session"])
    response = _import(narrow, "laptop", data)
    assert response.status_code == 200, response.content
    reasons = {entry["reason"] for entry in response.json()["conflicts"]}
    assert "scope_not_allowed" in reasons, response.json()
    assert response.json()["imported"]["nodes"] == 0
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(workspace=laptop).exists()
    # The same file with a key that may write those scopes brings the workspace card in.
    assert _import(api, "laptop", data).json()["imported"]["nodes"] == 1
