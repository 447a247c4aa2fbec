"""The review queue's reads: the unreviewed active cards a person may see, filtered, with their evidence.

What the queue lists is `memory.pages.selectors.page_nodes` (what the person may open, in the chosen
workspace) narrowed to active, unreviewed cards; accepting or rejecting them is the write services'
(`memory/write` accept, soft forget), called by `memory.pages.views.review`. The evidence of every
listed card is read in one query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q, QuerySet

from memory.models import HEAVY_FIELDS, MemoryMessage, MemoryNode, NodeStatus, ReviewState
from memory.pages.selectors import page_nodes
from memory.rules.review import CONFIDENCE_BANDS, LOW_BAND
from memory.visibility import Viewer

REVIEW_PAGE_SIZE = 50
BANDS = (*(band for _floor, band in CONFIDENCE_BANDS), LOW_BAND)


@dataclass(frozen=True)
class ReviewFilters:
    kind: str = ""
    source: str = ""  # the conversation (session id) the card was learned in
    band: str = ""  # h | m | l


@dataclass
class ReviewItem:
    node: MemoryNode
    evidence: list[MemoryMessage] = field(default_factory=list)


@dataclass
class ReviewQueue:
    items: list[ReviewItem]
    total: int
    kinds: list[tuple[str, int]]
    sources: list[tuple[str, int]]


def _band_q(band: str) -> Q:
    """Return the confidence range of `band` (memory.rules.review.confidence_band), all for none."""
    ceiling = None
    for floor, name in CONFIDENCE_BANDS:
        if name == band:
            return Q(confidence__gte=floor) & (Q(confidence__lt=ceiling) if ceiling is not None else Q())
        ceiling = floor
    return Q(confidence__lt=ceiling) if band == LOW_BAND else Q()


def unreviewed_nodes(viewer: Viewer) -> QuerySet[MemoryNode]:
    """Return the active, unreviewed cards the review queue may show `viewer`."""
    return page_nodes(viewer).filter(status=NodeStatus.ACTIVE, review_state=ReviewState.UNREVIEWED)


def review_queue(viewer: Viewer, filters: ReviewFilters) -> ReviewQueue:
    """Return the queue's first page (newest first), its size and the kinds and sources to filter by."""
    every = unreviewed_nodes(viewer)
    kinds = list(every.order_by().values_list("kind").annotate(n=Count("pk")).order_by("kind"))
    sources = list(every.exclude(session_id=None).order_by().values_list("session_id")
                   .annotate(n=Count("pk")).order_by("session_id"))
    chosen = every
    if filters.kind:
        chosen = chosen.filter(kind=filters.kind)
    if filters.source:
        chosen = chosen.filter(session_id=filters.source)
    chosen = chosen.filter(_band_q(filters.band))
    total = chosen.count()
    nodes = list(chosen.select_related("user").order_by("-updated_at", "pk")[:REVIEW_PAGE_SIZE])
    wanted = {(node.workspace_id, message_id) for node in nodes for message_id in node.source_message_ids}
    messages: dict[tuple[int, str], MemoryMessage] = {}
    if wanted:
        rows = MemoryMessage.objects.filter(
            tenant=viewer.tenant, workspace_id__in={w for w, _ in wanted},
            message_id__in={m for _, m in wanted}).defer(*HEAVY_FIELDS).order_by("created_at", "id")
        messages = {(row.workspace_id, row.message_id): row for row in rows}
    items = [ReviewItem(node, [messages[(node.workspace_id, m)] for m in node.source_message_ids
                               if (node.workspace_id, m) in messages]) for node in nodes]
    return ReviewQueue(items=items, total=total, kinds=kinds, sources=sources)
