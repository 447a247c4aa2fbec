"""DRF authentication and throttling: Bearer API keys for agents, Django sessions (with CSRF) for browsers.

What an authenticated caller may reach (the `Principal` and its `Viewer`) is memory.access's rule.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from rest_framework import authentication, exceptions, throttling
from rest_framework.request import Request

from tenants.models import ApiKey
from tenants.services import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request):  # noqa: ANN201
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Send `Authorization: Bearer <api key>`.")
        # Inside the request's transaction the key's tenant is bound from here on (the edge).
        api_key = api_key_authenticate(header[1], bind=connection.in_atomic_block)
        if api_key is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API key.")
        return AnonymousUser(), api_key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


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
