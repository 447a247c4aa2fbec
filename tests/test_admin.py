"""Django admin for operators: it sees every tenant, shows a new API key once and never edits memory rows."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest

from tenants.context import tenant_context
from tenants.models import ApiKey, Workspace
from tenants.services import api_key_authenticate


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


def test_admin_creates_an_api_key_and_shows_it_once(operator_client, tenant_a):
    with tenant_context(tenant_a):
        workspace = Workspace.objects.get(slug="default")
    response = operator_client.post("/admin/tenants/apikey/add/", {
        "tenant": tenant_a.pk, "name": "from-admin", "write_scopes": ["session", "user"], "workspace": workspace.pk,
    }, follow=True)
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"] if "shown once" in str(m)]
    assert len(shown) == 1
    raw_key = shown[0].rsplit(" ", 1)[-1]
    api_key = api_key_authenticate(raw_key)
    assert api_key is not None and api_key.name == "from-admin" and api_key.write_scopes == ["session", "user"]
    change_page = operator_client.get(f"/admin/tenants/apikey/{api_key.pk}/change/")
    assert raw_key.encode() not in change_page.content


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
