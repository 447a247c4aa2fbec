"""Background extraction: when to run, one run's lifecycle, applying its plan, retries and the summary chain.

A run (`ExtractionRun`, visible at `GET extract/{taskId}`) reads a session's main-channel messages
in `(after_message_pk, up_to_message_pk]`, asks an extractor for a `MemoryExtraction` plan (the
chat model when `EKKO_LLM_BASE_URL` is set, the rules otherwise) and applies it item by item
through `memory.services.nodes.node_write_batch` as the system actor `system:extractor`, so the same
rules and the same audit apply as for the API. An item that breaks a rule (sensitive content, a
bad kind, a stale target) is skipped with its reason; the others still apply. Items that restate
what is already remembered are no-ops, and the whole apply commits with the run's `done` state in
one transaction, so a re-run after a crash never duplicates a memory. After the apply, a summary
is appended to the session's chain once enough messages have passed since the last one.

Runs start when a session crosses a threshold (`extraction_maybe_request`: N new messages, a token
budget, or an explicit statement by the user) or on request (`extraction_request`, `POST extract`);
a session has at most one queued or running run. A failure never reaches the caller: the run goes
to `retrying` with exponential backoff and `extraction_retry_due` (Celery beat, every minute)
queues it again; after `EKKO_EXTRACT_MAX_ATTEMPTS` it is `failed`. Logger: `memory.pipeline.runs`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from memory.errors import Forbidden, MemoryServiceError, NotFound
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
from memory.pipeline.chat_model import LLMError, chat_client, llm_extract
from memory.pipeline.extractors import (
    KnownNode,
    MemoryExtraction,
    PlanItem,
    SourceMessage,
    extract_by_rules,
    has_explicit_statement,
    is_trivial,
)
from memory.pipeline.summaries import SummaryDraft, redact, summarize
from memory.rules.schema import (
    KindSpec,
    SchemaError,
    apply_confidence_contract,
    canonical_key,
    normalize_value,
    resolve_kind,
)
from memory.selectors import parse_node_id, tenant_kinds
from memory.services.nodes import node_write_batch, summary_append
from memory.visibility import Viewer, accessible_nodes_q, visible_nodes_q
from tenants.context import all_tenants_context, tenant_context
from tenants.models import Scope, Tenant, Workspace

__all__ = [
    "SYSTEM_ACTOR",
    "extraction_get",
    "extraction_maybe_request",
    "extraction_request",
    "extraction_retry_due",
    "extraction_run",
]

logger = logging.getLogger("memory.pipeline.runs")

SYSTEM_ACTOR = "system:extractor"
SYSTEM_WRITE_SCOPES = frozenset({Scope.SESSION.value, Scope.WORKSPACE.value, Scope.USER.value})
ACTIVE_STATES = (ExtractionStatus.QUEUED, ExtractionStatus.RUNNING)
MAX_KNOWN_NODES = 200
MAX_SUMMARY_INPUT = 400
RETRY_SWEEP_BATCH = 500
# pg_advisory_xact_lock's first key: the class of lock ("extraction of one session").
_SESSION_LOCK_CLASS = 7301


def _every_messages() -> int:
    return int(settings.EKKO_EXTRACT_EVERY_MESSAGES)


def _token_threshold() -> int:
    return int(settings.EKKO_EXTRACT_TOKEN_THRESHOLD)


def _max_attempts() -> int:
    return int(settings.EKKO_EXTRACT_MAX_ATTEMPTS)


def _summary_every() -> int:
    return int(settings.EKKO_SUMMARY_EVERY_MESSAGES)


def _trigger_delay() -> int:
    return int(settings.EKKO_EXTRACT_DELAY_SECONDS)


def _stale_after() -> timedelta:
    return timedelta(seconds=int(settings.EKKO_EXTRACT_STALE_SECONDS))


def retry_delay(attempts: int) -> timedelta:
    """Return the wait before retry number `attempts` (30 s, 60 s, 120 s, … capped)."""
    base = int(settings.EKKO_EXTRACT_RETRY_BASE_SECONDS)
    cap = int(settings.EKKO_EXTRACT_RETRY_MAX_SECONDS)
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


# --------------------------------------------------------------------------- queueing


def _lock_session(tenant_id: int, workspace_id: int, session_id: str) -> None:
    # Two captures of the same session at once must not both open a run.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            [_SESSION_LOCK_CLASS, f"{tenant_id}:{workspace_id}:{session_id}"],
        )


def _enqueue_on_commit(tenant_id: int, run_id: UUID | str, *, countdown: int = 0) -> None:
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
    _enqueue_on_commit(tenant_id, run.pk, countdown=0 if trigger == "api" else _trigger_delay())
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
    """Queue an extraction of the session's new messages, or return the run already queued or running."""
    if viewer.read_only:
        raise Forbidden("This API key is read-only; extraction writes memories.")
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
    if stats["count"] >= _every_messages():
        return "messages"
    if (stats["tokens"] or 0) >= _token_threshold():
        return "tokens"
    user_texts = new_messages.filter(role=Role.USER).values_list("content", flat=True)
    if any(has_explicit_statement(text) for text in user_texts):
        return "explicit"
    return None


def _maybe_create(tenant: Tenant | int, workspace_id: int, session_id: str) -> ExtractionRun | None:
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
            return _maybe_create(tenant_id, workspace_id, session_id)
    except Exception:
        logger.exception(
            "Extraction trigger check failed for session %r (tenant %s); the next capture or "
            "POST extract tries again.",
            session_id,
            tenant_id,
        )
        return None


# --------------------------------------------------------------------------- one run


@dataclass
class _Work:
    """What a claimed run read and decided before it writes anything."""

    tenant: Tenant
    workspace: Workspace
    run_user: AbstractBaseUser | None
    messages: list[SourceMessage]
    authors: dict[str, int | None]
    roles: dict[str, str]
    users: dict[int, AbstractBaseUser]
    kinds: dict[str, KindSpec]
    plan: MemoryExtraction
    extractor: str
    summary: _SummaryWork | None = None
    warnings: list[str] = field(default_factory=list)

    def viewer(self, session_id: str, user: AbstractBaseUser | None) -> Viewer:
        return Viewer(
            tenant=self.tenant,
            workspace=self.workspace,
            session_id=session_id,
            user=user,
            write_scopes=SYSTEM_WRITE_SCOPES,
            read_only=False,
            actor=SYSTEM_ACTOR,
        )


@dataclass
class _SummaryWork:
    draft: SummaryDraft
    source: str
    from_message_id: str
    to_message_id: str
    parent_id: UUID | None


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
            last = MemoryMessage.objects.filter(
                tenant=tenant, workspace_id=run.workspace_id, session_id=run.session_id
            ).aggregate(last=Max("pk"))["last"]
            run.up_to_message_pk = max(last or 0, run.after_message_pk)
        run.status, run.next_retry_at = ExtractionStatus.RUNNING, None
        run.attempts += 1
        run.save()
        return True, run


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


def _draft_from(summary: MemorySummary) -> SummaryDraft:
    return SummaryDraft(
        summary=summary.summary,
        current_goal=summary.current_goal,
        constraints=list(summary.constraints),
        preferences=list(summary.preferences),
        decisions=list(summary.decisions),
        completed_work=list(summary.completed_work),
        pending_work=list(summary.pending_work),
        known_issues=list(summary.known_issues),
    )


@dataclass
class _SummaryInput:
    messages: list[SourceMessage]
    from_message_id: str
    previous: MemorySummary | None


def _summary_input(run: ExtractionRun, latest: MemorySummary | None) -> _SummaryInput | None:
    """Return the messages for the chain's next summary, once EKKO_SUMMARY_EVERY_MESSAGES have passed."""
    since_pk = 0
    if latest is not None:
        since_pk = (
            MemoryMessage.objects.filter(
                tenant=run.tenant_id, workspace_id=run.workspace_id, message_id=latest.to_message_id
            )
            .values_list("pk", flat=True)
            .first()
            or 0
        )
    pending = MemoryMessage.objects.filter(
        tenant=run.tenant_id,
        workspace_id=run.workspace_id,
        session_id=run.session_id,
        channel=Channel.MAIN,
        pk__gt=since_pk,
        pk__lte=run.up_to_message_pk or 0,
    )
    if pending.count() < _summary_every():
        return None
    first_id = pending.order_by("pk").values_list("message_id", flat=True).first()
    rows = list(
        pending.order_by("-pk").values("message_id", "role", "content", "created_at")[:MAX_SUMMARY_INPUT]
    )
    rows.reverse()
    messages = [
        SourceMessage(
            message_id=r["message_id"], role=r["role"], content=r["content"], created_at=r["created_at"]
        )
        for r in rows
    ]
    return _SummaryInput(
        messages=messages, from_message_id=first_id or rows[0]["message_id"], previous=latest
    )


def _summary_work(summary_input: _SummaryInput | None) -> _SummaryWork | None:
    if summary_input is None:
        return None
    latest = summary_input.previous
    draft, source = summarize(summary_input.messages, previous=_draft_from(latest) if latest else None)
    return _SummaryWork(
        draft=draft,
        source=source,
        from_message_id=summary_input.from_message_id,
        to_message_id=summary_input.messages[-1].message_id,
        parent_id=latest.pk if latest else None,
    )


def _prepare(tenant: Tenant, run: ExtractionRun, now: datetime) -> _Work:
    """Read the run's messages and known memories and ask the extractor for a plan (no writes)."""
    with tenant_context(tenant):
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
                (
                    users[r["user_id"]]
                    for r in reversed(rows)
                    if r["role"] == Role.USER and r["user_id"] in users
                ),
                None,
            )
        latest = (
            MemorySummary.objects.filter(tenant=tenant, workspace=workspace, session_id=run.session_id)
            .order_by("-created_at")
            .first()
        )
        kinds = tenant_kinds(tenant=tenant)
        work = _Work(
            tenant=tenant,
            workspace=workspace,
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
            kinds=kinds,
            plan=MemoryExtraction(),
            extractor="none",
        )
        known = _known_nodes(work.viewer(run.session_id, run_user))
    readable = [m for m in work.messages if m.role == Role.USER and not is_trivial(m.content)]
    client = chat_client()
    if not readable:
        work.extractor = "none (no user message worth reading)"
    elif client is not None:
        work.plan = llm_extract(
            client,
            messages=work.messages,
            known=known,
            kinds=kinds,
            now=now,
            previous_summary=latest.summary if latest else None,
        )
        work.extractor = f"llm:{client.model}"
    else:
        work.plan = extract_by_rules(work.messages, known=known, now=now)
        work.extractor = "rules"
    with tenant_context(tenant):
        summary_input = _summary_input(run, latest)
    work.summary = _summary_work(summary_input)
    return work


class _Applier:
    """Apply plan items one by one, each in its own savepoint, recording what happened to each."""

    def __init__(self, work: _Work, run: ExtractionRun) -> None:
        self.work = work
        self.run = run

    def _author(self, ids: list[str]) -> AbstractBaseUser | None:
        for message_id in ids:
            user_id = self.work.authors.get(message_id)
            if self.work.roles.get(message_id) == Role.USER and user_id in self.work.users:
                return self.work.users[user_id]
        return self.work.run_user

    def _explicit(self, item: PlanItem, ids: list[str]) -> bool:
        """The user stated it only if the item quotes a cited user message verbatim (5+ characters)."""
        if not item.explicit_user_intent:
            return False
        texts = [m.content for m in self.work.messages if m.message_id in ids and m.role == Role.USER]
        _, downgraded = apply_confidence_contract(0.9, item.node.get("source_quote"), texts)
        return not downgraded

    def apply(self, index: int, item: PlanItem) -> dict[str, Any]:
        ids = [i for i in item.source_message_ids if i in self.work.authors]
        # Reasons and details may repeat what a model wrote: results never keep a secret.
        base: dict[str, Any] = {
            "index": index,
            "operation": item.operation,
            "reason": redact(item.reason),
            "sourceMessageIds": ids,
        }
        if item.error:
            return {**base, "outcome": "skipped", "code": "invalid", "detail": redact(item.error)}
        if item.operation == "ignore":
            return {**base, "outcome": "ignored"}
        try:
            return self._write(base, item, ids)
        except SchemaError as error:
            return {**base, "outcome": "skipped", "code": error.code, "detail": redact(error.detail)}
        except MemoryServiceError as error:
            return {**base, "outcome": "skipped", "code": error.code, "detail": redact(error.detail)}

    def _write(self, base: dict[str, Any], item: PlanItem, ids: list[str]) -> dict[str, Any]:
        viewer = self.work.viewer(self.run.session_id, self._author(ids))
        explicit = self._explicit(item, ids)
        notes = (
            []
            if explicit or not item.explicit_user_intent
            else ["explicit intent not backed by a verbatim quote of the user; treated as inferred"]
        )
        node = dict(item.node)
        operation = item.operation
        target = None
        if item.target_id:
            target = MemoryNode.objects.filter(
                accessible_nodes_q(viewer), pk=parse_node_id(item.target_id)
            ).first()
            if target is None:
                raise NotFound("The plan's targetId names no memory this session can reach.")
        kind_name = node.get("kind") or (target.kind if target is not None else None)
        base["kind"] = kind_name
        if operation in ("create", "supersede") and kind_name:
            spec = resolve_kind(kind_name, self.work.kinds)
            item_key = node.get("item_key") or (target.item_key if target is not None else None)
            key = canonical_key(spec, item_key)
            base["key"] = key
            scope = node.get("scope") or (target.scope if target is not None else spec.default_scope)
            if scope == Scope.USER and viewer.user is None:
                scope = node["scope"] = Scope.SESSION
                notes.append("no user is known for these messages; kept in session scope")
            needs_intent = scope == Scope.USER or (
                scope != Scope.SESSION and spec.requires_explicit_user_intent
            )
            effective = Scope.SESSION if needs_intent and not explicit else scope
            same = MemoryNode.objects.filter(
                visible_nodes_q(viewer), status=NodeStatus.ACTIVE, key=key, scope=effective
            ).first()
            if same is not None and _same_memory(spec, node, same):
                return {
                    **base,
                    "outcome": "noop",
                    "action": "noop",
                    "nodeId": str(same.pk),
                    "revision": same.revision,
                    "scope": same.scope,
                    "detail": "already remembered",
                }
            if operation == "supersede" and target is None:
                if same is None:
                    operation = "create"
                else:
                    target = same
        if operation == "update" and target is not None and _unchanged(target, node, self.work.kinds):
            return {
                **base,
                "outcome": "noop",
                "action": "noop",
                "nodeId": str(target.pk),
                "revision": target.revision,
                "detail": "already up to date",
            }
        if target is not None and target.status != NodeStatus.ACTIVE:
            if operation == "expire" and target.status == NodeStatus.EXPIRED:
                return {
                    **base,
                    "outcome": "noop",
                    "action": "noop",
                    "nodeId": str(target.pk),
                    "revision": target.revision,
                    "detail": "already expired",
                }
            return {
                **base,
                "outcome": "skipped",
                "code": "invalid",
                "nodeId": str(target.pk),
                "detail": f"the target is {target.status} now (applied before, or changed since)",
            }
        operation_data = {
            "operation": operation,
            "target_id": str(target.pk) if target is not None else None,
            "expected_revision": target.revision if target is not None else None,
            "node": {**node, "value_json_given": "value_json" in node},
            "reason": item.reason,
        }
        with transaction.atomic():
            [result] = node_write_batch(
                viewer=viewer,
                operations=[operation_data],
                explicit_user_intent=explicit,
                source_message_ids=ids,
            )
        written = result.node
        return {
            **base,
            "outcome": "noop" if result.action == "noop" else "applied",
            "action": result.action,
            "nodeId": str(written.pk),
            "revision": written.revision,
            "key": written.key,
            "scope": written.scope,
            "title": written.title,
            "appliedConfidence": result.applied_confidence,
            "notes": notes + result.notes,
        }


def _same_memory(spec: KindSpec, node: dict[str, Any], existing: MemoryNode) -> bool:
    if "value_json" in node and node["value_json"] is not None:
        return normalize_value(spec, node["value_json"]) == existing.value_json
    return bool(node.get("title")) and node.get("title") == existing.title


def _unchanged(target: MemoryNode, node: dict[str, Any], kinds: dict[str, KindSpec]) -> bool:
    spec = resolve_kind(target.kind, kinds)
    for name, value in node.items():
        if name in ("source_quote", "kind", "confidence"):
            continue
        if name == "value_json":
            value = normalize_value(spec, value)
        if not hasattr(target, name) or getattr(target, name) != value:
            return False
    return True


def _append_summary(work: _Work, run: ExtractionRun) -> tuple[dict[str, Any] | None, list[str]]:
    if work.summary is None:
        return None, []
    summary = work.summary
    data = {
        **summary.draft.as_service_data(),
        "from_message_id": summary.from_message_id,
        "to_message_id": summary.to_message_id,
        "parent_summary_id": summary.parent_id,
    }
    try:
        with transaction.atomic():
            appended = summary_append(
                viewer=work.viewer(run.session_id, work.run_user), session_id=run.session_id, data=data
            )
    except MemoryServiceError as error:
        logger.warning("Extraction run %s: summary not appended: %s", run.pk, error.detail)
        return None, [f"summary not appended: {error.detail}"]
    return {
        "id": str(appended.pk),
        "source": summary.source,
        "parentSummaryId": str(appended.parent_summary_id) if appended.parent_summary_id else None,
        "fromMessageId": appended.from_message_id,
        "toMessageId": appended.to_message_id,
    }, []


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
        applier = _Applier(work, run)
        items = [applier.apply(index, item) for index, item in enumerate(work.plan.nodes)]
        summary, warnings = _append_summary(work, run)
        counts = {
            outcome: sum(1 for i in items if i["outcome"] == outcome)
            for outcome in ("applied", "noop", "skipped", "ignored")
        }
        run.results = {
            "extractor": work.extractor,
            "messageCount": len(work.messages),
            "counts": counts,
            "items": items,
            "summaryPatch": work.plan.summary_patch,
            "summary": summary,
            "warnings": work.warnings + warnings,
        }
        run.status, run.error, run.next_retry_at = ExtractionStatus.DONE, "", None
        run.save()
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
                _maybe_create(tenant, run.workspace_id, run.session_id)  # messages that arrived meanwhile
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
        _enqueue_on_commit(tenant_id, run.pk)
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
