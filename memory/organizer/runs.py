"""One organizer run's lifecycle: request, scan → cluster → plan → gate → apply, decisions, the due sweep.

`organize_request` opens a queued run for one scope owner (the caller's user scope or a workspace scope,
under the write rules of memory/write) and queues `memory.organize_run`; `organize_run` (the task) drives
it, updating `phase` as it goes and finishing with the counts, the compression ratio and the tokens the
model used. Each cluster's item is gated (memory.organizer.gate) and, when the matrix says so, applied in
its own transaction (memory.services.organize); a refused cluster is recorded as `rejected` with its
reason and counted in `rejections`, the others apply. Queued items wait for a person
(`organize_item_decide`). `organize_due` (beat `organize-due`) opens scheduled runs for tenants whose
schedule is daily or weekly and whose last scheduled run is older than that.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from memory.errors import Conflict, Invalid, MemoryServiceError, NotFound
from memory.models import (
    MemoryNode,
    NodeStatus,
    OrganizeDecision,
    OrganizeItem,
    OrganizeMode,
    OrganizePhase,
    OrganizeRun,
    OrganizeState,
    OrganizeTrigger,
    ReviewState,
)
from memory.organizer.cluster import Card, cluster_cards
from memory.organizer.gate import decide, risk_of
from memory.organizer.plan import PlannedItem, plan_by_model, plan_by_rules
from memory.services.guards import (
    require_acting_for,
    require_workspace_reachable,
    require_write_scope,
    require_writer,
)
from memory.services.organize import OrganizeRefused, organize_item_apply
from memory.services.quota import JOURNAL_KIND, ladder_level, scope_usage
from memory.visibility import Viewer, owner_ref
from tenants.context import tenant_context
from tenants.models import OrganizeSchedule, Scope, Tenant, Workspace

__all__ = [
    "organize_due",
    "organize_get",
    "organize_item_decide",
    "organize_request",
    "organize_run",
    "organize_runs_list",
]

logger = logging.getLogger("memory.organizer.runs")
ORGANIZED_SCOPES = (Scope.USER, Scope.WORKSPACE)
SCHEDULE_EVERY = {OrganizeSchedule.DAILY: timedelta(days=1), OrganizeSchedule.WEEKLY: timedelta(days=7)}


def _enqueue(tenant_id: int, run_id: UUID) -> None:
    def send() -> None:
        from memory.pipeline import tasks

        try:
            tasks.organize_run.delay(tenant_id, str(run_id))
        except Exception:
            logger.warning("Could not queue organizer run %s (broker unavailable?).", run_id, exc_info=True)

    transaction.on_commit(send)


def organize_request(
    *,
    viewer: Viewer,
    scope: str = Scope.USER,
    trigger: str = OrganizeTrigger.MANUAL,
    mode: str = OrganizeMode.REVIEW,
) -> OrganizeRun:
    """Open a queued run over the viewer's user scope or workspace scope, under memory/write's rules."""
    if scope not in ORGANIZED_SCOPES:
        raise Invalid(
            "The organizer works on a user or workspace scope.", errors={"scope": ["user or workspace"]}
        )
    require_writer(viewer)
    require_write_scope(viewer, scope, field="scope")
    if scope == Scope.USER:
        if viewer.user is None:
            raise Invalid(
                "Name the member whose user scope to organize (userId).", errors={"userId": ["required"]}
            )
        require_acting_for(viewer, viewer.user.pk)
    user = viewer.user if scope == Scope.USER else None
    ref = owner_ref(
        scope=scope, workspace_id=viewer.workspace.pk, session_id=None, user_id=user.pk if user else None
    )
    with tenant_context(viewer.tenant):
        run = OrganizeRun.objects.create(
            tenant=viewer.tenant,
            workspace=viewer.workspace,
            user=user,
            scope=scope,
            owner_ref=ref,
            trigger=trigger,
            mode=mode,
            requested_by=viewer.actor,
            created_at=timezone.now(),
        )
        _enqueue(viewer.tenant.pk, run.pk)
    return run


def _parse(raw: Any, what: str) -> UUID:
    try:
        return UUID(str(raw))
    except ValueError as exc:
        raise NotFound(f"No organizer {what} with this id.") from exc


def _may_see(viewer: Viewer, run: OrganizeRun) -> bool:
    try:
        if run.scope == Scope.WORKSPACE or viewer.pinned_workspace_id is not None:
            require_workspace_reachable(viewer, run.workspace_id)
        if run.scope == Scope.USER:
            require_acting_for(viewer, run.user_id)
    except MemoryServiceError:
        return False
    return True


def organize_get(*, viewer: Viewer, run_id: Any) -> OrganizeRun:
    """Return a run the viewer may see, with its items (another tenant's, workspace's or person's → 404)."""
    pk = _parse(run_id, "run")
    with tenant_context(viewer.tenant, savepoint=False):
        run = OrganizeRun.objects.filter(tenant=viewer.tenant, pk=pk).first()
        if run is None or not _may_see(viewer, run):
            raise NotFound("No organizer run with this id.")
        run.item_list = list(
            OrganizeItem.objects.filter(tenant=viewer.tenant, run=run).order_by("created_at", "id")
        )
    return run


def organize_runs_list(*, viewer: Viewer, limit: int = 50) -> list[OrganizeRun]:
    """Return the newest runs the viewer may see (the Organizer page)."""
    with tenant_context(viewer.tenant, savepoint=False):
        runs = OrganizeRun.objects.filter(tenant=viewer.tenant).order_by("-created_at")[: limit * 4]
        return [run for run in runs if _may_see(viewer, run)][:limit]


# --------------------------------------------------------------------------- running


def _run_viewer(run: OrganizeRun) -> Viewer:
    return Viewer(
        tenant=run.tenant,
        workspace=run.workspace,
        user=run.user,
        write_scopes=frozenset({run.scope}),
        read_only=False,
        actor=run.requested_by or "system",
    )


def _owner_cards(run: OrganizeRun) -> list[Card]:
    nodes = (
        MemoryNode.objects.filter(
            tenant=run.tenant, scope=run.scope, owner_ref=run.owner_ref, status=NodeStatus.ACTIVE
        )
        .exclude(kind=JOURNAL_KIND)
        .order_by("created_at")
    )
    return [
        Card(
            id=str(n.pk),
            kind=n.kind,
            key=n.key,
            item_key=n.item_key,
            title=n.title,
            content=n.content,
            value=n.value_json,
            scope=n.scope,
            owner_ref=n.owner_ref,
            confidence=n.confidence,
            reviewed=n.review_state == ReviewState.REVIEWED,
            revision=n.revision,
            updated_at=n.updated_at,
            source_message_ids=list(n.source_message_ids),
            vector=list(n.embedding) if n.embedding is not None else None,
        )
        for n in nodes
    ]


def _count(run: OrganizeRun) -> int:
    return (
        MemoryNode.objects.filter(
            tenant=run.tenant, scope=run.scope, owner_ref=run.owner_ref, status=NodeStatus.ACTIVE
        )
        .exclude(kind=JOURNAL_KIND)
        .count()
    )


def _phase(run: OrganizeRun, phase: str, **fields: Any) -> None:
    run.phase = phase
    for name, value in fields.items():
        setattr(run, name, value)
    run.save(update_fields=["phase", *fields])


def _plan(clusters: list[list[Card]], headroom: int) -> tuple[list[tuple[list[Card], PlannedItem]], int]:
    from memory.pipeline.chat_model import chat_client

    client = chat_client()
    target = f"quota level {ladder_level(headroom)}: merge what is one memory" if headroom <= 100 else ""
    planned, tokens = [], 0
    for cluster in clusters:
        if client is None:
            planned.append((cluster, plan_by_rules(cluster)))
            continue
        item, used = plan_by_model(cluster, client, compression_target=target)
        planned.append((cluster, item))
        tokens += used
    return planned, tokens


def _apply_item(run: OrganizeRun, item: OrganizeItem, viewer: Viewer) -> None:
    try:
        result = organize_item_apply(
            viewer=viewer,
            action=item.action,
            members=item.members,
            target_id=item.target_id,
            proposed=item.proposed,
            # The revisions the plan saw: a card changed since then refuses the item (`stale`).
            revisions=(item.proposed or {}).get("revisions", {}),
            reason=f"organizer run {run.pk}: {item.reason}"[:1000],
        )
    except OrganizeRefused as exc:
        item.decision, item.reason = OrganizeDecision.REJECTED, f"{exc.code}: {exc.detail}"[:1000]
        run.rejections = {**run.rejections, exc.code: run.rejections.get(exc.code, 0) + 1}
        return
    item.decision, item.result_node_id, item.decided_at = OrganizeDecision.APPLIED, result, timezone.now()
    item.decided_by = viewer.actor


def _execute(run: OrganizeRun) -> None:
    viewer = _run_viewer(run)
    usage = scope_usage(run.tenant, [run.owner_ref])[run.owner_ref]
    cards = _owner_cards(run)
    _phase(run, OrganizePhase.CLUSTER, cards_before=len(cards), headroom_at_start=usage.headroom)
    clusters = cluster_cards(cards)
    _phase(run, OrganizePhase.PLAN)
    planned, tokens = _plan(clusters, usage.headroom)
    fallbacks = Counter(f"fallback_{item.fallback}" for _, item in planned if item.fallback)
    _phase(
        run,
        OrganizePhase.GATE,
        tokens_used=tokens,
        planner="llm" if any(i.planner != "rules" for _, i in planned) else "rules",
        rejections=dict(fallbacks),
    )
    now, by_id, items = timezone.now(), {card.id: card for card in cards}, []
    for _cluster, plan in planned:
        if plan.action == "keep":
            continue
        members = [by_id[m] for m in plan.members]
        risk = risk_of(members, confidence=plan.confidence)
        items.append(
            OrganizeItem.objects.create(
                tenant=run.tenant,
                run=run,
                members=plan.members,
                action=plan.action,
                target_id=plan.target_id,
                proposed={**(plan.proposed or {}), "revisions": {m: by_id[m].revision for m in plan.members}},
                planner=plan.planner,
                confidence=plan.confidence,
                risk=risk.level,
                risk_reasons=list(risk.reasons),
                reason=plan.reason,
                created_at=now,
                decision=decide(trigger=run.trigger, mode=run.mode, risk=risk.level),
            )
        )
    _phase(run, OrganizePhase.APPLY)
    for item in items:
        if item.decision == OrganizeDecision.APPLIED:
            _apply_item(run, item, viewer)
            item.save()
    _finish(run)


def _finish(run: OrganizeRun) -> None:
    after = _count(run)
    run.cards_after = after
    run.compression_ratio = round(after / run.cards_before, 4) if run.cards_before else 1.0
    run.state, run.phase, run.finished_at = OrganizeState.DONE, OrganizePhase.DONE, timezone.now()
    run.save(
        update_fields=["cards_after", "compression_ratio", "state", "phase", "finished_at", "rejections"]
    )


def organize_run(*, tenant_id: int, run_id: str) -> str:
    """Run one queued run to its end (the Celery task); a failure marks it failed, with the error."""
    tenant = Tenant.objects.get(pk=tenant_id)
    with tenant_context(tenant):
        run = OrganizeRun.objects.select_for_update().filter(tenant=tenant, pk=_parse(run_id, "run")).first()
        if run is None or run.state != OrganizeState.QUEUED:
            return run.state if run else "missing"
        run.tenant, run.workspace = tenant, Workspace.objects.get(tenant=tenant, pk=run.workspace_id)
        run.state = OrganizeState.RUNNING
        run.save(update_fields=["state"])
    try:
        with tenant_context(tenant):
            _execute(run)
    except Exception as exc:
        logger.exception("Organizer run %s failed.", run.pk)
        with tenant_context(tenant):
            OrganizeRun.objects.filter(tenant=tenant, pk=run.pk).update(
                state=OrganizeState.FAILED, error=str(exc)[:2000], finished_at=timezone.now()
            )
        return OrganizeState.FAILED
    return run.state


def organize_item_decide(*, viewer: Viewer, run_id: Any, item_id: Any, decision: str) -> OrganizeItem:
    """Apply or dismiss one queued item of a run the viewer may see and write (409 when already decided)."""
    if decision not in ("apply", "dismiss"):
        raise Invalid("decision is apply or dismiss.", errors={"decision": ["apply or dismiss"]})
    run = organize_get(viewer=viewer, run_id=run_id)
    require_writer(viewer)
    require_write_scope(viewer, run.scope, field="scope")
    pk = _parse(item_id, "item")
    with tenant_context(viewer.tenant):
        item = OrganizeItem.objects.select_for_update().filter(tenant=viewer.tenant, run=run, pk=pk).first()
        if item is None:
            raise NotFound("No organizer item with this id.")
        if item.decision != OrganizeDecision.QUEUED:
            raise Conflict(f"This item is already {item.decision}.")
        if decision == "dismiss":
            item.decision, item.decided_at, item.decided_by = (
                OrganizeDecision.DISMISSED,
                timezone.now(),
                viewer.actor,
            )
        else:
            _apply_item(run, item, viewer)
        item.save()
        run.cards_after = _count(run)
        run.compression_ratio = round(run.cards_after / run.cards_before, 4) if run.cards_before else 1.0
        run.save(update_fields=["cards_after", "compression_ratio", "rejections"])
    return item


def _owners_of(tenant: Tenant) -> list[tuple[str, str, int, int | None]]:
    rows = (
        MemoryNode.objects.filter(tenant=tenant, status=NodeStatus.ACTIVE, scope__in=ORGANIZED_SCOPES)
        .exclude(kind=JOURNAL_KIND)
        .values_list("scope", "owner_ref", "workspace_id", "user_id")
        .distinct()
    )
    seen: dict[str, tuple[str, str, int, int | None]] = {}
    for scope, ref, workspace_id, user_id in rows:
        seen.setdefault(ref, (scope, ref, workspace_id, user_id if scope == Scope.USER else None))
    return sorted(seen.values())


def organize_due(now: Any = None) -> int:
    """Open a scheduled run per scope owner of each tenant whose schedule is due; return how many."""
    now = now or timezone.now()
    tenants = list(Tenant.objects.filter(organize_schedule__in=list(SCHEDULE_EVERY)))
    opened = 0
    for tenant in tenants:
        with tenant_context(tenant):
            last = (
                OrganizeRun.objects.filter(tenant=tenant, trigger=OrganizeTrigger.SCHEDULED)
                .order_by("-created_at")
                .values_list("created_at", flat=True)
                .first()
            )
            if last is not None and last > now - SCHEDULE_EVERY[tenant.organize_schedule]:
                continue
            for scope, ref, workspace_id, user_id in _owners_of(tenant):
                run = OrganizeRun.objects.create(
                    tenant=tenant,
                    workspace=Workspace.objects.get(tenant=tenant, pk=workspace_id),
                    user_id=user_id,
                    scope=scope,
                    owner_ref=ref,
                    trigger=OrganizeTrigger.SCHEDULED,
                    mode=OrganizeMode.AUTO_LOW,
                    requested_by="system",
                    created_at=now,
                )
                _enqueue(tenant.pk, run.pk)
                opened += 1
    return opened
