"""Django admin for operators: it sees every tenant, shows a new API key once and never edits memory rows."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest

from tenants.context import tenant_context
from tenants.models import ApiKey, Workspace
from tenants.services import KEY_PREFIX, api_key_authenticate


@pytest.fixture
def operator_client(client, db):  # noqa: ANN001
    get_user_model().objects.create_superuser("ops", "ops@example.com", "ops-password-1")
    # django-axes throttles sign-ins by request address, so authenticate() needs a request.
    client.login(request=HttpRequest(), username="ops", password="ops-password-1")
    return client


@pytest.mark.parametrize("path", [
    "/admin/", "/admin/tenants/tenant/", "/admin/tenants/apikey/", "/admin/tenants/workspace/",
    "/admin/tenants/membership/", "/admin/memory/memorynode/", "/admin/memory/memoryauditevent/",
])
def test_admin_pages_list_every_tenant(operator_client, tenant_a, tenant_b, path):
    response = operator_client.get(path)
    assert response.status_code == 200
    if path == "/admin/tenants/workspace/":
        assert response.content.count(b"default") >= 2


def cookie_texts(cookies) -> list[str]:  # noqa: ANN001
    """Return every cookie value the browser holds, with the messages cookie decoded as the browser could."""
    from django.contrib.messages.storage.cookie import CookieStorage

    texts = []
    for morsel in cookies.values():
        texts.append(morsel.OutputString())
        if morsel.key == CookieStorage.cookie_name:
            texts.extend(str(m) for m in CookieStorage(HttpRequest())._decode(morsel.value) or [])
    return texts


def test_admin_shows_a_new_api_key_once_on_a_page_and_never_in_a_cookie(operator_client, tenant_a):
    with tenant_context(tenant_a):
        workspace = Workspace.objects.get(slug="default")
    response = operator_client.post("/admin/tenants/apikey/add/", {
        "tenant": tenant_a.pk, "name": "from-admin", "write_scopes": ["session", "user"],
        "workspace": workspace.pk,
    })
    hops = [response]
    while hops[-1].status_code in (301, 302, 303) and len(hops) < 5:
        hops.append(operator_client.get(hops[-1]["Location"]))
    page = hops[-1].content.decode()
    raw_key = re.search(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{20,}", page).group(0)
    leaked = [text for hop in hops for text in cookie_texts(hop.cookies) if raw_key in text]
    assert not leaked, "the raw key travelled in a cookie"
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert re.search(r'id="issued-key"[^>]*value="([^"]+)"', page).group(1) == raw_key
    api_key = api_key_authenticate(raw_key)
    assert api_key is not None and api_key.name == "from-admin"
    assert api_key.write_scopes == ["session", "user"]
    assert raw_key not in str(dict(operator_client.session)), "nor in the session"
    for path in ["/admin/tenants/apikey/", f"/admin/tenants/apikey/{api_key.pk}/change/", "/admin/"]:
        later = operator_client.get(path)
        assert raw_key.encode() not in later.content, f"{path} shows the key again"
        assert not [text for text in cookie_texts(later.cookies) if raw_key in text]
    assert api_key.prefix in operator_client.get("/admin/tenants/apikey/").content.decode()


def test_admin_revoke_action_refuses_the_key_afterwards(operator_client, tenant_a):
    from tenants.services import api_key_create

    issued = api_key_create(tenant=tenant_a, name="to-revoke")
    operator_client.post("/admin/tenants/apikey/", {"action": "revoke", "_selected_action": [issued.api_key.pk]})
    assert api_key_authenticate(issued.raw_key) is None
    with tenant_context(tenant_a):
        assert ApiKey.objects.get(pk=issued.api_key.pk).revoked_at is not None


@pytest.mark.parametrize("model", ["memorynode", "memoryauditevent"])
def test_admin_never_edits_memory_rows(operator_client, model):
    assert operator_client.get(f"/admin/memory/{model}/add/").status_code == 403


def test_openapi_schema_is_served(client, db):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json()["info"]["title"] == "Ekko Memory API"
