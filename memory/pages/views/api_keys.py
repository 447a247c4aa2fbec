"""The API keys page (owners and admins): issue a key, shown once, and revoke keys."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from memory.errors import NotFound
from memory.pages import forms, labels
from memory.pages.access import PageAccess, tenant_page, wants_fragment
from memory.pages.views.common import refuse
from tenants.models import ApiKey
from tenants.services import ApiKeyError, api_key_create, api_key_revoke

# --------------------------------------------------------------------------- API keys


def _keys_context(access: PageAccess, form: forms.ApiKeyForm, **extra: Any) -> dict[str, Any]:
    keys = list(
        ApiKey.objects.filter(tenant=access.tenant)
        # The pin's workspace is fetched for the tenant, not joined by id alone (docs/scale-out.md).
        .select_related("created_by").prefetch_related("workspace")
        .order_by("revoked_at", "-created_at")
    )
    for key in keys:
        key.scopes_display = ", ".join(str(labels.SCOPES.get(s, s)) for s in key.write_scopes)
    return {"access": access, "form": form, "keys": keys, **extra}


@require_http_methods(["GET", "POST"])
@tenant_page
def api_keys(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if not access.is_admin:
        return refuse(request, access)
    fragment = wants_fragment(request)
    template = "pages/api_keys.html#keys" if fragment else "pages/api_keys.html"
    if request.method == "GET":
        return render(
            request, template, _keys_context(access, forms.ApiKeyForm(workspaces=access.workspaces))
        )
    form = forms.ApiKeyForm(request.POST, workspaces=access.workspaces)
    if not form.is_valid():
        return render(request, template, _keys_context(access, form), status=400)
    try:
        issued = api_key_create(
            tenant=access.tenant,
            name=form.cleaned_data["name"],
            read_only=form.cleaned_data["read_only"],
            write_scopes=form.cleaned_data["write_scopes"],
            workspace=form.cleaned_data["workspace"],
            created_by=request.user,
        )
    except ApiKeyError as exc:
        form.add_error(None, str(exc))
        return render(request, template, _keys_context(access, form), status=400)
    # The raw key exists only in this response: it is never stored, logged or put in the session.
    response = render(
        request,
        template,
        _keys_context(access, forms.ApiKeyForm(workspaces=access.workspaces), issued=issued),
    )
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@tenant_page
def api_key_revoke_view(request: HttpRequest, access: PageAccess, key_id: int) -> HttpResponse:
    if not access.is_admin:
        return refuse(request, access)
    if not ApiKey.objects.filter(tenant=access.tenant, pk=key_id).exists():
        raise NotFound("No such API key.")
    revoked = api_key_revoke(tenant=access.tenant, api_key_id=key_id)
    notice = _("Key %(prefix)s… is revoked; agents using it are refused from now on.") % {
        "prefix": revoked.prefix
    }
    if wants_fragment(request):
        return render(
            request,
            "pages/api_keys.html#keys",
            _keys_context(access, forms.ApiKeyForm(workspaces=access.workspaces), notice=notice),
        )
    messages.success(request, notice)
    return redirect("apikey-list")
