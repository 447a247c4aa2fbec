"""Celery tasks: one-line adapters that take ids plus the tenant id and call one service.

With CELERY_BROKER_URL unset they run on a background thread of this process, after the request
(`ekko_site.inprocess`), so `make run` needs nothing else.
"""

from __future__ import annotations

import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="memory.embed_nodes", acks_late=True, max_retries=5, default_retry_delay=10)
def embed_nodes(tenant_id: int, node_ids: list[str]) -> int:
    from memory.services.embeddings import nodes_embed

    return nodes_embed(tenant_id=tenant_id, node_ids=node_ids)


@shared_task(name="memory.embed_messages", acks_late=True, max_retries=5, default_retry_delay=10)
def embed_messages(tenant_id: int, message_pks: list[int]) -> int:
    from memory.services.embeddings import messages_embed

    return messages_embed(tenant_id=tenant_id, message_pks=message_pks)


@shared_task(name="memory.extract_session", acks_late=True)
def extract_session(tenant_id: int, run_id: str) -> str:
    from memory.pipeline.runs import extraction_run

    return extraction_run(tenant_id=tenant_id, run_id=run_id).status


@shared_task(name="memory.retry_extractions")
def retry_extractions() -> int:
    from memory.pipeline.runs import extraction_retry_due

    return extraction_retry_due()


@shared_task(name="memory.expire_nodes")
def expire_nodes() -> int:
    from memory.services.maintenance import nodes_expire_due

    return nodes_expire_due()


@shared_task(name="memory.embed_missing")
def embed_missing() -> int:
    from memory.services.embeddings import embed_missing as sweep

    return sweep()


@shared_task(name="memory.record_reads", acks_late=True, max_retries=5, default_retry_delay=10)
def record_reads(batch: dict) -> int:
    from memory.services.reads import node_reads_write

    return node_reads_write(**batch)


@shared_task(name="memory.record_access", acks_late=True, max_retries=5, default_retry_delay=10)
def record_access(batch: dict) -> int:
    from memory.services.maintenance import node_access_record

    return node_access_record(**batch)


@shared_task(name="memory.sweep_read_audit")
def sweep_read_audit() -> int:
    from memory.services.reads import read_events_sweep

    return read_events_sweep()


@shared_task(name="memory.tenant_indexes")
def tenant_indexes() -> int:
    from memory.tenant_indexes import tenant_indexes_sweep

    result = tenant_indexes_sweep()
    return len(result.created) + len(result.dropped)


@shared_task(name="memory.organize_run", acks_late=True)
def organize_run(tenant_id: int, run_id: str) -> str:
    from memory.organizer.runs import organize_run as run

    return run(tenant_id=tenant_id, run_id=run_id)


@shared_task(name="memory.organize_due")
def organize_due() -> int:
    from memory.organizer.runs import organize_due as sweep

    return sweep()
