"""The workspace page: what the export file holds, the download, and the import (owners and admins)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from memory.access import sqlite_download
from memory.errors import QuotaExceeded
from memory.models import MemoryMessage, MemoryNode, MemorySummary
from memory.pages import forms, labels
from memory.pages.access import PageAccess, tenant_page, wants_fragment
from memory.pages.views.common import changed, refuse
from memory.transfer.import_rules import parse_user_map
from memory.transfer.report import ImportError_, ImportReport
from memory.transfer.sqlite_import import workspace_import_upload

# --------------------------------------------------------------------------- workspace export / import


def _workspace_counts(access: PageAccess) -> dict[str, Any]:
    """Return what the export file of the current workspace holds: one GROUP BY and two counts."""
    tenant, workspace = access.tenant, access.workspace
    by_status = dict(
        MemoryNode.objects.filter(tenant=tenant, workspace=workspace)
        .order_by()
        .values_list("status")
        .annotate(n=Count("pk"))
    )
    return {
        "by_status": [(key, str(label), by_status.get(key, 0)) for key, label in labels.STATUSES.items()],
        "memories": sum(by_status.values()),
        "messages": MemoryMessage.objects.filter(tenant=tenant, workspace=workspace).count(),
        "summaries": MemorySummary.objects.filter(tenant=tenant, workspace=workspace).count(),
    }


def _report_rows(report: ImportReport) -> list[dict[str, Any]]:
    tables = [
        ("nodes", _("Memories")),
        ("messages", _("Messages")),
        ("summaries", _("Summaries")),
        ("audit_events", _("Audit events")),
    ]
    return [
        {
            "label": label,
            "imported": getattr(report.imported, field),
            "updated": getattr(report.updated, field),
            "skipped": getattr(report.skipped, field),
        }
        for field, label in tables
    ]


def _workspace_context(access: PageAccess, **extra: Any) -> dict[str, Any]:
    return {"access": access, "counts": _workspace_counts(access), **extra}


@require_GET
@tenant_page
def workspace_view(request: HttpRequest, access: PageAccess) -> HttpResponse:
    context = _workspace_context(access)
    if wants_fragment(request):
        return render(request, "pages/workspace.html#workspace", context)
    return render(request, "pages/workspace.html", context)


@transaction.non_atomic_requests  # the export reads from its own repeatable-read snapshot
@require_GET
@tenant_page
def workspace_export(request: HttpRequest, access: PageAccess) -> HttpResponse:
    """Download the current workspace as an Ekko local-format file (owners and admins: it holds all)."""
    if not access.can_export:
        return refuse(request, access)
    return sqlite_download(access.viewer)


@require_POST
@tenant_page
def workspace_import(request: HttpRequest, access: PageAccess) -> HttpResponse:
    """Import an uploaded SQLite file into the current workspace (tenant owners and admins only)."""
    if not access.can_import:
        return refuse(request, access)
    fragment = wants_fragment(request)
    template = "pages/workspace.html#workspace" if fragment else "pages/workspace.html"
    form = forms.WorkspaceImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return render(request, template, _workspace_context(access, form=form), status=400)
    upload = form.cleaned_data["file"]
    if upload.size > settings.EKKO_MAX_IMPORT_BYTES:
        form.add_error(
            "file",
            _("The file is larger than the import limit of %(limit)s.")
            % {"limit": filesizeformat(settings.EKKO_MAX_IMPORT_BYTES)},
        )
        return render(request, template, _workspace_context(access, form=form), status=400)
    try:
        report = workspace_import_upload(viewer=access.viewer, chunks=upload.chunks(),
                                         user_map=parse_user_map(form.user_map_lines()),
                                         actor=access.principal.actor)
    except (ImportError_, QuotaExceeded) as exc:
        context = _workspace_context(
            access,
            form=form,
            import_error=_("This file cannot be imported; nothing was written."),
            import_error_detail=exc.detail,
        )
        return render(request, template, context, status=exc.status)
    context = _workspace_context(
        access,
        report=report,
        report_rows=_report_rows(report),
        report_mode=(
            _("Same workspace: ids kept, newer revisions applied.")
            if report.mode == "same_workspace"
            else _("Copy: the file came from another workspace, so its rows were copied here.")
        ),
        uploaded_name=upload.name,
    )
    response = render(request, template, context)
    return changed(response) if fragment else response
