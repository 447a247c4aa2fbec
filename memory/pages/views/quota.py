"""The memory quota page: how full each person's and workspace's memory is; tenant admins set the limit."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from memory.access import quota_owners
from memory.pages import forms, labels
from memory.pages.access import PageAccess, tenant_page
from memory.pages.views.common import refuse
from memory.services.quota import QuotaReport, quota_report
from tenants.services import tenant_card_limit_set


def _rows(access: PageAccess, report: QuotaReport) -> list[dict[str, Any]]:
    return [{
        "name": access.workspace_name(row.owner.label) if row.owner.scope == "workspace" else row.owner.label,
        "scope": labels.SCOPES.get(row.owner.scope, row.owner.scope),
        "usage": row.usage,
        "oldest_unreviewed_days": row.oldest_unreviewed_days,
        "level": row.usage.level,
        "level_label": labels.LEVELS.get(row.usage.level, row.usage.level),
    } for row in report.owners]


@require_http_methods(["GET", "POST"])
@tenant_page
def quota_view(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if request.method == "POST" and not access.is_admin:
        return refuse(request, access)
    report = quota_report(tenant=access.tenant, owners=quota_owners(access.principal))
    limit = report.owners[0].usage.limit if report.owners else access.tenant.card_limit
    form = forms.CardLimitForm(request.POST if request.method == "POST" else None,
                               initial={"card_limit": limit})
    if request.method == "POST":
        if form.is_valid():
            tenant_card_limit_set(tenant=access.tenant, card_limit=form.cleaned_data["card_limit"],
                                  changed_by=request.user)
            notice = _("The card limit is now %(limit)s.") % {"limit": form.cleaned_data["card_limit"]}
            messages.success(request, notice)
            return redirect("quota")
    context = {"access": access, "rows": _rows(access, report), "level": report.level,
               "level_label": labels.LEVELS.get(report.level, report.level), "limit": limit,
               "form": form if access.is_admin else None}
    return render(request, "pages/quota.html", context, status=400 if form.is_bound else 200)
