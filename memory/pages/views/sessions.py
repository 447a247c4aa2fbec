"""The session pages: a workspace's conversations the person may read, and one session's timeline."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from memory.errors import NotFound
from memory.pages import labels
from memory.pages import selectors as pages
from memory.pages.access import PageAccess, tenant_page, wants_fragment
from memory.pages.views.common import card_of, page_number

# --------------------------------------------------------------------------- sessions


@require_GET
@tenant_page
def session_list(request: HttpRequest, access: PageAccess) -> HttpResponse:
    rows, paging = pages.session_page(access.viewer, page=page_number(request))
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
        "cards": [card_of(access, node) for node in detail.nodes],
        "role_labels": labels.MESSAGE_ROLES,
        "messages_view": [
            {"message": m, "role": labels.MESSAGE_ROLES.get(m.role, m.role)} for m in detail.messages
        ],
    }
    return render(request, "pages/session_detail.html", context)
