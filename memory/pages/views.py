"""Page views: one function per page, one template per page, fragments for htmx requests.

Each view gets the resolved `PageAccess` (memory.pages.access), reads through selectors and
changes memory only through memory.services.nodes (tenants.services for API keys). An htmx request
gets the page's named partial (`page.html#fragment`) from the same view; a plain request the
full page, so every link and form also works without JavaScript. Side effects reach the
browser through `HX-Trigger` events (`memoriesChanged`), never inline scripts.
"""

from __future__ import annotations

import tempfile
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout as auth_logout
from django.contrib.auth.forms import AuthenticationForm
from django.db import transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget, trigger_client_event

from memory import selectors as memory_selectors
from memory.api.auth import SESSION_TENANT_KEY
from memory.api.transfer import sqlite_download
from memory.errors import MemoryServiceError, NotFound, RevisionConflict
from memory.models import MemoryMessage, MemoryNode, MemorySummary, NodeStatus
from memory.pages import forms, labels
from memory.pages import selectors as pages
from memory.pages.access import SESSION_WORKSPACE_KEY, PageAccess, tenant_page, wants_fragment
from memory.services import ForgetRequest, node_forget, node_restore, node_write_batch
from memory.transfer.sqlite_io import ImportError_, ImportReport, workspace_import_sqlite
from tenants.models import ApiKey
from tenants.services import ApiKeyError, api_key_create, api_key_revoke

CHANGED_EVENT = "memoriesChanged"


# --------------------------------------------------------------------------- helpers


def _safe_next(request: HttpRequest, candidate: str | None, default: str) -> str:
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return default


def _page(request: HttpRequest) -> int:
    raw = request.GET.get("page") or "1"
    return int(raw) if raw.isdigit() else 1


def _changed(response: HttpResponse) -> HttpResponse:
    return trigger_client_event(response, CHANGED_EVENT, {})


def _service_error_text(exc: MemoryServiceError) -> str:
    """Return a translated explanation of a refused change (the service's own words follow it)."""
    if isinstance(exc, RevisionConflict):
        return _("Someone changed this memory while you were looking at it.")
    if exc.status == 403:
        return _("You may not change this memory.")
    if exc.code == "sensitive_content":
        return _("Refused: memories never keep passwords, secrets, card or ID numbers.")
    return _("The change was refused.")


def _card(access: PageAccess, node: MemoryNode) -> dict[str, Any]:
    """Return what the templates show about one node, labels translated."""
    return {
        "node": node,
        "scope": labels.SCOPES.get(node.scope, node.scope),
        "scope_help": labels.SCOPE_HELP.get(node.scope, ""),
        "type": labels.TYPES.get(node.type, node.type),
        "status": labels.STATUSES.get(node.status, node.status),
        "value": forms.value_text(node.value_json),
        "can_change": access.can_change(node),
        "owner": node.user.get_username() if node.user_id else "",
    }


# --------------------------------------------------------------------------- sign in / out


@require_http_methods(["GET", "POST"])
def login_view(request: HttpRequest) -> HttpResponse:
    target = _safe_next(request, request.POST.get("next") or request.GET.get("next"), reverse("dashboard"))
    if request.user.is_authenticated and request.method == "GET":
        return redirect(target)
    form = AuthenticationForm(request, data=request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        auth_login(request, form.get_user())
        return redirect(target)
    return render(
        request, "pages/login.html", {"form": form, "next": target}, status=400 if form.errors else 200
    )


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    auth_logout(request)
    messages.info(request, _("You are signed out."))
    return redirect("login")


# --------------------------------------------------------------------------- switchers


@require_POST
@tenant_page
def switch_tenant(request: HttpRequest, access: PageAccess) -> HttpResponse:
    form = forms.SwitchForm(request.POST)
    if form.is_valid():
        chosen = next((m for m in access.memberships if m.tenant_id == form.cleaned_data["target"]), None)
        if chosen is None:
            return render(request, "pages/forbidden.html", {"access": access}, status=404)
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
            return render(request, "pages/forbidden.html", {"access": access}, status=404)
        request.session[SESSION_WORKSPACE_KEY] = form.cleaned_data["target"]
    next_url = form.cleaned_data.get("next") if form.is_valid() else None
    return redirect(_safe_next(request, next_url, reverse("dashboard")))


# --------------------------------------------------------------------------- dashboard


@require_GET
@tenant_page
def dashboard_view(request: HttpRequest, access: PageAccess) -> HttpResponse:
    context = {"access": access, "dashboard": pages.dashboard(access.viewer)}
    if wants_fragment(request):
        return render(request, "pages/dashboard.html#overview", context)
    return render(request, "pages/dashboard.html", context)


# --------------------------------------------------------------------------- memory list


@require_GET
@tenant_page
def memory_list(request: HttpRequest, access: PageAccess) -> HttpResponse:
    form = forms.FilterForm(request.GET)
    filters = form.filters()
    listing = pages.node_page(access.viewer, filters, page=_page(request))
    context = {
        "access": access,
        "form": form,
        "filters": filters,
        "listing": listing,
        "cards": [_card(access, node) for node in listing.nodes],
        "select_all": request.GET.get("select") == "all",
    }
    if wants_fragment(request):
        # Typing, filtering and paging swap the results only; the facets do not depend on them.
        return render(request, "pages/memory_list.html#listing", context)
    context["facets"] = pages.facets(access.viewer, filters.status)
    return render(request, "pages/memory_list.html", context)


@require_POST
@tenant_page
def memory_bulk_forget(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if not access.can_write:
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
    fragment = wants_fragment(request)
    template = "pages/memory_bulk_forget.html#dialog" if fragment else "pages/memory_bulk_forget.html"
    form = forms.BulkForgetForm(request.POST)
    valid = form.is_valid()
    targets = form.cleaned_data.get("target") or []
    if not targets:
        return render(
            request, template, {"access": access, "form": form, "nothing_selected": True}, status=400
        )
    chosen = list(
        pages.page_nodes(access.viewer).filter(pk__in=[pk for pk, _rev in targets]).order_by("title")
    )
    context: dict[str, Any] = {
        "access": access,
        "chosen": [_card(access, n) for n in chosen],
        "targets": request.POST.getlist("target"),
    }
    if request.POST.get("confirmed") != "1":
        # First step: show what would be forgotten and ask how.
        context["form"] = forms.BulkForgetForm()
        return render(request, template, context)
    context["form"] = form
    if not valid:
        return render(request, template, context, status=400)
    try:
        forgotten = node_forget(
            viewer=access.viewer,
            request=ForgetRequest(
                reason=form.cleaned_data["reason"],
                explicit_user_intent=True,
                mode=form.cleaned_data["mode"],
                targets=tuple(targets),
            ),
        )
    except MemoryServiceError as exc:
        context["error"], context["error_detail"] = _service_error_text(exc), exc.detail
        if isinstance(exc, NotFound):
            context["error"] = _("One of the selected memories is no longer there; reload the list.")
        status = 409 if isinstance(exc, RevisionConflict | NotFound) else (403 if exc.status == 403 else 400)
        return render(request, template, context, status=status)
    done = _forgotten_text(len(forgotten), form.cleaned_data["mode"])
    if fragment:
        return _changed(render(request, "pages/memory_bulk_forget.html#done", {"done": done}))
    messages.success(request, done)
    return redirect("memory-list")


def _forgotten_text(count: int, mode: str) -> str:
    if mode == "hard":
        return ngettext("Erased %(count)d memory for good.", "Erased %(count)d memories for good.", count) % {
            "count": count
        }
    return ngettext(
        "Forgot %(count)d memory. It can be restored from Forgotten memories.",
        "Forgot %(count)d memories. They can be restored from Forgotten memories.",
        count,
    ) % {"count": count}


# --------------------------------------------------------------------------- one memory


def _detail_context(access: PageAccess, node: MemoryNode, **extra: Any) -> dict[str, Any]:
    history = memory_selectors.node_history(viewer=access.viewer, node_id=node.pk)
    chain = [_card(access, link) for link in history.chain]
    created = next(
        (e for e in history.events if e.node_id == node.pk and e.event_type in ("create", "supersede")), None
    )
    return {
        "access": access,
        "card": _card(access, node),
        "chain": chain,
        "revisions": pages.revisions(history.events),
        "evidence": [
            {"message": m, "role": labels.MESSAGE_ROLES.get(m.role, m.role)}
            for m in pages.evidence_messages(access.viewer, node)
        ],
        "created": created,
        "created_actor": labels.actor_label(created.actor) if created else "",
        **extra,
    }


@require_GET
@tenant_page
def memory_detail(request: HttpRequest, access: PageAccess, node_id: UUID) -> HttpResponse:
    node = memory_selectors.node_get(viewer=access.viewer, node_id=node_id)
    context = _detail_context(access, node)
    if wants_fragment(request):
        return render(request, "pages/memory_detail.html#detail", context)
    return render(request, "pages/memory_detail.html", context)


@require_http_methods(["GET", "POST"])
@tenant_page
def memory_edit(request: HttpRequest, access: PageAccess, node_id: UUID) -> HttpResponse:
    node = memory_selectors.node_get(viewer=access.viewer, node_id=node_id)
    fragment = wants_fragment(request)
    template = "pages/memory_edit.html#editor" if fragment else "pages/memory_edit.html"
    if not access.can_change(node) or node.status != NodeStatus.ACTIVE:
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
    if request.method == "GET":
        return render(
            request,
            template,
            {"access": access, "card": _card(access, node), "form": forms.MemoryEditForm.for_node(node)},
        )
    form = forms.MemoryEditForm(request.POST)
    context: dict[str, Any] = {"access": access, "card": _card(access, node), "form": form}
    if not form.is_valid():
        return render(request, template, context, status=400)
    try:
        node_write_batch(
            viewer=access.viewer, operations=[form.operation(node.pk)], explicit_user_intent=True
        )
    except RevisionConflict:
        # Show the fresh version and keep what the person typed, now aimed at the fresh revision.
        fresh = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
        data = request.POST.copy()
        data["expected_revision"] = str(fresh.revision)
        data["original_value"] = forms.value_text(fresh.value_json)
        context.update(
            card=_card(access, fresh),
            form=forms.MemoryEditForm(data),
            conflict=True,
            attempted_revision=form.cleaned_data["expected_revision"],
        )
        if fresh.status != NodeStatus.ACTIVE:
            context["form"] = None
        return render(request, template, context, status=409)
    except MemoryServiceError as exc:
        context["error"], context["error_detail"] = _service_error_text(exc), exc.detail
        return render(request, template, context, status=403 if exc.status == 403 else 400)
    updated = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
    messages.success(request, _("Saved as revision %(revision)d.") % {"revision": updated.revision})
    if fragment:
        response = render(request, "pages/memory_detail.html#detail", _detail_context(access, updated))
        return _changed(reswap(retarget(response, "#detail"), "outerHTML"))
    return redirect("memory-detail", node_id=node.pk)


@require_http_methods(["GET", "POST"])
@tenant_page
def memory_forget(request: HttpRequest, access: PageAccess, node_id: UUID) -> HttpResponse:
    node = memory_selectors.node_get(viewer=access.viewer, node_id=node_id)
    fragment = wants_fragment(request)
    template = "pages/memory_forget.html#dialog" if fragment else "pages/memory_forget.html"
    if not access.can_change(node):
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
    if request.method == "GET":
        form = forms.ForgetForm(
            initial={
                "expected_revision": node.revision,
                "mode": "hard" if node.status == NodeStatus.DELETED else "soft",
            }
        )
        return render(request, template, {"access": access, "card": _card(access, node), "form": form})
    form = forms.ForgetForm(request.POST)
    context = {"access": access, "card": _card(access, node), "form": form}
    if not form.is_valid():
        return render(request, template, context, status=400)
    mode = form.cleaned_data["mode"]
    try:
        node_forget(
            viewer=access.viewer,
            request=ForgetRequest(
                reason=form.cleaned_data["reason"],
                explicit_user_intent=True,
                mode=mode,
                node_id=node.pk,
                expected_revision=form.cleaned_data["expected_revision"],
            ),
        )
    except MemoryServiceError as exc:
        fresh = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
        context.update(
            card=_card(access, fresh),
            error=_service_error_text(exc),
            error_detail=exc.detail,
            form=forms.ForgetForm(
                initial={
                    "expected_revision": fresh.revision,
                    "mode": mode,
                    "reason": form.cleaned_data["reason"],
                }
            ),
        )
        return render(
            request,
            template,
            context,
            status=409 if isinstance(exc, RevisionConflict) else (403 if exc.status == 403 else 400),
        )
    if mode == "hard":
        messages.success(request, _("“%(title)s” was erased for good.") % {"title": node.title})
    else:
        messages.success(
            request,
            _("“%(title)s” was forgotten. You can restore it from Forgotten memories.")
            % {"title": node.title},
        )
    destination = reverse("memory-list")
    if fragment:
        return HttpResponseClientRedirect(destination)
    return HttpResponseRedirect(destination, status=303)


@require_POST
@tenant_page
def memory_restore(request: HttpRequest, access: PageAccess, node_id: UUID) -> HttpResponse:
    node = memory_selectors.node_get(viewer=access.viewer, node_id=node_id)
    if not access.can_change(node):
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
    form = forms.RestoreForm(request.POST)
    error: dict[str, str] = {}
    status = 200
    if not form.is_valid():
        error = {"error": _("The restore request was incomplete; reload the page.")}
        status = 400
    else:
        try:
            node = node_restore(
                viewer=access.viewer,
                node_id=node.pk,
                expected_revision=form.cleaned_data["expected_revision"],
                reason=_("Restored in the browser"),
            )
        except MemoryServiceError as exc:
            error = {"error": _service_error_text(exc), "error_detail": exc.detail}
            status = 409 if isinstance(exc, RevisionConflict) else (403 if exc.status == 403 else 400)
            node = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
        else:
            messages.success(request, _("Restored. The agent can recall it again."))
    if wants_fragment(request):
        response = render(
            request, "pages/memory_detail.html#detail", _detail_context(access, node, **error), status=status
        )
        return _changed(response) if status == 200 else response
    if status != 200:
        return render(
            request, "pages/memory_detail.html", _detail_context(access, node, **error), status=status
        )
    return redirect("memory-detail", node_id=node.pk)


# --------------------------------------------------------------------------- sessions


@require_GET
@tenant_page
def session_list(request: HttpRequest, access: PageAccess) -> HttpResponse:
    rows, paging = pages.session_page(access.viewer, page=_page(request))
    context = {"access": access, "sessions": rows, "paging": paging}
    if wants_fragment(request):
        return render(request, "pages/session_list.html#sessions", context)
    return render(request, "pages/session_list.html", context)


@require_GET
@tenant_page
def session_detail(request: HttpRequest, access: PageAccess, session_id: str) -> HttpResponse:
    detail = pages.session_detail(access.viewer, session_id)
    if detail is None:
        raise NotFound("No such session here.")
    context = {
        "access": access,
        "detail": detail,
        "cards": [_card(access, node) for node in detail.nodes],
        "role_labels": labels.MESSAGE_ROLES,
        "messages_view": [
            {"message": m, "role": labels.MESSAGE_ROLES.get(m.role, m.role)} for m in detail.messages
        ],
    }
    return render(request, "pages/session_detail.html", context)


# --------------------------------------------------------------------------- API keys


def _keys_context(access: PageAccess, form: forms.ApiKeyForm, **extra: Any) -> dict[str, Any]:
    keys = list(
        ApiKey.objects.filter(tenant=access.tenant)
        .select_related("workspace", "created_by")
        .order_by("revoked_at", "-created_at")
    )
    for key in keys:
        key.scopes_display = ", ".join(str(labels.SCOPES.get(s, s)) for s in key.write_scopes)
    return {"access": access, "form": form, "keys": keys, **extra}


@require_http_methods(["GET", "POST"])
@tenant_page
def api_keys(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if not access.is_admin:
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
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
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
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
    """Download the current workspace as an Ekko local-format file (owners and admins: it holds everyone's)."""
    if not access.is_admin:
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
    return sqlite_download(access.tenant, access.workspace)


@require_POST
@tenant_page
def workspace_import(request: HttpRequest, access: PageAccess) -> HttpResponse:
    """Import an uploaded SQLite file into the current workspace (tenant owners and admins only)."""
    if not access.is_admin:
        return render(request, "pages/forbidden.html", {"access": access}, status=403)
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
        with tempfile.NamedTemporaryFile(prefix="ekko-import-", suffix=".sqlite") as copy:
            for chunk in upload.chunks():
                copy.write(chunk)
            copy.flush()
            report = workspace_import_sqlite(
                tenant=access.tenant, workspace=access.workspace, path=copy.name, actor=access.principal.actor
            )
    except ImportError_ as exc:
        context = _workspace_context(
            access,
            form=form,
            import_error=_("This file cannot be imported; nothing was written."),
            import_error_detail=exc.detail,
        )
        return render(request, template, context, status=400)
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
    return _changed(response) if fragment else response
