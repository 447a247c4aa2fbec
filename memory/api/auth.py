"""Who is calling: Bearer API keys for agents, Django sessions (with CSRF) for the browser.

Authentication resolves a `Principal` — tenant, actor label, write rights — once, at the edge;
views turn it into a `Viewer` for the workspace/session/user a request names.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework import authentication, exceptions, throttling
from rest_framework.request import Request

from tenants.context import all_tenants_context
from tenants.models import AGENT_WRITABLE_SCOPES, ApiKey, Membership, Role, Scope, Tenant
from tenants.services import api_key_authenticate

SESSION_TENANT_KEY = "ekko_tenant_id"


@dataclass(frozen=True)
class Principal:
    tenant: Tenant
    actor: str
    user: AbstractBaseUser | None
    api_key: ApiKey | None
    read_only: bool
    write_scopes: frozenset[str]
    pinned_workspace_id: int | None
    is_admin: bool
    restrict_to_person: bool


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request):  # noqa: ANN201
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Send `Authorization: Bearer <api key>`.")
        api_key = api_key_authenticate(header[1])
        if api_key is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API key.")
        return AnonymousUser(), api_key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def principal_for_api_key(api_key: ApiKey) -> Principal:
    return Principal(
        tenant=api_key.tenant,
        actor=f"api_key:{api_key.prefix}",
        user=None,
        api_key=api_key,
        read_only=api_key.read_only,
        write_scopes=frozenset(s for s in api_key.write_scopes if s != Scope.GLOBAL),
        pinned_workspace_id=api_key.workspace_id,
        is_admin=False,
        restrict_to_person=False,
    )


def memberships_of(user: AbstractBaseUser) -> list[Membership]:
    """Return every membership of a signed-in person (the tenant switcher's list)."""
    # A person's tenants are what we are looking up, so this reads across tenants (docs/tenancy.md).
    with all_tenants_context():
        return list(Membership.all_tenants.select_related("tenant").filter(user=user).order_by("tenant__slug"))


def principal_for_user(user: AbstractBaseUser, session: dict) -> Principal | None:
    memberships = memberships_of(user)
    if not memberships:
        return None
    chosen = next((m for m in memberships if m.tenant_id == session.get(SESSION_TENANT_KEY)), memberships[0])
    admin = chosen.role in (Role.OWNER, Role.ADMIN)
    scopes = {*AGENT_WRITABLE_SCOPES} | ({Scope.GLOBAL} if admin else set())
    return Principal(
        tenant=chosen.tenant,
        actor=f"user:{user.get_username()}",
        user=user,
        api_key=None,
        read_only=chosen.role == Role.VIEWER,
        write_scopes=frozenset(str(s) for s in scopes),
        pinned_workspace_id=None,
        is_admin=admin,
        restrict_to_person=not admin,
    )


class KeyRateThrottle(throttling.SimpleRateThrottle):
    """Per API key (or per signed-in user) request budget; 429 with Retry-After past it."""

    scope = "api"

    def get_rate(self) -> str:
        return settings.EKKO_RATE_LIMIT

    def get_cache_key(self, request: Request, view) -> str | None:  # noqa: ANN001
        if isinstance(request.auth, ApiKey):
            return f"throttle:key:{request.auth.pk}"
        if request.user is not None and request.user.is_authenticated:
            return f"throttle:user:{request.user.pk}"
        return None
