"""When extraction runs: the session thresholds, explicit requests, and one queued run per session.

`extraction_maybe_request` runs after a capture commits (`memory.pipeline.background`): counting
the session's main-channel messages that no run owns yet, it opens a run when there are at least
`EKKO_EXTRACT_EVERY_MESSAGES` of them (trigger `messages`), they hold at least
`EKKO_EXTRACT_TOKEN_THRESHOLD` tokens (`tokens`), or a user message states something to keep now
(`explicit`: see `memory.pipeline.gating.has_explicit_statement`). A triggered run is queued with a
countdown of `EKKO_EXTRACT_DELAY_SECONDS` so the turn ends first. `extraction_request` (`POST
extract`) opens one at once (trigger `api`). A session has at most one queued or running run (an
advisory lock per session serialises the check): a second request gets the same run, and new
messages join the queued one. The Celery task is sent on commit; a broker outage leaves the run
queued for the retry sweep (`memory.pipeline.runs.extraction_retry_due`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max, Sum

from memory.models import Channel, ExtractionRun, ExtractionStatus, MemoryMessage, Role
from memory.pipeline.gating import has_explicit_statement
from memory.services.guards import require_workspace_reachable, require_writer
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant

__all__ = [
    "ACTIVE_STATES",
    "enqueue_run",
    "extraction_maybe_request",
    "extraction_request",
    "open_run_if_due",
]

logger = logging.getLogger("memory.pipeline.runs")

ACTIVE_STATES = (ExtractionStatus.QUEUED, ExtractionStatus.RUNNING)
# pg_advisory_xact_lock's first key: the class of lock ("extraction of one session").
_SESSION_LOCK_CLASS = 7301


def _lock_session(tenant_id: int, workspace_id: int, session_id: str) -> None:
    # Two captures of the same session at once must not both open a run.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            [_SESSION_LOCK_CLASS, f"{tenant_id}:{workspace_id}:{session_id}"],
        )


def enqueue_run(tenant_id: int, run_id: UUID | str, *, countdown: int = 0) -> None:
    """Send the run's Celery task once the transaction commits (a broker outage is only logged)."""
    run_ref = str(run_id)

    def send() -> None:
        from memory.pipeline import tasks

        try:
            if countdown > 0:
                tasks.extract_session.apply_async(args=(tenant_id, run_ref), countdown=countdown)
            else:
                tasks.extract_session.delay(tenant_id, run_ref)
        except Exception:
            # The broker is down: the run stays queued and the retry sweep queues it again later.
            logger.warning(
                "Could not queue extraction run %s (broker unavailable?); the retry sweep will "
                "queue it again.",
                run_ref,
                exc_info=True,
            )

    transaction.on_commit(send)


def _active_run(tenant: Tenant | int, workspace_id: int, session_id: str) -> ExtractionRun | None:
    return (
        ExtractionRun.objects.filter(
            tenant=tenant, workspace_id=workspace_id, session_id=session_id, status__in=ACTIVE_STATES
        )
        .order_by("created_at")
        .first()
    )


def _cursor(tenant: Tenant | int, workspace_id: int, session_id: str) -> int:
    """Return the last message pk some run of the session already owns."""
    owned = ExtractionRun.objects.filter(
        tenant=tenant, workspace_id=workspace_id, session_id=session_id, up_to_message_pk__isnull=False
    ).aggregate(last=Max("up_to_message_pk"))
    return owned["last"] or 0


def _create_run(
    *, tenant: Tenant | int, workspace_id: int, session_id: str, user_id: int | None, trigger: str
) -> ExtractionRun:
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    run = ExtractionRun.objects.create(
        tenant_id=tenant_id,
        workspace_id=workspace_id,
        session_id=session_id,
        user_id=user_id,
        trigger=trigger,
        after_message_pk=_cursor(tenant_id, workspace_id, session_id),
    )
    # A triggered run waits for the turn to end, so the agent's own explicit memory/write of the same
    # statement lands first and the run finds it already remembered. Requests run at once.
    enqueue_run(
        tenant_id, run.pk, countdown=0 if trigger == "api" else int(settings.EKKO_EXTRACT_DELAY_SECONDS)
    )
    logger.info(
        "Extraction run %s queued for session %r (tenant %s, workspace %s, trigger %s).",
        run.pk,
        session_id,
        tenant_id,
        workspace_id,
        trigger,
    )
    return run


def extraction_request(*, viewer: Viewer, session_id: str, trigger: str = "api") -> ExtractionRun:
    """Queue an extraction of the session's new messages, or return the run already queued or running.

    A run writes memories, so the caller must be allowed to write into the session's workspace.
    """
    require_writer(viewer)
    require_workspace_reachable(viewer, viewer.workspace.pk)
    with tenant_context(viewer.tenant):
        _lock_session(viewer.tenant.pk, viewer.workspace.pk, session_id)
        active = _active_run(viewer.tenant, viewer.workspace.pk, session_id)
        if active is not None:
            logger.info(
                "Extraction requested for session %r: run %s is already %s.",
                session_id,
                active.pk,
                active.status,
            )
            return active
        return _create_run(
            tenant=viewer.tenant,
            workspace_id=viewer.workspace.pk,
            session_id=session_id,
            user_id=viewer.user.pk if viewer.user is not None else None,
            trigger=trigger,
        )


def _trigger_for(new_messages: Any) -> str | None:
    stats = new_messages.aggregate(count=Count("pk"), tokens=Sum("token_count"))
    if stats["count"] >= int(settings.EKKO_EXTRACT_EVERY_MESSAGES):
        return "messages"
    if (stats["tokens"] or 0) >= int(settings.EKKO_EXTRACT_TOKEN_THRESHOLD):
        return "tokens"
    user_texts = new_messages.filter(role=Role.USER).values_list("content", flat=True)
    if any(has_explicit_statement(text) for text in user_texts):
        return "explicit"
    return None


def open_run_if_due(tenant: Tenant | int, workspace_id: int, session_id: str) -> ExtractionRun | None:
    """Return a new run when unowned messages cross a threshold, else the active run or None."""
    _lock_session(tenant if isinstance(tenant, int) else tenant.pk, workspace_id, session_id)
    active = _active_run(tenant, workspace_id, session_id)
    if active is not None:
        return active  # a queued run reads these messages too; a running one's follow-up does
    cursor = _cursor(tenant, workspace_id, session_id)
    new_messages = MemoryMessage.objects.filter(
        tenant=tenant, workspace_id=workspace_id, session_id=session_id, channel=Channel.MAIN, pk__gt=cursor
    )
    trigger = _trigger_for(new_messages)
    if trigger is None:
        return None
    author = (
        new_messages.filter(role=Role.USER, user__isnull=False)
        .order_by("-pk")
        .values_list("user_id", flat=True)
        .first()
    )
    return _create_run(
        tenant=tenant, workspace_id=workspace_id, session_id=session_id, user_id=author, trigger=trigger
    )


def extraction_maybe_request(
    *, tenant_id: int, workspace_id: int, session_id: str, message_pks: Sequence[int]
) -> ExtractionRun | None:
    """Queue a run when the session's unextracted main-channel messages cross a trigger (seed 000).

    Triggers: at least EKKO_EXTRACT_EVERY_MESSAGES messages, at least EKKO_EXTRACT_TOKEN_THRESHOLD
    tokens, or an explicit statement, correction or task in a user message. Returns the new run,
    the session's run that is already queued or running, or None when no trigger fired (or the check
    itself failed: it runs after the capture committed, so it logs instead of failing the request).
    """
    try:
        with tenant_context(tenant_id):
            captured = MemoryMessage.objects.filter(
                tenant=tenant_id, pk__in=list(message_pks), channel=Channel.MAIN
            )
            if not captured.exists():
                return None
            return open_run_if_due(tenant_id, workspace_id, session_id)
    except Exception:
        logger.exception(
            "Extraction trigger check failed for session %r (tenant %s); the next capture or "
            "POST extract tries again.",
            session_id,
            tenant_id,
        )
        return None
