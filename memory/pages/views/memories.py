"""The memory pages: the filtered list, bulk forget, and one card's detail, edit, forget and restore.

Every change goes through memory.services.nodes with the page's Viewer, so the services' guards
and memory.visibility decide what a person may change; `PageAccess.can_change` only hides buttons.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget

from memory import selectors as memory_selectors
from memory.errors import MemoryServiceError, NotFound, RevisionConflict
from memory.models import MemoryNode, NodeStatus
from memory.pages import audit as page_audit
from memory.pages import forms, labels
from memory.pages import selectors as pages
from memory.pages.access import PageAccess, tenant_page, wants_fragment
from memory.pages.views.common import card_of, changed, page_number, refuse, service_error_text
from memory.services import ForgetRequest, node_forget, node_restore, node_write_batch

# --------------------------------------------------------------------------- memory list


@require_GET
@tenant_page
def memory_list(request: HttpRequest, access: PageAccess) -> HttpResponse:
    form = forms.FilterForm(request.GET)
    filters = form.filters()
    listing = pages.node_page(access.viewer, filters, page=page_number(request))
    context = {
        "access": access,
        "form": form,
        "filters": filters,
        "listing": listing,
        "cards": [card_of(access, node) for node in listing.nodes],
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
        return refuse(request, access)
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
        "chosen": [card_of(access, n) for n in chosen],
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
                purge_evidence=form.cleaned_data["purge_evidence"],
                targets=tuple(targets),
            ),
        ).forgotten
    except MemoryServiceError as exc:
        context["error"], context["error_detail"] = service_error_text(exc), exc.detail
        if isinstance(exc, NotFound):
            context["error"] = _("One of the selected memories is no longer there; reload the list.")
        status = 409 if isinstance(exc, RevisionConflict | NotFound) else (403 if exc.status == 403 else 400)
        return render(request, template, context, status=status)
    done = _forgotten_text(len(forgotten), form.cleaned_data["mode"])
    if fragment:
        return changed(render(request, "pages/memory_bulk_forget.html#done", {"done": done}))
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
    chain = [card_of(access, link) for link in history.chain]
    created = next(
        (e for e in history.events if e.node_id == node.pk and e.event_type in ("create", "supersede")), None
    )
    return {
        "access": access,
        "card": card_of(access, node),
        "chain": chain,
        "revisions": pages.revisions(history.events),
        "evidence": [
            {"message": m, "role": labels.MESSAGE_ROLES.get(m.role, m.role)}
            for m in pages.evidence_messages(access.viewer, node)
        ],
        "created": created,
        "created_actor": labels.actor_label(created.actor) if created else "",
        "readers": page_audit.card_readers(access.viewer, node),
        **extra,
    }


@require_GET
@tenant_page
def memory_detail(request: HttpRequest, access: PageAccess, node_id: UUID) -> HttpResponse:
    try:
        node = memory_selectors.node_get(viewer=access.viewer, node_id=node_id)
    except NotFound:
        receipt = page_audit.erased_card_receipt(access.viewer, node_id)
        if receipt is None:
            raise
        # Still a 404 (the memory is gone), with the proof of what was removed instead of a blank page.
        return render(request, "pages/memory_erased.html", {"access": access, "receipt": receipt}, status=404)
    page_audit.card_page_read(access.viewer, node)
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
        return refuse(request, access)
    if request.method == "GET":
        return render(
            request,
            template,
            {"access": access, "card": card_of(access, node), "form": forms.MemoryEditForm.for_node(node)},
        )
    form = forms.MemoryEditForm(request.POST)
    context: dict[str, Any] = {"access": access, "card": card_of(access, node), "form": form}
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
            card=card_of(access, fresh),
            form=forms.MemoryEditForm(data),
            conflict=True,
            attempted_revision=form.cleaned_data["expected_revision"],
        )
        if fresh.status != NodeStatus.ACTIVE:
            context["form"] = None
        return render(request, template, context, status=409)
    except MemoryServiceError as exc:
        context["error"], context["error_detail"] = service_error_text(exc), exc.detail
        return render(request, template, context, status=403 if exc.status == 403 else 400)
    updated = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
    messages.success(request, _("Saved as revision %(revision)d.") % {"revision": updated.revision})
    if fragment:
        response = render(request, "pages/memory_detail.html#detail", _detail_context(access, updated))
        return changed(reswap(retarget(response, "#detail"), "outerHTML"))
    return redirect("memory-detail", node_id=node.pk)


@require_http_methods(["GET", "POST"])
@tenant_page
def memory_forget(request: HttpRequest, access: PageAccess, node_id: UUID) -> HttpResponse:
    node = memory_selectors.node_get(viewer=access.viewer, node_id=node_id)
    fragment = wants_fragment(request)
    template = "pages/memory_forget.html#dialog" if fragment else "pages/memory_forget.html"
    if not access.can_change(node):
        return refuse(request, access)
    if request.method == "GET":
        form = forms.ForgetForm(
            initial={
                "expected_revision": node.revision,
                "mode": "hard" if node.status == NodeStatus.DELETED else "soft",
            }
        )
        return render(request, template, {"access": access, "card": card_of(access, node), "form": form})
    form = forms.ForgetForm(request.POST)
    context = {"access": access, "card": card_of(access, node), "form": form}
    if not form.is_valid():
        return render(request, template, context, status=400)
    mode = form.cleaned_data["mode"]
    try:
        result = node_forget(
            viewer=access.viewer,
            request=ForgetRequest(
                reason=form.cleaned_data["reason"],
                explicit_user_intent=True,
                mode=mode,
                purge_evidence=form.cleaned_data["purge_evidence"],
                node_id=node.pk,
                expected_revision=form.cleaned_data["expected_revision"],
            ),
        )
    except MemoryServiceError as exc:
        fresh = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
        context.update(
            card=card_of(access, fresh),
            error=service_error_text(exc),
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
        messages.info(request, _("Its erasure receipt %(receipt)s… stays at the memory's address.")
                      % {"receipt": str(result.receipt.id)[:8] if result.receipt else "—"})
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
        return refuse(request, access)
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
            error = {"error": service_error_text(exc), "error_detail": exc.detail}
            status = 409 if isinstance(exc, RevisionConflict) else (403 if exc.status == 403 else 400)
            node = memory_selectors.node_get(viewer=access.viewer, node_id=node.pk)
        else:
            messages.success(request, _("Restored. The agent can recall it again."))
    if wants_fragment(request):
        response = render(
            request, "pages/memory_detail.html#detail", _detail_context(access, node, **error), status=status
        )
        return changed(response) if status == 200 else response
    if status != 200:
        return render(
            request, "pages/memory_detail.html", _detail_context(access, node, **error), status=status
        )
    return redirect("memory-detail", node_id=node.pk)
