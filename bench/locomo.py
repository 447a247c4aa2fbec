"""LoCoMo retrieval: recall@5/10/20 of `messages/search` over real HTTP, per category, plus query latency.

Ingests a `locomo-retrieval-bench/v1` file (format: ../shared/bench/README.md) into the bench database
through the API of a gunicorn subprocess: one workspace per conversation, one `POST messages` per
session with message ids = dialog ids and `createdAt` = the session's date-time. It waits until every
embeddable message has its vector, then asks `POST messages/search` each question (its conversation's
workspace, limit 20) and scores the returned ids against the question's evidence.

    .venv/bin/python bench/locomo.py                 # dev split, fresh ingest (~2 minutes)
    .venv/bin/python bench/locomo.py --reuse         # data already there: score only (~1 minute)
    .venv/bin/python bench/locomo.py --bench PATH    # any file of the same format

Each turn is stored as the LoCoMo authors' surface form, `<speaker> said, "<text>"` (plus
` and shared <caption>` for a shared photo), the same text the offline baselines index.
Tune on dev only; the data is CC BY-NC 4.0 test data and never ships.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
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

DEFAULT_BENCH = ROOT.parent / "shared" / "bench" / "locomo_dev.json"
KS = (5, 10, 20)
SEARCH_LIMIT = 20
BATCH = 100  # the API's most messages per request
WARMUP_QUERIES = 20
EMBED_WAIT_SECONDS = 600


def surface_form(message: dict) -> str:
    text = f'{message["speaker"]} said, "{message["text"]}"'
    if message.get("image_caption"):
        text += f' and shared {message["image_caption"]}'
    return text


# --------------------------------------------------------------------------- data in the bench database


def bench_tenant(bench: dict, bench_path: Path):  # noqa: ANN201 - (tenant, slug)
    """Return the tenant that holds this file's conversations (one tenant per file content)."""
    from tenants.services import tenant_create

    digest = hashlib.sha256(bench_path.read_bytes()).hexdigest()[:10]
    slug = f"locomo-{bench.get('split', 'x')}-{digest}"
    setup = tenant_create(slug=slug, owner_username="locomo-bench")
    lift_card_limit(setup)
    return setup.tenant


def workspace_name(conversation: dict) -> str:
    return f"locomo {conversation['conversation_id']}"


def existing_workspaces(tenant, bench: dict) -> dict[str, int] | None:  # noqa: ANN001
    """Return {conversation id: workspace pk} when every conversation is fully stored with today's
    segmentation (a changed stemmer or stop list means re-ingesting), else None."""
    from memory.models import MemoryMessage
    from memory.rules.text import segment_for_search
    from tenants.context import tenant_context
    from tenants.models import Workspace

    found: dict[str, int] = {}
    with tenant_context(tenant):
        for conversation in bench["conversations"]:
            workspace = Workspace.objects.filter(tenant=tenant, name=workspace_name(conversation)).first()
            if workspace is None:
                return None
            stored = MemoryMessage.objects.filter(tenant=tenant, workspace=workspace)
            if stored.count() != len(conversation["messages"]):
                return None
            if any(row.search_text != segment_for_search(row.content)
                   for row in stored.order_by("pk").only("content", "search_text")[:50]):
                print("  stored search_text is from another segmentation; re-ingesting", file=sys.stderr)
                return None
            found[conversation["conversation_id"]] = workspace.pk
    return found


def drop_workspaces(tenant) -> None:  # noqa: ANN001
    """Delete this tenant's bench workspaces (and, by cascade, their messages and cards)."""
    from django.db import transaction

    from tenants.context import tenant_context
    from tenants.models import Workspace

    with transaction.atomic(), tenant_context(tenant):
        Workspace.objects.filter(tenant=tenant, name__startswith="locomo ").delete()


def missing_vectors(tenant) -> int:  # noqa: ANN001
    """Embeddable messages of the tenant without a vector of the current provider's model."""
    from memory.search.embeddings import get_provider
    from memory.services.embeddings import embeddable_messages, stale_vector_q
    from tenants.context import tenant_context

    with tenant_context(tenant):
        return embeddable_messages(tenant.pk).filter(stale_vector_q(get_provider().model_id)).count()


def extraction_runs(tenant) -> dict[str, int]:  # noqa: ANN001
    """Extraction runs of the tenant's bench workspaces by state (what capture set off)."""
    from django.db.models import Count

    from memory.models import ExtractionRun
    from tenants.context import tenant_context

    with tenant_context(tenant):
        rows = (ExtractionRun.objects.filter(tenant=tenant, workspace__name__startswith="locomo ")
                .values("status").annotate(n=Count("pk")))
        return {row["status"]: row["n"] for row in rows}


def ingest(client: Client, bench: dict) -> tuple[dict[str, int], float, list[float]]:
    """Create one workspace per conversation and post its sessions; return ids, seconds taken and the
    latency (ms) of each `POST messages`."""
    started = time.perf_counter()
    workspaces: dict[str, int] = {}
    captures: list[float] = []
    for conversation in bench["conversations"]:
        _, workspace = client.post("workspaces", {"name": workspace_name(conversation)})
        workspaces[conversation["conversation_id"]] = workspace["id"]
        speakers = conversation["speakers"]
        sessions: dict[int, list[dict]] = defaultdict(list)
        for message in conversation["messages"]:
            sessions[message["session_id"]].append(message)
        for session_id, messages in sessions.items():
            for start in range(0, len(messages), BATCH):
                elapsed, _ = client.post("messages", {
                    "workspaceId": workspace["id"],
                    "sessionId": f"session-{session_id}",
                    "messages": [{
                        "id": message["id"],
                        "role": "user" if message["speaker"] == speakers[0] else "assistant",
                        "content": surface_form(message),
                        "createdAt": message["timestamp"] + "Z",
                        "metadata": {"speaker": message["speaker"],
                                     "locomoDateTime": message["session_date_time"]},
                    } for message in messages[start:start + BATCH]],
                })
                captures.append(elapsed)
        print(f"  ingested {conversation['conversation_id']}: {len(conversation['messages'])} messages "
              f"({time.perf_counter() - started:.0f}s)", file=sys.stderr, flush=True)
    return workspaces, time.perf_counter() - started, captures


# --------------------------------------------------------------------------- scoring


def score(ranked: list[str], evidence: list[str]) -> dict[str, float]:
    relevant = set(evidence)
    ranked = list(dict.fromkeys(ranked))
    result: dict[str, float] = {}
    for k in KS:
        top = set(ranked[:k])
        result[f"R@{k}"] = len(relevant & top) / len(relevant)
        result[f"All@{k}"] = float(relevant <= top)
        result[f"Hit@{k}"] = float(bool(relevant & top))
    result["MRR"] = next((1 / rank for rank, item in enumerate(ranked, 1) if item in relevant), 0.0)
    return result


def ask(client: Client, bench: dict, workspaces: dict[str, int], key: str) -> tuple[list[dict], list[float]]:
    rows, latencies = [], []
    for conversation in bench["conversations"]:
        workspace = workspaces[conversation["conversation_id"]]
        for item in conversation.get(key, []):
            elapsed, body = client.post("messages/search", {
                "workspaceId": workspace, "queryText": item["question"], "limit": SEARCH_LIMIT})
            latencies.append(elapsed)
            ranked = [hit["id"] for hit in body["messages"]]
            rows.append({"qa_id": item["qa_id"], "category": item["category"], "ranked": ranked,
                         **score(ranked, item["evidence"])})
    return rows, latencies


def table(rows: list[dict], names: dict[str, str], title: str) -> str:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[str(row["category"])].append(row)
    metrics = [f"R@{k}" for k in KS] + [f"All@{k}" for k in KS] + ["MRR"]
    lines = [title, f"{'category':<16}{'n':>5}" + "".join(f"{m:>8}" for m in metrics)]

    def line(label: str, group: list[dict]) -> str:
        cells = []
        for metric in metrics:
            mean = sum(row[metric] for row in group) / len(group)
            cells.append(f"{mean:>8.3f}" if metric == "MRR" else f"{100 * mean:>8.1f}")
        return f"{label:<16}{len(group):>5}" + "".join(cells)

    for category in sorted(groups):
        lines.append(line(f"{category} {names.get(category, '')}", groups[category]))
    if len(groups) > 1:
        lines.append(line("overall", rows))
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH, help="a locomo-retrieval-bench/v1 file")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the conversations already stored for this file (re-ingest if incomplete)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--dump", type=Path,
                        help="write every question's ranked ids and scores to this JSON file")
    args = parser.parse_args()

    bench = json.loads(args.bench.read_text())
    if bench.get("format") != "locomo-retrieval-bench/v1":
        raise SystemExit(f"{args.bench} is not a locomo-retrieval-bench/v1 file")
    setup_django()
    from django.conf import settings

    from memory.search.embeddings import get_provider
    from tenants.services import api_key_create

    provider = get_provider()
    tenant = bench_tenant(bench, args.bench)
    print(f"machine: {machine()}\ncommit: {git_revision()}\ncommand: {' '.join(sys.argv)}", flush=True)
    print(f"bench: {args.bench} (split {bench.get('split')}), embeddings: {provider.model_id} "
          f"({provider.dimensions}-d), broker: {settings.CELERY_BROKER_URL}", flush=True)

    workspaces = existing_workspaces(tenant, bench) if args.reuse else None
    port = free_port()
    server = start_server(port, args.workers)
    try:
        client = Client(port, api_key_create(tenant=tenant, name="locomo bench").raw_key)
        ingest_seconds = embed_seconds = 0.0
        captures: list[float] = []
        if workspaces is None:
            drop_workspaces(tenant)
            workspaces, ingest_seconds, captures = ingest(client, bench)
        embed_seconds = wait_for_vectors(lambda: missing_vectors(tenant), what="message",
                                         limit_seconds=EMBED_WAIT_SECONDS)
        runs_after_ingest = extraction_runs(tenant)
        questions = [q for c in bench["conversations"] for q in c["qa"]]
        for item in questions[:WARMUP_QUERIES]:  # connections, plan caches, the query encoder
            conversation = next(c for c in bench["conversations"] if item in c["qa"])
            client.post("messages/search", {"workspaceId": workspaces[conversation["conversation_id"]],
                                            "queryText": item["question"], "limit": SEARCH_LIMIT})
        load_before = os.getloadavg()[0]
        rows, latencies = ask(client, bench, workspaces, "qa")
        adversarial, adversarial_latencies = ask(client, bench, workspaces, "adversarial_qa")
        floor = [client.get("workspaces") for _ in range(200)]  # auth + routing + one tiny query
        load_after = os.getloadavg()[0]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)

    messages = sum(len(c["messages"]) for c in bench["conversations"])
    sessions = sum(len(c["sessions"]) for c in bench["conversations"])
    names = {str(k): v for k, v in bench.get("category_names", {}).items()}
    print(f"\ndata: {len(workspaces)} conversations, {sessions} sessions, {messages:,} messages; "
          f"{len(rows)} scored questions (categories 1-4), {len(adversarial)} adversarial")
    if ingest_seconds:
        print(f"ingest over HTTP: {ingest_seconds:.0f}s; vectors complete {embed_seconds:.0f}s later")
        capture_stats = percentiles(captures)
        print(f"POST messages (capture) latency over {capture_stats['n']} requests: "
              f"p50 {capture_stats['p50']:.1f} ms, p95 {capture_stats['p95']:.1f} ms, "
              f"p99 {capture_stats['p99']:.1f} ms, mean {capture_stats['mean']:.1f} ms; extraction runs "
              f"by state once vectors were complete: {runs_after_ingest or 'none'}")
    else:
        print("ingest: reused the stored conversations")
    print(f"gunicorn {args.workers} workers, sequential requests from one client, limit {SEARCH_LIMIT}\n")
    print(table(rows, names, "messages/search recall (%), categories 1-4"))
    if adversarial:
        print()
        print(table(adversarial, names, "adversarial (category 5, not in the headline)"))
    stats = percentiles(latencies + adversarial_latencies)
    print(f"\nmessages/search latency over {stats['n']} queries: p50 {stats['p50']:.1f} ms, "
          f"p95 {stats['p95']:.1f} ms, p99 {stats['p99']:.1f} ms, mean {stats['mean']:.1f} ms "
          f"(1-minute load average {load_before:.1f} before the queries, {load_after:.1f} after, "
          f"on {os.cpu_count()} cores)")
    floor_stats = percentiles(floor)
    print(f"HTTP floor of this server (GET workspaces, {floor_stats['n']} requests): "
          f"p50 {floor_stats['p50']:.1f} ms, p95 {floor_stats['p95']:.1f} ms")
    if args.dump:
        args.dump.write_text(json.dumps({"qa": rows, "adversarial": adversarial}, indent=1))


if __name__ == "__main__":
    main()
