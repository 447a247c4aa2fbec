"""Retrieval at scale (issue 13): 1M memory cards over 201 tenants, then the agent API over HTTP under load.

    .venv/bin/python bench/scale.py                       # seed (or top up) 1M cards + 100k messages, measure
    .venv/bin/python bench/scale.py --reuse               # data already seeded: measure only
    .venv/bin/python bench/scale.py --quick               # 50k cards, 24 tenants, 10k messages (smoke run)
    .venv/bin/python bench/scale.py --reuse --sections search,context,saturation

Seeding (bench.scale_seed): tenant `scale-big` holds one user's 100k cards, ten tenants of 10k and forty
of 1k hold one user's cards each, 150 filler tenants (1-3 members) fill up to 1M; 100k messages live
in the big tenant's default workspace. Text is bilingual (English/German, bench.scale_corpus), vectors
come from the configured provider and are cached under .ekko/bench-cache/ (bench.scale_vectors).

Measurements, against gunicorn (2 uvicorn workers, as production) on the `ekko_bench` database, each at 1
and 8 concurrent clients (threads with their own connections), query embedding included (the server
embeds): `memory/search` structured (kinds + key), keyword (rare terms) and hybrid (a question),
`messages/search` over the 100k messages, `context`, `memory/write` with one and with 100 creates, and
`messages` capture of 100 messages per request; the same searches in tenants of 1k and 10k cards;
the offered rate (open loop) at which hybrid search p95 doubles; and, in-process, the SQL statements
each read sends with an EXPLAIN ANALYZE of the slowest. Every section prints the load average.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (  # noqa: E402
    free_port,
    git_revision,
    lift_card_limit,
    load_average,
    machine,
    setup_django,
    start_server,
    start_worker,
)
from bench.scale_corpus import Corpus  # noqa: E402
from bench.scale_load import ApiConnection, Run, closed_loop, saturation  # noqa: E402

SECTIONS = ("embed", "seed", "bulk", "search", "messages", "context", "small", "saturation", "write",
            "capture", "statements")
WRITE_BATCH = 100  # the API's most operations (and messages) per request
VECTOR_MODES = ("in-process", "worker", "inline")
RESULTS: list[tuple[str, int, Run, str]] = []  # (operation, clients, run, unit) for the closing table


def say(text: str = "") -> None:
    print(text, flush=True)


def section(name: str) -> None:
    say(f"\n== {name} ({load_average()})")


def report(name: str, clients: int, run: Run, unit: str = "requests/s", per_request: int = 1) -> None:
    stats = run.stats()
    rate = run.throughput * per_request
    RESULTS.append((name, clients, run, f"{rate:,.0f} {unit}"))
    error = f"  first error {run.first_error}" if run.errors else ""
    say(f"{name:<34}{clients:>3} clients {stats['n']:>5} req  p50 {stats['p50']:>7.1f}  p95 "
        f"{stats['p95']:>7.1f}  "
        f"p99 {stats['p99']:>7.1f} ms  {rate:>8,.1f} {unit}  errors {run.errors}  ({load_average()}){error}")


# --------------------------------------------------------------------------- requests


class Targets:
    """What the requests name: keys, users, workspaces and sample card keys of the measured tenants."""

    def __init__(self, layout, corpus: Corpus) -> None:  # noqa: ANN001
        from memory.models import MemoryNode
        from tenants.context import tenant_context
        from tenants.models import Workspace
        from tenants.services import api_key_create, tenant_create, workspace_create

        self.corpus = corpus
        self.tenants: dict[str, dict] = {}
        for name in ("big", "10k-01", "1k-01"):
            plan = layout.tenant(name)
            setup = tenant_create(slug=plan.slug, owner_username=f"{plan.slug}-owner")
            lift_card_limit(setup)
            with tenant_context(setup.tenant):
                keys = list(MemoryNode.objects.filter(tenant=setup.tenant, status="active", user=setup.owner)
                            .order_by("?").values_list("kind", "key")[:500])
                have = set(Workspace.objects.filter(tenant=setup.tenant).values_list("slug", flat=True))
            for slug in ("bench-writes", "bench-capture"):
                if slug not in have:
                    workspace_create(tenant=setup.tenant, name=slug, slug=slug)
            self.tenants[name] = {"key": api_key_create(tenant=setup.tenant, name="scale bench").raw_key,
                                  "user": setup.owner.get_username(), "keys": keys}
        # A short token per run keeps item keys unique across runs (item keys refuse timestamps).
        self.run_id = _base36(int(time.time() * 10) % 36**6)

    def structured(self, tenant: str) -> Callable[[int], tuple[str, dict]]:
        info = self.tenants[tenant]

        def make(i: int) -> tuple[str, dict]:
            kind, key = info["keys"][i % len(info["keys"])]
            return "memory/search", {"userId": info["user"], "kinds": [kind], "key": key, "limit": 20}
        return make

    def keyword(self, tenant: str) -> Callable[[int], tuple[str, dict]]:
        user = self.tenants[tenant]["user"]
        return lambda i: ("memory/search", {"userId": user, "queryText": self.corpus.keyword_query(i),
                                            "limit": 20})

    def hybrid(self, tenant: str) -> Callable[[int], tuple[str, dict]]:
        user = self.tenants[tenant]["user"]
        return lambda i: ("memory/search", {"userId": user, "queryText": self.corpus.hybrid_query(i),
                                            "limit": 20})

    def message_search(self, i: int) -> tuple[str, dict]:
        return "messages/search", {"workspaceId": "default", "queryText": self.corpus.hybrid_query(i),
                                   "limit": 20}

    def context(self, sessions: int) -> Callable[[int], tuple[str, dict]]:
        user = self.tenants["big"]["user"]
        return lambda i: ("context", {"sessionId": f"bench-s{i % sessions}", "userId": user,
                                      "queryText": self.corpus.hybrid_query(i), "tokenBudget": 4000})

    def write(self, per_request: int) -> Callable[[int], tuple[str, dict]]:
        def make(i: int) -> tuple[str, dict]:
            operations = []
            for j in range(per_request):
                card = self.corpus.card(10_000_000 + i * per_request + j)
                operations.append({"operation": "create", "reason": "scale bench", "node": {
                    "kind": "project_context", "itemKey": f"bench {self.run_id} {i} {j}",
                    "workspaceId": "bench-writes", "valueJson": card.value, "title": card.title,
                    "content": card.content, "tags": list(card.tags)}})
            return "memory/write", {"explicitUserIntent": True, "operations": operations}
        return make

    def capture(self, i: int) -> tuple[str, dict]:
        return "messages", {"workspaceId": "bench-capture", "sessionId": f"capture-{self.run_id}-{i}",
                            "messages": [{"role": "user" if j % 2 == 0 else "assistant",
                                          "content": self.corpus.message(20_000_000 + i * WRITE_BATCH + j)}
                                         for j in range(WRITE_BATCH)]}


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while number:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
    return f"r{text or '0'}"


def measure(port: int, key: str, name: str, make: Callable, clients: tuple[int, ...], requests: int,
            unit: str = "requests/s", per_request: int = 1) -> dict[int, Run]:
    runs = {}
    for count in clients:
        run = closed_loop(port, key, make, clients=count, requests=requests, warmup=3,
                          start_index=len(RESULTS) * 10_000)
        report(name, count, run, unit, per_request)
        runs[count] = run
    return runs


def wait_for_vectors(tenant_slug: str, label: str) -> None:
    """Wait until the background embedding has caught up with the tenant's written cards and messages."""
    from memory.models import MemoryNode
    from memory.services.embeddings import embeddable_messages
    from tenants.context import tenant_context
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug=tenant_slug)
    started = time.perf_counter()
    while True:
        with tenant_context(tenant):
            missing = (MemoryNode.objects.filter(tenant=tenant, embedding__isnull=True).count()
                       + embeddable_messages(tenant.pk).filter(embedding__isnull=True).count())
        if not missing or time.perf_counter() - started > 900:
            break
        time.sleep(2)
    say(f"  background vectors after {label}: {'complete' if not missing else f'{missing} still missing'} "
        f"{time.perf_counter() - started:.0f}s after the last request")


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="50k cards in 24 tenants, 10k messages")
    parser.add_argument("--reuse", action="store_true",
                        help="skip seeding when the seeded counts are complete")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--requests", type=int, default=200, help="timed read requests per measurement")
    parser.add_argument("--write-requests", type=int, default=40, help="timed batched write/capture requests")
    parser.add_argument("--clients", default="1,8", help="concurrent clients per measurement")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--saturation-seconds", type=float, default=20.0,
                        help="length of each offered-load step")
    parser.add_argument("--bulk-sample", type=int, default=1000, help="cards written by node_write_bulk")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vectors", choices=VECTOR_MODES, default="in-process",
                        help="who computes the vectors of written cards and captured messages: the gunicorn "
                             "workers after each response (no broker), a Celery worker on --broker, or the "
                             "request itself before it answers (EKKO_TASKS_INLINE)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/5", help="Redis for --vectors worker")
    parser.add_argument("--worker-concurrency", type=int, default=1,
                        help="Celery worker processes for --vectors worker")
    parser.add_argument("--worker-nice", type=int, default=0,
                        help="lower the Celery worker's CPU priority by this (its database backend's stays)")
    args = parser.parse_args()
    # A stopped run (SIGTERM) still stops its gunicorn and worker (the finally blocks below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    clients = tuple(int(c) for c in args.clients.split(","))

    setup_django()
    from django.conf import settings

    from bench import scale_seed
    from memory.search.embeddings import get_provider

    server_threads = settings.EKKO_EMBEDDING_THREADS
    # The bench's own corpus embedding: one BLAS thread keeps its rate on a shared 2-core machine
    # (two threads collapse to ~60-150 texts/s when other processes take a core). The server keeps its
    # setting.
    settings.EKKO_EMBEDDING_THREADS = int(os.environ.get("EKKO_BENCH_EMBEDDING_THREADS", "1"))
    layout = scale_seed.layout(quick=args.quick, seed=args.seed)
    corpus = Corpus(args.seed)
    provider = get_provider()
    say(f"machine: {machine()}\ncommit: {git_revision()}\ncommand: {shlex.join(sys.argv)}\n{load_average()}")
    say(f"layout: {layout.cards:,} cards in {len(layout.tenants)} tenants (prefix {layout.prefix!r}; "
        f"a pool of {layout.card_pool:,} card texts, the big tenant's {layout.tenants[0].cards:,} its own "
        f"slice), "
        f"{layout.messages:,} messages; embeddings {provider.model_id} ({provider.dimensions}-d, server "
        f"threads "
        f"{server_threads}); vectors {vector_mode(args)}")

    from bench import scale_report

    if "embed" in sections:
        section("embedding rate (the bench process, 1024-text batches)")
        scale_report.embedding_rates(corpus)
    if "seed" in sections:
        section("seed")
        scale_seed.seed_all(layout, corpus, reuse=args.reuse, report=say)
    if "bulk" in sections:
        section(f"node_write_bulk sample ({args.bulk_sample:,} cards, one write each)")
        rate = scale_seed.service_bulk_rate(layout, corpus, args.bulk_sample)
        say(f"node_write_bulk: {rate:,.0f} cards/s (vectors queued after commit, not timed)  "
            f"({load_average()})")
    scale_report.data_sizes(layout, say)

    http = ("search", "messages", "context", "small", "saturation", "write", "capture")
    http_sections = [name for name in sections if name in http]
    targets = Targets(layout, corpus) if http_sections or "statements" in sections else None
    if http_sections:
        port = free_port()
        env = server_env(args)
        worker = (start_worker(env, args.worker_concurrency, args.worker_nice) if args.vectors == "worker"
                  else None)
        try:
            server = start_server(port, args.workers, extra_env=env)
            try:
                run_http(port, targets, layout, http_sections, clients, args)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=60)
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)  # warm shutdown: finishes the task at hand
                worker.wait(timeout=120)
    if "statements" in sections:
        section("SQL per request (in-process, same views), EXPLAIN ANALYZE of the slowest statement")
        scale_report.statements(layout, targets, say)
    scale_report.closing_table(RESULTS, say)


def vector_mode(args: argparse.Namespace) -> str:
    return {"in-process": "in-process background (no broker: each gunicorn worker embeds after responding)",
            "worker": f"a Celery worker in the background ({args.worker_concurrency} process(es), nice "
                      f"{args.worker_nice}, broker {args.broker})",
            "inline": "inline (EKKO_TASKS_INLINE=1: stored before the response)"}[args.vectors]


def server_env(args: argparse.Namespace) -> dict[str, str]:
    """The settings gunicorn (and the worker) get for the vector mode; a queue of this run's own."""
    if args.vectors == "worker":
        return {"CELERY_BROKER_URL": args.broker, "CELERY_RESULT_BACKEND": args.broker,
                "CELERY_TASK_DEFAULT_QUEUE": f"ekko-bench-{os.getpid()}"}
    if args.vectors == "inline":
        return {"EKKO_TASKS_INLINE": "1"}
    return {}


def run_http(port: int, targets: Targets, layout, sections: list[str],  # noqa: ANN001
             clients: tuple[int, ...], args: argparse.Namespace) -> None:
    big = targets.tenants["big"]
    floor = ApiConnection(port, big["key"])
    for i in range(6):  # both workers: first requests load the embedder and open connections
        floor.post(*targets.hybrid("big")(-i - 1))
    samples = [floor.send("GET", "workspaces")[0] for _ in range(100)]
    floor.close()
    samples.sort()
    say(f"\nHTTP floor (GET workspaces, 100 requests): p50 {samples[50]:.1f} ms, p95 {samples[95]:.1f} ms")
    requests = args.requests
    if "search" in sections:
        section(f"memory/search, {layout.tenants[0].cards:,} cards of one user, {layout.cards:,} in the "
                f"database")
        measure(port, big["key"], "memory/search structured", targets.structured("big"), clients, requests)
        measure(port, big["key"], "memory/search keyword", targets.keyword("big"), clients, requests)
        measure(port, big["key"], "memory/search hybrid", targets.hybrid("big"), clients, requests)
    if "messages" in sections:
        section(f"messages/search, {layout.messages:,} messages in one workspace")
        measure(port, big["key"], "messages/search", targets.message_search, clients, requests)
    if "context" in sections:
        section("context (tokenBudget 4000; recent messages of a seeded session)")
        from bench.scale_seed import SESSION_LENGTH

        sessions = layout.messages // SESSION_LENGTH
        measure(port, big["key"], "context", targets.context(sessions), clients, requests)
    if "small" in sections:
        for name in ("10k-01", "1k-01"):
            plan = layout.tenant(name)
            info = targets.tenants[name]
            section(f"tenant {plan.slug} ({plan.cards:,} cards of one user)")
            measure(port, info["key"], f"memory/search structured {name}", targets.structured(name), clients,
                    requests)
            measure(port, info["key"], f"memory/search keyword {name}", targets.keyword(name), clients,
                    requests)
            measure(port, info["key"], f"memory/search hybrid {name}", targets.hybrid(name), clients,
                    requests)
    if "saturation" in sections:
        section("offered load (open loop, Poisson arrivals): memory/search hybrid on the big tenant")
        single = closed_loop(port, big["key"], targets.hybrid("big"), clients=1, requests=60, warmup=3,
                             start_index=5_000_000)
        say(f"one client back to back: {single.throughput:.1f} requests/s, "
            f"p95 {single.stats()['p95']:.1f} ms")

        def show(step) -> None:  # noqa: ANN001
            stats = step.run.stats()
            say(f"  offered {step.offered:6.1f}/s  achieved {step.run.throughput:6.1f}/s  p50 "
                f"{stats['p50']:7.1f}  "
                f"p95 {stats['p95']:7.1f}  p99 {stats['p99']:7.1f} ms  errors {step.run.errors}  "
                f"({load_average()})" + (f"  first error {step.run.first_error}" if step.run.errors else ""))
        base = single.stats()["p95"]
        steps = saturation(port, big["key"], targets.hybrid("big"), base_rate=single.throughput,
                           base_p95=base, seconds=args.saturation_seconds, report=show)
        within = [s for s in steps if s.run.stats()["p95"] <= 2 * base and not s.run.errors]
        over = [s for s in steps if s not in within]
        if not over:
            say(f"p95 stayed within twice {base:.1f} ms up to {steps[-1].offered:.1f}/s offered")
        elif not within:
            say(f"p95 doubles (from {base:.1f} ms, one client back to back) below {over[0].offered:.1f}/s "
                "offered, the lightest step")
        else:
            say(f"p95 doubles (from {base:.1f} ms, one client back to back) between "
                f"{within[-1].offered:.1f}/s and {over[0].offered:.1f}/s offered")
    if "write" in sections:
        section(f"memory/write into workspace bench-writes of the big tenant (vectors: {vector_mode(args)})")
        measure(port, big["key"], "memory/write 1 create", targets.write(1), clients, requests, "cards/s")
        wait_for_vectors(layout.tenants[0].slug, "single writes")
        measure(port, big["key"], f"memory/write {WRITE_BATCH} creates", targets.write(WRITE_BATCH), clients,
                args.write_requests, "cards/s", WRITE_BATCH)
        wait_for_vectors(layout.tenants[0].slug, "batched writes")
    if "capture" in sections:
        section(f"messages capture, {WRITE_BATCH} messages per request, workspace bench-capture (vectors: "
                f"{vector_mode(args)})")
        measure(port, big["key"], f"messages capture {WRITE_BATCH}", targets.capture, clients,
                args.write_requests, "messages/s", WRITE_BATCH)
        wait_for_vectors(layout.tenants[0].slug, "capture")


if __name__ == "__main__":
    main()
