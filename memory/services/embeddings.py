"""Vectors for nodes and messages: computed in the background after commit, swept up when work was missed.

Embeddings are derived data (like the search index), so writing them is no memory mutation: no
revision bump, no audit event. Each function takes the tenant id explicitly and works inside
its tenant context.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import Q
from django.db.models.functions import Length

from memory.models import Channel, MemoryMessage, MemoryNode
from memory.search.embeddings import EmbeddingProvider, get_provider
from memory.services.rows_insert import vectors_update
from tenants.context import tenant_context
from tenants.models import Tenant

logger = logging.getLogger(__name__)

MIN_MESSAGE_CHARS = 10  # seed 004: short messages ("ok", "thanks") are not worth a vector
BATCH = 128


def node_embedding_text(node: MemoryNode) -> str:
    value = node.value_json
    value_text = value if isinstance(value, str) else (json.dumps(value, ensure_ascii=False) if value else "")
    return "\n".join(part for part in (node.title, node.content, value_text) if part)


def node_vectors(provider: EmbeddingProvider, nodes: Sequence[MemoryNode]) -> list[list[float]]:
    """Return each card's vector: the normalised sum of its whole text's and its statement's vectors.

    A title is a label ("不吃花椒") and the statement says it in full; weighting the statement twice
    lets a paraphrase or a question in the other language find the card more often, without losing
    the title's words (bench/README.md, memory_search_quality.py). One embed call for all views.
    """
    views = [[node_embedding_text(node)] for node in nodes]
    for node, texts in zip(nodes, views, strict=True):
        if node.content and node.content.strip() and node.content != texts[0]:
            texts.append(node.content)
    flat = provider.embed([text for texts in views for text in texts])
    vectors, start = [], 0
    for texts in views:
        parts, start = flat[start:start + len(texts)], start + len(texts)
        summed = [math.fsum(column) for column in zip(*parts, strict=True)]
        norm = math.sqrt(math.fsum(value * value for value in summed)) or 1.0
        vectors.append([value / norm for value in summed])
    return vectors


def nodes_embed(*, tenant_id: int, node_ids: Sequence[str]) -> int:
    """Compute vectors for the given nodes with the configured provider; return how many were stored.

    Each batch is read, embedded outside any transaction, then stored in a short one of its own.
    """
    provider = get_provider()
    stored = 0
    for start in range(0, len(node_ids), BATCH):
        with tenant_context(tenant_id):
            nodes = list(MemoryNode.objects.filter(tenant_id=tenant_id, pk__in=node_ids[start:start + BATCH])
                         .only("id", "title", "content", "value_json"))
        if not nodes:
            continue
        vectors = dict(zip((node.pk for node in nodes), node_vectors(provider, nodes), strict=True))
        stored += _vectors_store(tenant_id, MemoryNode, vectors, provider.model_id)
    logger.info("embedded %d node(s) of tenant %s with %s", stored, tenant_id, provider.model_id)
    return stored


def _vectors_store(tenant_id: int, model: type[MemoryNode] | type[MemoryMessage],
                   vectors: dict[Any, list[float]], model_id: str) -> int:
    """Write `vectors` (by row pk) of `model_id` in one short transaction; return how many were written.

    Two processes can embed the same rows at once (a task and the sweep, two workers' sweeps). Each
    locks the rows in id order and skips the ones another holds (that one writes the same vector),
    so neither waits on the other: updating in different orders once deadlocked. A row skipped
    because a write holds it gets its vector from that write's own task or from the sweep. The
    locked rows are then written by one UPDATE … FROM unnest(…) (`vectors_update`).
    """
    with tenant_context(tenant_id):
        locked = model.objects.select_for_update(skip_locked=True).filter(tenant_id=tenant_id,
                                                                          pk__in=list(vectors))
        mine = list(locked.order_by("pk").values_list("pk", flat=True))
        vectors_update(model, tenant_id=tenant_id, pks=mine, vectors=[vectors[pk] for pk in mine],
                       model_id=model_id)
    return len(mine)


def embeddable_messages(tenant_id: int):  # noqa: ANN201 - a queryset
    """Main-channel messages long enough to embed (call inside the tenant context)."""
    return embeddable(MemoryMessage.objects.filter(tenant_id=tenant_id))


def embeddable(messages):  # noqa: ANN001, ANN201 - querysets
    """Narrow a queryset of messages to those that get a vector: main channel, long enough."""
    return messages.annotate(length=Length("content")).filter(channel=Channel.MAIN,
                                                              length__gte=MIN_MESSAGE_CHARS)


def messages_embed(*, tenant_id: int, message_pks: Sequence[int]) -> int:
    """Compute vectors for main-channel messages of at least MIN_MESSAGE_CHARS characters."""
    provider = get_provider()
    stored = 0
    for start in range(0, len(message_pks), BATCH):
        with tenant_context(tenant_id):
            messages = list(embeddable_messages(tenant_id).filter(pk__in=message_pks[start:start + BATCH])
                            .only("id", "content"))
        if not messages:
            continue
        texts = [m.content for m in messages]
        vectors = dict(zip((m.pk for m in messages), provider.embed(texts), strict=True))
        stored += _vectors_store(tenant_id, MemoryMessage, vectors, provider.model_id)
    logger.info("embedded %d message(s) of tenant %s with %s", stored, tenant_id, provider.model_id)
    return stored


def stale_vector_q(model_id: str) -> Q:
    return Q(embedding__isnull=True) | ~Q(embedding_model=model_id)


def embed_missing(*, limit_per_tenant: int = 2000) -> int:
    """Catch up on rows whose vector is missing or from another model (lost tasks, broker outages)."""
    provider = get_provider()
    total = 0
    for tenant_id in Tenant.objects.values_list("pk", flat=True):
        with tenant_context(tenant_id):
            node_ids = list(MemoryNode.objects.filter(stale_vector_q(provider.model_id), tenant_id=tenant_id)
                            .values_list("pk", flat=True)[:limit_per_tenant])
            message_pks = list(embeddable_messages(tenant_id).filter(stale_vector_q(provider.model_id))
                               .values_list("pk", flat=True)[:limit_per_tenant])
        if node_ids:
            total += nodes_embed(tenant_id=tenant_id, node_ids=[str(pk) for pk in node_ids])
        if message_pks:
            total += messages_embed(tenant_id=tenant_id, message_pks=message_pks)
    return total


VECTOR_TABLES = {  # table → its HNSW index (memory/models.py)
    MemoryNode._meta.db_table: "node_embedding_hnsw",
    MemoryMessage._meta.db_table: "message_embedding_hnsw",
}


def vector_column_dimensions() -> int:
    """Return how many dimensions the vector columns hold now."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
            [MemoryNode._meta.db_table],
        )
        return cursor.fetchone()[0]


def vector_columns_resize(*, dimensions: int) -> None:
    """Give every vector column `dimensions` (as the owner: it is DDL); drops every vector for a rebuild."""
    with connections["owner"].cursor() as cursor:
        for table, index in VECTOR_TABLES.items():
            cursor.execute(f'DROP INDEX IF EXISTS "{index}"')
            cursor.execute(f'ALTER TABLE "{table}" ALTER COLUMN embedding TYPE vector({dimensions}) '
                           "USING NULL")
            cursor.execute(f"UPDATE \"{table}\" SET embedding_model = ''")
            cursor.execute(f'CREATE INDEX "{index}" ON "{table}" USING hnsw (embedding vector_cosine_ops) '
                           "WITH (m = 16, ef_construction = 64)")
