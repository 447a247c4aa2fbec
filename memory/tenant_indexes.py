"""Big tenants' own search structures: HNSW and GIN indexes and term statistics (`manage.py tenant_indexes`).

The shared indexes of a search table hold every tenant's rows. A tenant-filtered nearest-neighbour
search walks a graph of everyone's vectors and filters afterwards, and below ~50k rows of a tenant
the planner gives up on it for an exact scan that reads (detoasts) every vector of the tenant; a
keyword lookup in the shared GIN index finds every tenant's rows holding the word, and the planner
(rightly, for a word common everywhere) prefers reading the whole tenant. A tenant whose rows in
`memory_memorynode` or `memory_memorymessage` reach `EKKO_TENANT_INDEX_FROM` therefore gets partial
indexes of its own:

    CREATE INDEX CONCURRENTLY memory_node_hnsw_t<tenant id in hex> ON memory_memorynode
        USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64) WHERE tenant_id = <id>
    CREATE INDEX CONCURRENTLY memory_node_gin_t<tenant id in hex> ON memory_memorynode
        USING gin (search_vector) WHERE tenant_id = <id>

(`memory_message_…` for messages; memory.index_health reports them by these names). The search
statements name their tenant as a literal (client-side parameter binding, custom plans), so the
planner proves the predicate and reads only that tenant's graph and posting lists. Such a tenant also
gets term statistics (memory.services.term_stats, refreshed when older than TERM_STATS_MAX_AGE), from
which the keyword arm weighs common words without counting their rows (memory.search.keyword_arm).

Both go when the tenant's rows fall below half the threshold (so a tenant hovering at the threshold
does not rebuild its graph every sweep); a deleted tenant's index is dropped (its rows and statistics
go with it), and an invalid index (an interrupted build) is dropped and built again. The sweep
(`tenant_indexes_sweep`) runs from the beat schedule and from the command; an advisory lock keeps it
to one process at a time. Builds and drops are CONCURRENTLY, so writes go on meanwhile; DDL runs on
the `owner` connection (only the table's owner may index it), the row counts in each tenant's context
on the application's connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Model
from django.utils import timezone

from memory.index_health import own_tenant
from memory.models import MemoryMessage, MemoryNode, MemoryTermStat
from memory.services.term_stats import term_stats_clear, term_stats_refresh
from tenants.context import tenant_context
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# Table kind in the index name → model. The HNSW graph parameters are the shared index's (memory.models).
SEARCH_MODELS: dict[str, type[Model]] = {"node": MemoryNode, "message": MemoryMessage}
METHODS: dict[str, str] = {
    "hnsw": "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
    "gin": "USING gin (search_vector)",
}
# pg_try_advisory_lock key of the sweep: one sweep at a time per database, whichever process runs it.
SWEEP_LOCK = 0x656B6B6F_69647831  # "ekkoidx1"
# Term statistics move slowly (a share of rows holding a word); an hourly refresh keeps them close.
TERM_STATS_MAX_AGE = timedelta(hours=1)


def index_name(kind: str, tenant_id: int, method: str = "hnsw") -> str:
    """Return the name of a tenant's own index (`method` "hnsw" or "gin") on the `kind` ("node"/"message") table."""
    return f"memory_{kind}_{method}_t{int(tenant_id):x}"


def index_definition(kind: str, tenant_id: int, method: str = "hnsw") -> str:
    """Return the CREATE INDEX CONCURRENTLY statement of a tenant's own index."""
    table = SEARCH_MODELS[kind]._meta.db_table
    return (f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{index_name(kind, tenant_id, method)}" ON "{table}" '
            f"{METHODS[method]} WHERE tenant_id = {int(tenant_id):d}")


@dataclass(frozen=True)
class TenantIndex:
    kind: str
    method: str
    tenant_id: int
    name: str
    valid: bool


@dataclass
class SweepPlan:
    """What a sweep does: indexes to build and to drop, term statistics to refresh and to clear."""

    create: list[tuple[TenantIndex, str]] = field(default_factory=list)
    drop: list[tuple[TenantIndex, str]] = field(default_factory=list)
    refresh: list[tuple[str, int]] = field(default_factory=list)  # (kind, tenant id)
    clear: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class SweepResult:
    plan: SweepPlan
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    refreshed: list[tuple[str, int]] = field(default_factory=list)
    skipped: str = ""  # why nothing ran (another sweep holds the lock, the feature is off)


def existing_indexes(*, using: str = "owner") -> list[TenantIndex]:
    """Return the tenants' own indexes on the search tables, valid or not (by name: memory.index_health)."""
    tables = {model._meta.db_table: kind for kind, model in SEARCH_MODELS.items()}
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT t.relname, i.relname, am.amname, x.indisvalid FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_am am ON am.oid = i.relam "
            "WHERE t.relname = ANY(%s) AND am.amname = ANY(%s) AND pg_table_is_visible(t.oid) ORDER BY i.relname",
            [list(tables), list(METHODS)])
        rows = cursor.fetchall()
    found = []
    for table, name, method, valid in rows:
        kind = tables[table]
        tenant_id = own_tenant(name, None)
        if isinstance(tenant_id, int) and name == index_name(kind, tenant_id, method):
            found.append(TenantIndex(kind, method, tenant_id, name, bool(valid)))
    return found


def tenant_rows(kind: str, tenant_id: int, *, up_to: int) -> int:
    """Return how many rows the tenant has in the `kind` table, counting no further than `up_to`."""
    model = SEARCH_MODELS[kind]
    with tenant_context(tenant_id):
        return model.objects.filter(tenant_id=tenant_id).order_by()[:up_to].count()


def stats_refreshed_at(kind: str, tenant_id: int) -> datetime | None:
    """Return when the tenant's term statistics of the `kind` table were refreshed, or None without any."""
    with tenant_context(tenant_id):
        return (MemoryTermStat.objects.filter(tenant_id=tenant_id, source=kind, term=MemoryTermStat.COLLECTION)
                .values_list("refreshed_at", flat=True).first())


def sweep_plan(*, threshold: int, using: str = "owner", now: datetime | None = None) -> SweepPlan:
    """Return the builds, drops, refreshes and clears that fit the tenants' own structures to their sizes.

    A tenant with `threshold` rows gets its index and term statistics; it keeps them down to half of
    that; its statistics are refreshed when older than TERM_STATS_MAX_AGE.
    """
    plan = SweepPlan()
    now = now or timezone.now()
    keep_from = max(1, threshold // 2)
    tenants = set(Tenant.objects.values_list("pk", flat=True))
    have = {(index.kind, index.method, index.tenant_id): index for index in existing_indexes(using=using)}
    for index in have.values():
        if index.tenant_id not in tenants:
            plan.drop.append((index, "tenant deleted"))
        elif not index.valid:
            plan.drop.append((index, "invalid (an interrupted build)"))
    for tenant_id in sorted(tenants):
        for kind in SEARCH_MODELS:
            own = {method: have.get((kind, method, tenant_id)) for method in METHODS}
            rows = tenant_rows(kind, tenant_id, up_to=threshold)
            # A tenant that has its structures keeps them down to half the threshold.
            big = rows >= (keep_from if any(own.values()) else threshold)
            for method, index in own.items():
                if big and (index is None or not index.valid):
                    plan.create.append((TenantIndex(kind, method, tenant_id, index_name(kind, tenant_id, method),
                                                    True), f"{rows:,}+ rows"))
                elif not big and index is not None and index.valid:
                    plan.drop.append((index, f"{rows:,} rows, below {keep_from:,}"))
            refreshed = stats_refreshed_at(kind, tenant_id)
            if big and (refreshed is None or now - refreshed > TERM_STATS_MAX_AGE):
                plan.refresh.append((kind, tenant_id))
            elif not big and refreshed is not None:
                plan.clear.append((kind, tenant_id))
    return plan


def tenant_indexes_sweep(*, threshold: int | None = None, dry_run: bool = False, using: str = "owner",
                         report: Callable[[str], None] | None = None) -> SweepResult:
    """Build the missing own indexes of tenants at or above `threshold` rows, drop those no longer wanted.

    `threshold` defaults to `EKKO_TENANT_INDEX_FROM` (0 turns the sweep off). With `dry_run` only the
    plan is returned. `report` is told each step as it happens.
    """
    threshold = settings.EKKO_TENANT_INDEX_FROM if threshold is None else threshold
    if threshold <= 0:
        return SweepResult(plan=SweepPlan(), skipped="EKKO_TENANT_INDEX_FROM is 0: tenants get no own index")
    connection = connections[using]
    if connection.in_atomic_block:
        raise RuntimeError("tenant_indexes_sweep builds indexes CONCURRENTLY: call it outside a transaction.")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [SWEEP_LOCK])
        if not cursor.fetchone()[0]:
            return SweepResult(plan=SweepPlan(), skipped="another sweep is running")
    try:
        plan = sweep_plan(threshold=threshold, using=using)
        result = SweepResult(plan=plan)
        if dry_run:
            return result
        for index, reason in plan.drop:
            _run_ddl(using, f'DROP INDEX CONCURRENTLY IF EXISTS "{index.name}"')
            result.dropped.append(index.name)
            _tell(report, f"dropped {index.name} ({reason})")
        for kind, tenant_id in plan.clear:
            term_stats_clear(tenant_id=tenant_id, source=kind)
            _tell(report, f"cleared the {kind} term statistics of tenant {tenant_id}")
        for index, reason in plan.create:
            started = time.perf_counter()
            try:
                _run_ddl(using, index_definition(index.kind, index.tenant_id, index.method))
            except DatabaseError as error:
                # A failed concurrent build leaves an invalid index behind: remove it, the next sweep retries.
                logger.warning("tenant indexes: building %s failed: %s", index.name, error)
                _run_ddl(using, f'DROP INDEX CONCURRENTLY IF EXISTS "{index.name}"')
                continue
            result.created.append(index.name)
            _tell(report, f"built {index.name} ({reason}) in {time.perf_counter() - started:.1f}s")
        for kind, tenant_id in plan.refresh:
            started = time.perf_counter()
            terms = term_stats_refresh(tenant_id=tenant_id, source=kind)
            result.refreshed.append((kind, tenant_id))
            _tell(report, f"refreshed the {kind} term statistics of tenant {tenant_id} ({terms:,} terms) in "
                          f"{time.perf_counter() - started:.1f}s")
        return result
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SWEEP_LOCK])


def _run_ddl(using: str, statement: str) -> None:
    with connections[using].cursor() as cursor:
        cursor.execute(statement)


def _tell(report: Callable[[str], None] | None, message: str) -> None:
    logger.info("tenant indexes: %s", message)
    if report is not None:
        report(message)
