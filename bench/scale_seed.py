"""Seed the scale bench's data: many tenants of memory cards and one workspace of messages, with vectors.

Rows go through memory.services.imports (the import staging path: COPY into temporary tables, one
INSERT … SELECT per chunk under the tenant's row-level security), the bulk writer an import of an
Ekko file uses. `node_write_bulk` (one savepoint, slot lock, insert and audit event per card)
measured ~130 cards/s on this machine, which would take over two hours for 1M cards; its rate is
timed on a sample instead (`service_bulk_rate`). Every card gets its `create` audit event, as a
write would; vectors come from bench.scale_vectors (cached), so the seeded rows equal what the
services would have stored after the background embedding.

The layout is deterministic: tenant `<prefix>big` holds one user's 100k cards, `<prefix>10k-NN` and
`<prefix>1k-NN` tenants hold exactly that many cards of one user each, `<prefix>fill-NNN` tenants
(1 to 3 members) fill the rest; 100k messages live in the big tenant's default workspace.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from bench._common import lift_card_limit
from bench.scale_corpus import Card, Corpus

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
WEEK = timedelta(days=7)
CHUNK = 10_000
SESSION_LENGTH = 50
# Shares of cards written as older revisions (superseded), expired or soft-forgotten ones.
SUPERSEDED_SHARE, EXPIRED_SHARE, DELETED_SHARE = 0.05, 0.02, 0.01


@dataclass(frozen=True)
class TenantPlan:
    slug: str
    cards: int
    members: int  # users holding the user-scope cards (the first is the owner)
    text_offset: int  # where its cards start in the card text pool


@dataclass(frozen=True)
class Layout:
    prefix: str
    seed: int
    tenants: tuple[TenantPlan, ...]
    messages: int
    card_pool: int  # distinct card texts (and vectors); tenants other than the big one share them

    @property
    def cards(self) -> int:
        return sum(tenant.cards for tenant in self.tenants)

    def tenant(self, name: str) -> TenantPlan:
        return next(t for t in self.tenants if t.slug == self.prefix + name)


def layout(*, quick: bool, seed: int = 1) -> Layout:
    """Return the full layout (1M cards, 201 tenants) or the quick one (50k cards, 24 tenants)."""
    prefix = "scale-quick-" if quick else "scale-"
    sizes_of = {True: (20_000, 1, 2, 50_000, 20), False: (100_000, 10, 40, 1_000_000, 150)}
    big, tens, ones, total, fillers = sizes_of[quick]
    pool = 30_000 if quick else 150_000
    rng = random.Random(seed)
    plans = [TenantPlan(f"{prefix}big", big, 1, 0)]
    plans += [TenantPlan(f"{prefix}10k-{i + 1:02d}", 10_000, 1, 0) for i in range(tens)]
    plans += [TenantPlan(f"{prefix}1k-{i + 1:02d}", 1_000, 1, 0) for i in range(ones)]
    rest = total - sum(p.cards for p in plans)
    weights = [rng.lognormvariate(0, 0.8) for _ in range(fillers)]  # a long tail of tenant sizes
    sizes = [int(rest * w / sum(weights)) for w in weights]
    sizes[0] += rest - sum(sizes)
    plans += [TenantPlan(f"{prefix}fill-{i + 1:03d}", size, rng.randint(1, 3), 0)
              for i, size in enumerate(sizes)]
    # The big tenant's texts are the pool's first `big` texts (distinct); the others wrap around the rest.
    shared = pool - big
    placed = [plans[0]]
    for index, plan in enumerate(plans[1:]):
        placed.append(TenantPlan(plan.slug, plan.cards, plan.members, big + (index * 7919) % shared))
    return Layout(prefix=prefix, seed=seed, tenants=tuple(placed), messages=10_000 if quick else 100_000,
                  card_pool=pool)


def text_index(layout: Layout, plan: TenantPlan, position: int) -> int:
    """Return the pool index of the card text at `position` in `plan`'s tenant."""
    if plan.text_offset == 0:
        return position % layout.card_pool
    big = layout.tenants[0].cards
    return big + (plan.text_offset - big + position) % (layout.card_pool - big)


def _vector_text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{value:.6g}" for value in vector.tolist()) + "]"


def _pg_array(items: tuple[str, ...] | list[str]) -> str:
    from memory.transfer.sqlite_format import pg_array

    return pg_array(list(items))


# --------------------------------------------------------------------------- tenants


@dataclass
class SeededTenant:
    slug: str
    tenant: object
    workspace: object
    users: list
    cards: int


def tenant_setup(plan: TenantPlan) -> SeededTenant:
    """Create (or find) the tenant of `plan` with its members; return it with its stored card count."""
    from django.contrib.auth import get_user_model

    from memory.models import MemoryNode
    from tenants.context import tenant_context
    from tenants.models import Role, Workspace
    from tenants.services import membership_set, tenant_create

    setup = tenant_create(slug=plan.slug, owner_username=f"{plan.slug}-owner")
    lift_card_limit(setup)
    users = [setup.owner]
    for number in range(1, plan.members):
        user, _ = get_user_model().objects.get_or_create(username=f"{plan.slug}-member{number}")
        membership_set(tenant=setup.tenant, user=user, role=Role.MEMBER)
        users.append(user)
    with tenant_context(setup.tenant):
        workspace = Workspace.objects.get(tenant=setup.tenant, slug=Workspace.DEFAULT_SLUG)
        stored = MemoryNode.objects.filter(tenant=setup.tenant, workspace=workspace).count()
    return SeededTenant(plan.slug, setup.tenant, workspace, users, stored)


# --------------------------------------------------------------------------- cards


def _card_rows(layout: Layout, plan: TenantPlan, seeded: SeededTenant, texts: _TextColumns, model: str,
               start: int, end: int) -> Iterator[tuple[tuple, tuple]]:
    """Yield (node staging row, audit staging row) for positions start..end-1 of the tenant."""
    from memory.rules.item_keys import canonical_key
    from memory.rules.kinds import DEFAULT_KINDS
    from memory.visibility import owner_ref

    tenant, workspace = seeded.tenant, seeded.workspace
    for position in range(start, end):
        pool_index = text_index(layout, plan, position)
        card_texts = texts(pool_index)
        card = card_texts[0]
        rng = random.Random(f"{layout.seed}:{plan.slug}:{position}")
        spec = DEFAULT_KINDS[card.kind]
        scope = "user" if spec.default_scope == "user" else "workspace"
        user = seeded.users[position % len(seeded.users)] if scope == "user" else None
        owner = owner_ref(scope=scope, workspace_id=workspace.pk, session_id=None,
                          user_id=user.pk if user is not None else None)
        created = EPOCH + timedelta(minutes=position * 3 + rng.randint(0, 2))
        draw = rng.random()
        status, expires = "active", None
        if draw < DELETED_SHARE:
            status = "deleted"
        elif draw < DELETED_SHARE + EXPIRED_SHARE:
            status, expires = "expired", created + timedelta(days=rng.randint(1, 30))
        node_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        revision, supersedes = 1, None
        key = canonical_key(spec, card.item_key)
        item_key = card.item_key  # stored as given, like node_write_batch; the key holds the normalised form
        common = (str(tenant.pk), str(workspace.pk), str(user.pk) if user else None, None)
        if status == "active" and rng.random() < SUPERSEDED_SHARE / (1 - DELETED_SHARE - EXPIRED_SHARE):
            # An older revision of the same slot, with another text: the user changed their mind.
            old_texts = texts((pool_index + 104_729) % layout.card_pool)
            supersedes, revision, before = uuid.UUID(int=rng.getrandbits(128), version=4), 2, created - WEEK
            yield (_node_row(supersedes, common, None, None, scope, owner, spec, item_key, key, old_texts,
                             "superseded", 1, before, None, model),
                   _audit_row(supersedes, tenant, workspace, user, spec, key, before))
        yield (_node_row(node_id, common, supersedes, supersedes, scope, owner, spec, item_key, key,
                         card_texts, status, revision, created, expires, model),
               _audit_row(node_id, tenant, workspace, user, spec, key, created))


class _TextColumns:
    """The search text and vector literal of each pool text, kept for the texts tenants share."""

    def __init__(self, corpus: Corpus, vectors: np.ndarray, keep_from: int) -> None:
        self.corpus, self.vectors, self.keep_from = corpus, vectors, keep_from
        self.kept: dict[int, tuple[Card, str, str]] = {}

    def __call__(self, pool_index: int) -> tuple[Card, str, str]:
        found = self.kept.get(pool_index)
        if found is not None:
            return found
        from memory.rules.node_text import node_search_text

        card = self.corpus.card(pool_index)
        search_text = node_search_text(title=card.title, content=card.content, value_json=card.value,
                                       item_key=card.item_key, tags=card.tags,
                                       entities=card.entities)
        columns = (card, search_text, _vector_text(self.vectors[pool_index]))
        if pool_index >= self.keep_from:
            self.kept[pool_index] = columns
        return columns


def _node_row(node_id, common, parent, supersedes, scope, owner, spec, item_key, key, texts,  # noqa: ANN001
              status, revision, created, expires, model) -> tuple:
    tenant_id, workspace_id, user_id, session_id = common
    card, search_text, vector_text = texts
    return (
        str(node_id), tenant_id, workspace_id, user_id, session_id, parent and str(parent),
        supersedes and str(supersedes), scope, owner, spec.name, item_key, key, spec.domain,
        _pg_array(spec.category_path), "/".join(spec.category_path), spec.type, json.dumps(card.value),
        card.title, card.content, status, 0.9, 0.6, _pg_array(card.tags), _pg_array(card.entities), "{}",
        True, revision, created, created, expires, 0, None, search_text, vector_text, model,
        "insert", str(node_id),
    )


def _audit_row(node_id, tenant, workspace, user, spec, key, created) -> tuple:  # noqa: ANN001
    return (str(uuid.uuid5(node_id, "create")), str(tenant.pk), str(workspace.pk), "create", str(node_id),
            None, str(user.pk) if user else None, "system:bench", "seed",
            json.dumps({"kind": spec.name, "key": key}), created)


def seed_cards(layout: Layout, work: list[tuple[TenantPlan, SeededTenant]], corpus: Corpus,
               vectors: np.ndarray, model: str, report: Callable[[str], None]) -> int:
    """Insert each tenant's missing cards through the staging path; return how many rows were written.

    Rows of the next chunk are built in a thread while the database inserts the current one.
    """
    texts = _TextColumns(corpus, vectors, keep_from=layout.tenants[0].cards)
    chunks = [(plan, seeded, start, min(plan.cards, start + CHUNK))
              for plan, seeded in work for start in range(_positions_done(seeded), plan.cards, CHUNK)]
    written, started = 0, time.perf_counter()
    with ThreadPoolExecutor(max_workers=1) as builder:
        def build(chunk: tuple) -> list:
            plan, seeded, start, end = chunk
            return list(_card_rows(layout, plan, seeded, texts, model, start, end))

        pending = builder.submit(build, chunks[0]) if chunks else None
        for number, (plan, seeded, _, end) in enumerate(chunks):
            rows = pending.result()
            pending = builder.submit(build, chunks[number + 1]) if number + 1 < len(chunks) else None
            _insert_cards(seeded, rows)
            written += len(rows)
            if number % 10 == 9 or number == len(chunks) - 1:
                elapsed = time.perf_counter() - started
                report(f"cards: {written:,} rows in {elapsed:.0f}s ({written / elapsed:,.0f} rows/s), "
                       f"last {plan.slug} {end:,}/{plan.cards:,}")
    return written


def _insert_cards(seeded: SeededTenant, rows: list) -> None:
    from memory.services import imports
    from memory.services.imports_nodes import nodes_apply_staged, nodes_stage
    from tenants.context import tenant_context

    tenant = seeded.tenant
    with tenant_context(tenant):
        staging = imports.import_staging_open(tenant=tenant, check_each_statement=True)
        nodes_stage(tenant=tenant, staging=staging, rows=[node for node, _ in rows])
        imports.audit_events_stage(tenant=tenant, staging=staging, rows=[event for _, event in rows])
        nodes_apply_staged(tenant=tenant, staging=staging)
        imports.audit_events_insert_staged(tenant=tenant, staging=staging)
        imports.import_staging_close(tenant=tenant, staging=staging)


def _positions_done(seeded: SeededTenant) -> int:
    """Return how many card positions of the tenant are stored (each has one row that is not superseded)."""
    from memory.models import MemoryNode
    from tenants.context import tenant_context

    with tenant_context(seeded.tenant):
        return MemoryNode.objects.filter(tenant=seeded.tenant, workspace=seeded.workspace).exclude(
            status="superseded").count()


# --------------------------------------------------------------------------- messages


def seed_messages(layout: Layout, seeded: SeededTenant, corpus: Corpus, vectors: np.ndarray,
                  model: str) -> int:
    """Insert the missing messages into the tenant's default workspace through the staging path."""
    from memory.models import MemoryMessage
    from memory.rules.text import count_tokens, segment_for_search
    from memory.services import imports
    from tenants.context import tenant_context

    with tenant_context(seeded.tenant):
        position = MemoryMessage.objects.filter(tenant=seeded.tenant, workspace=seeded.workspace).count()
    written = 0
    user = seeded.users[0]
    while position < layout.messages:
        end = min(layout.messages, position + CHUNK)
        rows = []
        for index in range(position, end):
            content = corpus.message(index)
            session, turn = divmod(index, SESSION_LENGTH)
            role = "user" if turn % 2 == 0 else "assistant"
            created = EPOCH + timedelta(minutes=session * 90 + turn)
            rows.append((str(seeded.tenant.pk), str(seeded.workspace.pk), f"bench-msg-{index}",
                         f"bench-s{session}", str(user.pk), f"bench-msg-{index - 1}" if turn else None, role,
                         content, "main", "", None, count_tokens(content), created,
                         segment_for_search(content), _vector_text(vectors[index]), model))
        with tenant_context(seeded.tenant):
            staging = imports.import_staging_open(tenant=seeded.tenant, check_each_statement=True)
            imports.messages_stage(tenant=seeded.tenant, staging=staging, rows=rows)
            imports.messages_insert_staged(tenant=seeded.tenant, staging=staging, parent_renames={},
                                           in_background=False, on_done=lambda _: None)
            imports.import_staging_close(tenant=seeded.tenant, staging=staging)
        written += len(rows)
        position = end
    return written


# --------------------------------------------------------------------------- the bulk service path


def service_bulk_rate(layout: Layout, corpus: Corpus, cards: int) -> float:
    """Time `node_write_bulk` writing `cards` new cards into `<prefix>bulk` (vectors: background, untimed)."""
    from memory.services import NodeWrite, node_write_bulk
    from memory.visibility import Viewer

    plan = TenantPlan(f"{layout.prefix}bulk", 0, 1, 0)
    seeded = tenant_setup(plan)
    viewer = Viewer(tenant=seeded.tenant, workspace=seeded.workspace, user=seeded.users[0],
                    write_scopes=frozenset({"workspace", "user"}), read_only=False, actor="system:bench")
    writes = []
    for number in range(cards):
        card = corpus.card(seeded.cards + number)
        writes.append(NodeWrite(viewer=viewer, explicit_user_intent=True, operations=[{
            "operation": "create", "reason": "bench", "node": {
                "kind": card.kind, "item_key": f"{card.item_key} b{seeded.cards + number}",
                "value_json": card.value, "value_json_given": True, "title": card.title,
                "content": card.content,
                "tags": list(card.tags), "entities": list(card.entities)}}]))
    from django.db import transaction

    from ekko_site.inprocess import worker

    with transaction.atomic():  # the vectors are queued at the outer commit, after the clock stops
        started = time.perf_counter()
        node_write_bulk(writes=writes, skip_invalid=False)
        rate = cards / (time.perf_counter() - started)
    worker.wait_idle(timeout=900)  # let the background embedding finish before the next measurement
    return rate


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the whole seed


def seeded_counts(layout: Layout) -> tuple[dict[str, int], int]:
    """Return {slug: its default workspace's cards, old revisions aside} and the big tenant's messages."""
    from django.db import connections

    with connections["owner"].cursor() as cursor:  # the owner role reads across tenants for this check
        cursor.execute(
            """
            SELECT t.slug, count(n.id) FROM tenants_tenant t
            JOIN tenants_workspace w ON w.tenant_id = t.id AND w.slug = 'default'
            LEFT JOIN memory_memorynode n ON n.tenant_id = t.id AND n.workspace_id = w.id
                                          AND n.status <> 'superseded'
            WHERE t.slug LIKE %s GROUP BY t.slug
            """, [layout.prefix + "%"])
        cards = dict(cursor.fetchall())
        cursor.execute(
            """
            SELECT count(*) FROM memory_memorymessage m JOIN tenants_tenant t ON t.id = m.tenant_id
            JOIN tenants_workspace w ON w.id = m.workspace_id AND w.slug = 'default' WHERE t.slug = %s
            """, [layout.tenants[0].slug])
        messages = cursor.fetchone()[0]
    return cards, messages


def seed_complete(layout: Layout) -> bool:
    from bench.scale_vectors import CACHE_DIR

    cards, messages = seeded_counts(layout)
    return (all(cards.get(plan.slug) == plan.cards for plan in layout.tenants) and messages == layout.messages
            and not (CACHE_DIR / _dropped_file_name()).exists())


def _dropped_file_name() -> str:
    from django.db import connection

    return f"dropped-vector-indexes-{connection.settings_dict['NAME']}.json"


def vector_indexes_drop(report: Callable[[str], None]) -> None:
    """Drop the vector indexes of the node and message tables (any hnsw/ivfflat index, partial ones too).

    Inserting a row into a 1M-row HNSW graph costs ~10 ms on this machine; building the graph once after
    the load is far cheaper. The definitions are saved first, so an interrupted seed restores them next run.
    """
    from django.db import connections

    from bench.scale_vectors import CACHE_DIR

    path = CACHE_DIR / _dropped_file_name()
    saved = json.loads(path.read_text()) if path.exists() else []
    with connections["owner"].cursor() as cursor:
        cursor.execute(
            """
            SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_am a ON a.oid = i.relam
            WHERE t.relname IN ('memory_memorynode', 'memory_memorymessage')
              AND a.amname IN ('hnsw', 'ivfflat')
            """)
        found = cursor.fetchall()
        saved += [[name, definition] for name, definition in found if [name, definition] not in saved]
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(saved))
        for name, _ in found:
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
    report(f"dropped vector indexes for the load: {', '.join(name for name, _ in found) or 'none'}")


def vector_indexes_restore(report: Callable[[str], None]) -> None:
    """Build the vector indexes dropped by `vector_indexes_drop` (in memory, two processes) and analyse."""
    from django.db import connections

    from bench.scale_vectors import CACHE_DIR

    path = CACHE_DIR / _dropped_file_name()
    saved = json.loads(path.read_text()) if path.exists() else []
    with connections["owner"].cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '4GB'")  # the 1M-row graph fits in memory (~3 GB)
        cursor.execute("SET max_parallel_maintenance_workers = 1")
        for name, definition in saved:
            started = time.perf_counter()
            cursor.execute(definition.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1))
            report(f"built {name} in {time.perf_counter() - started:.0f}s")
        cursor.execute("RESET maintenance_work_mem")
        cursor.execute("RESET max_parallel_maintenance_workers")
    if path.exists():
        path.unlink()


def seed_all(layout: Layout, corpus: Corpus, *, reuse: bool, report: Callable[[str], None]) -> None:
    """Seed what `layout` misses (nothing, with `reuse` and complete counts) and print the times."""
    from django.db import connections

    from bench.scale_vectors import cached_vectors
    from memory.search.embeddings import get_provider

    if reuse and seed_complete(layout):
        report(f"reusing the seeded data: {layout.cards:,} cards in {len(layout.tenants)} tenants, "
               f"{layout.messages:,} messages")
        return
    model = get_provider().model_id
    started = time.perf_counter()
    card_vectors = cached_vectors("cards", seed=layout.seed, count=layout.card_pool,
                                  text=lambda i: corpus.card(i).embedding_text)
    message_vectors = cached_vectors("messages", seed=layout.seed, count=layout.messages, text=corpus.message)
    report(f"vectors ready in {time.perf_counter() - started:.0f}s (cached under bench-cache/ for the next "
           f"run)")
    started = time.perf_counter()
    work = [(plan, tenant_setup(plan)) for plan in layout.tenants]
    report(f"{len(work)} tenants and their members ready in {time.perf_counter() - started:.0f}s")
    missing_cards = sum(plan.cards - seeded.cards for plan, seeded in work)
    _, stored_messages = seeded_counts(layout)
    if missing_cards + layout.messages - stored_messages > 50_000:
        vector_indexes_drop(report)
    started = time.perf_counter()
    rows = seed_cards(layout, work, corpus, card_vectors, model, report)
    card_seconds = time.perf_counter() - started
    started = time.perf_counter()
    messages = seed_messages(layout, work[0][1], corpus, message_vectors, model)
    message_seconds = time.perf_counter() - started
    started = time.perf_counter()
    vector_indexes_restore(report)
    index_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with connections["owner"].cursor() as cursor:
        cursor.execute("VACUUM ANALYZE memory_memorynode")
        cursor.execute("VACUUM ANALYZE memory_memorymessage")
        cursor.execute("VACUUM ANALYZE memory_memoryauditevent")
    analyze_seconds = time.perf_counter() - started
    report(f"cards: {rows:,} rows (with superseded revisions and one audit event each) in "
           f"{card_seconds:.0f}s = "
           f"{rows / max(card_seconds, 1e-9):,.0f} rows/s through memory.services.imports")
    report(f"messages: {messages:,} in {message_seconds:.0f}s = "
           f"{messages / max(message_seconds, 1e-9):,.0f}/s")
    report(f"vector index build {index_seconds:.0f}s, VACUUM ANALYZE {analyze_seconds:.0f}s; cards incl. "
           f"index "
           f"build: {rows / max(card_seconds + index_seconds, 1e-9):,.0f} rows/s")
