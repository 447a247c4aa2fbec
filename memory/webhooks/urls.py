"""Which receiver URLs an endpoint may name (server-side request forgery guard).

http(s) only, a host, no user or password in the URL. Unless EKKO_WEBHOOK_ALLOW_PRIVATE, every
address the host resolves to must be public: loopback, private, link-local (cloud metadata),
multicast, reserved and unspecified addresses are refused, at registration and again at each send
(DNS may change in between). Deliveries never follow redirects (memory.webhooks.delivery).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class UnsafeUrl(ValueError):
    """The URL may not receive webhooks; the message says why."""


def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UnsafeUrl(f"The host {host} does not resolve ({exc.strerror or exc}).") from exc
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    address = mapped or address
    return not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def url_check(url: str, *, resolve: bool = True) -> str:
    """Return `url` when it may receive webhooks; raise UnsafeUrl saying why not."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise UnsafeUrl("Use an http:// or https:// URL.")
    if not parts.hostname:
        raise UnsafeUrl("The URL names no host.")
    if parts.username or parts.password:
        raise UnsafeUrl("Leave user names and passwords out of the URL; deliveries are signed instead.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UnsafeUrl("The URL's port is not a number between 0 and 65535.") from exc
    if resolve and not settings.EKKO_WEBHOOK_ALLOW_PRIVATE:
        refused = [str(a) for a in _addresses(parts.hostname, port) if not _is_public(a)]
        if refused:
            raise UnsafeUrl(
                f"{parts.hostname} points to a private, loopback or link-local address "
                f"({', '.join(refused)}); webhooks go to public addresses only."
            )
    return url.strip()
