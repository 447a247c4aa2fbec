"""API keys: stored only as a hash, shown once, revocable; and the two tenant commands of API.md."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tenants.context import tenant_context
from tenants.models import ApiKey, Membership, Role, Tenant, Workspace
from tenants.services import ApiKeyError, api_key_authenticate, api_key_create, api_key_revoke


def test_api_key_is_stored_only_as_a_hash(tenant_a):
    issued = api_key_create(tenant=tenant_a, name="agent")
    with tenant_context(tenant_a):
        row = ApiKey.objects.values().get(pk=issued.api_key.pk)
    assert row["key_hash"] == hashlib.sha256(issued.raw_key.encode()).hexdigest()
    assert all(issued.raw_key not in str(value) for value in row.values())
    assert issued.raw_key.startswith(row["prefix"]) and len(row["prefix"]) < len(issued.raw_key) // 3


def test_api_key_authenticates_until_revoked(tenant_a):
    issued = api_key_create(tenant=tenant_a)
    found = api_key_authenticate(issued.raw_key)
    assert found is not None and found.tenant_id == tenant_a.pk and found.last_used_at is not None
    api_key_revoke(tenant=tenant_a, api_key_id=issued.api_key.pk)
    assert api_key_authenticate(issued.raw_key) is None


def test_unknown_or_malformed_keys_are_refused(tenant_a):
    api_key_create(tenant=tenant_a)
    assert api_key_authenticate("ekko_not-a-real-key") is None
    assert api_key_authenticate("") is None


def test_api_key_refuses_global_write_scope(tenant_a):
    with pytest.raises(ApiKeyError, match="global"):
        api_key_create(tenant=tenant_a, write_scopes=["session", "global"])


def test_api_key_cannot_pin_another_tenants_workspace(tenant_a, tenant_b):
    with tenant_context(tenant_b):
        other = Workspace.objects.get(slug="default")
    with pytest.raises(ApiKeyError, match="another tenant"):
        api_key_create(tenant=tenant_a, workspace=other)


def test_create_tenant_command_is_idempotent(db):
    out = StringIO()
    call_command("create_tenant", "acme", "--owner", "carol", "--name", "Acme", stdout=out)
    call_command("create_tenant", "acme", "--owner", "carol", stdout=out)
    tenant = Tenant.objects.get(slug="acme")
    with tenant_context(tenant):
        assert list(Workspace.objects.values_list("slug", flat=True)) == ["default"]
        assert list(Membership.objects.values_list("user__username", "role")) == [("carol", Role.OWNER)]
    assert tenant.name == "Acme"


def test_create_api_key_command_prints_the_key_alone_on_the_last_line(tenant_a):
    out = StringIO()
    call_command("create_api_key", "tenant-a", "--read-only", "--write-scopes", "session", "--workspace",
                 "default", "--name", "ci", stdout=out)
    last_line = out.getvalue().strip().splitlines()[-1]
    api_key = api_key_authenticate(last_line)
    assert api_key is not None
    assert (api_key.read_only, api_key.write_scopes, api_key.workspace.slug, api_key.name) == (
        True, ["session"], "default", "ci")


def test_create_api_key_command_explains_a_missing_tenant(db):
    with pytest.raises(CommandError, match="create_tenant"):
        call_command("create_api_key", "nope", stdout=StringIO())
