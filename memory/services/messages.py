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
from memory.services.rows_insert import rows_insert
from memory.visibility import Viewer
from tenants.context import tenant_context


def _generated_message_id(*, workspace_id: int, session_id: str, role: str, content: str,
                          created_at: datetime | None, batch_prefix: str, index: int) -> str:
    if created_at is None:
        # One random prefix per batch (96 bits), the position after it: reading the system's random
        # source once per message cost ~0.5 ms each under load.
        return f"msg_{batch_prefix}{index:08x}"
    # A client retrying the same timestamped message gets the same id, so the capture stays idempotent.
    digest = hashlib.sha256(
        json.dumps([workspace_id, session_id, role, content, created_at.isoformat()]).encode()
    ).hexdigest()
    return f"msg_{digest[:32]}"


def _require_same(existing: MemoryMessage, session_id: str, data: dict[str, Any], index: int) -> None:
    """Refuse a client id that already holds other content (evidence is append-only)."""
    if (existing.session_id, existing.role, existing.content) != (session_id, data["role"], data["content"]):
        raise Invalid(
            f"Message id {existing.message_id!r} already holds different content; evidence is "
            "append-only, so send the new message with a new id.",
            errors={f"messages[{index}].id": ["already used for different content"]},
        )


def _draft(viewer: Viewer, session_id: str, data: dict[str, Any], index: int, now: datetime,
           batch_prefix: str) -> MemoryMessage:
    created_at = data.get("created_at")
    message_id = data.get("id") or _generated_message_id(
        workspace_id=viewer.workspace.pk, session_id=session_id, role=data["role"],
        content=data["content"], created_at=created_at, batch_prefix=batch_prefix, index=index,
    )
    return MemoryMessage(
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


def _settle(viewer: Viewer, session_id: str, messages: Sequence[dict[str, Any]],
            drafts: Sequence[MemoryMessage]) -> list[MemoryMessage]:
    """Answer each message with the row stored under its id (one query), or with its draft if none is.

    A repeated id with other content is refused; a repeat within the batch is answered by the first.
    """
    known = {message.message_id: message for message in MemoryMessage.objects.filter(
        tenant=viewer.tenant, workspace=viewer.workspace, message_id__in=[d.message_id for d in drafts])}
    answers = []
    for index, (data, draft) in enumerate(zip(messages, drafts, strict=True)):
        existing = known.get(draft.message_id)
        if existing is not None:
            _require_same(existing, session_id, data, index)
        answers.append(known.setdefault(draft.message_id, draft))
    return answers


ATTEMPTS = 3  # a concurrent capture of the same ids can win the insert race; settle again, then insert


def message_append_batch(*, viewer: Viewer, session_id: str,
                         messages: Sequence[dict[str, Any]]) -> list[MemoryMessage]:
    """Append evidence messages (append-only; a repeated client id with the same content is a no-op).

    Set-based: the batch's ids are looked up in one query, every message is checked before any is
    written, and the new ones are inserted in one statement with one parameter per column.
    """
    require_capture_allowed(viewer)
    require_batch_size(len(messages), what="messages")
    now = timezone.now()
    with tenant_context(viewer.tenant):
        batch_prefix = uuid4().hex[:24]
        drafts = [_draft(viewer, session_id, data, index, now, batch_prefix)
                  for index, data in enumerate(messages)]
        for attempt in range(ATTEMPTS):
            stored = _settle(viewer, session_id, messages, drafts)
            new = list({id(m): m for m in stored if m.pk is None}.values())
            try:
                with transaction.atomic():
                    rows_insert(MemoryMessage, new)
                break
            except IntegrityError:
                # A concurrent capture of one of these client ids committed first: answer with its
                # row, as a retry after it would have been answered.
                for message in new:
                    message.pk = None
                if attempt == ATTEMPTS - 1:
                    raise
        messages_captured_announce(tenant_id=viewer.tenant.pk, workspace_id=viewer.workspace.pk,
                                   session_id=session_id, message_pks=[m.pk for m in new])
    return stored
