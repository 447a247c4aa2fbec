"""What the card page shows from the audit trail: who read the card lately, and erasure receipts.

Reads come from the read audit (memory.services.reads), grouped per caller over the last week;
opening a card page is itself a read (endpoint `pages`). Callers pass a node the viewer may
already open, so nothing here widens what a page can show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Max
from django.utils import timezone

from memory.models import MemoryNode, MemoryReadEvent, ReadEndpoint
from memory.pages import labels
from memory.services.reads import node_reads_record
from memory.visibility import Viewer

READ_WINDOW_DAYS = 7
READERS_SHOWN = 10


@dataclass(frozen=True)
class Reader:
    actor: str
    label: str
    count: int
    last_read_at: datetime


def card_readers(viewer: Viewer, node: MemoryNode, *, now: datetime | None = None) -> list[Reader]:
    """Return who read `node` in the last week (most reads first), one line per API key or person."""
    since = (now or timezone.now()) - timedelta(days=READ_WINDOW_DAYS)
    rows = (
        MemoryReadEvent.objects.filter(tenant=viewer.tenant, node_id=node.pk, created_at__gte=since)
        .values("actor").annotate(count=Count("id"), last=Max("created_at")).order_by("-count", "actor")
    )
    return [Reader(actor=row["actor"], label=labels.actor_label(row["actor"]), count=row["count"],
                   last_read_at=row["last"]) for row in rows[:READERS_SHOWN]]


def card_page_read(viewer: Viewer, node: MemoryNode) -> None:
    """Record that the signed-in person opened the card's page."""
    node_reads_record(tenant=viewer.tenant, node_ids=[node.pk], endpoint=ReadEndpoint.PAGES,
                      actor=viewer.actor, user_id=viewer.user.pk if viewer.user is not None else None)
