"""Bilingual quality of `memory/search`: R@1, R@5, MRR of the hybrid search over HTTP next to its two arms.

Writes the hand-written cards of `bench/data/bilingual_cards.json` (format: bench/README.md) through
`POST memory/write` into the bench database, waits until every card has its vector, then asks
`POST memory/search` (queryText, limit 10) every labelled query as the one bench viewer (user,
workspace, session). In the same run it ranks the same cards in-process by the vector arm alone
(cosine distance of the stored card vectors to the server's query embedding) and by the keyword arm
alone (memory.search.hybrid's keyword coverage without a vector), and prints the three side by side,
overall, per query type and per language pair.

    .venv/bin/python bench/memory_search_quality.py             # fresh write of the cards (~1 minute)
    .venv/bin/python bench/memory_search_quality.py --reuse     # the tenant already holds this data
    .venv/bin/python bench/memory_search_quality.py --json      # metrics as one JSON document on stdout
    .venv/bin/python bench/memory_search_quality.py --dump /tmp/q.json   # every query's ranked card ids
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (  # noqa: E402
    ROOT,
    Client,
    free_port,
    git_revision,
    lift_card_limit,
    machine,
    percentiles,
    setup_django,
    start_server,
    wait_for_vectors,
)

DEFAULT_DATA = ROOT / "bench" / "data" / "bilingual_cards.json"
FORMAT = "ekko-memory-search-quality/v1"
QUERY_TYPES = ("same_language", "paraphrase", "cross_language", "keyword")
LANGUAGE_PAIRS = ("zh→zh", "en→en", "zh→en", "en→zh")
RANKERS = ("hybrid", "vector", "keyword", "plain")
RANKER_LABELS = {"hybrid": "memory/search (HTTP)", "vector": "vector arm only", "keyword": "keyword arm only",
                 "plain": "embedder, plain text"}
LIMIT = 10
WRITE_BATCH = 50  # the API takes at most 100 operations per request
WARMUP_QUERIES = 10
BENCH_USER = "qbench-user"
BENCH_WORKSPACE = "quality bench"
BENCH_SESSION = "qbench-session"


def load_bench(path: Path) -> dict:
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise SystemExit(f"{path} is not a {FORMAT} file")
    return data


def card_search_text(card: dict) -> str:
    """Return the text the keyword index reads for a data-file card (memory.rules.node_text's definition)."""
    from memory.rules.node_text import node_search_text

    return node_search_text(title=card["title"], content=card["content"], value_json=card.get("valueJson"),
                            item_key=card.get("itemKey"), tags=[], entities=[])


def paraphrase_overlaps(data: dict) -> dict[str, list[str]]:
    """Return {query id: shared terms} for paraphrase queries that share a term with a relevant card."""
    from memory.rules.text import query_terms

    cards = {card["id"]: card for card in data["cards"]}
    found: dict[str, list[str]] = {}
    for query in data["queries"]:
        if query["type"] != "paraphrase":
            continue
        terms = query_terms(query["text"])
        for card_id in query["relevant"]:
            shared = sorted(set(terms) & set(card_search_text(cards[card_id]).split()))
            if shared:
                found.setdefault(query["id"], []).extend(shared)
    return found


# --------------------------------------------------------------------------- the cards in the bench database


def bench_tenant(path: Path):  # noqa: ANN201 - a Tenant
    """Return the tenant that holds this file's cards (one tenant per file content)."""
    from tenants.services import tenant_create

    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:10]
    setup = tenant_create(slug=f"qbench-{digest}", owner_username=BENCH_USER)
    lift_card_limit(setup)
    return setup.tenant


def bench_viewer(tenant):  # noqa: ANN001, ANN201 - a Viewer
    """Return the viewer the HTTP searches speak for: the bench user, workspace and session."""
    from django.contrib.auth import get_user_model

    from memory.visibility import Viewer
    from tenants.context import tenant_context
    from tenants.models import Workspace

    with tenant_context(tenant):
        workspace = Workspace.objects.get(tenant=tenant, name=BENCH_WORKSPACE)
    return Viewer(tenant=tenant, workspace=workspace, session_id=BENCH_SESSION,
                  user=get_user_model().objects.get(username=BENCH_USER))


def active_cards(viewer):  # noqa: ANN001, ANN201 - a queryset (call inside the tenant context)
    from memory.models import MemoryNode, NodeStatus
    from memory.visibility import visible_nodes_q

    return MemoryNode.objects.filter(visible_nodes_q(viewer), status=NodeStatus.ACTIVE)


def stored_cards(tenant, data: dict) -> dict[str, str] | None:  # noqa: ANN001
    """Return {node id: card id} when the bench workspace holds exactly this file's cards, segmented as
    today (a changed segmentation or search-text rule means writing them again), else None."""
    from memory.rules.node_text import node_search_text
    from tenants.context import tenant_context
    from tenants.models import Workspace

    with tenant_context(tenant):
        if not Workspace.objects.filter(tenant=tenant, name=BENCH_WORKSPACE).exists():
            return None
        rows = list(active_cards(bench_viewer(tenant)))
    by_title = {card["title"]: card for card in data["cards"]}
    if len(rows) != len(data["cards"]) or {row.title for row in rows} != set(by_title):
        return None
    for row in rows:
        # Compared as token lists: jsonb reorders an object's keys, so a stored value reads back reordered.
        today = node_search_text(title=row.title, content=row.content, value_json=row.value_json,
                                 item_key=row.item_key, tags=row.tags, entities=row.entities)
        if row.content != by_title[row.title]["content"] or sorted(row.search_text.split()) != sorted(
                today.split()):
            print("  stored cards differ from the file or today's search text; writing them again",
                  file=sys.stderr)
            return None
    return {str(row.pk): by_title[row.title]["id"] for row in rows}


def drop_workspace(tenant) -> None:  # noqa: ANN001
    """Delete the bench workspace (and, by cascade, every card learned in it)."""
    from django.db import transaction

    from tenants.context import tenant_context
    from tenants.models import Workspace

    with transaction.atomic(), tenant_context(tenant):
        Workspace.objects.filter(tenant=tenant, name=BENCH_WORKSPACE).delete()


def write_cards(client: Client, data: dict) -> dict[str, str]:
    """Create the bench workspace and write every card with `memory/write`; return {node id: card id}."""
    _, workspace = client.post("workspaces", {"name": BENCH_WORKSPACE})
    node_ids: dict[str, str] = {}
    cards = data["cards"]
    for start in range(0, len(cards), WRITE_BATCH):
        batch = cards[start:start + WRITE_BATCH]
        operations = [{"operation": "create", "reason": f"quality bench card {card['id']}", "node": {
            **{name: card[name] for name in ("kind", "itemKey", "scope", "valueJson", "title", "content")
               if name in card},
            "workspaceId": workspace["id"], "userId": BENCH_USER, "sessionId": BENCH_SESSION,
        }} for card in batch]
        _, body = client.post("memory/write", {"operations": operations, "explicitUserIntent": True})
        for card, result in zip(batch, body["results"], strict=True):
            if result["action"] != "created":
                raise RuntimeError(f"card {card['id']} was {result['action']}, not created: two cards share "
                                   f"the slot {result['key']}; give one another itemKey")
            node_ids[result["nodeId"]] = card["id"]
    return node_ids


def missing_vectors(viewer) -> int:  # noqa: ANN001
    from memory.search.embeddings import get_provider
    from memory.services.embeddings import stale_vector_q
    from tenants.context import tenant_context

    with tenant_context(viewer.tenant):
        return active_cards(viewer).filter(stale_vector_q(get_provider().model_id)).count()


# --------------------------------------------------------------------------- the three rankers


def rank_over_http(client: Client, workspace_id: int, text: str) -> tuple[list[str], float]:
    """Ask `memory/search` as the bench viewer (the query text alone, no structured fields)."""
    elapsed, body = client.post("memory/search", {
        "queryText": text, "limit": LIMIT, "userId": BENCH_USER, "sessionId": BENCH_SESSION,
        "workspaceId": workspace_id})
    return [node["id"] for node in body["relevant"]], elapsed


def rank_by_vector(viewer, text: str) -> list[str]:  # noqa: ANN001
    """Rank the viewer's active cards by cosine distance to the server's query embedding."""
    from pgvector.django import CosineDistance

    from memory.search.embeddings import embed_query
    from tenants.context import tenant_context

    vector = embed_query(text)
    if vector is None:
        return []
    with tenant_context(viewer.tenant):
        ranked = (active_cards(viewer).filter(embedding__isnull=False)
                  .annotate(distance=CosineDistance("embedding", vector)).order_by("distance", "id"))
        return [str(pk) for pk in ranked.values_list("pk", flat=True)[:LIMIT]]


def rank_by_keywords(viewer, text: str) -> list[str]:  # noqa: ANN001
    """Rank the viewer's active cards by the keyword arm alone (term coverage, no vector)."""
    from memory.models import HEAVY_FIELDS
    from memory.search.hybrid import text_candidates, text_plan
    from memory.search.ranking import Fusion
    from tenants.context import tenant_context

    plan = text_plan(text, None)
    if not plan.runs:
        return []
    with tenant_context(viewer.tenant):
        found = text_candidates(active_cards(viewer).defer(*HEAVY_FIELDS), plan)
    scores = found.scores(Fusion(keyword_weight=1.0, vector_weight=0.0, max_distance=0.0))
    return [str(pk) for pk in list(scores)[:LIMIT]]


class PlainEmbedder:
    """The default embedder's cosine over each card's plain text (title, content, value), as an outside
    check ranks the same cards: the baseline the stored card vectors and the hybrid must beat."""

    def __init__(self, viewer) -> None:  # noqa: ANN001
        import numpy as np

        from memory.search.embeddings import get_provider
        from memory.services.embeddings import node_embedding_text
        from tenants.context import tenant_context

        with tenant_context(viewer.tenant):
            cards = list(active_cards(viewer).only("id", "title", "content", "value_json"))
        self.ids = [str(card.pk) for card in cards]
        self.matrix = np.array(get_provider().embed([node_embedding_text(card) for card in cards]))

    def rank(self, text: str) -> list[str]:
        import numpy as np

        from memory.search.embeddings import embed_query

        vector = embed_query(text)
        if vector is None:
            return []
        order = np.argsort(-(self.matrix @ np.array(vector)), kind="stable")
        return [self.ids[index] for index in order[:LIMIT]]


# --------------------------------------------------------------------------- scoring


def score(ranked: list[str], relevant: list[str]) -> dict[str, float]:
    """R@k is the share of the relevant cards in the top k, out of at most k (R@1: is the first relevant)."""
    wanted = set(relevant)
    return {
        "R@1": float(bool(ranked[:1]) and ranked[0] in wanted),
        "R@5": len(wanted & set(ranked[:5])) / min(5, len(wanted)),
        "MRR": next((1 / rank for rank, item in enumerate(ranked, 1) if item in wanted), 0.0),
    }


def pair(query: dict) -> str:
    return f"{query['lang']}→{query['cardLang']}"


def summarise(rows: list[dict]) -> dict[str, dict]:
    """Return {group: {n, <ranker>: {R@1, R@5, MRR}}} for overall, each query type and language pair."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        for group in ("overall", row["type"], row["pair"]):
            groups[group].append(row)
    order = ["overall", *QUERY_TYPES, *LANGUAGE_PAIRS]
    return {group: {"n": len(groups[group]), **{
        ranker: {metric: round(sum(row[ranker][metric] for row in groups[group]) / len(groups[group]), 3)
                 for metric in ("R@1", "R@5", "MRR")} for ranker in RANKERS}}
            for group in order if groups[group]}


def table(summary: dict[str, dict]) -> str:
    head = f"{'':<16}{'n':>4}" + "".join(f"  | {RANKER_LABELS[r]:<20}" for r in RANKERS)
    sub = f"{'group':<16}{'':>4}" + "  |  R@1   R@5   MRR  " * len(RANKERS)
    lines = [head, sub]
    for group, cells in summary.items():
        lines.append(f"{group:<16}{cells['n']:>4}" + "".join(
            f"  | {cells[r]['R@1']:.3f} {cells[r]['R@5']:.3f} {cells[r]['MRR']:.3f}" for r in RANKERS))
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"a {FORMAT} file")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the cards already stored for this file (written again if they differ)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--dump", type=Path,
                        help="write every query's ranked card ids per ranker to this JSON file")
    parser.add_argument("--json", action="store_true",
                        help="print the metrics as JSON on stdout (the report goes to stderr)")
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout

    data = load_bench(args.data)
    setup_django()
    from memory.search.embeddings import get_provider
    from tenants.services import api_key_create

    provider = get_provider()
    for query_id, shared in paraphrase_overlaps(data).items():
        print(f"  warning: paraphrase query {query_id} shares {shared} with its relevant card",
              file=sys.stderr)
    tenant = bench_tenant(args.data)
    command = " ".join(sys.argv)
    print(f"machine: {machine()}\ncommit: {git_revision()}\ncommand: {command}", file=out, flush=True)
    print(f"data: {args.data.name}, {len(data['cards'])} cards, {len(data['queries'])} queries, tenant "
          f"{tenant.slug}; embeddings: {provider.model_id} ({provider.dimensions}-d)", file=out, flush=True)

    node_cards = stored_cards(tenant, data) if args.reuse else None
    reused = node_cards is not None
    port = free_port()
    server = start_server(port, args.workers)
    try:
        client = Client(port, api_key_create(tenant=tenant, name="quality bench").raw_key)
        if node_cards is None:
            drop_workspace(tenant)
            node_cards = write_cards(client, data)
        viewer = bench_viewer(tenant)
        workspace_id = viewer.workspace.pk
        embed_seconds = wait_for_vectors(lambda: missing_vectors(viewer), what="card")
        for query in data["queries"][:WARMUP_QUERIES]:  # connections, plan caches, the query encoder
            rank_over_http(client, workspace_id, query["text"])
        plain = PlainEmbedder(viewer)
        load_before = os.getloadavg()[0]
        rows, latencies = [], []
        for query in data["queries"]:
            hybrid, elapsed = rank_over_http(client, workspace_id, query["text"])
            latencies.append(elapsed)
            ranked = {"hybrid": hybrid, "vector": rank_by_vector(viewer, query["text"]),
                      "keyword": rank_by_keywords(viewer, query["text"]), "plain": plain.rank(query["text"])}
            ranked = {name: [node_cards.get(pk, pk) for pk in ids] for name, ids in ranked.items()}
            rows.append({"id": query["id"], "type": query["type"], "pair": pair(query), "text": query["text"],
                         "relevant": query["relevant"], "ranked": ranked,
                         **{name: score(ids, query["relevant"]) for name, ids in ranked.items()}})
        load_after = os.getloadavg()[0]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)

    summary = summarise(rows)
    stats = percentiles(latencies)
    print(("cards: reused the stored cards" if reused else "cards: written over HTTP")
          + f"; vectors complete {embed_seconds:.0f}s later; gunicorn {args.workers} workers, "
          f"sequential queries from one client, limit {LIMIT}\n", file=out)
    print(table(summary), file=out)
    print(f"\nmemory/search latency over {stats['n']} queries: p50 {stats['p50']:.1f} ms, "
          f"p95 {stats['p95']:.1f} ms (1-minute load average {load_before:.1f} before the queries, "
          f"{load_after:.1f} after, on {os.cpu_count()} cores)", file=out)
    if args.dump:
        args.dump.write_text(json.dumps([{key: row[key] for key in ("id", "type", "pair", "text", "relevant",
                                                                       "ranked")} for row in rows],
                                        ensure_ascii=False, indent=1))
    if args.json:
        print(json.dumps({"commit": git_revision(), "command": command, "data": args.data.name,
                          "cards": len(data["cards"]), "queries": len(data["queries"]),
                          "embeddings": provider.model_id, "metrics": summary,
                          "latencyMs": {"p50": round(stats["p50"], 1), "p95": round(stats["p95"], 1)},
                          "loadAverage": [round(load_before, 2), round(load_after, 2)]}, ensure_ascii=False))


if __name__ == "__main__":
    main()
