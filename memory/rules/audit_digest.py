"""The audit chain's digest format (migration memory/0006 computes the same values in SQL).

An event's `content_digest` is SHA-256 over (salt, reason, payload text); its `digest` is SHA-256
over the format version, the tenant, its sequence, the previous event's digest, its content-free
fields and its content digest. Each part is written as `<length>:<value>` (or `~` for NULL), so no
field can run into the next. Changing anything here breaks every stored chain: a new format is a
new VERSION, written by a new migration.
"""

from __future__ import annotations

import hashlib
from uuid import UUID

GENESIS = "0" * 64
VERSION = "ekko-audit-v1"


def _field(value: str | None) -> str:
    return "~" if value is None else f"{len(value)}:{value}"


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def content_digest(*, salt: str, reason: str, payload_text: str | None) -> str:
    """Return the salted digest of an event's content (`payload_text` is PostgreSQL's jsonb text)."""
    material = _field(salt) + _field(reason) + _field(payload_text)
    return hashlib.sha256(material.encode()).hexdigest()


def event_digest(*, tenant_id: int, sequence: int, previous_digest: str, event_id: UUID | str,
                 event_type: str, node_id: UUID | str | None, workspace_id: int | None,
                 session_id: str | None, actor: str, created_at_us: int, content_digest: str) -> str:
    """Return an event's chain digest: it covers the previous digest and the content-free fields."""
    parts = [VERSION, str(tenant_id), str(sequence), previous_digest, str(event_id), event_type,
             _optional(node_id), _optional(workspace_id), session_id, actor, str(created_at_us),
             content_digest]
    return hashlib.sha256("".join(_field(part) for part in parts).encode()).hexdigest()
