"""How much background work waits, over every tenant: the queue depths of the metrics scrape.

Listed in docs/tenancy.md: the counts lift the tenant walls (one total for the service), and no row,
id or tenant leaves this module. Each count stops at BACKLOG_CAP rows, so a scrape stays cheap
however far behind the work is.
"""

from __future__ import annotations

from django.db import transaction

from memory.models import ExtractionRun, ExtractionStatus, MemoryMessage, MemoryNode
from memory.services.embeddings import embeddable
from tenants.context import all_tenants_context

BACKLOG_CAP = 100_000
WAITING_RUNS = (ExtractionStatus.QUEUED, ExtractionStatus.RUNNING, ExtractionStatus.RETRYING)


def background_backlog() -> dict[str, int]:
    """Return {"embedding": cards and messages without a vector, "extraction": runs not finished yet}."""
    with transaction.atomic(), all_tenants_context():
        cards = MemoryNode.all_tenants.filter(embedding__isnull=True).values("pk")[:BACKLOG_CAP].count()
        messages = (embeddable(MemoryMessage.all_tenants.filter(embedding__isnull=True))
                    .values("pk")[:BACKLOG_CAP].count())
        runs = ExtractionRun.all_tenants.filter(status__in=WAITING_RUNS).values("pk")[:BACKLOG_CAP].count()
    return {"embedding": cards + messages, "extraction": runs}
