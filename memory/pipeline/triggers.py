"""When extraction runs: at the end of a turn, on request, and one queued run per session.

A turn is the user's message, what the agent did with it (its own `memory/write`, tool calls) and the
assistant's reply. Extraction reads only completed turns (`completed_turns_end`): the messages
before the session's latest user message, or all of them once an assistant reply follows it, so a
run never reads a message the agent is still acting on. `extraction_maybe_request` runs after a
capture commits (`memory.pipeline.background`) and looks at the completed, unowned main-channel
messages of the session. It opens a run when

- they hold an assistant reply and a user message worth reading (`turn`, seed 000's "after the
  agent replied"; seed 003 captures the reply once the agent's run is complete), or, as a safety
  net for agents that never capture replies (the next user message completes the turn before it),
- there are at least `EKKO_EXTRACT_EVERY_MESSAGES` of them (`messages`), they hold at least
  `EKKO_EXTRACT_TOKEN_THRESHOLD` tokens (`tokens`), or a user message states something to keep
  (`explicit`: see `memory.pipeline.gating.has_explicit_statement`).

So capturing the user's message alone never triggers a run on that message. A turn run is queued at
once (the turn is over); a safety-net run waits `EKKO_EXTRACT_DELAY_SECONDS`. `extraction_request`
(`POST extract`) opens one at once (trigger `api`) that reads every message, the latest included:
the caller says the turn is over. A session has at most one queued or running run (an advisory lock
per session serialises the check): a second request gets the same run, and new messages join the
queued one. The Celery task is sent on commit; a broker outage leaves the run queued for the retry
sweep (`memory.pipeline.runs.extraction_retry_due`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Max, Q, TextField, Value, When

from memory.models import Channel, ExtractionRun, ExtractionStatus, MemoryMessage, Role
from memory.pipeline.gating import has_explicit_statement, is_trivial
from memory.services.guards import require_workspace_writer
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant

__all__ = [
    "ACTIVE_STATES",
    "completed_turns_end",
    "enqueue_run",
    "extraction_maybe_request",
    "extraction_request",
    "open_run_if_due",
]

logger = logging.getLogger("memory.pipeline.runs")

ACTIVE_STATES = (ExtractionStatus.QUEUED, ExtractionStatus.RUNNING)
# Runs that start without a countdown: the turn has ended (a reply) or the caller asked (`POST extract`).
IMMEDIATE_TRIGGERS = ("turn", "api")
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
    *, tenant: Tenant | int, workspace_id: int, session_id: str, user_id: int | None, trigger: str,
    after_message_pk: int | None = None,
) -> ExtractionRun:
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    run = ExtractionRun.objects.create(
        tenant_id=tenant_id,
        workspace_id=workspace_id,
        session_id=session_id,
        user_id=user_id,
        trigger=trigger,
        after_message_pk=(after_message_pk if after_message_pk is not None
                          else _cursor(tenant_id, workspace_id, session_id)),
    )
    # A turn run and a request start at once: the turn is over. A safety-net run (no reply captured)
    # leaves the agent time; it never reads the turn in progress either way (`completed_turns_end`).
    enqueue_run(
        tenant_id,
        run.pk,
        countdown=0 if trigger in IMMEDIATE_TRIGGERS else int(settings.EKKO_EXTRACT_DELAY_SECONDS),
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
    require_workspace_writer(viewer, viewer.workspace.pk)
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


def completed_turns_end(tenant: Tenant | int, workspace_id: int, session_id: str) -> int:
    """Return the last message pk of the session's completed turns (0 when none has completed).

    The turn in progress starts at the latest main-channel user message and ends with an assistant
    reply after it; until then it is not read. Without a user message everything is complete.
    """
    last = MemoryMessage.objects.filter(
        tenant=tenant, workspace_id=workspace_id, session_id=session_id, channel=Channel.MAIN
    ).aggregate(
        user=Max("pk", filter=Q(role=Role.USER)),
        reply=Max("pk", filter=Q(role=Role.ASSISTANT)),
        any=Max("pk"),
    )
    if last["user"] is None or (last["reply"] or 0) > last["user"]:
        return last["any"] or 0
    return last["user"] - 1


def _trigger_for(new_messages: Sequence[tuple[str, int, int | None, str]]) -> str | None:
    """The trigger (role, token count, user, user text) rows cross, or None."""
    user_texts = [text for role, _, _, text in new_messages if role == Role.USER]
    replies = any(role == Role.ASSISTANT for role, *_ in new_messages)
    if replies and any(not is_trivial(text) for text in user_texts):
        return "turn"
    if len(new_messages) >= int(settings.EKKO_EXTRACT_EVERY_MESSAGES):
        return "messages"
    if sum(tokens for _, tokens, _, _ in new_messages) >= int(settings.EKKO_EXTRACT_TOKEN_THRESHOLD):
        return "tokens"
    if any(has_explicit_statement(text) for text in user_texts):
        return "explicit"
    return None


def open_run_if_due(tenant: Tenant | int, workspace_id: int, session_id: str) -> ExtractionRun | None:
    """Return a new run when the completed, unowned messages cross a trigger, else the active run or None."""
    _lock_session(tenant if isinstance(tenant, int) else tenant.pk, workspace_id, session_id)
    active = _active_run(tenant, workspace_id, session_id)
    if active is not None:
        return active  # a queued run reads these messages too; a running one's follow-up does
    cursor = _cursor(tenant, workspace_id, session_id)
    # One read of what the triggers look at; only user messages' text is read.
    new_messages = list(
        MemoryMessage.objects.filter(
            tenant=tenant,
            workspace_id=workspace_id,
            session_id=session_id,
            channel=Channel.MAIN,
            pk__gt=cursor,
            pk__lte=completed_turns_end(tenant, workspace_id, session_id),
        )
        .order_by("pk")
        .values_list(
            "role", "token_count", "user_id",
            Case(When(role=Role.USER, then=F("content")), default=Value(""), output_field=TextField()),
        )
    )
    trigger = _trigger_for(new_messages)
    if trigger is None:
        return None
    author = next((user for role, _, user, _ in reversed(new_messages) if role == Role.USER and user), None)
    return _create_run(tenant=tenant, workspace_id=workspace_id, session_id=session_id, user_id=author,
                       trigger=trigger, after_message_pk=cursor)


def extraction_maybe_request(
    *, tenant_id: int, workspace_id: int, session_id: str, message_pks: Sequence[int]
) -> ExtractionRun | None:
    """Queue a run when the session's completed, unextracted turns cross a trigger (seed 000).

    Triggers: an assistant reply after a user message worth reading (`turn`); as a safety net, at least
    EKKO_EXTRACT_EVERY_MESSAGES messages, at least EKKO_EXTRACT_TOKEN_THRESHOLD tokens, or an explicit
    statement, correction or task in a user message of a completed turn. Returns the new run,
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
