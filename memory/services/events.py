"""What the services announce once their transaction has committed: nodes written, messages captured,
read, accessed.

The services never import the pipeline (it imports them), so follow-up work is announced as Django
signals sent from `transaction.on_commit`; `memory.pipeline.background` connects the receivers that
queue embeddings and extraction (in `MemoryConfig.ready`). A rolled-back write announces nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from django.db import transaction
from django.dispatch import Signal

from memory.models import MemoryMessage, MemoryNode

# Receivers get `tenant_id` and `node_ids` (UUIDs of created, superseding or updated nodes).
nodes_written = Signal()
# Receivers get `tenant_id`, `workspace_id`, `session_id` and `message_pks` (new rows only).
messages_captured = Signal()
# Receivers get `batch`: the keyword arguments of memory.services.reads.node_reads_write.
nodes_read = Signal()
# Receivers get `batch`: the keyword arguments of memory.services.maintenance.node_access_record.
nodes_accessed = Signal()


def nodes_written_announce(*, tenant_id: int, node_ids: Iterable[UUID]) -> None:
    """Send `nodes_written` after the current transaction commits (nothing when `node_ids` is empty)."""
    ids = list(dict.fromkeys(node_ids))
    if ids:
        transaction.on_commit(
            lambda: nodes_written.send(sender=MemoryNode, tenant_id=tenant_id, node_ids=ids))


def messages_captured_announce(*, tenant_id: int, workspace_id: int, session_id: str,
                               message_pks: Iterable[int]) -> None:
    """Send `messages_captured` after the current transaction commits (nothing for no new messages)."""
    pks = list(message_pks)
    if pks:
        transaction.on_commit(lambda: messages_captured.send(
            sender=MemoryMessage, tenant_id=tenant_id, workspace_id=workspace_id, session_id=session_id,
            message_pks=pks))


def nodes_read_announce(*, batch: dict) -> None:
    """Send `nodes_read` with one read-audit batch after the current transaction commits."""
    transaction.on_commit(lambda: nodes_read.send(sender=MemoryNode, batch=batch))


def nodes_accessed_announce(*, batch: dict) -> None:
    """Send `nodes_accessed` with one access-count batch after the current transaction commits."""
    transaction.on_commit(lambda: nodes_accessed.send(sender=MemoryNode, batch=batch))
