"""Where one batched `memory/write` request's time goes, phase by phase, in-process.

Sends `bench/scale.py`'s write requests (100 creates into workspace bench-writes of the big tenant of
the quick or full scale database) through Django's test Client and prints, per request (median of
`--requests` after two warm-up ones): wall time, SQL time of the request thread, and the time spent
in each write phase (request validation, drafts, slot lookup, card INSERT, audit INSERT, vectors).
`--vectors inline` computes and stores the vectors in the request (EKKO_TASKS_INLINE) as
`scale.py --vectors inline` does; `--vectors worker` leaves them to a worker (the task is not sent).

    .venv/bin/python bench/write_profile.py --quick --vectors worker
    .venv/bin/python bench/write_profile.py --quick --vectors inline --profile --top 25
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EKKO_RATE_LIMIT", "1000000/min")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,127.0.0.1")
os.environ.setdefault("EKKO_LOG_LEVEL", "WARNING")
from bench._common import load_average, setup_django  # noqa: E402

PHASES = {  # phase → (module, function) timed around each call
    "validate (DRF)": ("memory.api.serializers", "MemoryWriteSerializer.is_valid"),
    "drafts": ("memory.services.node_creates", "node_prepare"),
    "slot lookup": ("memory.services.node_creates", "slot_occupants"),
    "card INSERT": ("memory.services.node_creates", "nodes_insert"),
    "audit INSERT": ("memory.services.node_creates", "audit_node_changes"),
    "embed": ("memory.services.embeddings", "node_vectors"),
    "vector store": ("memory.services.embeddings", "_vectors_store"),
}
TIMES: dict[str, float] = defaultdict(float)


def timed(name: str, function):  # noqa: ANN001, ANN201
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            TIMES[name] += time.perf_counter() - start
    return wrapper


def install_timers() -> None:
    import importlib

    for name, (module_name, attribute) in PHASES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner, _, attr = attribute.rpartition(".")
        target = getattr(module, owner, None) if owner else module
        if target is None or not hasattr(target, attr):
            continue
        setattr(target, attr, timed(name, getattr(target, attr)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vectors", choices=("worker", "inline"), default="worker")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--per-request", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="cProfile the measured requests")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="cumulative", help="pstats order: cumulative, tottime …")
    args = parser.parse_args()
    if args.vectors == "inline":
        os.environ["EKKO_TASKS_INLINE"] = "1"
    setup_django()
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from bench import scale_seed
    from bench.scale import Targets
    from bench.scale_corpus import Corpus
    from memory.pipeline import background

    if args.vectors == "worker":
        background.enqueue = lambda task, *a: True  # the worker's share is not this request's
    install_timers()
    layout = scale_seed.layout(quick=args.quick, seed=args.seed)
    targets = Targets(layout, Corpus(args.seed))
    client = Client(HTTP_AUTHORIZATION=f"Bearer {targets.tenants['big']['key']}")
    make = targets.write(args.per_request)
    sql = [0.0]

    def sql_timer(execute, statement, params, many, context):  # noqa: ANN001, ANN202
        start = time.perf_counter()
        try:
            return execute(statement, params, many, context)
        finally:
            sql[0] += time.perf_counter() - start

    rows: list[dict[str, float]] = []
    profiler = cProfile.Profile()
    load_before = load_average()
    since = timezone.now()
    for i in range(args.requests + 2):
        path, body = make(i)
        TIMES.clear()
        sql[0] = 0.0
        measured = i >= 2
        if measured and args.profile:
            profiler.enable()
        start = time.perf_counter()
        with connection.execute_wrapper(sql_timer):
            response = client.post(f"/api/v1/{path}", json.dumps(body, ensure_ascii=False),
                                   content_type="application/json")
        wall = time.perf_counter() - start
        if measured and args.profile:
            profiler.disable()
        assert response.status_code == 200, response.content[:500]
        if measured:
            rows.append({"wall": wall, "SQL (all)": sql[0], **TIMES})
    print(f"memory/write, {args.per_request} creates per request, vectors {args.vectors}: median of "
          f"{len(rows)} requests; load average {load_before} -> {load_average()}")
    names = ["wall", "SQL (all)", *PHASES]
    for name in names:
        values = [row.get(name, 0.0) * 1000 for row in rows]
        print(f"  {name:<16} {statistics.median(values):8.1f} ms")
    wall = statistics.median(row["wall"] for row in rows)
    print(f"  => {args.per_request / wall:,.0f} cards/s single request in-process")
    if args.profile:
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.top)
    if args.vectors == "worker":
        embed_written(layout.tenant("big").slug, since)


def embed_written(slug: str, since) -> None:  # noqa: ANN001
    """Give the cards this run wrote their vectors now (no worker saw them; scale.py waits for them)."""
    from memory.models import MemoryNode
    from memory.services.embeddings import nodes_embed
    from tenants.context import tenant_context
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug=slug)
    with tenant_context(tenant):
        written = MemoryNode.objects.filter(tenant=tenant, embedding__isnull=True, created_at__gte=since)
        ids = [str(pk) for pk in written.values_list("pk", flat=True)]
    print(f"  (embedding the {len(ids)} written cards the worker would have)")
    nodes_embed(tenant_id=tenant.pk, node_ids=ids)


if __name__ == "__main__":
    main()
