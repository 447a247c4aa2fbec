"""Term statistics of big tenants: how many of their searched rows hold each common search term.

The keyword arm weighs each query term by its BM25 inverse document frequency, which needs the number
of searched rows holding the term. For a word in tens of thousands of a tenant's rows, counting costs
more than the rest of the search, so for tenants with their own search index (memory.tenant_indexes)
the arm reads these statistics instead (memory.search.keyword_arm). `term_stats_refresh` stores, per
searched table, every term found in at least `MemoryTermStat.KEPT_FROM` of the tenant's searched rows (active
cards; main-channel messages), counted by PostgreSQL's `ts_stat` over the rows' tsvectors, plus the
collection's size under the empty term (`MemoryTermStat.COLLECTION`). A term missing here is rare in the tenant and is counted
exactly at search time. Only terms of many rows are kept, so no single card's words are: a hard
forget leaves nothing of the card here.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.utils import timezone

from memory.models import MemoryMessage, MemoryNode, MemoryTermStat, SearchTable
from tenants.context import tenant_context

_SEARCHED_ROWS = {
    SearchTable.NODE: (MemoryNode._meta.db_table, "status = 'active'"),
    SearchTable.MESSAGE: (MemoryMessage._meta.db_table, "channel = 'main'"),
}


def term_stats_refresh(*, tenant_id: int, source: str, now: datetime | None = None) -> int:
    """Replace the tenant's statistics of `source` ("node" or "message") with fresh counts; return the terms kept."""
    db_table, searched = _SEARCHED_ROWS[SearchTable(source)]
    rows_sql = f"SELECT search_vector FROM {db_table} WHERE tenant_id = {int(tenant_id):d} AND {searched}"
    now = now or timezone.now()
    stats_table = MemoryTermStat._meta.db_table
    with tenant_context(tenant_id):
        MemoryTermStat.objects.filter(tenant_id=tenant_id, source=source).delete()
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {stats_table} (tenant_id, source, term, documents, refreshed_at) "
                f"SELECT %s, %s, word, ndoc, %s FROM ts_stat(%s) WHERE ndoc >= %s AND length(word) <= 200 "
                f"UNION ALL SELECT %s, %s, %s, count(*), %s FROM {db_table} WHERE tenant_id = %s AND {searched}",
                [tenant_id, source, now, rows_sql, MemoryTermStat.KEPT_FROM, tenant_id, source, MemoryTermStat.COLLECTION,
                 now, tenant_id])
            return cursor.rowcount - 1


def term_stats_clear(*, tenant_id: int, source: str) -> int:
    """Remove the tenant's statistics of `source`; return how many rows went."""
    with tenant_context(tenant_id):
        deleted, _ = MemoryTermStat.objects.filter(tenant_id=tenant_id, source=source).delete()
    return deleted

