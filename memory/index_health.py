"""Index health of the tenant tables: the report behind `manage.py index_health`.

Per table (pg_stat_user_tables): live and dead rows, last (auto)analyze and (auto)vacuum, size.
Per index: method, size, validity (a failed `CREATE INDEX CONCURRENTLY` leaves an invalid one),
its predicate, and a bloat figure for B-tree indexes — measured by `pgstatindex` when the
pgstattuple extension is installed, else estimated from the planner statistics the standard way
(pages the index would need at its fillfactor for `reltuples` entries of the columns' average
width, against the pages it has; it ignores B-tree deduplication, so an index of many equal keys
shows less bloat than it has). GIN and HNSW indexes have no such estimate; their table's dead
rows (entries a VACUUM has yet to clean out) are the figure to watch. A tenant has its own index
when a partial index's predicate pins one `tenant_id`, or when its name follows the per-tenant
convention `memory_<node|message>_<hnsw|gin>_t<tenant id in hex>`.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from django.apps import apps
from django.db import connections

from tenants.models import TenantOwnedModel

PER_TENANT_NAME = re.compile(r"^memory_(?:node|message)_(?:hnsw|gin)_t(?P<hex>[0-9a-f]+)$")
TENANT_PREDICATE = re.compile(r"\btenant_id\s*=\s*'?(?P<value>[0-9a-fA-F-]+)'?")
# B-tree page layout (PostgreSQL's storage/bufpage.h and access/nbtree.h): page header, special space.
PAGE_HEADER, BTREE_OPAQUE, ITEM_POINTER, INDEX_TUPLE_HEADER, MAXALIGN = 24, 16, 4, 8, 8


@dataclass
class IndexHealth:
    name: str
    method: str
    size_bytes: int
    valid: bool
    predicate: str | None
    rows: int  # the planner's estimate (reltuples), -1 before the first ANALYZE or VACUUM
    tenant_id: int | str | None = None  # set when this is a tenant's own index
    bloat_pct: float | None = None
    bloat_bytes: int | None = None
    bloat_source: str = "n/a"  # "pgstattuple", "estimate", "no statistics (ANALYZE the table)" or "n/a"


@dataclass
class TableHealth:
    name: str
    size_bytes: int
    live_rows: int
    dead_rows: int
    last_analyze: datetime | None
    last_autoanalyze: datetime | None
    last_vacuum: datetime | None
    last_autovacuum: datetime | None
    indexes: list[IndexHealth] = field(default_factory=list)


@dataclass
class TenantIndexes:
    tenant_id: int | str
    slug: str | None  # None: no such tenant (an index left behind by a deleted tenant)
    indexes: list[str]


@dataclass
class Report:
    pgstattuple: bool
    tables: list[TableHealth]
    tenants: list[TenantIndexes]
    # `tsvector @@ tsquery` is leakproof, so keyword searches under row-level security can use the GIN
    # indexes (memory migration 0010 sets it when it runs as a superuser).
    text_match_leakproof: bool = False


def tenant_tables() -> list[str]:
    """Return the tables of every tenant-owned model, sorted."""
    return sorted(model._meta.db_table for model in apps.get_models() if issubclass(model, TenantOwnedModel))


def index_health(*, using: str = "owner") -> Report:
    """Read the health of every tenant table and its indexes from the catalogue of database `using`."""
    tables = tenant_tables()
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT count(*) > 0, current_setting('block_size')::int FROM pg_extension "
                       "WHERE extname = 'pgstattuple'")
        has_pgstattuple, block_size = cursor.fetchone()
        cursor.execute(
            "SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup, last_analyze, "
            "last_autoanalyze, last_vacuum, last_autovacuum FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s) ORDER BY relname", [tables])
        health = {row[0]: TableHealth(*row) for row in cursor.fetchall()}
        for table, index in _indexes(cursor, tables, has_pgstattuple, block_size):
            if table in health:
                health[table].indexes.append(index)
        owners = _tenant_indexes(cursor, [index for table in health.values() for index in table.indexes])
        leakproof = text_match_leakproof(cursor)
    return Report(pgstattuple=has_pgstattuple, tables=list(health.values()), tenants=owners,
                  text_match_leakproof=leakproof)


def text_match_leakproof(cursor) -> bool:  # noqa: ANN001
    """Return whether `tsvector @@ tsquery` may be an index condition under row-level security."""
    cursor.execute("SELECT proleakproof FROM pg_proc WHERE oid = %s::regprocedure",
                   ["ts_match_vq(tsvector, tsquery)"])
    return bool(cursor.fetchone()[0])


def _indexes(cursor, tables: list[str], has_pgstattuple: bool,  # noqa: ANN001
             block_size: int) -> list[tuple[str, IndexHealth]]:
    cursor.execute(
        "SELECT t.relname, i.relname, am.amname, pg_relation_size(i.oid), x.indisvalid, "
        "pg_get_expr(x.indpred, x.indrelid), i.reltuples::bigint, i.relpages, i.reloptions, "
        "ARRAY(SELECT a.attname FROM unnest(x.indkey) AS k(attnum) JOIN pg_attribute a "
        "      ON a.attrelid = x.indrelid AND a.attnum = k.attnum), i.oid "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "JOIN pg_am am ON am.oid = i.relam "
        "WHERE t.relname = ANY(%s) AND pg_table_is_visible(t.oid) ORDER BY t.relname, i.relname", [tables])
    rows = cursor.fetchall()
    cursor.execute("SELECT tablename, attname, null_frac, avg_width FROM pg_stats "
                   "WHERE schemaname = current_schema() AND tablename = ANY(%s)", [tables])
    stats = {(table, column): (null_frac, width) for table, column, null_frac, width in cursor.fetchall()}
    found = []
    for table, name, method, size, valid, predicate, count, pages, options, columns, oid in rows:
        index = IndexHealth(name, method, size, valid, predicate, count, own_tenant(name, predicate))
        if method == "btree" and has_pgstattuple:
            cursor.execute("SELECT avg_leaf_density FROM pgstatindex(%s)", [oid])
            _measured_bloat(index, cursor.fetchone()[0], _fillfactor(options))
        elif method == "btree":
            key_stats = [stats.get((table, column)) for column in columns]
            _estimated_bloat(index, pages, _fillfactor(options), key_stats, block_size)
        found.append((table, index))
    return found


def own_tenant(name: str, predicate: str | None) -> int | str | None:
    """Return the tenant an index belongs to alone (by its predicate or its name), or None."""
    try:
        if predicate and " OR " not in predicate.upper() and (match := TENANT_PREDICATE.search(predicate)):
            value = match.group("value")
            return int(value) if value.isdigit() else str(uuid.UUID(value))
        if match := PER_TENANT_NAME.match(name):
            digits = match.group("hex")
            return str(uuid.UUID(digits)) if len(digits) == 32 else int(digits, 16)
    except ValueError:  # a predicate on tenant_id that is no tenant id
        pass
    return None


def bloat_from_leaf_density(leaf_density: float, fillfactor: int) -> float:
    """Return the bloat (percent of the index) that pgstatindex's average leaf density shows."""
    return max(0.0, 100.0 * (1 - leaf_density / fillfactor))


def estimated_pages(rows: int, fillfactor: int, key_width: float, nullable: bool,
                    block_size: int = 8192) -> int:
    """Return the pages a freshly built B-tree needs for `rows` entries of `key_width` bytes of keys."""
    header = INDEX_TUPLE_HEADER + (4 if nullable else 0)  # a null bitmap when a key may be NULL
    tuple_width = _aligned(header) + _aligned(math.ceil(key_width))
    usable = (block_size - PAGE_HEADER - BTREE_OPAQUE) * fillfactor / 100
    return 1 + math.ceil(max(rows, 0) / math.floor(usable / (ITEM_POINTER + tuple_width)))


def _aligned(width: int) -> int:
    return (width + MAXALIGN - 1) // MAXALIGN * MAXALIGN


def _fillfactor(options: list[str] | None) -> int:
    found = [option.partition("=")[2] for option in options or [] if option.startswith("fillfactor=")]
    return int(found[0]) if found else 90


def _measured_bloat(index: IndexHealth, leaf_density: float, fillfactor: int) -> None:
    index.bloat_pct = round(bloat_from_leaf_density(leaf_density, fillfactor), 1)
    index.bloat_bytes = int(index.size_bytes * index.bloat_pct / 100)
    index.bloat_source = "pgstattuple"


def _estimated_bloat(index: IndexHealth, pages: int, fillfactor: int,
                     columns: list[tuple[float, int] | None], block_size: int) -> None:
    if index.rows < 0 or not columns or None in columns:
        index.bloat_source = "no statistics (ANALYZE the table)"
        return
    key_width = sum((1 - null_frac) * width for null_frac, width in columns)
    nullable = any(null_frac > 0 for null_frac, _ in columns)
    spare = max(0, pages - estimated_pages(index.rows, fillfactor, key_width, nullable, block_size))
    index.bloat_pct = round(100.0 * spare / pages, 1) if pages else 0.0
    index.bloat_bytes = spare * block_size
    index.bloat_source = "estimate"


def _tenant_indexes(cursor, indexes: list[IndexHealth]) -> list[TenantIndexes]:  # noqa: ANN001
    owned: dict[int | str, list[str]] = {}
    for index in indexes:
        if index.tenant_id is not None:
            owned.setdefault(index.tenant_id, []).append(index.name)
    numeric = [tenant for tenant in owned if isinstance(tenant, int)]
    slugs: dict[int | str, str] = {}
    if numeric:
        cursor.execute("SELECT id, slug FROM tenants_tenant WHERE id = ANY(%s)", [numeric])
        slugs = dict(cursor.fetchall())
    return [TenantIndexes(tenant, slugs.get(tenant), sorted(names))
            for tenant, names in sorted(owned.items(), key=lambda item: str(item[0]))]
