"""`manage.py index_health` on the real database: table statistics, B-tree bloat, tenants' own indexes."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from memory.index_health import estimated_pages, index_health, own_tenant
from memory.services.reads import node_reads_write, read_events_sweep

READS = "memory_memoryreadevent"
UUID = "0b5c1f0e-2a6f-4c8e-9f3a-1d2e3f4a5b6c"


@pytest.mark.parametrize(("name", "predicate", "tenant"), [
    ("node_embedding_hnsw", None, None),
    ("node_active_slot_uniq", "((status)::text = 'active'::text)", None),
    ("anything", "(tenant_id = 12)", 12),
    ("anything", "((tenant_id = 12) AND ((status)::text = 'active'::text))", 12),
    ("anything", "((tenant_id = 12) OR (tenant_id = 13))", None),
    ("anything", f"(tenant_id = '{UUID}'::uuid)", UUID),
    ("memory_node_hnsw_tc", None, 12),
    ("memory_message_gin_t1f", None, 31),
    (f"memory_node_hnsw_t{UUID.replace('-', '')}", None, UUID),
    ("memory_node_hnsw_tenant", None, None),
])
def test_an_index_of_one_tenant_is_known_by_its_predicate_or_its_name(name, predicate, tenant):
    assert own_tenant(name, predicate) == tenant


def test_the_estimate_counts_the_pages_a_fresh_btree_needs():
    # 100k bigint keys: 8 + 8 bytes a tuple plus a 4-byte line pointer, 90 % of 8,152 bytes a page.
    assert estimated_pages(100_000, 90, 8, nullable=False) == 1 + -(-100_000 // 366)
    assert estimated_pages(0, 90, 8, nullable=False) == 1


def _tenant_row(report, table: str):
    return next(t for t in report.tables if t.name == table)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_bloat_statistics_and_a_tenants_own_index_are_reported(tenant_a, tenant_b):
    now = timezone.now()
    for read_at, count in ((now - timedelta(days=90), 4500), (now, 500)):
        node_reads_write(tenant_id=tenant_a.pk, node_ids=[str(uuid.uuid4()) for _ in range(count)],
                         endpoint="memory/search", actor="api_key:test", user_id=None, api_key_id=None,
                         read_at=read_at.isoformat())
    owner = connections["owner"]
    with owner.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {READS}")
    fresh = {index.name: index for index in _tenant_row(index_health(), READS).indexes}
    assert read_events_sweep(now=now) == 4500
    own = f"memory_node_hnsw_t{tenant_a.pk:x}"
    with owner.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {READS}")
        cursor.execute(f"CREATE INDEX {own} ON memory_memorynode USING hnsw (embedding vector_cosine_ops) "
                       f"WHERE tenant_id = {tenant_a.pk}")
        cursor.execute(f"CREATE INDEX memory_b_kinds ON memory_memorynode (kind) "
                       f"WHERE tenant_id = {tenant_b.pk}")
    try:
        report = index_health()
        out = StringIO()
        call_command("index_health", "--json", stdout=out)
        text = StringIO()
        call_command("index_health", stdout=text)
    finally:
        with owner.cursor() as cursor:
            cursor.execute(f"DROP INDEX {own}; DROP INDEX memory_b_kinds")

    reads = _tenant_row(report, READS)
    assert reads.live_rows == 500 and reads.last_analyze is not None and reads.last_vacuum is not None
    after = {index.name: index for index in reads.indexes}
    # Distinct keys (each read names its own card): B-tree deduplication does not shrink this index.
    assert fresh["read_node_time_idx"].bloat_source == "estimate"
    assert fresh["read_node_time_idx"].bloat_pct < 40 <= after["read_node_time_idx"].bloat_pct
    nodes = {index.name: index for index in _tenant_row(report, "memory_memorynode").indexes}
    assert nodes["node_embedding_hnsw"].method == "hnsw" and nodes["node_embedding_hnsw"].bloat_pct is None
    assert nodes[own].tenant_id == tenant_a.pk and nodes["memory_b_kinds"].tenant_id == tenant_b.pk
    assert {t.slug: t.indexes for t in report.tenants} == {"tenant-a": [own], "tenant-b": ["memory_b_kinds"]}

    as_json = json.loads(out.getvalue())
    assert {table["name"] for table in as_json["tables"]} >= {READS, "memory_memorynode", "tenants_workspace"}
    assert {"tenant_id": tenant_a.pk, "slug": "tenant-a", "indexes": [own]} in as_json["tenants"]
    assert f"tenant-a (id {tenant_a.pk}): {own}" in text.getvalue()
    assert "read_tenant_time_idx" in text.getvalue() and "last analyze" in text.getvalue()


@pytest.mark.django_db(databases=["default", "owner"])
def test_card_pages_keep_room_for_hot_access_bumps() -> None:
    """memory migration 0013: an access bump of a card stays on its page and touches no index."""
    with connections["owner"].cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'memory_memorynode'")
        assert "fillfactor=80" in (cursor.fetchone()[0] or [])
