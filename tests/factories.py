"""Factories for test data; every one of them requires the tenant it creates data for."""

from __future__ import annotations

from tenants.models import Tenant
from tenants.services import tenant_create


def make_tenant(slug: str, *, owner: str, password: str = "pw-for-tests-1") -> Tenant:
    return tenant_create(slug=slug, owner_username=owner, password=password).tenant
