"""Security edges of the site: the sign-in lockout page, the client address it locks, and the CSP header.

django-axes (configured in settings.py, described in docs/security.md) counts failed sign-ins on the
pages' form and the admin login; it asks `client_ip` for the address and `lockout_response` for the
answer once a username and address are locked. `ContentSecurityPolicyMiddleware` adds the
`Content-Security-Policy` header Django 5.2 does not send itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.contrib.admin import site
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse


def client_ip(request: HttpRequest) -> str | None:
    """Return the address of the browser: REMOTE_ADDR, or the one our own trusted proxies forwarded."""
    remote = request.META.get("REMOTE_ADDR")
    count = settings.EKKO_TRUSTED_PROXY_COUNT
    if not count:
        return remote
    # Each trusted proxy appends the address it saw; entries left of those came from the client.
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    if len(hops) < count:
        return remote
    try:
        return str(ipaddress.ip_address(hops[-count]))
    except ValueError:
        return remote


def lockout_response(request: HttpRequest, original_response: HttpResponse | None = None,
                     credentials: dict | None = None) -> HttpResponse:
    """Return the 429 page for a locked sign-in, in the admin's look on /admin/ and the pages' elsewhere."""
    cool_off = int(settings.AXES_COOLOFF_TIME.total_seconds())
    admin = request.path.startswith(reverse("admin:index"))
    context = {
        **(site.each_context(request) if admin else {}),
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": max(1, -(-cool_off // 60)),
        "sign_in_url": reverse("admin:login") if admin else reverse("login"),
    }
    template = "admin/locked_out.html" if admin else "security/locked_out.html"
    response = render(request, template, context, status=429)
    response["Retry-After"] = str(cool_off)
    return response


class ContentSecurityPolicyMiddleware:
    """Send settings.EKKO_CONTENT_SECURITY_POLICY on every response that does not carry its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if policy := settings.EKKO_CONTENT_SECURITY_POLICY:
            response.headers.setdefault("Content-Security-Policy", policy)
        return response
