"""The query plans of the search statements: EXPLAIN (ANALYZE, BUFFERS) of what a search really sends.

Runs `memory/search` (search_nodes) and `messages/search` (search_messages) in-process as a tenant's
owner, catches each statement the text arms send (memory.search.hybrid) and explains it inside the
same transaction, with the same parameters and settings (tenant binding, `hnsw.ef_search`), right
after the search ran it. Prints each statement's time, then the plan lines that name an index or a
row count. For the tenants seeded by bench/scale.py (`scale-big`, `scale-10k-01`, `scale-1k-01`) or
any other tenant slug:

    .venv/bin/python bench/search_plans.py                                   # scale-big, three queries
    .venv/bin/python bench/search_plans.py --tenant scale-1k-01 --query "isst der Nutzer Feta"
    .venv/bin/python bench/search_plans.py --messages --full                 # message search, whole plans
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import git_revision, machine, setup_django  # noqa: E402

QUERIES = {
    "rare word": "Brasalo",
    "common words": "isst der Nutzer Feta",
    "paraphrase, no keyword match": "Lieblingsgericht Frühstück Wochenende",
}
_INTERESTING = re.compile(r"Index|Seq Scan|Bitmap|Sort|Limit|Execution|Planning|Buffers|rows=", re.I)


def load_average() -> str:
    import os

    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f}"


def _viewer(slug: str):  # noqa: ANN202
    from memory.visibility import Viewer
    from tenants.context import tenant_context
    from tenants.models import Membership, Tenant, Workspace

    tenant = Tenant.objects.get(slug=slug)
    with tenant_context(tenant):
        workspace = Workspace.objects.get(tenant=tenant, slug=Workspace.DEFAULT_SLUG)
        owner = Membership.objects.filter(tenant=tenant).order_by("pk").select_related("user").first().user
    return Viewer(tenant=tenant, workspace=workspace, user=owner)


def explained(run, repeat: int) -> tuple[list[str], list[float]]:  # noqa: ANN001
    """Run `run()` `repeat` times; return the last run's plan of the arms' statement and every run's time."""
    from django.db import connection

    caught: dict = {}

    def wrapper(execute, sql, params, many, context):  # noqa: ANN001, ANN202 - Django's signature
        if "UNION ALL" not in sql or caught.get("busy"):
            return execute(sql, params, many, context)
        started = time.perf_counter()
        result = execute(sql, params, many, context)
        caught["ms"] = (time.perf_counter() - started) * 1000
        caught["busy"] = True
        try:
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                caught["plan"] = [row[0] for row in cursor.fetchall()]
        finally:
            caught["busy"] = False
        return result

    times = []
    for _ in range(repeat):
        caught.pop("ms", None)
        with connection.execute_wrapper(wrapper):
            run()
        times.append(caught.get("ms", float("nan")))
    return caught.get("plan", []), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenant", action="append", help="tenant slug (repeatable); default scale-big")
    parser.add_argument("--query", action="append", help="query text (repeatable); default three kinds")
    parser.add_argument("--messages", action="store_true", help="explain messages/search instead")
    parser.add_argument("--repeat", type=int, default=5, help="runs per query (the last one is explained)")
    parser.add_argument("--full", action="store_true", help="print whole plans")
    parser.add_argument("--keyword-only", action="store_true", help="search without a query vector")
    args = parser.parse_args()
    setup_django()
    from memory.search.embeddings import embed_query
    from memory.search.messages import search_messages
    from memory.search.retrieval import MemoryQuery, search_nodes

    queries = {text: text for text in args.query} if args.query else QUERIES
    print(f"machine: {machine()}\ncommit: {git_revision()}\ncommand: {' '.join(sys.argv)}\n{load_average()}")
    for slug in args.tenant or ["scale-big"]:
        viewer = _viewer(slug)
        for label, text in queries.items():
            vector = None if args.keyword_only else embed_query(text)
            if args.messages:
                def run(text=text, vector=vector) -> None:  # noqa: ANN001
                    search_messages(viewer=viewer, query_text=text, query_embedding=vector)
            else:
                def run(text=text, vector=vector) -> None:  # noqa: ANN001
                    search_nodes(viewer=viewer, query=MemoryQuery(query_text=text, limit=20),
                                 record_access=False, query_embedding=vector)
            plan, times = explained(run, args.repeat)
            print(f"\n== {slug} · {'messages' if args.messages else 'cards'} · {label}: {text!r}  "
                  f"statement median {statistics.median(times):.1f} ms, max {max(times):.1f} ms over "
                  f"{len(times)} runs ({load_average()})")
            for line in plan:
                if args.full or _INTERESTING.search(line):
                    print("  " + line[:220])


if __name__ == "__main__":
    main()
