"""Per-request overheads: where one API request's time goes, statement by statement, in-process.

Sends the operations of `bench/api_latency.py` (`memory/search` structured and hybrid, `memory/write`,
`context`, plus `GET workspaces` as the floor) through Django's test Client — the middleware,
ATOMIC_REQUESTS, DRF, the views and the after-commit hooks gunicorn runs, minus the HTTP server — to
the tenant `bench-<nodes>` of the bench database (seeded like api_latency.py when missing), and
prints per operation: wall time, the SQL statements the request thread sent (count and time, grouped
by what they are for), the query embedding, and the rest (Python: DRF, ranking, rendering).

    .venv/bin/python bench/request_overheads.py --nodes 10000
    .venv/bin/python bench/request_overheads.py --nodes 10000 --profile "search keyword" --top 30
    .venv/bin/python bench/request_overheads.py --nodes 10000 --statements   # every distinct statement
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import re
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EKKO_RATE_LIMIT", "1000000/min")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,127.0.0.1")
os.environ.setdefault("EKKO_LOG_LEVEL", "WARNING")
from bench._common import git_revision, load_average, machine, percentiles, setup_django  # noqa: E402

# What a statement is for, by the first pattern that matches it (checked in order).
STATEMENT_KINDS = [
    ("savepoint", re.compile(r"^\s*(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT)", re.I)),
    ("tenant binding", re.compile(r"set_config\('ekko\.tenant_id'")),
    ("SET LOCAL", re.compile(r"^\s*SET LOCAL", re.I)),
    ("api key", re.compile(r'"tenants_apikey"')),
    ("workspace", re.compile(r'^\s*SELECT .*FROM "tenants_workspace"', re.I | re.S)),
    ("member", re.compile(r'"tenants_membership"')),
    ("access bump", re.compile(r'^\s*UPDATE "memory_memorynode" SET "access_count"', re.I)),
    ("read audit", re.compile(r'"memory_memoryreadevent"')),
    ("card write", re.compile(r'^\s*(INSERT INTO|UPDATE) "memory_memorynode"', re.I)),
    ("text arms", re.compile(r"search_vector|<=>|ts_rank|to_tsquery", re.I)),
    ("users", re.compile(r'"auth_user"')),
    ("audit event", re.compile(r'"memory_memoryauditevent"|pg_advisory', re.I)),
    ("cards", re.compile(r'"memory_memorynode"')),
    ("messages", re.compile(r'"memory_memorymessage"')),
    ("summary", re.compile(r'"memory_memorysummary"')),
]


def statement_kind(sql: str) -> str:
    return next((name for name, pattern in STATEMENT_KINDS if pattern.search(sql)), "other")


class Recorder:
    """Times every statement the request thread sends and every embedding it computes."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.reset()

    def reset(self) -> None:
        self.statements: list[tuple[str, float]] = []
        self.embed_ms = 0.0

    def __call__(self, execute, sql, params, many, context):  # noqa: ANN001, ANN204 - Django's wrapper API
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if threading.get_ident() == self.thread:
                self.statements.append((sql, (time.perf_counter() - started) * 1000))

    def wrap_embedder(self, provider) -> None:  # noqa: ANN001
        embed = provider.embed

        def timed(texts):  # noqa: ANN001, ANN202
            started = time.perf_counter()
            try:
                return embed(texts)
            finally:
                if threading.get_ident() == self.thread:
                    self.embed_ms += (time.perf_counter() - started) * 1000

        provider.embed = timed


def tenant_info(nodes: int) -> dict:
    """Return the API key and user of the bench tenant with `nodes` cards (seeded when missing)."""
    from bench.api_latency import seed

    return seed(f"bench-{nodes}", nodes, rng=random.Random(42), embed=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000, help="cards of the tenant bench-<nodes>")
    parser.add_argument("--requests", type=int, default=100, help="timed requests per operation")
    parser.add_argument("--profile", metavar="OPERATION", help="cProfile this operation's timed requests")
    parser.add_argument("--top", type=int, default=25, help="rows of the profile to print")
    parser.add_argument("--statements", action="store_true",
                        help="print each operation's distinct statements")
    args = parser.parse_args()
    setup_django()
    from django.db import connection
    from django.test import Client

    from bench.api_latency import operations
    from memory.search.embeddings import get_provider

    print(f"machine: {machine()}\ncommit: {git_revision()}\ncommand: {' '.join(sys.argv)}", flush=True)
    info = tenant_info(args.nodes)
    recorder = Recorder()
    recorder.wrap_embedder(get_provider())
    client = Client(HTTP_AUTHORIZATION=f"Bearer {info['key']}")
    rng = random.Random(7)
    ops = {"floor (GET workspaces)": None, **operations(info["user"], rng)}
    load_before = load_average()
    rows, listings = [], {}
    profiler = cProfile.Profile() if args.profile else None
    with connection.execute_wrapper(recorder):
        for name, make in ops.items():
            samples, counts, sql_ms, embed_ms = [], [], [], []
            kind_count: Counter[str] = Counter()
            kind_ms: dict[str, float] = defaultdict(float)
            distinct: Counter[str] = Counter()
            for i in range(-10, args.requests):  # 10 warm-up requests first
                path, body = ("workspaces", None) if make is None else make(i)
                recorder.reset()
                profiling = profiler is not None and name == args.profile and i >= 0
                if profiling:
                    profiler.enable()
                started = time.perf_counter()
                if body is None:
                    response = client.get(f"/api/v1/{path}")
                else:
                    response = client.post(f"/api/v1/{path}", json.dumps(body, ensure_ascii=False),
                                           content_type="application/json")
                elapsed = (time.perf_counter() - started) * 1000
                if profiling:
                    profiler.disable()
                if response.status_code >= 400:
                    raise RuntimeError(f"{path} answered {response.status_code}: {response.content[:300]!r}")
                if i < 0:
                    continue
                samples.append(elapsed)
                counts.append(len(recorder.statements))
                sql_ms.append(sum(ms for _, ms in recorder.statements))
                embed_ms.append(recorder.embed_ms)
                for sql, ms in recorder.statements:
                    kind = statement_kind(sql)
                    kind_count[kind] += 1
                    kind_ms[kind] += ms
                    distinct[re.sub(r"\s+", " ", sql)[:160]] += 1
            by_kind = {kind: (kind_count[kind] / args.requests, kind_ms[kind] / args.requests)
                       for kind in kind_count}
            rows.append((name, percentiles(samples), statistics.fmean(counts), statistics.fmean(sql_ms),
                         statistics.fmean(embed_ms), by_kind))
            listings[name] = distinct
    load_after = load_average()

    print(f"\ntenant bench-{args.nodes}, {args.requests} sequential requests per operation through Django's "
          f"test Client (after 10 warm-up ones); load average {load_before} -> {load_after}")
    print(f"{'operation':<24}{'p50 ms':>8}{'p95 ms':>8}{'mean ms':>9}{'stmts':>7}{'SQL ms':>8}{'embed ms':>9}"
          f"{'rest ms':>9}")
    for name, stats, count, sql, embed, _ in rows:
        print(f"{name:<24}{stats['p50']:>8.1f}{stats['p95']:>8.1f}{stats['mean']:>9.1f}{count:>7.1f}{sql:>8.1f}"
              f"{embed:>9.1f}{stats['mean'] - sql - embed:>9.1f}")
    print("\nstatements per request and their SQL ms per request (means), by what they are for:")
    for name, _stats, _count, _sql, _embed, by_kind in rows:
        parts = ", ".join(f"{kind} {n:.1f} ({ms:.1f} ms)" for kind, (n, ms) in
                          sorted(by_kind.items(), key=lambda item: -item[1][1]))
        print(f"  {name}: {parts}")
    if args.statements:
        for name, distinct in listings.items():
            print(f"\n{name}: distinct statements (times sent over {args.requests} requests)")
            for sql, times in distinct.most_common():
                print(f"  {times:>5}  {sql}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
        print(f"\ncProfile of {args.profile!r} ({args.requests} requests), by cumulative time:")
        print(out.getvalue())


if __name__ == "__main__":
    main()
