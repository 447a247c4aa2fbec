"""How a receiver checks an Ekko webhook: the code docs/webhooks.md quotes (standard library only).

Copy `verify_ekko_signature` into the receiving service; Ekko's tests receive their deliveries
through it, so the documented code is the tested code.
"""

# --8<-- [start:verify]
import hashlib
import hmac
import time

TOLERANCE_SECONDS = 300  # refuse deliveries signed more than 5 minutes ago (replays)


def verify_ekko_signature(secret: str, body: bytes, header: str, now: float | None = None) -> bool:
    """Return True when `header` (Ekko-Signature) signs the raw `body` with `secret`, recently."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))
# --8<-- [end:verify]
