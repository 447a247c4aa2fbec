"""The signature scheme of every delivery (docs/webhooks.md).

`Ekko-Signature: t=<unix seconds>,v1=<hex>` where v1 is HMAC-SHA256, keyed with the endpoint's
secret, over `<t>.<raw body>`. Signing the timestamp with the body lets a receiver refuse a
replayed delivery (memory.webhooks.receiver checks both).
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Ekko-Signature"
EVENT_ID_HEADER = "Ekko-Event-Id"
EVENT_HEADER = "Ekko-Event"


def signature(*, secret: str, timestamp: int, body: bytes) -> str:
    """Return the hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(*, secret: str, body: bytes, timestamp: int | None = None) -> str:
    """Return the `Ekko-Signature` value for `body` signed now (or at `timestamp`)."""
    moment = int(time.time()) if timestamp is None else timestamp
    return f"t={moment},v1={signature(secret=secret, timestamp=moment, body=body)}"
