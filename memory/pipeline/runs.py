"""One extraction run's lifecycle: claim, read, extract, apply, finish or fail, and the retry sweep.

A run (`ExtractionRun`, visible at `GET extract/{taskId}`) reads a session's main-channel messages
in `(after_message_pk, up_to_message_pk]` (the end fixed at its claim: the completed turns, or every
message for `POST extract`), asks an extractor for a `MemoryExtraction` plan (the
chat model when `EKKO_LLM_BASE_URL` is set, the rules otherwise), applies it through the write
service (`memory.pipeline.apply`) and appends the session's next summary when it is due
(`memory.pipeline.summary_chain`). The apply, the summary and the run's `done` state commit in
one transaction, so a re-run after a crash never duplicates a memory. Runs are opened by
`memory.pipeline.triggers`. A failure never reaches the caller: the run goes to `retrying` with
exponential backoff and `extraction_retry_due` (Celery beat, every minute) queues it again; after
`EKKO_EXTRACT_MAX_ATTEMPTS` it is `failed`. Logger: `memory.pipeline.runs`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Max, Q
from django.utils import timezone

from ekko_site.metrics import EXTRACTIONS
from memory.errors import MemoryServiceError, NotFound
from memory.models import (
    Channel,
    ExtractionRun,
    ExtractionStatus,
    MemoryMessage,
    MemoryNode,
    MemorySummary,
    NodeStatus,
    Role,
)
from memory.pipeline.apply import RunInput, plan_apply
from memory.pipeline.chat_model import LLMError, chat_client, llm_extract
from memory.pipeline.extractors import extract_by_rules
from memory.pipeline.gating import is_trivial
from memory.pipeline.plans import KnownNode, MemoryExtraction, SourceMessage
from memory.pipeline.summary_chain import SummaryWork, summary_append_next, summary_next
from memory.pipeline.triggers import ACTIVE_STATES, completed_turns_end, enqueue_run, open_run_if_due
from memory.rules.errors import SchemaError
from memory.selectors import tenant_kinds
from memory.visibility import Viewer, visible_nodes_q
from memory.webhooks.services import extraction_completed_record
from tenants.context import all_tenants_context, tenant_context
from tenants.models import Tenant, Workspace

__all__ = [
    "extraction_get",
    "extraction_retry_due",
    "extraction_run",
    "retry_delay",
]

logger = logging.getLogger("memory.pipeline.runs")

MAX_KNOWN_NODES = 200
RETRY_SWEEP_BATCH = 500


def _max_attempts() -> int:
    return int(settings.EKKO_EXTRACT_MAX_ATTEMPTS)


def _stale_after() -> timedelta:
    return timedelta(seconds=int(settings.EKKO_EXTRACT_STALE_SECONDS))


def retry_delay(attempts: int) -> timedelta:
    """Return the wait before retry number `attempts` (30 s, 60 s, 120 s, … capped)."""
    base = int(settings.EKKO_EXTRACT_RETRY_BASE_SECONDS)
    cap = int(settings.EKKO_EXTRACT_RETRY_MAX_SECONDS)
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


# --------------------------------------------------------------------------- one run


@dataclass
class _Work:
    """What a claimed run read and decided before it writes anything."""

    source: RunInput
    plan: MemoryExtraction
    extractor: str
    summary: SummaryWork | None = None
    warnings: list[str] = field(default_factory=list)


def _parse_run_id(run_id: Any) -> UUID:
    try:
        return UUID(str(run_id))
    except ValueError as exc:
        raise NotFound("No extraction task with this id.") from exc


def _claim(tenant: Tenant, run_pk: UUID, now: datetime) -> tuple[bool, ExtractionRun]:
    with tenant_context(tenant):
        run = ExtractionRun.objects.select_for_update().filter(tenant=tenant, pk=run_pk).first()
        if run is None:
            raise NotFound("No extraction task with this id.")
        skip = None
        if run.status in (ExtractionStatus.DONE, ExtractionStatus.FAILED):
            skip = f"already {run.status}"
        elif run.status == ExtractionStatus.RUNNING and run.updated_at > now - _stale_after():
            skip = f"already running since {run.updated_at.isoformat()}"
        elif run.status == ExtractionStatus.RETRYING and run.next_retry_at and run.next_retry_at > now:
            skip = f"retrying, not due before {run.next_retry_at.isoformat()}"
        if skip:
            logger.info("Extraction run %s skipped: %s.", run.pk, skip)
            return False, run
        if run.attempts >= _max_attempts():
            run.status, run.next_retry_at = ExtractionStatus.FAILED, None
            run.error = run.error or f"gave up after {run.attempts} attempts (the worker was lost mid-run)"
            run.save()
            logger.error("Extraction run %s failed: %s.", run.pk, run.error)
            return False, run
        if run.up_to_message_pk is None:
            run.up_to_message_pk = max(_input_end(tenant, run), run.after_message_pk)
        run.status, run.next_retry_at = ExtractionStatus.RUNNING, None
        run.attempts += 1
        run.save()
        return True, run


def _input_end(tenant: Tenant, run: ExtractionRun) -> int:
    """Return the last message a run reads: all of them on request, else the end of the completed turns."""
    if run.trigger == "api":
        last = MemoryMessage.objects.filter(
            tenant=tenant, workspace_id=run.workspace_id, session_id=run.session_id
        ).aggregate(last=Max("pk"))["last"]
        return last or 0
    return completed_turns_end(tenant, run.workspace_id, run.session_id)


def _zone(metadata: Any) -> tzinfo | None:
    name = metadata.get("timeZone") or metadata.get("timezone") if isinstance(metadata, dict) else None
    if isinstance(name, str) and name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return None
    return None


def _known_nodes(viewer: Viewer) -> list[KnownNode]:
    rows = (
        MemoryNode.objects.filter(visible_nodes_q(viewer), status=NodeStatus.ACTIVE)
        .order_by("-updated_at")
        .values("pk", "kind", "key", "scope", "revision", "item_key", "value_json", "title")[:MAX_KNOWN_NODES]
    )
    return [
        KnownNode(
            node_id=str(row["pk"]),
            kind=row["kind"],
            key=row["key"],
            scope=row["scope"],
            revision=row["revision"],
            item_key=row["item_key"],
            value_json=row["value_json"],
            title=row["title"],
        )
        for row in rows
    ]


def _read_input(tenant: Tenant, run: ExtractionRun) -> RunInput:
    workspace = Workspace.objects.get(tenant=tenant, pk=run.workspace_id)
    rows = list(
        MemoryMessage.objects.filter(
            tenant=tenant,
            workspace=workspace,
            session_id=run.session_id,
            channel=Channel.MAIN,
            pk__gt=run.after_message_pk,
            pk__lte=run.up_to_message_pk or 0,
        )
        .order_by("pk")
        .values("message_id", "role", "content", "created_at", "user_id", "metadata")
    )
    user_ids = {r["user_id"] for r in rows if r["user_id"] is not None} | (
        {run.user_id} if run.user_id else set()
    )
    users = get_user_model().objects.in_bulk(list(user_ids)) if user_ids else {}
    run_user = users.get(run.user_id) if run.user_id else None
    if run_user is None:
        run_user = next(
            (users[r["user_id"]] for r in reversed(rows) if r["role"] == Role.USER and r["user_id"] in users),
            None,
        )
    return RunInput(
        tenant=tenant,
        workspace=workspace,
        session_id=run.session_id,
        run_user=run_user,
        messages=[
            SourceMessage(
                message_id=r["message_id"],
                role=r["role"],
                content=r["content"],
                created_at=r["created_at"],
                time_zone=_zone(r["metadata"]),
            )
            for r in rows
        ],
        authors={r["message_id"]: r["user_id"] for r in rows},
        roles={r["message_id"]: r["role"] for r in rows},
        users=users,
        kinds=tenant_kinds(tenant=tenant),
    )


def _prepare(tenant: Tenant, run: ExtractionRun, now: datetime) -> _Work:
    """Read the run's messages and known memories and ask the extractor for a plan (no writes)."""
    with tenant_context(tenant):
        source = _read_input(tenant, run)
        latest = (
            MemorySummary.objects.filter(tenant=tenant, workspace=source.workspace, session_id=run.session_id)
            .order_by("-created_at")
            .first()
        )
        known = _known_nodes(source.viewer(source.run_user))
    work = _Work(source=source, plan=MemoryExtraction(), extractor="none")
    readable = [m for m in source.messages if m.role == Role.USER and not is_trivial(m.content)]
    client = chat_client()
    if not readable:
        work.extractor = "none (no user message worth reading)"
    elif client is not None:
        work.plan = llm_extract(
            client,
            messages=source.messages,
            known=known,
            kinds=source.kinds,
            now=now,
            previous_summary=latest.summary if latest else None,
        )
        work.extractor = f"llm:{client.model}"
    else:
        work.plan = extract_by_rules(source.messages, known=known, now=now)
        work.extractor = "rules"
    work.summary = summary_next(tenant, run, latest)
    return work


def _finish(tenant: Tenant, claimed: ExtractionRun, work: _Work) -> ExtractionRun:
    """Apply the plan, append the summary and mark the run done, all in one transaction."""
    with tenant_context(tenant):
        run = ExtractionRun.objects.select_for_update().get(tenant=tenant, pk=claimed.pk)
        if run.status != ExtractionStatus.RUNNING or run.attempts != claimed.attempts:
            logger.warning(
                "Extraction run %s changed hands while it ran (now %s, attempt %s); its result was dropped.",
                run.pk,
                run.status,
                run.attempts,
            )
            return run
        items = plan_apply(work.source, work.plan.nodes)
        summary, warnings = summary_append_next(
            viewer=work.source.viewer(work.source.run_user), run=run, summary=work.summary
        )
        counts = {
            outcome: sum(1 for i in items if i["outcome"] == outcome)
            for outcome in ("applied", "noop", "skipped", "ignored")
        }
        run.results = {
            "extractor": work.extractor,
            "messageCount": len(work.source.messages),
            "counts": counts,
            "items": items,
            "summaryPatch": work.plan.summary_patch,
            "summary": summary,
            "warnings": work.warnings + warnings,
        }
        run.status, run.error, run.next_retry_at = ExtractionStatus.DONE, "", None
        run.save()
        extraction_completed_record(tenant=tenant, run=run)
    EXTRACTIONS.labels(outcome=run.status).inc()
    for entry in items:
        if entry["outcome"] == "skipped":
            logger.info(
                "Extraction run %s: item %s (%s %s) skipped: %s",
                run.pk,
                entry["index"],
                entry["operation"],
                entry.get("kind"),
                entry.get("detail"),
            )
    return run


def _fail(tenant: Tenant, claimed: ExtractionRun, error: Exception) -> ExtractionRun:
    with tenant_context(tenant):
        run = ExtractionRun.objects.select_for_update().get(tenant=tenant, pk=claimed.pk)
        if run.status != ExtractionStatus.RUNNING or run.attempts != claimed.attempts:
            return run
        run.error = f"{type(error).__name__}: {error}"[:2000]
        if run.attempts >= _max_attempts():
            run.status, run.next_retry_at = ExtractionStatus.FAILED, None
            logger.error(
                "Extraction run %s (session %r) failed for good after %d attempts: %s",
                run.pk,
                run.session_id,
                run.attempts,
                run.error,
            )
        else:
            run.status = ExtractionStatus.RETRYING
            run.next_retry_at = timezone.now() + retry_delay(run.attempts)
            logger.warning(
                "Extraction run %s (session %r) attempt %d failed: %s; retrying at %s.",
                run.pk,
                run.session_id,
                run.attempts,
                run.error,
                run.next_retry_at.isoformat(),
            )
        run.save()
    EXTRACTIONS.labels(outcome=run.status).inc()
    return run


def extraction_run(*, tenant_id: int, run_id: str | UUID) -> ExtractionRun:
    """Run one extraction (the Celery task's body); failures become `retrying`/`failed`, never exceptions.

    A run that is done, failed, running elsewhere or not yet due is left alone and returned as is.
    """
    tenant = Tenant.objects.get(pk=tenant_id)
    now = timezone.now()
    claimed, run = _claim(tenant, _parse_run_id(run_id), now)
    if not claimed:
        return run
    started = time.monotonic()
    try:
        work = _prepare(tenant, run, now)
        run = _finish(tenant, run, work)
    except Exception as error:
        if not isinstance(error, LLMError | MemoryServiceError | SchemaError):
            logger.exception("Extraction run %s crashed.", run.pk)
        try:
            return _fail(tenant, run, error)
        except Exception:
            logger.exception(
                "Extraction run %s: could not record the failure; the retry sweep will pick "
                "the run up once it is stale.",
                run.pk,
            )
            return run
    if run.status == ExtractionStatus.DONE and run.results:
        counts = run.results["counts"]
        logger.info(
            "Extraction run %s (session %r) done in %.0f ms by %s: %d messages, %d applied, %d no-op, "
            "%d skipped, %d ignored%s.",
            run.pk,
            run.session_id,
            (time.monotonic() - started) * 1000,
            run.results["extractor"],
            run.results["messageCount"],
            counts["applied"],
            counts["noop"],
            counts["skipped"],
            counts["ignored"],
            f", summary {run.results['summary']['id']}" if run.results.get("summary") else "",
        )
        try:
            with tenant_context(tenant):
                open_run_if_due(tenant, run.workspace_id, run.session_id)  # messages that arrived meanwhile
        except Exception:
            logger.exception(
                "Extraction run %s: the follow-up check failed; the next message retries it.", run.pk
            )
    return run


# --------------------------------------------------------------------------- retries and reads


def _requeue(tenant_id: int, run_pk: UUID, now: datetime) -> bool:
    stale = now - _stale_after()
    with tenant_context(tenant_id):
        run = ExtractionRun.objects.select_for_update().filter(tenant=tenant_id, pk=run_pk).first()
        if run is None:
            return False
        due = (
            run.status == ExtractionStatus.RETRYING
            and (run.next_retry_at is None or run.next_retry_at <= now)
        ) or (run.status in ACTIVE_STATES and run.updated_at <= stale)
        if not due:
            return False
        if (
            run.status == ExtractionStatus.RETRYING
            and ExtractionRun.objects.filter(
                tenant=tenant_id,
                workspace_id=run.workspace_id,
                session_id=run.session_id,
                status__in=ACTIVE_STATES,
            )
            .exclude(pk=run.pk)
            .exists()
        ):
            return False  # one run per session at a time; the next sweep tries again
        previous = run.status
        run.status, run.next_retry_at = ExtractionStatus.QUEUED, None
        run.save()
        enqueue_run(tenant_id, run.pk)
        logger.info(
            "Extraction run %s re-queued (was %s, %d attempts so far).", run.pk, previous, run.attempts
        )
        return True


def extraction_retry_due(*, now: datetime | None = None) -> int:
    """Queue again every run whose retry is due, or that sat queued or running past the stale limit.

    Called by Celery beat every minute. Returns how many runs were queued.
    """
    now = now or timezone.now()
    stale = now - _stale_after()
    # Listed in docs/tenancy.md: a periodic sweep finds due runs of every tenant, then handles each
    # inside that tenant's own context.
    with all_tenants_context():
        due = list(
            ExtractionRun.all_tenants.filter(
                Q(status=ExtractionStatus.RETRYING, next_retry_at__lte=now)
                | Q(status__in=ACTIVE_STATES, updated_at__lte=stale)
            )
            .order_by("updated_at")
            .values_list("tenant_id", "pk")[:RETRY_SWEEP_BATCH]
        )
    queued = 0
    for tenant_id, run_pk in due:
        try:
            queued += _requeue(tenant_id, run_pk, now)
        except Exception:
            logger.exception("Could not re-queue extraction run %s.", run_pk)
    if due:
        logger.info("Extraction retry sweep: %d of %d due runs queued.", queued, len(due))
    return queued


def extraction_get(*, viewer: Viewer, run_id: str | UUID) -> ExtractionRun:
    """Return the run `viewer` may see; others' runs are 404 like missing ones."""
    run_pk = _parse_run_id(run_id)
    with tenant_context(viewer.tenant):
        run = ExtractionRun.objects.filter(tenant=viewer.tenant, pk=run_pk).first()
    if run is None or viewer.pinned_workspace_id not in (None, run.workspace_id):
        raise NotFound("No extraction task with this id.")
    if (
        viewer.restrict_to_person
        and run.workspace_id not in viewer.member_workspace_ids
        and (viewer.user is None or run.user_id != viewer.user.pk)
    ):
        raise NotFound("No extraction task with this id.")
    return run
