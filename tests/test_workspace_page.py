"""The workspace page: counts, export (.sqlite download), import for admins with its report, errors,
roles, CSRF and tenant crossing — through Django's test client against the real database."""

from __future__ import annotations

import re
import sqlite3

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from memory.models import MemoryMessage, MemoryNode
from memory.pages.access import SESSION_WORKSPACE_KEY
from tenants.context import tenant_context
from tenants.models import Role
from tenants.services import workspace_create
from tests.test_pages import HTMX, default_workspace, person, remember, signed_in


@pytest.fixture
def team(tenant_a, tenant_b):  # noqa: ANN001
    """Tenant A: alice (owner) with a workspace memory and a personal one, mia (member), vera (viewer)."""
    alice = get_user_model().objects.get(username="alice")
    users = {
        "alice": alice,
        "mia": person(tenant_a, "mia", Role.MEMBER),
        "vera": person(tenant_a, "vera", Role.VIEWER),
    }
    node = remember(
        tenant_a,
        alice,
        kind="hard_constraint",
        item="python311",
        title="项目只用 Python 3.11",
        content="项目只用 Python 3.11",
        scope="workspace",
    )
    remember(tenant_a, alice, title="alice 不吃香菜", session_id="chat-alice")
    bob = get_user_model().objects.get(username="bob")
    remember(tenant_b, bob, title="bob 不吃香菜", session_id="chat-bob")
    return {"tenant": tenant_a, "other": tenant_b, "users": users, "node": node}


def _count(html: str, status: str) -> int:
    return int(re.search(rf'data-status="{status}">(\d+)<', html).group(1))


def _export(client: Client) -> bytes:
    response = client.get("/workspace/export.sqlite")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/vnd.sqlite3"
    return b"".join(response.streaming_content)


def _upload(data: bytes, name: str = "w.sqlite") -> dict[str, SimpleUploadedFile]:
    return {"file": SimpleUploadedFile(name, data, content_type="application/vnd.sqlite3")}


def _switch(client: Client, workspace_id: int) -> None:
    response = client.post("/switch/workspace/", {"target": workspace_id, "next": "/workspace/"})
    assert response.status_code == 302 and response["Location"] == "/workspace/"


def _node_count(tenant, **filters) -> int:  # noqa: ANN001, ANN003
    with tenant_context(tenant):
        return MemoryNode.objects.filter(**filters).count()


def test_page_shows_the_workspace_and_its_counts_to_a_member(team):
    html = signed_in("mia").get("/workspace/").content.decode()
    assert 'href="/workspace/" aria-current="page"' in html
    assert "Default" in html or default_workspace(team["tenant"]).name in html
    assert f"<code>{default_workspace(team['tenant']).slug}</code>" in html
    assert _count(html, "active") == 2 and _count(html, "deleted") == 0
    assert re.search(r'stat-number">2</span> <span class="stat-label">Messages', html)
    # An export holds everyone's memories of the workspace, so members get neither export nor import.
    assert 'href="/workspace/export.sqlite"' not in html
    assert 'type="file"' not in html and "/workspace/import/" not in html
    assert 'href="/workspace/export.sqlite"' in signed_in("alice").get("/workspace/").content.decode()


def test_page_fragment_for_htmx(team):
    body = signed_in("alice").get("/workspace/", **HTMX).content.decode()
    assert body.lstrip().startswith('<div id="workspace"') and "<html" not in body


def test_export_is_an_sqlite_file_with_the_workspace_node(team, tmp_path):
    response = signed_in("alice").get("/workspace/export.sqlite")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="tenant-a-default.sqlite"'
    path = tmp_path / "export.sqlite"
    path.write_bytes(b"".join(response.streaming_content))
    with sqlite3.connect(path) as db:
        rows = dict(db.execute("SELECT id, title FROM memory_nodes"))
    assert rows[str(team["node"].pk)] == "项目只用 Python 3.11"


def test_admin_imports_the_export_into_another_workspace_and_sees_the_report(team):
    client = signed_in("alice")
    data = _export(client)
    laptop = workspace_create(tenant=team["tenant"], name="Laptop")
    _switch(client, laptop.pk)
    page = client.get("/workspace/").content.decode()
    assert "Laptop" in page and _count(page, "active") == 0
    assert re.search(
        r'<label for="id_file">[^<]+</label>\s*<input type="file" name="file" id="id_file"', page
    )
    response = client.post("/workspace/import/", _upload(data))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Imported w.sqlite into “Laptop”." in html and "Copy:" in html
    report = re.search(r'<table class="table report">.*?</table>', html, re.S).group(0)
    cells = re.findall(
        r'<th scope="row">([^<]+)</th><td class="num">(\d+)</td><td class="num">(\d+)</td>'
        r'<td class="num">(\d+)</td>',
        report,
    )
    # The workspace card is copied; alice's personal card follows her and already exists: skipped.
    assert ("Memories", "1", "0", "1") in cells and ("Messages", "2", "0", "0") in cells
    assert "0 conflicts" in html
    assert _count(html, "active") == 1  # the counts on the same answer already include the copy
    assert _node_count(team["tenant"], workspace=laptop) == 1
    # The same file again adds nothing; through htmx only the page's fragment comes back.
    again = client.post("/workspace/import/", _upload(data), **HTMX)
    assert again.status_code == 200 and "<html" not in again.content.decode()
    assert again["HX-Trigger"] and _node_count(team["tenant"], workspace=laptop) == 1


@pytest.mark.parametrize("data", [b"not sqlite at all", b"SQLite format 3\x00" + b"\x00" * 50])
def test_a_garbage_file_shows_the_error_and_writes_nothing(team, data):
    before = _node_count(team["tenant"])
    with tenant_context(team["tenant"]):
        messages_before = MemoryMessage.objects.count()
    response = signed_in("alice").post("/workspace/import/", _upload(data, "junk.sqlite"))
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="alert error" role="alert"' in html and "nothing was written" in html
    assert _node_count(team["tenant"]) == before
    with tenant_context(team["tenant"]):
        assert MemoryMessage.objects.count() == messages_before


def test_import_without_a_file_is_explained(team):
    response = signed_in("alice").post("/workspace/import/", {})
    assert response.status_code == 400 and "Choose the file to import." in response.content.decode()


@pytest.mark.parametrize("name", ["mia", "vera"])
def test_members_and_viewers_cannot_export_or_import(team, name):
    data = _export(signed_in("alice"))
    before = _node_count(team["tenant"])
    client = signed_in(name)
    laptop = workspace_create(tenant=team["tenant"], name="Laptop")
    assert client.get("/workspace/export.sqlite").status_code == 403
    assert client.post("/workspace/import/", _upload(data)).status_code == 403
    assert client.post("/workspace/import/", _upload(data), **HTMX).status_code == 403
    assert _node_count(team["tenant"]) == before and _node_count(team["tenant"], workspace=laptop) == 0


def test_import_needs_post_and_csrf(team):
    data = _export(signed_in("alice"))
    client = signed_in("alice", enforce_csrf_checks=True)
    assert client.get("/workspace/import/").status_code == 405
    before = _node_count(team["tenant"])
    assert client.post("/workspace/import/", _upload(data)).status_code == 403
    assert client.post("/workspace/import/", _upload(data), **HTMX).status_code == 403
    assert _node_count(team["tenant"]) == before
    # With the token from the page's hx-headers the same post goes through.
    html = client.get("/workspace/").content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', html).group(1)
    response = client.post("/workspace/import/", _upload(data), HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200 and "Same workspace" in response.content.decode()


def test_another_tenants_user_sees_only_their_own_workspace(team):
    bob = signed_in("bob")
    foreign = default_workspace(team["tenant"])
    # Choosing tenant A's workspace is refused, and a planted session value is ignored.
    assert bob.post("/switch/workspace/", {"target": foreign.pk}).status_code == 404
    session = bob.session
    session[SESSION_WORKSPACE_KEY] = foreign.pk
    session.save()
    html = bob.get("/workspace/").content.decode()
    assert "tenant-b" in html or team["other"].name in html
    assert _count(html, "active") == 1  # bob's one memory, not tenant A's two
    response = bob.get("/workspace/export.sqlite")
    assert response["Content-Disposition"] == 'attachment; filename="tenant-b-default.sqlite"'
    assert bob.get("/workspace/").status_code == 200


def test_sign_in_required(team):
    assert Client().get("/workspace/").status_code == 302
    assert Client().get("/workspace/export.sqlite").status_code == 302
    assert Client().post("/workspace/import/", {}).status_code == 302


def test_chinese_page(team):
    html = signed_in("alice").get("/workspace/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert '<html lang="zh-hans">' in html and "导出" in html and "Export" not in html


def test_an_import_maps_the_files_users_to_members_named_on_the_page(team):
    """bob's personal card (another tenant's file) is left out unless the page maps bob to a member."""
    data = _export(signed_in("bob"))
    client = signed_in("alice")
    laptop = workspace_create(tenant=team["tenant"], name="Laptop")
    _switch(client, laptop.pk)
    unmapped = client.post("/workspace/import/", _upload(data))
    assert unmapped.status_code == 200 and "unknown_user" in unmapped.content.decode()
    mia = team["users"]["mia"]
    assert _node_count(team["tenant"], user=mia) == 0
    bad = client.post("/workspace/import/", {**_upload(data), "map_users": "bob"})
    assert bad.status_code == 400 and "NAME=MEMBER" in bad.content.decode()
    stranger = client.post("/workspace/import/", {**_upload(data), "map_users": "bob=nobody"})
    assert stranger.status_code == 400 and _node_count(team["tenant"], user=mia) == 0
    mapped = client.post("/workspace/import/", {**_upload(data), "map_users": "bob=mia\n"})
    assert mapped.status_code == 200, mapped.content.decode()[:500]
    assert _node_count(team["tenant"], user=mia, title="bob 不吃香菜") == 1
