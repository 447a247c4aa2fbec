"""Work that follows a commit (embeddings, extraction, read audit, access counts): the receivers of the
services' signals.

The services announce committed writes through `memory.services.events`; `connect_receivers`
(called from `MemoryConfig.ready`) hooks these receivers to them, so the services never import the
pipeline. Queuing never fails the request that caused it: with the broker down the failure is
logged and the work stays visible in the database (rows without vectors, queued extraction runs),
where the periodic sweeps (`memory.embed_missing`, `memory.retry_extractions`) pick it up later.
"""

from __future__ import annotations

import logging
from typing import Any

from memory.services import events

logger = logging.getLogger(__name__)


def enqueue(task: Any, *args: Any) -> bool:
    """Send `task` to the broker (or, without one, this process's background queue); log failures."""
    try:
        task.delay(*args)
    except Exception:  # noqa: BLE001 - broker outages must not reach the request
        logger.warning("could not run or queue %s%r; a periodic sweep will retry", task.name, args,
                       exc_info=True)
        return False
    return True


def after_nodes_written(sender: Any, *, tenant_id: int, node_ids: list, **kwargs: Any) -> None:
    """Queue embeddings for new or changed nodes."""
    from memory.pipeline import tasks

    enqueue(tasks.embed_nodes, tenant_id, [str(pk) for pk in node_ids])


def after_messages_captured(sender: Any, *, tenant_id: int, workspace_id: int, session_id: str,
                            message_pks: list[int], **kwargs: Any) -> None:
    """Queue embeddings for new messages and, past the extraction thresholds, an extraction run."""
    from memory.pipeline import tasks

    enqueue(tasks.embed_messages, tenant_id, message_pks)
    _maybe_extract(tenant_id, workspace_id, session_id, message_pks)


def _maybe_extract(tenant_id: int, workspace_id: int, session_id: str, message_pks: list[int]) -> None:
    from memory.pipeline.triggers import extraction_maybe_request

    extraction_maybe_request(tenant_id=tenant_id, workspace_id=workspace_id, session_id=session_id,
                             message_pks=message_pks)


def after_nodes_read(sender: Any, *, batch: dict, **kwargs: Any) -> None:
    """Queue one read-audit batch; with the broker unreachable, write it now (a read is never lost)."""
    from memory.pipeline import tasks
    from memory.services.reads import node_reads_write

    if not enqueue(tasks.record_reads, batch):
        node_reads_write(**batch)


def after_nodes_accessed(sender: Any, *, batch: dict, **kwargs: Any) -> None:
    """Queue one access-count batch; with the broker unreachable, apply it now (like the read audit)."""
    from memory.pipeline import tasks
    from memory.services.maintenance import node_access_record

    if not enqueue(tasks.record_access, batch):
        node_access_record(**batch)


def connect_receivers() -> None:
    """Hook the receivers to the services' signals (idempotent: dispatch uids)."""
    events.nodes_written.connect(after_nodes_written, dispatch_uid="memory.pipeline.after_nodes_written")
    events.messages_captured.connect(after_messages_captured,
                                     dispatch_uid="memory.pipeline.after_messages_captured")
    events.nodes_read.connect(after_nodes_read, dispatch_uid="memory.pipeline.after_nodes_read")
    events.nodes_accessed.connect(after_nodes_accessed, dispatch_uid="memory.pipeline.after_nodes_accessed")
