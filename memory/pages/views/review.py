"""The review queue (`/review/`): the extractor's unreviewed cards, to accept or reject one by one or in bulk.

Accept is `memory/write`'s `accept` and reject the soft forget, both through the write services
with the page's Viewer, so the services' guards and memory.visibility decide what a person may
change; a card the person cannot open answers 404, one no longer waiting for review 409. A reject
is a person's forget of the extractor's card: the extractor's recent-rejections rule
(memory.pipeline.guardrails) keeps it from writing the card again.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from memory.errors import MemoryServiceError, NotFound, RevisionConflict
from memory.pages import forms, labels
from memory.pages.access import PageAccess, tenant_page, wants_fragment
from memory.pages.review import review_queue, unreviewed_nodes
from memory.pages.selectors import page_nodes
from memory.pages.views.common import card_of, changed, refuse, service_error_text
from memory.services import ForgetRequest, node_forget, node_write_batch


def _queue_context(access: PageAccess, form: forms.ReviewFilterForm, **extra: Any) -> dict[str, Any]:
    filters = form.filters()
    queue = review_queue(access.viewer, filters)
    return {
        "access": access,
        "form": form,
        "filters": filters,
        "queue": queue,
        "items": [{"card": card_of(access, item.node),
                   "evidence": [{"message": m, "role": labels.MESSAGE_ROLES.get(m.role, m.role)}
                                for m in item.evidence]} for item in queue.items],
        **extra,
    }


@require_GET
@tenant_page
def review_list(request: HttpRequest, access: PageAccess) -> HttpResponse:
    context = _queue_context(access, forms.ReviewFilterForm(request.GET))
    if wants_fragment(request):
        return render(request, "pages/review.html#queue", context)
    return render(request, "pages/review.html", context)


@require_POST
@tenant_page
def review_act(request: HttpRequest, access: PageAccess) -> HttpResponse:
    if not access.can_write:
        return refuse(request, access)
    form = forms.ReviewActionForm(request.POST)
    filters = forms.ReviewFilterForm(request.POST)
    if not form.is_valid():
        error = _("Tick the memories to accept or reject first.") if "target" in form.errors else (
            _("The request was incomplete; reload the page."))
        return _answer(request, access, filters, error=error, status=400)
    targets = form.cleaned_data["target"]
    try:
        _still_waiting(access, [pk for pk, _rev in targets])
        act = _accept if form.cleaned_data["action"] == "accept" else _reject
        done = act(access, targets)
    except NotFound:
        raise  # another's card and a missing one answer alike: 404 (tenant_page)
    except MemoryServiceError as exc:
        status = 409 if isinstance(exc, RevisionConflict) or exc.status == 409 else (
            403 if exc.status == 403 else 400)
        return _answer(request, access, filters, error=service_error_text(exc), error_detail=exc.detail,
                       status=status)
    return _answer(request, access, filters, done=done)


def _still_waiting(access: PageAccess, node_ids: list[Any]) -> None:
    """Refuse ids the person cannot open (404) and cards no longer waiting for review (409)."""
    waiting = set(unreviewed_nodes(access.viewer).filter(pk__in=node_ids).values_list("pk", flat=True))
    if len(waiting) == len(set(node_ids)):
        return
    missing = set(node_ids) - waiting
    if page_nodes(access.viewer).filter(pk__in=missing).count() < len(missing):
        raise NotFound("No memory node with this id.")
    raise RevisionConflict("A selected memory was reviewed or forgotten meanwhile; reload the queue.")


def _accept(access: PageAccess, targets: list[tuple[Any, int]]) -> str:
    reason = _("Accepted in the review queue")
    node_write_batch(viewer=access.viewer, explicit_user_intent=True, operations=[
        {"operation": "accept", "target_id": str(pk), "expected_revision": revision, "reason": reason}
        for pk, revision in targets])
    return ngettext("Accepted %(count)d memory.", "Accepted %(count)d memories.", len(targets)) % {
        "count": len(targets)}


def _reject(access: PageAccess, targets: list[tuple[Any, int]]) -> str:
    node_forget(viewer=access.viewer, request=ForgetRequest(
        reason=_("Rejected in the review queue"), explicit_user_intent=True, mode="soft",
        purge_evidence=False, targets=tuple(targets)))
    return ngettext(
        "Rejected %(count)d memory. The assistant will not learn it again unless you say it explicitly.",
        "Rejected %(count)d memories. The assistant will not learn them again unless you say so explicitly.",
        len(targets)) % {"count": len(targets)}


def _answer(request: HttpRequest, access: PageAccess, filters: forms.ReviewFilterForm, *, status: int = 200,
            done: str = "", **error: str) -> HttpResponse:
    if wants_fragment(request):
        response = render(request, "pages/review.html#queue",
                          _queue_context(access, filters, done=done, **error), status=status)
        return changed(response) if done else response
    if status != 200:
        return render(request, "pages/review.html", _queue_context(access, filters, **error), status=status)
    messages.success(request, done)
    chosen = {name: value for name, value in dataclasses.asdict(filters.filters()).items() if value}
    location = reverse("review-list") + (f"?{urlencode(chosen)}" if chosen else "")
    return HttpResponseRedirect(location, status=303)
