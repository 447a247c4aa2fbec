"""A memory slot's keyed digest: what a hard-forget audit event keeps instead of the slot's key.

A slot is a scope owner (`user:7`, `session:3:s1`, `workspace:3`) and a key. The key of an itemized
kind is content (`avoid_ingredient:香菜`), so an event that must keep no content keeps
`slot_digest` of it: an HMAC under the server's secret, equal for the same slot of the same tenant,
useless for guessing the key without the secret. The extractor's recent-rejection check
(`memory.pipeline.guardrails`) compares digests to find the slots a person erased.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["slot_digest"]

_PURPOSE = b"ekko.slot-digest.v1:"


def slot_digest(*, secret: str | bytes, tenant_id: int, owner_ref: str, key: str) -> str:
    """Return the hex HMAC-SHA256 of the tenant's slot `(owner_ref, key)`, keyed by a hash of `secret`."""
    raw = secret.encode() if isinstance(secret, str) else secret
    derived = hashlib.sha256(_PURPOSE + raw).digest()
    message = f"{tenant_id}\x1f{owner_ref}\x1f{key}".encode()
    return hmac.new(derived, message, hashlib.sha256).hexdigest()
