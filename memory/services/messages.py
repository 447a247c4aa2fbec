"""Evidence capture: messages are appended, never changed; a repeated client id is idempotent."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import uuid4

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.errors import Invalid
from memory.models import MemoryMessage
from memory.rules.text import count_tokens, segment_for_search
from memory.services.events import messages_captured_announce
from memory.services.guards import require_batch_size, require_capture_allowed
from memory.visibility import Viewer
from tenants.context import tenant_context


def _generated_message_id(*, workspace_id: int, session_id: str, role: str, content: str,
                          created_at: datetime | None) -> str:
    if created_at is None:
        return f"msg_{uuid4().hex}"
    # A client retrying the same timestamped message gets the same id, so the capture stays idempotent.
    digest = hashlib.sha256(
        json.dumps([workspace_id, session_id, role, content, created_at.isoformat()]).encode()
    ).hexdigest()
    return f"msg_{digest[:32]}"


def _stored(viewer: Viewer, message_id: str, session_id: str, data: dict[str, Any],
            index: int) -> MemoryMessage | None:
    """Return the message already stored under `message_id` (None if there is none); refuse other content."""
    existing = MemoryMessage.objects.filter(
        tenant=viewer.tenant, workspace=viewer.workspace, message_id=message_id).first()
    if existing is not None and (existing.session_id, existing.role, existing.content) != (
            session_id, data["role"], data["content"]):
        raise Invalid(
            f"Message id {message_id!r} already holds different content; evidence is "
            "append-only, so send the new message with a new id.",
            errors={f"messages[{index}].id": ["already used for different content"]},
        )
    return existing


def message_append_batch(*, viewer: Viewer, session_id: str,
                         messages: Sequence[dict[str, Any]]) -> list[MemoryMessage]:
    """Append evidence messages (append-only; a repeated client id with the same content is a no-op)."""
    require_capture_allowed(viewer)
    require_batch_size(len(messages), what="messages")
    now = timezone.now()
    stored: list[MemoryMessage] = []
    created_ids: list[int] = []
    with tenant_context(viewer.tenant):
        for index, data in enumerate(messages):
            created_at = data.get("created_at")
            message_id = data.get("id") or _generated_message_id(
                workspace_id=viewer.workspace.pk, session_id=session_id, role=data["role"],
                content=data["content"], created_at=created_at,
            )
            existing = _stored(viewer, message_id, session_id, data, index)
            if existing is not None:
                stored.append(existing)
                continue
            message = MemoryMessage(
                tenant=viewer.tenant,
                workspace=viewer.workspace,
                message_id=message_id,
                session_id=session_id,
                user=viewer.user,
                parent_id=data.get("parent_id"),
                role=data["role"],
                content=data["content"],
                channel=data.get("channel") or "main",
                agent_name=data.get("agent_name") or "",
                metadata=data.get("metadata"),
                token_count=count_tokens(data["content"]),
                # Messages of one batch keep their order even when they share a clock tick.
                created_at=created_at or now + timedelta(microseconds=index),
                search_text=segment_for_search(data["content"]),
            )
            try:
                with transaction.atomic():
                    message.save(force_insert=True)
            except IntegrityError:
                # A concurrent capture of the same client id committed first: answer with its row, as
                # a retry after it would have been answered.
                existing = _stored(viewer, message_id, session_id, data, index)
                if existing is None:
                    raise
                stored.append(existing)
                continue
            stored.append(message)
            created_ids.append(message.pk)
        messages_captured_announce(tenant_id=viewer.tenant.pk, workspace_id=viewer.workspace.pk,
                                   session_id=session_id, message_pks=created_ids)
    return stored
