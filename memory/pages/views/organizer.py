"""The Organizer page: the runs a person may see, "Run now", a run's items (apply or dismiss queued ones),
and, for tenant admins, the schedule (off, daily, weekly)."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memory.errors import MemoryServiceError, NotFound
from memory.models import OrganizeMode
from memory.organizer.runs import organize_get, organize_item_decide, organize_request, organize_runs_list
from memory.pages import labels
from memory.pages.access import PageAccess, tenant_page
from memory.pages.views.common import refuse
from tenants.models import OrganizeSchedule
from tenants.services import tenant_organize_schedule_set


@require_http_methods(["GET", "POST"])
@tenant_page
def organizer_view(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if request.method == "POST":
        if request.POST.get("schedule") is not None:
            if not access.is_admin or request.POST["schedule"] not in OrganizeSchedule.values:
                return refuse(request, access)
            tenant_organize_schedule_set(
                tenant=access.tenant, schedule=request.POST["schedule"], changed_by=request.user
            )
            messages.success(request, _("The organizer schedule is saved."))
            return redirect("organizer")
        scope = request.POST.get("scope", "user")
        mode = request.POST.get("mode", OrganizeMode.REVIEW)
        if scope not in ("user", "workspace") or mode not in OrganizeMode.values:
            return refuse(request, access, status=400)
        try:
            run = organize_request(viewer=access.viewer, scope=scope, mode=mode)
        except MemoryServiceError as exc:
            messages.error(request, exc.detail)
            return redirect("organizer")
        messages.success(request, _("The organizer is running; this page shows its result."))
        return redirect("organizer-run", run_id=run.pk)
    runs = organize_runs_list(viewer=access.viewer)
    context = {
        "access": access,
        "runs": runs,
        "states": labels.ORGANIZE_STATES,
        "schedules": labels.ORGANIZE_SCHEDULES,
        "schedule": access.tenant.organize_schedule,
    }
    return render(request, "pages/organizer.html", context)


@require_GET
@tenant_page
def organizer_run(request: HttpRequest, access: PageAccess, run_id: UUID) -> HttpResponse:
    try:
        run = organize_get(viewer=access.viewer, run_id=run_id)
    except NotFound:
        return refuse(request, access, status=404)
    items = [
        {
            "item": item,
            "action": labels.ORGANIZE_ACTIONS.get(item.action, item.action),
            "risk": labels.ORGANIZE_RISKS.get(item.risk),
            "decision": labels.ORGANIZE_DECISIONS.get(item.decision, item.decision),
            "reasons": ", ".join(str(labels.ORGANIZE_RISK_REASONS.get(r, r)) for r in item.risk_reasons),
        }
        for item in run.item_list
    ]
    context = {"access": access, "run": run, "items": items,
               "state": labels.ORGANIZE_STATES.get(run.state, run.state)}
    return render(request, "pages/organizer_run.html", context)


@require_POST
@tenant_page
def organizer_item(request: HttpRequest, access: PageAccess, run_id: UUID, item_id: UUID) -> HttpResponse:
    decision = request.POST.get("decision", "")
    try:
        item = organize_item_decide(viewer=access.viewer, run_id=run_id, item_id=item_id, decision=decision)
    except NotFound:
        return refuse(request, access, status=404)
    except MemoryServiceError as exc:
        messages.error(request, str(exc))
        return redirect("organizer-run", run_id=run_id)
    if item.decision == "rejected":
        messages.error(request, _("The change could not be applied: %(reason)s") % {"reason": item.reason})
    else:
        messages.success(request, _("Applied.") if item.decision == "applied" else _("Dismissed."))
    return redirect("organizer-run", run_id=run_id)
