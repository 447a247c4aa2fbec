"""The audit chain's digest format (migration memory/0006 computes the same values in SQL).

An event's `content_digest` is SHA-256 over (salt, reason, payload text); its `digest` is SHA-256
over the format version, the tenant, its sequence, the previous event's digest, its content-free
fields and its content digest. Each part is written as `<length>:<value>` (or `~` for NULL), so no
field can run into the next. Changing anything here breaks every stored chain: a new format is a
new VERSION, written by a new migration.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from uuid import UUID

GENESIS = "0" * 64
VERSION = "ekko-audit-v1"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


def event_problem(*, tenant_id: int, sequence: int, previous_digest: str, event_id: UUID | str,
                  event_type: str, node_id: UUID | str | None, workspace_id: int | str | None,
                  session_id: str | None, actor: str, created_at_us: int, reason: str,
                  payload_text: str | None, content_salt: str, content_digest_: str, digest: str) -> str | None:
    """Return what is wrong with one event's stored digests (None when they hold), chain links aside."""
    if content_salt:
        if content_digest(salt=content_salt, reason=reason, payload_text=payload_text) != content_digest_:
            return "reason or payload changed after the event was written"
    elif reason or payload_text is not None:
        return "content is present but its salt was erased"
    expected = event_digest(
        tenant_id=tenant_id, sequence=sequence, previous_digest=previous_digest, event_id=event_id,
        event_type=event_type, node_id=node_id, workspace_id=workspace_id, session_id=session_id, actor=actor,
        created_at_us=created_at_us, content_digest=content_digest_,
    )
    if expected != digest:
        return "digest mismatch: a chained field (type, node, workspace, session, actor, time) was changed"
    return None


def microseconds(value: datetime) -> int:
    """Return an aware timestamp as whole microseconds since the epoch (the trigger's `created_at` part)."""
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
