"""What every page group shares: safe redirects, paging, the htmx change event, refusals and the card view."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django_htmx.http import trigger_client_event

from memory.errors import MemoryServiceError, RevisionConflict
from memory.models import MemoryNode
from memory.pages import forms, labels
from memory.pages.access import PageAccess
from memory.rules.review import review_mark

CHANGED_EVENT = "memoriesChanged"


# --------------------------------------------------------------------------- helpers


def safe_next(request: HttpRequest, candidate: str | None, default: str) -> str:
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return default


def page_number(request: HttpRequest) -> int:
    raw = request.GET.get("page") or "1"
    return int(raw) if raw.isdigit() else 1


def changed(response: HttpResponse) -> HttpResponse:
    return trigger_client_event(response, CHANGED_EVENT, {})


def service_error_text(exc: MemoryServiceError) -> str:
    """Return a translated explanation of a refused change (the service's own words follow it)."""
    if isinstance(exc, RevisionConflict):
        return _("Someone changed this memory while you were looking at it.")
    if exc.status == 403:
        return _("You may not change this memory.")
    if exc.code == "quota_exceeded":
        return _("Memory is full: forget something first, or ask a tenant admin to raise the card limit.")
    if exc.code == "sensitive_content":
        return _("Refused: memories never keep passwords, secrets, card or ID numbers.")
    return _("The change was refused.")


def card_of(access: PageAccess, node: MemoryNode) -> dict[str, Any]:
    """Return what the templates show about one node, labels translated."""
    return {
        "node": node,
        "scope": labels.SCOPES.get(node.scope, node.scope),
        "scope_help": labels.SCOPE_HELP.get(node.scope, ""),
        "type": labels.TYPES.get(node.type, node.type),
        "status": labels.STATUSES.get(node.status, node.status),
        "value": forms.value_text(node.value_json),
        "can_change": access.can_change(node),
        "review": labels.REVIEW_STATES.get(node.review_state, node.review_state),
        "review_mark": review_mark(node.review_state, node.confidence),
        "owner": node.user.get_username() if node.user_id else "",
    }


def refuse(request: HttpRequest, access: PageAccess, *, status: int = 403) -> HttpResponse:
    """Answer with the page that says this person may not do that (403), or that it is not theirs (404)."""
    return render(request, "pages/forbidden.html", {"access": access}, status=status)
