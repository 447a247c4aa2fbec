"""The dashboard and the tenant and workspace switchers (only tenants and workspaces the person reaches)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from memory.access import SESSION_TENANT_KEY
from memory.pages import forms
from memory.pages import selectors as pages
from memory.pages.access import SESSION_WORKSPACE_KEY, PageAccess, tenant_page, wants_fragment
from memory.pages.views.common import refuse, safe_next

# --------------------------------------------------------------------------- switchers


@require_POST
@tenant_page
def switch_tenant(request: HttpRequest, access: PageAccess) -> HttpResponse:
    form = forms.SwitchForm(request.POST)
    if form.is_valid():
        chosen = next((m for m in access.memberships if m.tenant_id == form.cleaned_data["target"]), None)
        if chosen is None:
            return refuse(request, access, status=404)
        request.session[SESSION_TENANT_KEY] = chosen.tenant_id
        request.session.pop(SESSION_WORKSPACE_KEY, None)
    # Another tenant's objects are not found there: start from its dashboard.
    return redirect("dashboard")


@require_POST
@tenant_page
def switch_workspace(request: HttpRequest, access: PageAccess) -> HttpResponse:
    form = forms.SwitchForm(request.POST)
    if form.is_valid():
        if form.cleaned_data["target"] not in {w.pk for w in access.workspaces}:
            return refuse(request, access, status=404)
        request.session[SESSION_WORKSPACE_KEY] = form.cleaned_data["target"]
    next_url = form.cleaned_data.get("next") if form.is_valid() else None
    return redirect(safe_next(request, next_url, reverse("dashboard")))


# --------------------------------------------------------------------------- dashboard


@require_GET
@tenant_page
def dashboard_view(request: HttpRequest, access: PageAccess) -> HttpResponse:
    context = {"access": access, "dashboard": pages.dashboard(access.viewer)}
    if wants_fragment(request):
        return render(request, "pages/dashboard.html#overview", context)
    return render(request, "pages/dashboard.html", context)
