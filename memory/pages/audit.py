"""What the card page shows from the audit trail: who read the card lately, and erasure receipts.

Reads come from the read audit (memory.services.reads), grouped per caller over the last week;
opening a card page is itself a read (endpoint `pages`). Callers pass a node the viewer may
already open, so nothing here widens what a page can show. Once a card is erased its address
shows the erasure receipt instead, to the person who erased it and to tenant admins only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.db.models import Count, Max
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from memory.models import AuditEventType, MemoryAuditEvent, MemoryNode, MemoryReadEvent, ReadEndpoint
from memory.pages import labels
from memory.services.reads import node_reads_record
from memory.visibility import Viewer

READ_WINDOW_DAYS = 7
READERS_SHOWN = 10
REMOVED_LABELS = {
    "memory_memorynode": _("memory cards deleted (with older versions and derived cards)"),
    "memory_memoryauditevent": _("audit entries whose reason and snapshot were erased"),
    "memory_extractionrun": _("extraction results scrubbed"),
    "memory_memorymessage": _("conversation messages deleted"),
    "memory_memorysummary": _("conversation summaries redacted"),
}


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


@dataclass(frozen=True)
class Receipt:
    event: MemoryAuditEvent
    actor: str
    removed: list[tuple[str, int]]
    derived: int
    purge_evidence: bool


def erased_card_receipt(viewer: Viewer, node_id: UUID) -> Receipt | None:
    """Return the erasure receipt of a hard-forgotten card, when `viewer` erased it or is a tenant admin."""
    deleted = (MemoryAuditEvent.objects.filter(tenant=viewer.tenant, node_id=node_id,
                                               event_type=AuditEventType.DELETE, payload__mode="hard")
               .order_by("sequence").first())
    if deleted is None:
        return None
    # The receipt is the first erase event after the card's delete event (one forget, one lock).
    event = (MemoryAuditEvent.objects.filter(tenant=viewer.tenant, event_type=AuditEventType.ERASE,
                                             sequence__gt=deleted.sequence).order_by("sequence").first())
    receipt = (event.payload or {}).get("receipt") if event is not None else None
    if receipt is None or str(node_id) not in [*receipt.get("nodeIds", []), *receipt.get("derivedIds", [])]:
        return None
    if not (viewer.whole_tenant or event.actor == viewer.actor):
        return None
    return Receipt(
        event=event, actor=labels.actor_label(event.actor),
        removed=[(str(REMOVED_LABELS.get(table, table)), count)
                 for table, count in receipt["removed"].items()],
        derived=len(receipt.get("derivedIds", [])), purge_evidence=bool(receipt.get("purgeEvidence")),
    )
