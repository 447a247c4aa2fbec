"""The webhooks page (owners and admins): register endpoints (secret shown once), see the delivery log,
resume a paused endpoint, rotate a secret, remove an endpoint."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from memory.pages.access import PageAccess, tenant_page
from memory.pages.views.common import refuse
from memory.pages.webhook_forms import WebhookEndpointForm
from memory.webhooks.models import WebhookDelivery, WebhookEndpoint
from memory.webhooks.services import (
    EndpointError,
    IssuedSecret,
    endpoint_create,
    endpoint_delete,
    endpoint_resume,
    endpoint_rotate_secret,
)

LOG_SIZE = 50


def _render(
    request: HttpRequest,
    access: PageAccess,
    form: WebhookEndpointForm | None = None,
    *,
    issued: IssuedSecret | None = None,
    status: int = 200,
) -> HttpResponse:
    endpoints = list(WebhookEndpoint.objects.filter(tenant=access.tenant).prefetch_related("workspace"))
    urls = {endpoint.pk: endpoint.url for endpoint in endpoints}
    log = list(WebhookDelivery.objects.filter(tenant=access.tenant).order_by("-created_at")[:LOG_SIZE])
    for delivery in log:
        delivery.endpoint_url = urls.get(delivery.endpoint_id, "")
    context: dict[str, Any] = {
        "access": access,
        "endpoints": endpoints,
        "log": log,
        "issued": issued,
        "form": form or WebhookEndpointForm(workspaces=access.workspaces),
    }
    response = render(request, "pages/webhooks.html", context, status=status)
    if issued is not None:
        response["Cache-Control"] = "no-store"  # the secret exists only in this response
    return response


@require_http_methods(["GET", "POST"])
@tenant_page
def webhook_list(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if not access.is_admin:
        return refuse(request, access)
    if request.method == "GET":
        return _render(request, access)
    form = WebhookEndpointForm(request.POST, workspaces=access.workspaces)
    if not form.is_valid():
        return _render(request, access, form, status=400)
    try:
        issued = endpoint_create(
            tenant=access.tenant,
            url=form.cleaned_data["url"],
            events=form.cleaned_data["events"],
            workspace=form.cleaned_data["workspace"],
            description=form.cleaned_data["description"],
            created_by=request.user,
        )
    except EndpointError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        return _render(request, access, form, status=400)
    return _render(request, access, issued=issued)


def _endpoint_action(request: HttpRequest, access: PageAccess, endpoint_id: int, action: str) -> HttpResponse:
    if not access.is_admin:
        return refuse(request, access)
    try:
        if action == "rotate":
            return _render(
                request, access, issued=endpoint_rotate_secret(tenant=access.tenant, endpoint_id=endpoint_id)
            )
        if action == "resume":
            endpoint_resume(tenant=access.tenant, endpoint_id=endpoint_id)
            messages.success(request, _("The endpoint is resumed; waiting deliveries are sent now."))
        else:
            endpoint_delete(tenant=access.tenant, endpoint_id=endpoint_id)
            messages.success(request, _("The endpoint is removed."))
    except EndpointError:
        return refuse(request, access, status=404)
    return redirect("webhook-list")


@require_POST
@tenant_page
def webhook_resume(request: HttpRequest, access: PageAccess, endpoint_id: int) -> HttpResponse:
    return _endpoint_action(request, access, endpoint_id, "resume")


@require_POST
@tenant_page
def webhook_rotate(request: HttpRequest, access: PageAccess, endpoint_id: int) -> HttpResponse:
    return _endpoint_action(request, access, endpoint_id, "rotate")


@require_POST
@tenant_page
def webhook_delete(request: HttpRequest, access: PageAccess, endpoint_id: int) -> HttpResponse:
    return _endpoint_action(request, access, endpoint_id, "delete")
