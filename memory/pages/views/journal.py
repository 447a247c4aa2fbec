"""The journal page: the signed-in person's own journal, one card per date, newest first.

Only the person's own entries, whatever the role: an admin who may browse every card of the tenant on
the memories page still reads no one else's journal here (`memory.selectors.journal_cards`).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from memory.pages.access import PageAccess, tenant_page, wants_fragment
from memory.pages.selectors import NodePage
from memory.pages.views.common import page_number
from memory.rules.journal import ENTRY_SEPARATOR
from memory.selectors import journal_cards

JOURNAL_PAGE_SIZE = 10  # dates per page: a day may hold many entries


@require_GET
@tenant_page
def journal_view(request: HttpRequest, access: PageAccess) -> HttpResponse:
    cards = journal_cards(viewer=access.viewer)
    total = cards.count()
    number = max(1, min(page_number(request), -(-total // JOURNAL_PAGE_SIZE) or 1))
    start = (number - 1) * JOURNAL_PAGE_SIZE
    rows = list(cards[start:start + JOURNAL_PAGE_SIZE])
    days = [{"node": node, "entries": str(node.value_json or node.content).split(ENTRY_SEPARATOR)}
            for node in rows]
    paging = NodePage(nodes=rows, number=number, total=total, page_size=JOURNAL_PAGE_SIZE)
    context = {"access": access, "days": days, "paging": paging}
    if wants_fragment(request):
        return render(request, "pages/journal.html#journal", context)
    return render(request, "pages/journal.html", context)
